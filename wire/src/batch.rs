//! Batch frames: many tickbox frames in one ZeroMQ message, for streams where every subscriber takes everything
//! (a replay at `--speed max`, a feed whose only subscriber subscribed to ""). One message per record costs one
//! allocation, one queue slot and one wake-up per record on both ends; a batch pays those once per batch.
//!
//! ```text
//!  "#B" 0x00 │ batch version u8 (1) │ reserved u8 (0) │ count u16 LE │ count × ( length u16 LE │ record bytes )
//! ```
//!
//! Each record is one complete tickbox frame (topic, NUL, header, payload), unchanged, so a reader hands it to
//! [`crate::MessageRef::decode`] as if it had arrived alone. The batch topic `#B` is matched by the empty
//! subscription only: no data topic starts with `#` (the encoder refuses one), so a prefix subscription such as
//! `Q.` never receives a batch, and a publisher only batches when every subscriber subscribed to "".

use std::ops::Range;

use crate::error::DecodeError;

/// Topic of every batch frame. A SUB subscribed to "" receives batches; prefix subscriptions ("Q.", "T.XNAS") never do.
pub const BATCH_TOPIC: &str = "#B";

/// Largest record a batch can carry (per-record length is u16).
pub const MAX_BATCHED_RECORD: usize = u16::MAX as usize;

/// The batch layout version this build writes and reads.
pub const BATCH_VERSION: u8 = 1;

/// Bytes before the first record: topic, NUL, version, reserved, count.
pub const BATCH_HEADER_LEN: usize = 7;

/// Bytes of each record's length prefix.
pub const BATCH_RECORD_PREFIX: usize = 2;

/// The frame's first bytes, which say "this is a batch".
const MAGIC: &[u8; 3] = b"#B\0";
/// Offset of the little-endian record count.
const COUNT_AT: usize = 5;

/// Writes one batch into a caller's buffer, which may be the body of a `zmq::Message` allocated at the batch's
/// exact size, so each record is copied once, from wherever it lives straight into the message that is sent.
/// [`BatchBuilder`] is the same writer over a buffer it owns.
#[derive(Debug)]
pub struct BatchWriter<'a> {
    buf: &'a mut [u8],
    fill: Fill,
}

impl<'a> BatchWriter<'a> {
    /// Starts an empty batch at the front of `buf` (the header is written now, the count by [`Self::finish`]).
    /// A buffer shorter than [`BATCH_HEADER_LEN`] takes no record.
    pub fn new(buf: &'a mut [u8], max_records: u16) -> Self {
        let used = if buf.len() >= BATCH_HEADER_LEN {
            write_header(buf);
            BATCH_HEADER_LEN
        } else {
            // Too small for even the header: every push fails, and `finish` returns nothing.
            buf.len()
        };
        BatchWriter {
            buf,
            fill: Fill::new(used, max_records),
        }
    }

    /// Reserves room for one record of `len` bytes and returns it to fill in place; `None` when it does not fit.
    #[inline]
    pub fn push_with(&mut self, len: usize) -> Option<&mut [u8]> {
        self.fill.push_with(self.buf, len)
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        usize::from(self.fill.count)
    }

    /// True when no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.fill.count == 0
    }

    /// Writes the count and returns how many bytes of the buffer the batch takes.
    pub fn finish(self) -> usize {
        if self.buf.len() >= BATCH_HEADER_LEN {
            self.fill.write_count(self.buf)
        } else {
            0
        }
    }
}

/// Bytes a batch of records of these lengths takes, to size its buffer exactly before filling it.
#[inline]
pub fn batch_frame_len(record_bytes: usize, records: usize) -> usize {
    BATCH_HEADER_LEN + records * BATCH_RECORD_PREFIX + record_bytes
}

/// Reusable builder: owns one buffer, never reallocates after construction.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    buf: Box<[u8]>,
    fill: Fill,
}

impl BatchBuilder {
    /// A builder whose batches are at most `max_frame_bytes` long (header included) and hold at most
    /// `max_records` records. The buffer is allocated here, once.
    pub fn new(max_frame_bytes: usize, max_records: u16) -> Self {
        let mut buf = vec![0u8; max_frame_bytes.max(BATCH_HEADER_LEN)].into_boxed_slice();
        write_header(&mut buf);
        BatchBuilder {
            buf,
            fill: Fill::new(BATCH_HEADER_LEN, max_records),
        }
    }

    /// Appends one complete tickbox frame (topic\0header payload). Returns false, appending nothing, when it does not fit (caller sends the batch, clears, pushes again). Records larger than MAX_BATCHED_RECORD or than an empty batch's room must be sent as single frames (returns false on an empty builder too; callers check `is_empty`).
    #[inline]
    pub fn try_push(&mut self, frame: &[u8]) -> bool {
        match self.push_with(frame.len()) {
            Some(slot) => {
                slot.copy_from_slice(frame);
                true
            }
            None => false,
        }
    }

    /// Reserves room for one record of `len` bytes and returns it for the caller to fill in place (so a replayer can copy straight from the journal map into the batch, or restamp in place); None when it does not fit.
    #[inline]
    pub fn push_with(&mut self, len: usize) -> Option<&mut [u8]> {
        self.fill.push_with(&mut self.buf, len)
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        usize::from(self.fill.count)
    }

    /// True when the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.fill.count == 0
    }

    /// Bytes the finished frame takes so far (header included).
    pub fn frame_len(&self) -> usize {
        self.fill.used
    }

    /// The finished batch frame (writes the count).
    pub fn frame(&mut self) -> &[u8] {
        let used = self.fill.write_count(&mut self.buf);
        &self.buf[..used]
    }

    /// Empties the batch, keeping the buffer.
    pub fn clear(&mut self) {
        self.fill = Fill::new(BATCH_HEADER_LEN, self.fill.max_records);
    }
}

/// A batch written into a buffer the caller keeps between calls, e.g. a pooled buffer that is later handed to
/// libzmq as it is (zero-copy send), where neither [`BatchWriter`] (borrows the buffer for its whole life) nor
/// [`BatchBuilder`] (owns it) fits. Give every call the same buffer; a different one is not unsafe, only wrong.
#[derive(Debug, Clone, Copy)]
pub struct BatchCursor {
    fill: Fill,
}

impl BatchCursor {
    /// Starts an empty batch at the front of `buf` (the header is written now, the count by [`Self::finish`]).
    /// A buffer shorter than [`BATCH_HEADER_LEN`] takes no record.
    pub fn start(buf: &mut [u8], max_records: u16) -> Self {
        let used = if buf.len() >= BATCH_HEADER_LEN {
            write_header(buf);
            BATCH_HEADER_LEN
        } else {
            buf.len()
        };
        BatchCursor {
            fill: Fill::new(used, max_records),
        }
    }

    /// Reserves room in `buf` for one record of `len` bytes and returns it to fill in place; `None` when it does
    /// not fit.
    #[inline]
    pub fn push_with<'b>(&mut self, buf: &'b mut [u8], len: usize) -> Option<&'b mut [u8]> {
        self.fill.push_with(buf, len)
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        usize::from(self.fill.count)
    }

    /// True when no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.fill.count == 0
    }

    /// Writes the count into `buf` and returns how many of its bytes the batch takes (0 for a buffer too short
    /// for the header).
    pub fn finish(&self, buf: &mut [u8]) -> usize {
        if self.fill.used >= BATCH_HEADER_LEN && buf.len() >= BATCH_HEADER_LEN {
            self.fill.write_count(buf)
        } else {
            0
        }
    }

    /// Finishes the batch (as [`finish`](Self::finish)) and returns the bytes of `buf` to send as one message:
    /// the whole batch, or, when it holds a single record, that record alone as a plain frame (it sits in place
    /// past the header and its length prefix), since a batch of one would only cost its reader the unpacking.
    pub fn finish_message(&self, buf: &mut [u8]) -> std::ops::Range<usize> {
        let used = self.finish(buf);
        if self.fill.count == 1 && used > 0 {
            BATCH_HEADER_LEN + BATCH_RECORD_PREFIX..used
        } else {
            0..used
        }
    }
}

/// How far a batch has been filled, over whichever buffer holds it: the one piece of bookkeeping both
/// [`BatchWriter`] (a caller's buffer) and [`BatchBuilder`] (its own) use.
#[derive(Debug, Clone, Copy)]
struct Fill {
    used: usize,
    count: u16,
    max_records: u16,
}

impl Fill {
    fn new(used: usize, max_records: u16) -> Self {
        Fill {
            used,
            count: 0,
            max_records,
        }
    }

    /// Writes the length prefix of a record of `len` bytes and returns its room, or `None` when it may not be
    /// pushed: empty, longer than a u16 length can say, over the record limit, past the end of the buffer, or
    /// the buffer too short for a header.
    #[inline]
    fn push_with<'b>(&mut self, buf: &'b mut [u8], len: usize) -> Option<&'b mut [u8]> {
        if len == 0
            || len > MAX_BATCHED_RECORD
            || self.count >= self.max_records
            || self.used < BATCH_HEADER_LEN
        {
            return None;
        }
        let at = self.used + BATCH_RECORD_PREFIX;
        if at + len > buf.len() {
            return None;
        }
        buf[self.used..at].copy_from_slice(&(len as u16).to_le_bytes());
        self.used = at + len;
        self.count += 1;
        Some(&mut buf[at..at + len])
    }

    /// Writes the record count into the header and returns the batch's length.
    fn write_count(&self, buf: &mut [u8]) -> usize {
        buf[COUNT_AT..COUNT_AT + 2].copy_from_slice(&self.count.to_le_bytes());
        self.used
    }
}

fn write_header(buf: &mut [u8]) {
    buf[..3].copy_from_slice(MAGIC);
    buf[3] = BATCH_VERSION;
    buf[4] = 0;
    buf[COUNT_AT..COUNT_AT + 2].copy_from_slice(&0u16.to_le_bytes());
}

/// One publishing socket's subscriptions by kind, as a verbose XPUB reports them: the empty prefix, the batch
/// topic (a reader's statement that it unpacks batches, sent beside its "") and every other prefix. Publishers
/// decide from it whether to batch and how many subscribers they have; it does no I/O.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SubscriptionTally {
    all: u64,
    batch: u64,
    prefix: u64,
}

impl SubscriptionTally {
    /// Counts one XPUB subscription message: byte 0 is 1 (subscribe) or 0 (unsubscribe), the rest the prefix.
    /// Any other message is ignored; an unsubscription never takes a count below zero.
    pub fn on_message(&mut self, msg: &[u8]) {
        let Some((&op, prefix)) = msg.split_first() else {
            return;
        };
        let slot = if prefix.is_empty() {
            &mut self.all
        } else if prefix == BATCH_TOPIC.as_bytes() {
            &mut self.batch
        } else {
            &mut self.prefix
        };
        match op {
            1 => *slot += 1,
            0 => *slot = slot.saturating_sub(1),
            _ => {}
        }
    }

    /// Subscriptions that stand for a subscriber: all but the batch opt-in, which only qualifies a reader's ""
    /// (a reader with several prefixes counts once per prefix).
    pub fn subscribers(&self) -> u64 {
        self.all + self.prefix
    }

    /// True while any subscription is held, the batch opt-in included.
    pub fn any(&self) -> bool {
        self.all + self.batch + self.prefix > 0
    }

    /// Batch frames reach every subscriber and each of them reads them: someone takes everything, every
    /// empty-prefix subscription is matched by a batch-topic one, and no other prefix is held (a batch's topic
    /// matches no other prefix, so its holder would receive nothing).
    pub fn all_read_batches(&self) -> bool {
        self.all > 0 && self.prefix == 0 && self.batch >= self.all
    }
}

/// True when `frame` starts with the batch topic and its NUL ("#B\0").
#[inline]
pub fn is_batch(frame: &[u8]) -> bool {
    frame.starts_with(MAGIC)
}

/// Iterates the records of a batch frame without copying; each item is one complete frame to hand to MessageRef::decode. Err on a malformed batch header; the iterator yields Err(DecodeError) for a truncated record and then stops.
pub fn batch_records(frame: &[u8]) -> Result<BatchRecords<'_>, DecodeError> {
    Ok(BatchRecords {
        frame,
        spans: batch_spans(frame)?,
    })
}

/// Where each record of a batch frame lies in it, for a reader that rewrites records in place (a borrowing
/// iterator cannot lend `&mut` slices of the frame it walks): the same checks as [`batch_records`], and the
/// frame is handed to every [`BatchSpans::next_in`] instead of being held.
pub fn batch_spans(frame: &[u8]) -> Result<BatchSpans, DecodeError> {
    if !is_batch(frame) {
        return Err(DecodeError::NotABatch);
    }
    if frame.len() < BATCH_HEADER_LEN {
        return Err(DecodeError::TruncatedBatchHeader { got: frame.len() });
    }
    let version = frame[3];
    if version != BATCH_VERSION {
        return Err(DecodeError::UnknownBatchVersion(version));
    }
    // frame[4] is reserved: written as 0, ignored on read so a later use of it need not break old readers.
    let count = u16::from_le_bytes([frame[COUNT_AT], frame[COUNT_AT + 1]]);
    Ok(BatchSpans {
        at: BATCH_HEADER_LEN,
        declared: count,
        index: 0,
        done: false,
    })
}

/// A cursor over the records of one batch frame (see [`batch_spans`]).
#[derive(Debug, Clone)]
pub struct BatchSpans {
    at: usize,
    declared: u16,
    index: u16,
    done: bool,
}

impl BatchSpans {
    /// The record count the batch header states.
    pub fn declared_count(&self) -> u16 {
        self.declared
    }

    /// The byte range of the next record in `frame` (the frame [`batch_spans`] read; another one is not unsafe,
    /// only wrong: ranges are checked against the frame given). `Err` for a truncated record or bytes after the
    /// last one, then `None`.
    #[inline]
    pub fn next_in(&mut self, frame: &[u8]) -> Option<Result<Range<usize>, DecodeError>> {
        if self.done {
            return None;
        }
        let rest = frame.get(self.at..).unwrap_or_default();
        if self.index == self.declared {
            self.done = true;
            return if rest.is_empty() {
                None
            } else {
                Some(Err(DecodeError::BatchTrailingBytes {
                    count: self.declared,
                    extra: rest.len(),
                }))
            };
        }
        let index = self.index;
        let fail = |this: &mut Self, err| {
            this.done = true;
            Some(Err(err))
        };
        let Some((len_bytes, body)) = rest.split_first_chunk::<BATCH_RECORD_PREFIX>() else {
            return fail(
                self,
                DecodeError::TruncatedBatchRecord {
                    index,
                    needed: BATCH_RECORD_PREFIX,
                    got: rest.len(),
                },
            );
        };
        let len = usize::from(u16::from_le_bytes(*len_bytes));
        if len == 0 {
            return fail(self, DecodeError::EmptyBatchRecord { index });
        }
        if body.len() < len {
            return fail(
                self,
                DecodeError::TruncatedBatchRecord {
                    index,
                    needed: len,
                    got: body.len(),
                },
            );
        }
        let start = self.at + BATCH_RECORD_PREFIX;
        self.at = start + len;
        self.index += 1;
        Some(Ok(start..start + len))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            // Up to one error item after the declared records.
            let left = usize::from(self.declared - self.index);
            (0, Some(left + 1))
        }
    }
}

/// The records of one batch frame, in order, borrowed from it (see [`batch_records`]).
#[derive(Debug, Clone)]
pub struct BatchRecords<'a> {
    frame: &'a [u8],
    spans: BatchSpans,
}

impl BatchRecords<'_> {
    /// The record count the batch header states (what a reader that stops at an error did not receive).
    pub fn declared_count(&self) -> u16 {
        self.spans.declared
    }
}

impl<'a> Iterator for BatchRecords<'a> {
    type Item = Result<&'a [u8], DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let frame = self.frame;
        self.spans
            .next_in(frame)
            .map(|span| span.map(|range| &frame[range]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode_to_vec, Header, Kind, MessageRef, Quote, Trade};

    fn frames(n: u64) -> Vec<Vec<u8>> {
        (1..=n)
            .map(|seq| {
                if seq % 2 == 0 {
                    let header = Header::live(Kind::Trade, 3, seq, 1_000 + seq);
                    encode_to_vec("T.XNAS.MSFT", &header, &Trade::default().into()).unwrap()
                } else {
                    let header = Header::live(Kind::Quote, 3, seq, 1_000 + seq);
                    encode_to_vec("Q.XNAS.AAPL", &header, &Quote::default().into()).unwrap()
                }
            })
            .collect()
    }

    /// A builder (8 KiB, 64 records) holding every frame of `input`, each of which must fit.
    fn built(input: &[Vec<u8>]) -> BatchBuilder {
        let mut builder = BatchBuilder::new(8192, 64);
        for f in input {
            assert!(builder.try_push(f));
        }
        builder
    }

    fn collect(frame: &[u8]) -> Result<Vec<Vec<u8>>, DecodeError> {
        batch_records(frame)?
            .map(|r| r.map(<[u8]>::to_vec))
            .collect()
    }

    #[test]
    fn spans_find_the_records_and_let_them_be_rewritten_in_place() {
        let input = frames(5);
        let mut frame = built(&input).frame().to_vec();
        let mut spans = batch_spans(&frame).unwrap();
        assert_eq!(spans.declared_count(), 5);
        let mut seen = 0;
        while let Some(span) = spans.next_in(&frame) {
            let span = span.unwrap();
            assert_eq!(&frame[span.clone()], &input[seen][..]);
            crate::stamp_send_time_in_place(&mut frame[span], 99, crate::Flags::REPLAY).unwrap();
            seen += 1;
        }
        assert_eq!(seen, 5);
        for record in batch_records(&frame).unwrap() {
            assert_eq!(
                MessageRef::decode(record.unwrap())
                    .unwrap()
                    .header()
                    .send_time_ns,
                99
            );
        }
        // A truncated batch: the spans stop with the same error the records do.
        let cut = &frame[..frame.len() - 3];
        let mut spans = batch_spans(cut).unwrap();
        let mut errors = Vec::new();
        while let Some(span) = spans.next_in(cut) {
            if let Err(e) = span {
                errors.push(e);
            }
        }
        let records: Vec<DecodeError> = batch_records(cut)
            .unwrap()
            .filter_map(Result::err)
            .collect();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors, records);
    }

    #[test]
    fn round_trip_keeps_records_and_order() {
        let input = frames(10);
        let mut builder = built(&input);
        assert_eq!(builder.len(), 10);
        let frame = builder.frame().to_vec();
        assert!(is_batch(&frame));
        assert_eq!(batch_records(&frame).unwrap().declared_count(), 10);
        let out = collect(&frame).unwrap();
        assert_eq!(out, input);
        for (i, r) in out.iter().enumerate() {
            assert_eq!(
                MessageRef::decode(r).unwrap().header().sequence,
                i as u64 + 1
            );
        }
        builder.clear();
        assert!(builder.is_empty());
        assert_eq!(collect(builder.frame()).unwrap(), Vec::<Vec<u8>>::new());
    }

    /// One record goes out as that record's own frame; two or more as the batch; none as nothing.
    #[test]
    fn a_finished_message_is_the_lone_record_or_the_whole_batch() {
        let input = frames(2);
        let mut buf = vec![0u8; 1024];
        let cursor = BatchCursor::start(&mut buf, 8);
        assert_eq!(cursor.finish_message(&mut buf), 0..BATCH_HEADER_LEN);
        let mut cursor = BatchCursor::start(&mut buf, 8);
        cursor
            .push_with(&mut buf, input[0].len())
            .unwrap()
            .copy_from_slice(&input[0]);
        let lone = cursor.finish_message(&mut buf);
        assert_eq!(&buf[lone], &input[0][..]);
        cursor
            .push_with(&mut buf, input[1].len())
            .unwrap()
            .copy_from_slice(&input[1]);
        let both = cursor.finish_message(&mut buf);
        assert_eq!(both.start, 0);
        assert_eq!(collect(&buf[both]).unwrap(), input);
    }

    #[test]
    fn cursor_over_a_kept_buffer_writes_what_the_builder_writes() {
        let input = frames(7);
        let mut builder = BatchBuilder::new(1024, 5);
        let mut buf = vec![0xAAu8; 1024];
        let mut cursor = BatchCursor::start(&mut buf, 5);
        assert!(cursor.is_empty());
        for f in &input {
            let by_builder = builder.try_push(f);
            let by_cursor = match cursor.push_with(&mut buf, f.len()) {
                Some(slot) => {
                    slot.copy_from_slice(f);
                    true
                }
                None => false,
            };
            assert_eq!(by_builder, by_cursor);
        }
        // The record limit (5) stops both.
        assert_eq!(cursor.len(), 5);
        let used = cursor.finish(&mut buf);
        assert_eq!(&buf[..used], builder.frame());
        assert_eq!(collect(&buf[..used]).unwrap(), input[..5].to_vec());
        // Too short for a header: takes nothing, finishes empty.
        let mut tiny = [0u8; 3];
        let mut cursor = BatchCursor::start(&mut tiny, 5);
        assert!(cursor.push_with(&mut tiny, 1).is_none());
        assert_eq!(cursor.finish(&mut tiny), 0);
    }

    #[test]
    fn builder_refuses_what_does_not_fit_and_appends_nothing() {
        let input = frames(3);
        let one = input[0].len();
        // Room for exactly two records of this size.
        let mut builder = BatchBuilder::new(BATCH_HEADER_LEN + 2 * (2 + one), 64);
        assert!(builder.try_push(&input[0]));
        assert!(builder.try_push(&input[0]));
        let before = builder.frame().to_vec();
        assert!(!builder.try_push(&input[0]));
        assert_eq!(builder.frame(), &before[..]);
        // The record limit binds too.
        let mut two = BatchBuilder::new(1 << 16, 2);
        assert!(two.try_push(&input[1]));
        assert!(two.try_push(&input[1]));
        assert!(!two.try_push(&input[1]));
        // Too large even for an empty batch, or empty: refused on an empty builder.
        let mut small = BatchBuilder::new(BATCH_HEADER_LEN + 10, 64);
        assert!(!small.try_push(&input[0]));
        assert!(small.is_empty());
        let mut big = BatchBuilder::new(1 << 20, 64);
        assert!(!big.try_push(&vec![1u8; MAX_BATCHED_RECORD + 1]));
        assert!(big.try_push(&vec![1u8; MAX_BATCHED_RECORD]));
        assert!(!big.try_push(&[]));
        assert!(big.push_with(0).is_none());
    }

    #[test]
    fn push_with_fills_in_place() {
        let input = frames(2);
        let mut builder = BatchBuilder::new(4096, 8);
        for f in &input {
            builder.push_with(f.len()).unwrap().copy_from_slice(f);
        }
        assert_eq!(collect(builder.frame()).unwrap(), input);
    }

    #[test]
    fn writer_over_a_caller_buffer_matches_the_builder() {
        let input = frames(5);
        let total: usize = input.iter().map(Vec::len).sum();
        let mut buf = vec![0u8; batch_frame_len(total, input.len())];
        let mut writer = BatchWriter::new(&mut buf, 64);
        for f in &input {
            writer.push_with(f.len()).unwrap().copy_from_slice(f);
        }
        assert!(writer.push_with(1).is_none(), "exactly full");
        assert_eq!(writer.finish(), buf.len());
        assert_eq!(built(&input).frame(), &buf[..]);
        let mut tiny = [0u8; 3];
        let mut writer = BatchWriter::new(&mut tiny, 64);
        assert!(writer.push_with(1).is_none());
        assert_eq!(writer.finish(), 0);
    }

    #[test]
    fn malformed_batches_are_typed_errors() {
        let input = frames(3);
        let mut builder = BatchBuilder::new(4096, 8);
        for f in &input {
            assert!(builder.try_push(f));
        }
        let good = builder.frame().to_vec();

        assert_eq!(batch_records(&input[0]).err(), Some(DecodeError::NotABatch));
        assert_eq!(
            batch_records(b"#B\0\x01").err(),
            Some(DecodeError::TruncatedBatchHeader { got: 4 })
        );
        let mut bad_version = good.clone();
        bad_version[3] = 2;
        assert_eq!(
            batch_records(&bad_version).err(),
            Some(DecodeError::UnknownBatchVersion(2))
        );

        // Count says more than the bytes hold: the records present, then a truncation error, then nothing.
        let mut more = good.clone();
        more[COUNT_AT] = 4;
        let mut it = batch_records(&more).unwrap();
        assert_eq!(it.by_ref().take(3).filter(|r| r.is_ok()).count(), 3);
        assert!(matches!(
            it.next(),
            Some(Err(DecodeError::TruncatedBatchRecord { index: 3, .. }))
        ));
        assert_eq!(it.next(), None);

        // Count says fewer: trailing bytes.
        let mut fewer = good.clone();
        fewer[COUNT_AT] = 2;
        assert!(matches!(
            collect(&fewer),
            Err(DecodeError::BatchTrailingBytes { count: 2, .. })
        ));

        // A zero-length record.
        let mut zero = good[..BATCH_HEADER_LEN].to_vec();
        zero[COUNT_AT] = 1;
        zero.extend_from_slice(&[0, 0]);
        assert_eq!(
            collect(&zero),
            Err(DecodeError::EmptyBatchRecord { index: 0 })
        );
    }

    #[test]
    fn truncation_at_every_offset_never_panics_and_is_detected() {
        let input = frames(4);
        let mut builder = BatchBuilder::new(4096, 8);
        for f in &input {
            assert!(builder.try_push(f));
        }
        let good = builder.frame().to_vec();
        for cut in 0..good.len() {
            assert!(collect(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert!(collect(&good).is_ok());
    }

    #[test]
    fn a_tally_counts_subscribers_without_the_opt_in_and_allows_batches_only_when_every_reader_opted_in(
    ) {
        let sub = |p: &[u8]| [&[1u8][..], p].concat();
        let unsub = |p: &[u8]| [&[0u8][..], p].concat();
        let mut t = SubscriptionTally::default();
        assert!(!t.any() && !t.all_read_batches());
        t.on_message(&sub(BATCH_TOPIC.as_bytes()));
        t.on_message(&sub(b""));
        assert_eq!(t.subscribers(), 1, "the opt-in is not a subscriber");
        assert!(t.all_read_batches());
        // A reader of "" alone, and then a prefix holder, each stop batching.
        t.on_message(&sub(b""));
        assert!(!t.all_read_batches());
        t.on_message(&unsub(b""));
        t.on_message(&sub(b"Q."));
        assert_eq!(t.subscribers(), 2);
        assert!(!t.all_read_batches());
        t.on_message(&unsub(b"Q."));
        assert!(t.all_read_batches());
        // Everyone leaves; extra unsubscriptions and other messages change nothing.
        for m in [
            unsub(b""),
            unsub(BATCH_TOPIC.as_bytes()),
            unsub(b""),
            vec![7, b'x'],
            vec![],
        ] {
            t.on_message(&m);
        }
        assert!(!t.any());
        assert_eq!(t.subscribers(), 0);
    }
}
