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
    let mut dec = RecordDecoder::with_version(
        Cursor::new(f.record),
        version,
        VersionUpgradePolicy::AsIs,
        false,
    )
    .ok()?;
    let rec = dec.decode_ref().ok()??;
    let payload = derive_payload(f.rtype, &rec)?;
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
