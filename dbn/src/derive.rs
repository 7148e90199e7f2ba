//! Tickbox equivalents of DBN records, derived on read: trades (and the trade of a TBBO) → `trade`, top-of-book
//! schemas (MBP-1, BBO, CMBP-1, CBBO) → `quote`. Everything else has no tickbox equivalent and stays a vendor
//! record.

use std::io::Cursor;

use dbn::decode::dbn::RecordDecoder;
use dbn::{rtype, BboMsg, CbboMsg, Cmbp1Msg, Mbp1Msg, RecordRef, TradeMsg, VersionUpgradePolicy};
use tickbox_wire::{Flags, Header, Kind, Payload, Quote, Side, Trade};

use crate::frame::VendorFrame;

fn side(c: std::ffi::c_char) -> Side {
    match c as u8 {
        b'B' => Side::Buy,
        b'A' => Side::Sell,
        _ => Side::None,
    }
}

/// A quote from the instrument id, `[bid_px, ask_px]`, `[bid_sz, ask_sz, bid_ct, ask_ct]` and venue time.
fn quote(iid: u32, px: [i64; 2], qty: [u32; 4], t: u64) -> Payload {
    Payload::Quote(Quote {
        instrument_id: iid,
        bid_px: px[0],
        ask_px: px[1],
        bid_size: qty[0],
        ask_size: qty[1],
        bid_orders: qty[2],
        ask_orders: qty[3],
        venue_time_ns: t,
    })
}

/// The tickbox frame a publisher would send for this vendor record: its topic (`T.`/`Q.` instead of `V.`),
/// header (same publisher, sequence, times and session) and payload. `None` for records with no tickbox
/// equivalent or that do not decode. TBBO records give their trade.
pub fn derive_wire(f: &VendorFrame<'_>) -> Option<(String, Header, Payload)> {
    if !crate::frame::record_fits(f.record) {
        return None;
    }
    let version = if (1..=3).contains(&f.version) {
        f.version
    } else {
        dbn::DBN_VERSION
    };
    let payload = if usize::from(f.record[0]) * 4 == f.record.len() {
        REUSED.with_borrow_mut(|slot| reused_payload(slot, version, f))
    } else {
        // A length word that disagrees with the stored bytes would leave a partial or extra record in a
        // long-lived decoder's stream; such a record gets a decoder of its own.
        let mut dec = RecordDecoder::with_version(
            Cursor::new(f.record),
            version,
            VersionUpgradePolicy::AsIs,
            false,
        )
        .ok()?;
        let rec = dec.decode_ref().ok()??;
        derive_payload(f.rtype, &rec)
    }?;
    let kind = payload.kind();
    let letter = kind.topic_letter();
    let rest = f.topic.split_once('.').map_or(f.topic, |(_, r)| r);
    let header = Header {
        kind,
        flags: Flags(f.header.flags),
        publisher_id: f.header.publisher_id,
        sequence: f.header.sequence,
        send_time_ns: f.header.send_time_ns,
        origin_time_ns: f.header.origin_time_ns,
        session: f.header.session,
    };
    debug_assert!(matches!(kind, Kind::Quote | Kind::Trade));
    Some((format!("{letter}.{rest}"), header, payload))
}

/// A decoder kept per thread for [`derive_wire`]: building one zero-fills its buffers (tens of KiB), which cost
/// more than the whole derivation when done per record (a perf profile of `feed --source JOURNAL` put 23 % of the
/// samples in that `memset`). Records are fed to it one at a time through its cursor.
type ReusedDecoder = RecordDecoder<Cursor<Vec<u8>>>;

thread_local! {
    static REUSED: std::cell::RefCell<Option<(u8, ReusedDecoder)>> = const { std::cell::RefCell::new(None) };
}

/// Decodes `f.record`, whose length word matches its length exactly, with the thread's decoder: one complete
/// record in, so the decoder's stream is back at a record boundary afterwards. Any failure drops the decoder,
/// so no half-consumed state reaches the next record.
fn reused_payload(
    slot: &mut Option<(u8, ReusedDecoder)>,
    version: u8,
    f: &VendorFrame<'_>,
) -> Option<Payload> {
    if slot.as_ref().is_none_or(|(v, _)| *v != version) {
        let dec = RecordDecoder::with_version(
            Cursor::new(Vec::with_capacity(f.record.len())),
            version,
            VersionUpgradePolicy::AsIs,
            false,
        )
        .ok()?;
        *slot = Some((version, dec));
    }
    let (_, dec) = slot.as_mut()?;
    let cursor = dec.get_mut();
    cursor.get_mut().clear();
    cursor.get_mut().extend_from_slice(f.record);
    cursor.set_position(0);
    let payload = match dec.decode_ref() {
        Ok(Some(rec)) => Some(derive_payload(f.rtype, &rec)),
        _ => None,
    };
    match payload {
        Some(payload) => payload,
        None => {
            *slot = None;
            None
        }
    }
}

/// The tickbox payload of one decoded DBN record of `rtype`; `None` when it has no tickbox equivalent. Shared by
/// [`derive_wire`] (a stored vendor frame) and the replay of a DBN file (a record straight from the decoder), so
/// both publish the same message.
pub(crate) fn derive_payload(rtype: u8, rec: &RecordRef<'_>) -> Option<Payload> {
    let payload = match rtype {
        rtype::MBP_0 => {
            let t = rec.get::<TradeMsg>()?;
            Payload::Trade(Trade {
                instrument_id: t.hd.instrument_id,
                price: t.price,
                size: t.size,
                aggressor: side(t.side),
                trade_id: u64::from(t.sequence),
                venue_time_ns: t.hd.ts_event,
            })
        }
        rtype::MBP_1 => {
            let m = rec.get::<Mbp1Msg>()?;
            if m.action as u8 == b'T' {
                Payload::Trade(Trade {
                    instrument_id: m.hd.instrument_id,
                    price: m.price,
                    size: m.size,
                    aggressor: side(m.side),
                    trade_id: u64::from(m.sequence),
                    venue_time_ns: m.hd.ts_event,
                })
            } else {
                let l = &m.levels[0];
                quote(
                    m.hd.instrument_id,
                    [l.bid_px, l.ask_px],
                    [l.bid_sz, l.ask_sz, l.bid_ct, l.ask_ct],
                    m.hd.ts_event,
                )
            }
        }
        rtype::BBO_1S | rtype::BBO_1M => {
            let m = rec.get::<BboMsg>()?;
            let l = &m.levels[0];
            quote(
                m.hd.instrument_id,
                [l.bid_px, l.ask_px],
                [l.bid_sz, l.ask_sz, l.bid_ct, l.ask_ct],
                m.hd.ts_event,
            )
        }
        rtype::CMBP_1 => {
            let m = rec.get::<Cmbp1Msg>()?;
            let l = &m.levels[0];
            quote(
                m.hd.instrument_id,
                [l.bid_px, l.ask_px],
                [l.bid_sz, l.ask_sz, 0, 0],
                m.hd.ts_event,
            )
        }
        rtype::CBBO_1S | rtype::CBBO_1M => {
            let m = rec.get::<CbboMsg>()?;
            let l = &m.levels[0];
            quote(
                m.hd.instrument_id,
                [l.bid_px, l.ask_px],
                [l.bid_sz, l.ask_sz, 0, 0],
                m.hd.ts_event,
            )
        }
        _ => return None,
    };
    Some(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{VendorHeader, VENDOR_DBN};
    use dbn::RecordHeader;

    fn trade(price: i64) -> TradeMsg {
        TradeMsg {
            hd: RecordHeader::new::<TradeMsg>(rtype::MBP_0, 2, 7, 1_700_000_000_000_000_000),
            price,
            size: 5,
            action: b'T' as _,
            side: b'A' as _,
            flags: Default::default(),
            depth: 0,
            ts_recv: 1_700_000_000_000_000_100,
            ts_in_delta: 0,
            sequence: 9,
        }
    }

    fn frame<'a>(record: &'a [u8], version: u8) -> VendorFrame<'a> {
        VendorFrame {
            topic: "V.XNAS.AAPL",
            header: VendorHeader {
                flags: 0,
                publisher_id: 1,
                sequence: 1,
                send_time_ns: 0,
                origin_time_ns: 0,
                session: 0,
            },
            vendor: VENDOR_DBN,
            version,
            rtype: record[1],
            source: 0,
            record,
        }
    }

    fn price(f: &VendorFrame<'_>) -> Option<i64> {
        match derive_wire(f)? {
            (_, _, Payload::Trade(t)) => Some(t.price),
            _ => None,
        }
    }

    /// The thread's reused decoder gives each record its own result: a record it cannot decode, one whose length
    /// word disagrees with its bytes, and a change of DBN version leave nothing behind for the next record.
    #[test]
    fn reused_decoder_keeps_records_apart() {
        let (a, b) = (trade(100), trade(200));
        let (a, b) = (a.as_ref(), b.as_ref());
        assert_eq!(price(&frame(a, 3)), Some(100));
        assert_eq!(price(&frame(b, 3)), Some(200));
        // The length word says 48 bytes, the rtype is one the decoder does not know.
        let mut bad = a.to_vec();
        bad[1] = 0xEE;
        assert_eq!(price(&frame(&bad, 3)), None);
        assert_eq!(price(&frame(b, 3)), Some(200));
        // One extra byte after the record: decoded alone, the next record is unaffected.
        let mut long = a.to_vec();
        long.push(0);
        assert_eq!(price(&frame(&long, 3)), Some(100));
        assert_eq!(price(&frame(b, 2)), Some(200));
        assert_eq!(price(&frame(a, 1)), Some(100));
        assert_eq!(price(&frame(b, 3)), Some(200));
    }
}
