//! The tickbox wire format: one ZeroMQ frame per market-data message.
//!
//! ```text
//!  topic bytes (UTF-8, no NUL) │ 0x00 │ header (40 bytes, little-endian) │ payload (fixed size per kind)
//! ```
//!
//! The topic comes first so ZeroMQ prefix subscriptions select by topic (`Q.` all quotes, `Q.XNAS.AAPL\0` exactly
//! one symbol's quotes). Topics look like `Q.XNAS.AAPL` (kind letter, venue, symbol); heartbeats use `H.<publisher>`.
//! The header is fixed-width so the subscriber's hot path reads it at known offsets without decoding the payload.
//! Payloads are `bincode` with fixed-width little-endian integers, so every kind has a fixed encoded size.
//! Prices are fixed-point `i64` in units of [`PRICE_SCALE`] (1e-9), never floats.
//!
//! Decoding borrows from the received frame and never allocates: [`MessageRef::decode`] checks the topic and
//! header and keeps the payload as a slice; [`MessageRef::payload`] decodes it into a small `Copy` value.
//! Every malformed frame is a [`DecodeError`], never a panic.

mod batch;
mod clock;
mod error;
mod frame;
mod framing;
mod header;
pub mod history;
mod kind;
mod payload;
pub mod sequence;
mod short_keys;
pub mod tap;
mod topic;

pub use batch::{
    batch_frame_len, batch_records, batch_spans, is_batch, BatchBuilder, BatchCursor, BatchRecords,
    BatchSpans, BatchWriter, SubscriptionTally, BATCH_HEADER_LEN, BATCH_RECORD_PREFIX, BATCH_TOPIC,
    BATCH_VERSION, MAX_BATCHED_RECORD,
};
pub use clock::{now_ns, Clock, ManualClock, SystemClock};
pub use error::{DecodeError, EncodeError};
pub use frame::{
    encode, encode_to_vec, encoded_len, find_nul, restamp_in_place, set_flags_in_place,
    stamp_send_time_in_place, topic_str, write_identity_at, write_send_fields_at, MessageRef,
};
pub use framing::Framing;
pub use header::{Flags, Header, HEADER_LEN, HEADER_LEN_V1, WIRE_VERSION};
pub use kind::Kind;
pub use payload::{
    BookLevel, GapCause, GapNotice, Heartbeat, Payload, Quote, Side, Trade, PRICE_SCALE,
};
pub use sequence::{PublisherLedger, SequenceEvent, SequenceTotals, SequenceTracker};
pub use short_keys::ShortKeyCache;
pub use topic::{
    gap_topic, heartbeat_topic, key_words, make_topic, shard_for, shard_key_of_topic, stable_hash,
};
