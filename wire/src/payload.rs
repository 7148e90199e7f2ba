use bincode::de::Decoder;
use bincode::enc::Encoder;
use bincode::error::{DecodeError as BincodeDecodeError, EncodeError as BincodeEncodeError};
use bincode::{Decode, Encode};

use crate::error::DecodeError;
use crate::kind::Kind;

/// Prices are `i64` counts of 1e-9: `PRICE_SCALE` units make one currency unit (as in DBN).
pub const PRICE_SCALE: i64 = 1_000_000_000;

pub(crate) const CODEC: bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
> = bincode::config::standard()
    .with_little_endian()
    .with_fixed_int_encoding();

/// Which side of the book (for trades: the aggressor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Side {
    /// Not known or not applicable (e.g. an auction print).
    #[default]
    None = 0,
    /// The bid side (for a trade: a buyer lifted the offer).
    Buy = 1,
    /// The ask side (for a trade: a seller hit the bid).
    Sell = 2,
}

// Hand-written so a side is one byte on the wire (bincode's derive spends four on an enum tag).
impl Encode for Side {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), BincodeEncodeError> {
        (*self as u8).encode(encoder)
    }
}

impl<Context> Decode<Context> for Side {
    fn decode<D: Decoder<Context = Context>>(decoder: &mut D) -> Result<Self, BincodeDecodeError> {
        match u8::decode(decoder)? {
            0 => Ok(Side::None),
            1 => Ok(Side::Buy),
            2 => Ok(Side::Sell),
            found => Err(BincodeDecodeError::UnexpectedVariant {
                type_name: "Side",
                allowed: &bincode::error::AllowedEnumVariants::Range { min: 0, max: 2 },
                found: found as u32,
            }),
        }
    }
}
bincode::impl_borrow_decode!(Side);

/// Top of book.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode)]
pub struct Quote {
    /// The venue's numeric id for the instrument (the topic names it by symbol).
    pub instrument_id: u32,
    /// Best bid price, in units of [`PRICE_SCALE`].
    pub bid_px: i64,
    /// Best ask price, in units of [`PRICE_SCALE`].
    pub ask_px: i64,
    /// Quantity bid at `bid_px` (shares or contracts).
    pub bid_size: u32,
    /// Quantity offered at `ask_px` (shares or contracts).
    pub ask_size: u32,
    /// Orders resting at the best bid (0 when the venue does not say).
    pub bid_orders: u32,
    /// Orders resting at the best ask (0 when the venue does not say).
    pub ask_orders: u32,
    /// The venue's own timestamp (ns since the Unix epoch), when known; 0 otherwise.
    pub venue_time_ns: u64,
}

/// A print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode)]
pub struct Trade {
    /// The venue's numeric id for the instrument (the topic names it by symbol).
    pub instrument_id: u32,
    /// Execution price, in units of [`PRICE_SCALE`].
    pub price: i64,
    /// Quantity traded (shares or contracts).
    pub size: u32,
    /// The side that crossed the spread; [`Side::None`] when unknown (auctions, off-book prints).
    pub aggressor: Side,
    /// The venue's trade id, for matching corrections and busts.
    pub trade_id: u64,
    /// The venue's own timestamp (ns since the Unix epoch), when known; 0 otherwise.
    pub venue_time_ns: u64,
}

/// Sent by an idle publisher so subscribers can tell silence from death. The header's sequence repeats the last
/// data sequence sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode)]
pub struct Heartbeat {
    /// How often the publisher promises a message (data or heartbeat) while alive.
    pub interval_ns: u64,
    /// Data messages this publisher has sent since it started.
    pub messages_sent: u64,
}

/// One price level of a depth book.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode)]
pub struct BookLevel {
    /// The venue's numeric id for the instrument (the topic names it by symbol).
    pub instrument_id: u32,
    /// Which side of the book this level is on.
    pub side: Side,
    /// 0 is the best level.
    pub level: u8,
    /// The level's price, in units of [`PRICE_SCALE`].
    pub price: i64,
    /// Total quantity resting at this level; 0 means the level was removed.
    pub size: u32,
    /// Orders resting at this level (0 when the venue does not say).
    pub order_count: u32,
    /// The venue's own timestamp (ns since the Unix epoch), when known; 0 otherwise.
    pub venue_time_ns: u64,
}

/// Why a journal lacks some of a publisher's sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum GapCause {
    /// Never reached the recorder (lost upstream: a full high-water mark, a slow tap consumer, a dead link).
    #[default]
    NotReceived = 1,
}

impl Encode for GapCause {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), BincodeEncodeError> {
        (*self as u8).encode(encoder)
    }
}

impl<Context> Decode<Context> for GapCause {
    fn decode<D: Decoder<Context = Context>>(decoder: &mut D) -> Result<Self, BincodeDecodeError> {
        match u8::decode(decoder)? {
            1 => Ok(GapCause::NotReceived),
            found => Err(BincodeDecodeError::UnexpectedVariant {
                type_name: "GapCause",
                allowed: &bincode::error::AllowedEnumVariants::Range { min: 1, max: 1 },
                found: found as u32,
            }),
        }
    }
}
bincode::impl_borrow_decode!(GapCause);

/// A recorder's statement, written into the journal where it noticed it, that sequences
/// `first_missing..=last_missing` of the header's publisher (and session) never reached it. The header's
/// `sequence` is `last_missing`, so a gap detector reading a replay treats the notice like a heartbeat naming the
/// last sequence accounted for, and counts the range as a *recorded* gap, apart from its own transport loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode)]
pub struct GapNotice {
    /// First sequence the journal lacks (inclusive).
    pub first_missing: u64,
    /// Last sequence the journal lacks (inclusive); equal to the header's `sequence`.
    pub last_missing: u64,
    /// When the recorder noticed (ns since the Unix epoch).
    pub detected_ns: u64,
    /// Why the sequences are missing.
    pub cause: GapCause,
}

impl GapNotice {
    /// Sequences the notice accounts for (saturating: a forged notice cannot wrap).
    pub fn missing(&self) -> u64 {
        self.last_missing
            .saturating_sub(self.first_missing)
            .saturating_add(1)
    }
}

/// A decoded payload of any kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payload {
    /// [`Kind::Quote`].
    Quote(Quote),
    /// [`Kind::Trade`].
    Trade(Trade),
    /// [`Kind::Heartbeat`].
    Heartbeat(Heartbeat),
    /// [`Kind::BookLevel`].
    BookLevel(BookLevel),
    /// [`Kind::Gap`].
    Gap(GapNotice),
}

impl Payload {
    /// The kind a header carrying this payload must name.
    pub fn kind(&self) -> Kind {
        match self {
            Payload::Quote(_) => Kind::Quote,
            Payload::Trade(_) => Kind::Trade,
            Payload::Heartbeat(_) => Kind::Heartbeat,
            Payload::BookLevel(_) => Kind::BookLevel,
            Payload::Gap(_) => Kind::Gap,
        }
    }

    /// Encoded size of a payload of `kind`: fixed, because every field is fixed-width.
    pub const fn encoded_len(kind: Kind) -> usize {
        match kind {
            Kind::Quote => 4 + 8 + 8 + 4 + 4 + 4 + 4 + 8,
            Kind::Trade => 4 + 8 + 4 + 1 + 8 + 8,
            Kind::Heartbeat => 8 + 8,
            Kind::BookLevel => 4 + 1 + 1 + 8 + 4 + 4 + 8,
            Kind::Gap => 8 + 8 + 8 + 1,
        }
    }

    /// Writes the payload at the start of `out`, which must hold at least `encoded_len(kind)` bytes.
    pub(crate) fn encode_into(&self, out: &mut [u8]) -> usize {
        let result = match self {
            Payload::Quote(p) => bincode::encode_into_slice(p, out, CODEC),
            Payload::Trade(p) => bincode::encode_into_slice(p, out, CODEC),
            Payload::Heartbeat(p) => bincode::encode_into_slice(p, out, CODEC),
            Payload::BookLevel(p) => bincode::encode_into_slice(p, out, CODEC),
            Payload::Gap(p) => bincode::encode_into_slice(p, out, CODEC),
        };
        // The caller sized `out` from `encoded_len`, and fixed-width fields cannot overflow it.
        result.expect("payload buffer sized by encoded_len")
    }

    /// Decodes a payload of `kind` from its bytes: for readers that already split a frame themselves (a worker's
    /// record carries its decoded header and payload offset) and need not decode the frame again.
    pub fn decode(kind: Kind, bytes: &[u8]) -> Result<Self, DecodeError> {
        let expected = Self::encoded_len(kind);
        if bytes.len() != expected {
            return Err(DecodeError::PayloadLength {
                kind,
                expected,
                got: bytes.len(),
            });
        }
        let invalid = |err: BincodeDecodeError| match err {
            BincodeDecodeError::UnexpectedVariant {
                found, type_name, ..
            } => DecodeError::InvalidField {
                kind,
                field: if type_name == "GapCause" {
                    "cause"
                } else {
                    "side"
                },
                value: u64::from(found),
            },
            // Lengths were checked above, so only an invalid enum byte can fail; report anything else as such.
            _ => DecodeError::InvalidField {
                kind,
                field: "payload",
                value: 0,
            },
        };
        Ok(match kind {
            Kind::Quote => Payload::Quote(decode_exact(bytes).map_err(invalid)?),
            Kind::Trade => Payload::Trade(decode_exact(bytes).map_err(invalid)?),
            Kind::Heartbeat => Payload::Heartbeat(decode_exact(bytes).map_err(invalid)?),
            Kind::BookLevel => Payload::BookLevel(decode_exact(bytes).map_err(invalid)?),
            Kind::Gap => Payload::Gap(decode_exact(bytes).map_err(invalid)?),
        })
    }
}

fn decode_exact<T: Decode<()>>(bytes: &[u8]) -> Result<T, BincodeDecodeError> {
    bincode::decode_from_slice(bytes, CODEC).map(|(value, _)| value)
}

impl From<Quote> for Payload {
    fn from(p: Quote) -> Self {
        Payload::Quote(p)
    }
}
impl From<Trade> for Payload {
    fn from(p: Trade) -> Self {
        Payload::Trade(p)
    }
}
impl From<Heartbeat> for Payload {
    fn from(p: Heartbeat) -> Self {
        Payload::Heartbeat(p)
    }
}
impl From<GapNotice> for Payload {
    fn from(p: GapNotice) -> Self {
        Payload::Gap(p)
    }
}
impl From<BookLevel> for Payload {
    fn from(p: BookLevel) -> Self {
        Payload::BookLevel(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_notice_with_unknown_cause_is_a_typed_error() {
        let notice = GapNotice {
            first_missing: 3,
            last_missing: 9,
            detected_ns: 1,
            cause: GapCause::NotReceived,
        };
        assert_eq!(notice.missing(), 7);
        let mut bytes = bincode::encode_to_vec(notice, CODEC).unwrap();
        assert_eq!(Payload::decode(Kind::Gap, &bytes), Ok(Payload::Gap(notice)));
        *bytes.last_mut().unwrap() = 9;
        assert_eq!(
            Payload::decode(Kind::Gap, &bytes),
            Err(DecodeError::InvalidField {
                kind: Kind::Gap,
                field: "cause",
                value: 9
            })
        );
    }

    #[test]
    fn encoded_len_matches_bincode() {
        let samples = [
            Payload::Quote(Quote::default()),
            Payload::Trade(Trade::default()),
            Payload::Heartbeat(Heartbeat::default()),
            Payload::BookLevel(BookLevel::default()),
            Payload::Gap(GapNotice::default()),
        ];
        for payload in samples {
            let n = match payload {
                Payload::Quote(p) => bincode::encode_to_vec(p, CODEC).unwrap().len(),
                Payload::Trade(p) => bincode::encode_to_vec(p, CODEC).unwrap().len(),
                Payload::Heartbeat(p) => bincode::encode_to_vec(p, CODEC).unwrap().len(),
                Payload::BookLevel(p) => bincode::encode_to_vec(p, CODEC).unwrap().len(),
                Payload::Gap(p) => bincode::encode_to_vec(p, CODEC).unwrap().len(),
            };
            assert_eq!(
                n,
                Payload::encoded_len(payload.kind()),
                "{:?}",
                payload.kind()
            );
        }
    }
}
