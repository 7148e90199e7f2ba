//! Recorded market data (a vendor file, a journal) as the feed publishes it instead of the synthetic market: the
//! record-source trait and the totals of such a run. Reading the recording is the caller's: anything that
//! implements [`RecordSource`] (the `tickbox-dbn` crate reads DBN files and journals) hands records over in order,
//! each with the time it happened (which paces the replay) and its origin time (kept in the header's
//! `origin_time_ns`). Publishing it is [`crate::SourceFeed`]'s, on the one shard publisher: every record goes out
//! under the shard's own publisher id, session and gap-free sequence, stamped with the send time, exactly like a
//! synthetic message.

use std::collections::BTreeMap;
use std::time::Duration;

use tickbox_units::Speed;

use crate::error::SourceError;
use tickbox_wire::{encode, encoded_len, EncodeError, Header, Payload};

/// One recorded message to publish: a ready tickbox frame, borrowed from the source (a journal's mapped record
/// as it lies, or a frame the source encoded once into its own buffer). The feed copies it once, into the
/// shard's batch or frame buffer, and writes its own identity there (publisher id, session, sequence, send
/// time, no flags); topic, kind, payload and origin time go out as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceRecord<'a> {
    /// When it happened in the recording (ns since the epoch): paces the replay. Times that go backwards are
    /// sent at once, never waited for.
    pub time_ns: u64,
    /// The frame: topic as a tickbox publisher spells it (`Q.XNAS.AAPL`, the part after the first `.` picks the
    /// shard), header (its `origin_time_ns` the original event time), payload (a quote, trade or book level).
    pub frame: &'a [u8],
}

impl<'a> SourceRecord<'a> {
    /// A record encoded from its parts into `buf` (reused from record to record, so a source allocates
    /// nothing per record): `origin_time_ns` goes into the header, the publisher's fields are left for the feed.
    pub fn encode(
        buf: &'a mut Vec<u8>,
        time_ns: u64,
        origin_time_ns: u64,
        topic: &str,
        payload: &Payload,
    ) -> Result<Self, EncodeError> {
        let kind = payload.kind();
        let mut header = Header::live(kind, 0, 0, 0);
        header.origin_time_ns = origin_time_ns;
        buf.resize(encoded_len(topic, kind), 0);
        let n = encode(buf, topic, &header, payload)?;
        Ok(SourceRecord {
            time_ns,
            frame: &buf[..n],
        })
    }
}

/// What a source yields: a record to publish, or one it read and cannot publish, with the reason (counted in
/// the report under that reason).
#[derive(Debug, Clone, PartialEq)]
pub enum SourceItem<'a> {
    /// Publish this.
    Record(SourceRecord<'a>),
    /// Read but not publishable; the reason groups the count (keep it short and free of per-record detail).
    Skipped(String),
}

/// A recording read in order.
pub trait RecordSource: Send {
    /// The next item, `Ok(None)` at the end, `Err` when the recording is damaged and cannot be read on.
    fn next_item(&mut self) -> Result<Option<SourceItem<'_>>, SourceError>;
}

/// A snapshot of a running replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Items read from the source so far.
    pub read: u64,
    /// Records published so far.
    pub published: u64,
    /// Items skipped so far.
    pub skipped: u64,
    /// The replay has ended (end of the source, duration, stop or error).
    pub finished: bool,
}

/// What a replay of a recording did, beside its shards' reports (the `FeedReport` that carries it).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceTotals {
    /// The speed asked for.
    pub speed: Speed,
    /// Items read from the source (published + skipped).
    pub read: u64,
    /// Records published (over all shards).
    pub published: u64,
    /// Items not published, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// From the first record sent to the last.
    pub elapsed: Duration,
    /// The source was read to its end (false: stopped early or by `duration`).
    pub complete: bool,
}

impl SourceTotals {
    /// Items skipped, all reasons together.
    pub fn total_skipped(&self) -> u64 {
        self.skipped.values().sum()
    }

    /// Records published per second of `elapsed`.
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.published as f64 / secs
        } else {
            0.0
        }
    }
}
