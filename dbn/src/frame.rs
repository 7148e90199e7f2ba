//! Kind 6, `vendor`: a tickbox frame (topic, NUL, the wire header) whose payload is an 8-byte prefix and one
//! vendor record, byte for byte as the vendor encoded it. See docs/book/src/wire.md section 6.

use crate::error::FrameError;

/// The wire kind byte of a vendor record frame.
pub const VENDOR_KIND: u8 = 6;
/// The topic letter of vendor record frames (`V.GLBX.ESM3`).
pub const VENDOR_TOPIC_LETTER: char = 'V';
/// Vendor byte of a Databento DBN record.
pub const VENDOR_DBN: u8 = 1;
/// Bytes of the payload prefix before the record.
pub const PREFIX_LEN: usize = 8;

const HEADER_LEN: usize = tickbox_wire::HEADER_LEN;
const HEADER_LEN_V1: usize = tickbox_wire::HEADER_LEN_V1;

/// The wire header fields of a vendor frame (the layout is `tickbox_wire::Header`'s; the kind is always 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VendorHeader {
    /// Provenance flags, carried through unchanged.
    pub flags: u16,
    /// The DBN record's publisher id.
    pub publisher_id: u32,
    /// Per-publisher sequence within the import (gap-free from 1).
    pub sequence: u64,
    /// The record's `ts_recv` (its index time).
    pub send_time_ns: u64,
    /// The record's `ts_event`.
    pub origin_time_ns: u64,
    /// The import run (its start, ns since the epoch).
    pub session: u64,
}

/// A decoded view of one vendor frame, borrowing from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VendorFrame<'a> {
    /// The topic (`V.<venue>.<symbol>`).
    pub topic: &'a str,
    /// Header fields.
    pub header: VendorHeader,
    /// Vendor ([`VENDOR_DBN`]).
    pub vendor: u8,
    /// The DBN version of the record bytes (1 to 3; 0 when the source did not say).
    pub version: u8,
    /// The DBN rtype (also the record's second byte).
    pub rtype: u8,
    /// Index of the imported file in the journal's manifest.
    pub source: u32,
    /// The record exactly as the file held it.
    pub record: &'a [u8],
}

impl<'a> VendorFrame<'a> {
    /// Decodes a frame of kind 6. Never panics; every malformed input is a [`FrameError`].
    pub fn decode(frame: &'a [u8]) -> Result<Self, FrameError> {
        let nul = frame
            .iter()
            .position(|&b| b == 0)
            .ok_or(FrameError::NotAFrame("no topic terminator"))?;
        if nul == 0 {
            return Err(FrameError::NotAFrame("empty topic"));
        }
        let topic = std::str::from_utf8(&frame[..nul])
            .map_err(|_| FrameError::NotAFrame("topic is not UTF-8"))?;
        let rest = &frame[nul + 1..];
        let header_len = match rest.first() {
            Some(2) => HEADER_LEN,
            Some(1) => HEADER_LEN_V1,
            Some(_) => return Err(FrameError::NotAFrame("unknown wire version")),
            None => return Err(FrameError::NotAFrame("truncated header")),
        };
        let h = rest
            .get(..header_len)
            .ok_or(FrameError::NotAFrame("truncated header"))?;
        if h[1] != VENDOR_KIND {
            return Err(FrameError::OtherKind(h[1]));
        }
        let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap_or([0; 8]));
        let header = VendorHeader {
            flags: u16::from_le_bytes([h[2], h[3]]),
            publisher_id: u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
            sequence: u64_at(8),
            send_time_ns: u64_at(16),
            origin_time_ns: u64_at(24),
            session: if header_len == HEADER_LEN {
                u64_at(32)
            } else {
                0
            },
        };
        let payload = &rest[header_len..];
        if payload.len() < PREFIX_LEN {
            return Err(FrameError::Short(payload.len()));
        }
        let (prefix, record) = payload.split_at(PREFIX_LEN);
        if prefix[0] != VENDOR_DBN {
            return Err(FrameError::UnknownVendor(prefix[0]));
        }
        let said = record.first().map_or(0, |&l| l as usize * 4);
        if record.len() < 16 || said != record.len() {
            return Err(FrameError::RecordLength {
                said,
                got: record.len(),
            });
        }
        if prefix[2] != record[1] {
            return Err(FrameError::RtypeMismatch {
                prefix: prefix[2],
                record: record[1],
            });
        }
        Ok(VendorFrame {
            topic,
            header,
            vendor: prefix[0],
            version: prefix[1],
            rtype: prefix[2],
            source: u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]),
            record,
        })
    }
}

/// Appends one vendor frame to `out` (cleared first). `topic` must be non-empty and NUL-free (the importer's
/// topics are); `record` is one DBN record, whose first two bytes are its length / 4 and its rtype.
pub fn encode_vendor_frame(
    out: &mut Vec<u8>,
    topic: &str,
    header: &VendorHeader,
    version: u8,
    source: u32,
    record: &[u8],
) {
    out.clear();
    out.extend_from_slice(topic.as_bytes());
    out.push(0);
    out.push(tickbox_wire::WIRE_VERSION);
    out.push(VENDOR_KIND);
    out.extend_from_slice(&header.flags.to_le_bytes());
    out.extend_from_slice(&header.publisher_id.to_le_bytes());
    out.extend_from_slice(&header.sequence.to_le_bytes());
    out.extend_from_slice(&header.send_time_ns.to_le_bytes());
    out.extend_from_slice(&header.origin_time_ns.to_le_bytes());
    out.extend_from_slice(&header.session.to_le_bytes());
    out.push(VENDOR_DBN);
    out.push(version);
    out.push(record.get(1).copied().unwrap_or(0));
    out.push(0);
    out.extend_from_slice(&source.to_le_bytes());
    out.extend_from_slice(record);
}

/// The fewest bytes a record of `rtype` can have (its smallest version's struct), or `None` for an rtype the
/// `dbn` crate does not know. The `dbn` crate panics when asked to view a record shorter than its rtype's struct,
/// so every record from a file or a journal is checked with [`record_fits`] before the crate looks inside it.
///
/// `TBBO` (0xC5) is left out: versions 1 to 3, the ones tickbox reads, carry a trade's top of book under
/// `MBP_1`, and the crate's version-3 views refuse 0xC5 while its dispatch (JSON encoder, index time) unwraps
/// the refusal. Admitting it let a damaged rtype byte panic `journal dump` and `import`.
pub fn min_record_len(rtype: u8) -> Option<usize> {
    use dbn::rtype as r;
    use std::mem::size_of;
    let table: [(u8, usize); 22] = [
        (r::MBP_0, size_of::<dbn::TradeMsg>()),
        (r::MBP_1, size_of::<dbn::Mbp1Msg>()),
        (r::MBP_10, size_of::<dbn::Mbp10Msg>()),
        (r::OHLCV_DEPRECATED, size_of::<dbn::OhlcvMsg>()),
        (r::OHLCV_1S, size_of::<dbn::OhlcvMsg>()),
        (r::OHLCV_1M, size_of::<dbn::OhlcvMsg>()),
        (r::OHLCV_1H, size_of::<dbn::OhlcvMsg>()),
        (r::OHLCV_1D, size_of::<dbn::OhlcvMsg>()),
        (r::OHLCV_EOD, size_of::<dbn::OhlcvMsg>()),
        (r::STATUS, size_of::<dbn::StatusMsg>()),
        (r::INSTRUMENT_DEF, size_of::<dbn::v1::InstrumentDefMsg>()),
        (r::IMBALANCE, size_of::<dbn::ImbalanceMsg>()),
        (r::ERROR, size_of::<dbn::v1::ErrorMsg>()),
        (r::SYMBOL_MAPPING, size_of::<dbn::v1::SymbolMappingMsg>()),
        (r::SYSTEM, size_of::<dbn::v1::SystemMsg>()),
        (r::STATISTICS, size_of::<dbn::v1::StatMsg>()),
        (r::MBO, size_of::<dbn::MboMsg>()),
        (r::CMBP_1, size_of::<dbn::Cmbp1Msg>()),
        (r::TCBBO, size_of::<dbn::Cmbp1Msg>()),
        (r::CBBO_1S, size_of::<dbn::CbboMsg>()),
        (r::CBBO_1M, size_of::<dbn::CbboMsg>()),
        (r::BBO_1S, size_of::<dbn::BboMsg>()),
    ];
    table
        .iter()
        .find(|(t, _)| *t == rtype)
        .map(|(_, n)| *n)
        .or(if rtype == r::BBO_1M {
            Some(size_of::<dbn::BboMsg>())
        } else {
            None
        })
}

/// Whether `record` (its bytes, header included) is long enough for its rtype and of a known rtype, so the `dbn`
/// crate can view it without panicking.
pub fn record_fits(record: &[u8]) -> bool {
    record.len() >= 16
        && record
            .get(1)
            .and_then(|&t| min_record_len(t))
            .is_some_and(|n| record.len() >= n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut rec = vec![0u8; 48];
        rec[0] = 12;
        rec[1] = 0x00;
        let h = VendorHeader {
            flags: 2,
            publisher_id: 7,
            sequence: 9,
            send_time_ns: 11,
            origin_time_ns: 10,
            session: 5,
        };
        let mut out = Vec::new();
        encode_vendor_frame(&mut out, "V.GLBX.ESM3", &h, 2, 3, &rec);
        let f = VendorFrame::decode(&out).unwrap();
        assert_eq!(f.topic, "V.GLBX.ESM3");
        assert_eq!(f.header, h);
        assert_eq!((f.version, f.rtype, f.source), (2, 0, 3));
        assert_eq!(f.record, &rec[..]);
        for cut in 0..out.len() {
            assert!(VendorFrame::decode(&out[..cut]).is_err());
        }
        // Standard tickbox readers reject the kind, as docs/book/src/wire.md section 10 requires.
        assert!(tickbox_wire::MessageRef::decode(&out).is_err());
    }
}
