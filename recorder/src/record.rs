//! The recorder: a SUB socket on a tap (or any tickbox PUB endpoint) appending every frame, with its capture time,
//! to a journal in batches, and accounting for every publisher sequence on the way.
//!
//! [`Recorder`] is the socket-free part: frames in, journal records out. Each frame goes through the wire crate's
//! [`SequenceTracker`] (restarts, heartbeats, duplicates, cached values, anomalies handled there), and every loss
//! it detects becomes a gap-notice record written right before the frame that revealed it, so the journal says
//! what it lacks, in stream order. The per-publisher [`Ledger`] (recorded, missing, overwritten) is persisted in the
//! journal's application metadata at every batch commit. [`record`] is the thin loop that owns the SUB socket.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tickbox_auth::handshake::HandshakeWatch;
use tickbox_journal::{Batch, Writer};
use tickbox_wire::{
    Flags, GapCause, GapNotice, Header, Kind, MessageRef, Payload, SequenceEvent, SequenceTracker,
};

use crate::error::RecorderError;
use crate::journal_ext::{self, OverwriteStats, APP_META_MAX};
use crate::ledger::{Ledger, LedgerOverflow, LedgerRow, MAX_LEDGER_PUBLISHERS};

/// First byte of an Espresso tap subscription-event frame (`tickbox_wire::tap::EVENT_MARKER`): no wire frame
/// starts with NUL, because a topic is never empty. Repeated here so the recorder does not depend on the feed.
pub const TAP_EVENT_MARKER: u8 = 0x00;

/// What to record and how.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Endpoints to connect the SUB socket to.
    pub connect: Vec<String>,
    /// Topic prefixes to subscribe to; empty means everything.
    pub topics: Vec<String>,
    /// Most frames appended per journal batch (one publish, one msync under per-batch durability).
    pub batch_max: usize,
    /// Receive high-water mark of the SUB socket, in messages: how much libzmq buffers while the recorder is busy
    /// writing; beyond it the publisher drops.
    pub receive_hwm: i32,
    /// Stop after this many messages from the stream were appended (gap notices the recorder writes not counted;
    /// the records of the last batch frame are all appended, so it can be passed by up to a batch).
    pub max_messages: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// How often the progress callback runs.
    pub progress_every: Duration,
    /// `[context.sockets.recorder]`: applied to the SUB socket (see `tickbox_zmqx::profile`).
    pub socket_profile: tickbox_zmqx::profile::SocketProfile,
    /// `[security]`: applied to the SUB before it connects.
    pub security: tickbox_auth::Security,
    /// With several endpoints, the core each endpoint's reader thread is pinned to, in `connect` order (`[recorder]
    /// reader_cores`); readers past the end of the list, and a single endpoint (read on the calling thread), run
    /// unpinned.
    pub reader_cores: Vec<usize>,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            connect: Vec::new(),
            topics: Vec::new(),
            batch_max: 1024,
            receive_hwm: 1_000_000,
            max_messages: None,
            duration: None,
            progress_every: Duration::from_secs(1),
            socket_profile: tickbox_zmqx::profile::SocketProfile::default(),
            security: tickbox_auth::Security::default(),
            reader_cores: Vec::new(),
        }
    }
}

/// Counters of a recording (this run; the journal's cumulative ledger is [`Recorder::journal_ledger`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Frames from the stream appended to the journal (data, heartbeats, cached values, upstream gap notices).
    pub messages: u64,
    /// Data records appended (quotes, trades, book levels; not heartbeats, notices or cached values).
    pub recorded: u64,
    /// Publisher sequences the journal lacks: named by the gap notices written (own and upstream ones).
    pub missing: u64,
    /// Gap notices the recorder wrote (losses it detected).
    pub gap_events: u64,
    /// Gap notices received from upstream (recording a replay) and recorded as they came.
    pub upstream_gap_notices: u64,
    /// Publisher heartbeats appended (counted in `messages`, not in `recorded`).
    pub heartbeats: u64,
    /// LVC cached values recorded (out of sequence by design; not counted as recorded).
    pub cached: u64,
    /// Payload bytes appended (gap notices included).
    pub bytes: u64,
    /// Journal batches committed with at least one received frame (empty polls not counted).
    pub batches: u64,
    /// Frames that are not tickbox wire messages (not recorded; the first few are logged).
    pub invalid_frames: u64,
    /// Espresso tap subscription events (not recorded, not invalid).
    pub tap_events: u64,
    /// Batch frames (`#B`) received; each of their records was accounted for and appended as if it had come
    /// alone (in `messages` and the rest). A batch with a malformed record counts one invalid frame, for the
    /// record and whatever follows it (the sequence check names what that lost as a gap).
    pub batch_frames: u64,
    /// Multipart messages (the wire format is single-frame; not recorded).
    pub multipart_messages: u64,
    /// Sequences received twice (not recorded again).
    pub duplicates: u64,
    /// Late arrivals inside a gap already noticed (recorded; the notice stays).
    pub reordered: u64,
    /// Publisher restarts seen (a new session: counting starts again, nothing is missing).
    pub restarts: u64,
    /// Implausible sequence jumps (recorded as received, not believed).
    pub anomalies: u64,
    /// Messages of publishers beyond the tracker's bound (recorded, not tracked).
    pub untracked: u64,
    /// What ring laps overwrote (journal-wide, since the journal was created).
    pub overwritten: OverwriteStats,
    /// Times the recording thread reserved an archive's disk itself because the journal's preparer had not
    /// (`Writer::reserve_stalls`; this run, every journal of a history summed, as of each journal's last commit
    /// of records). Zero for a ring, which is allocated whole.
    pub reserve_stalls: u64,
    /// Publisher sequences were checked (false when recording a topic subset).
    pub sequences_checked: bool,
    /// Per publisher, this run: recorded, missing, gap events, overwritten; plus the overflow row.
    pub publishers: Vec<LedgerRow>,
    /// Publishers beyond the ledger's bound, summed.
    pub publishers_overflow: LedgerOverflow,
    /// Journal sequence of the first record appended (`None`: nothing appended yet).
    pub first_seq: Option<u64>,
    /// Journal sequence of the last record appended.
    pub last_seq: Option<u64>,
    /// Time since recording started.
    pub elapsed: Duration,
    /// The journal's disk filled: the recording stopped there (the journal's error, naming the file). Every
    /// record appended before it is in the journal, which is closed cleanly.
    pub disk_full: Option<String>,
    /// Handshakes a publisher refused (ZAP: a key it does not list, an address it denies, a full connection cap)
    /// or that failed. libzmq never tries such an endpoint again; the recorder connects again itself, after 1 s
    /// and then twice as long each time, up to 30 s.
    pub handshakes_refused: u64,
}

impl RecordStats {
    /// Stream frames appended per second of `elapsed` (0 before any time has passed).
    pub fn rate(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.messages as f64 / s
        } else {
            0.0
        }
    }
}

/// Data records the ring overwrote since the last drain, per publisher. The journal writer owns it (its overwrite
/// sink, called inside an append on the recording thread) and [`Recorder::after_commit`] drains it through the
/// writer, so no overwritten record takes a lock.
#[derive(Debug, Default)]
struct Tally {
    per_publisher: Vec<(u32, u64)>,
    other: u64,
}

impl journal_ext::OverwriteSink for Tally {
    fn overwritten(&mut self, record: journal_ext::OverwrittenRecord<'_>) {
        let data_of = MessageRef::decode(record.payload).ok().and_then(|m| {
            let h = m.header();
            let data =
                !matches!(h.kind, Kind::Heartbeat | Kind::Gap) && !h.flags.contains(Flags::CACHED);
            data.then_some(h.publisher_id)
        });
        let Some(publisher) = data_of else {
            self.other += 1;
            return;
        };
        if let Some((_, n)) = self.per_publisher.iter_mut().find(|(p, _)| *p == publisher) {
            *n += 1;
        } else if self.per_publisher.len() < MAX_LEDGER_PUBLISHERS {
            self.per_publisher.push((publisher, 1));
        } else {
            // Bounded like the ledger: counted, unattributed.
            self.other += 1;
        }
    }
}

/// Most records [`Recorder::new`] reads to bring a stale (or missing) ledger up to date with the journal.
const CATCH_UP_MAX: u64 = 10_000_000;

/// Accounts in `ledger` for the journal's records `from..end` (data recorded, gap notices), as if recorded now.
fn catch_up(ledger: &mut Ledger, path: &std::path::Path, from: u64, end: u64) {
    let mut reader = match tickbox_journal::Reader::open(path) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("cannot read the journal to bring its ledger up to date: {e}");
            return;
        }
    };
    if let Err(e) = reader.seek_seq(from) {
        tracing::warn!("cannot read the journal to bring its ledger up to date: {e}");
        return;
    }
    let mut n = 0u64;
    loop {
        let rec = match reader.next() {
            Ok(Some(rec)) if rec.seq < end => rec,
            Ok(_) => break,
            Err(tickbox_journal::JournalError::Lapped { .. }) => continue,
            Err(e) => {
                tracing::warn!("ledger catch-up stopped: {e}");
                break;
            }
        };
        n += 1;
        let Ok(m) = MessageRef::decode(rec.payload) else {
            continue;
        };
        let h = m.header();
        if h.flags.contains(Flags::CACHED) {
            continue;
        }
        match (h.kind, m.payload()) {
            (Kind::Heartbeat, _) => {}
            (Kind::Gap, Ok(Payload::Gap(g))) => {
                ledger.on_gap(h.publisher_id, h.session, g.first_missing, g.last_missing)
            }
            (Kind::Gap, _) => {}
            _ => ledger.on_recorded(h.publisher_id, h.session, h.sequence, true),
        }
    }
    if n > 0 {
        tracing::info!(
            records = n,
            from,
            "brought the journal's ledger up to date from its records"
        );
    }
}

/// The socket-free recorder: account for and append frames, persist the ledger at commits.
pub struct Recorder {
    tracker: SequenceTracker,
    /// Off when recording a topic subset: a publisher's sequence then has holes by design.
    track: bool,
    /// This run's ledger.
    run: Ledger,
    /// The journal's ledger, continued from its app metadata.
    journal: Ledger,
    stats: RecordStats,
    max_payload: usize,
    scratch: Vec<u8>,
    last_overwrite: OverwriteStats,
    /// The reserve stalls of the journals this run finished ([`RecordStats::reserve_stalls`] adds the current
    /// one's).
    reserve_stalls_earlier: u64,
    ring_capacity: Option<u64>,
    /// Bytes of records appended to the current journal of a history since it was started by this run (what a
    /// size roll measures).
    journal_bytes: u64,
}

impl Recorder {
    /// Prepares to record into `writer`: continues the ledger stored in the journal (resuming each publisher's
    /// session and last sequence, so a loss while no recorder ran is noticed), and installs the overwrite hook.
    pub fn new(writer: &mut Writer) -> Result<Recorder, RecorderError> {
        Self::new_after(writer, None)
    }

    /// [`Recorder::new`] for a journal that continues another (the next period of a history): a journal with no
    /// ledger yet starts from where `previous` (the last journal's ledger) left each publisher, so a loss while
    /// no recorder ran, or across the roll, is noticed.
    pub fn new_after(
        writer: &mut Writer,
        previous: Option<&Ledger>,
    ) -> Result<Recorder, RecorderError> {
        let mut journal = match journal_ext::read_app_meta(writer.path()) {
            Ok(meta) if meta.is_empty() => previous.map_or_else(Ledger::new, Ledger::carried),
            Ok(meta) => Ledger::decode(&meta).unwrap_or_else(|e| {
                tracing::warn!(
                    "journal metadata is not a recorder ledger ({e}); starting a new one"
                );
                Ledger::new()
            }),
            Err(e) => {
                tracing::warn!("cannot read the journal's metadata ({e}); starting a new ledger");
                Ledger::new()
            }
        };
        journal.runs = journal.runs.saturating_add(1);
        // The ledger is stored after each commit, so a recorder killed in between leaves up to a batch of records
        // it does not count yet (and a journal from before ledgers has none): catch up from the records.
        let end = writer.next_seq();
        if journal.journal_next_seq < end {
            let from = journal
                .journal_next_seq
                .max(end.saturating_sub(CATCH_UP_MAX))
                .max(1);
            catch_up(&mut journal, writer.path(), from, end);
        }
        let mut tracker = SequenceTracker::new();
        for row in journal.rows() {
            if row.last_sequence == 0 {
                continue;
            }
            // A heartbeat naming the last sequence accounted for: the tracker takes it as where the publisher is,
            // without counting a received message.
            let seed = Header::live(Kind::Heartbeat, row.publisher, row.last_sequence, 0)
                .with_session(row.session);
            tracker.on_header(&seed, None);
        }
        journal_ext::on_overwrite(writer, Tally::default());
        let last_overwrite = journal_ext::overwritten(writer);
        let ring_capacity = (writer.header().mode == tickbox_journal::Mode::Ring)
            .then_some(writer.header().capacity);
        let mut r = Recorder {
            tracker,
            track: true,
            run: Ledger::new(),
            journal,
            stats: RecordStats {
                overwritten: last_overwrite,
                ..RecordStats::default()
            },
            max_payload: writer.max_payload(),
            scratch: Vec::with_capacity(256),
            last_overwrite,
            reserve_stalls_earlier: 0,
            ring_capacity,
            journal_bytes: 0,
        };
        r.persist(writer)?;
        Ok(r)
    }

    /// Moves the accounting to `next`, the journal that follows the one just committed (a history's roll): the
    /// sequence tracker goes on as it is (a publisher's chain continues across the roll, so nothing is lost or
    /// counted twice there), and `next` gets a ledger of its own that starts where each publisher was.
    pub fn continue_into(&mut self, next: &mut Writer) -> Result<(), RecorderError> {
        self.journal = self.journal.carried();
        self.journal.runs = 1;
        // As of the previous journal's last commit.
        self.reserve_stalls_earlier = self.stats.reserve_stalls;
        journal_ext::on_overwrite(next, Tally::default());
        self.last_overwrite = journal_ext::overwritten(next);
        self.ring_capacity =
            (next.header().mode == tickbox_journal::Mode::Ring).then_some(next.header().capacity);
        self.max_payload = next.max_payload();
        self.journal_bytes = 0;
        self.persist(next)
    }

    /// Bytes of records this run appended to the current journal (gap notices included, record framing counted).
    pub fn journal_bytes(&self) -> u64 {
        self.journal_bytes
    }

    /// Turns publisher sequence checking off (or on). Off is for recording a topic subset, where every publisher's
    /// sequence has holes by design: no gap notices, no duplicate detection; data is still counted per publisher.
    pub fn set_sequence_tracking(&mut self, on: bool) {
        self.track = on;
    }

    /// The journal's cumulative ledger (every run that appended to it).
    pub fn journal_ledger(&self) -> &Ledger {
        &self.journal
    }

    /// This run's counters, with the per-publisher breakdown.
    pub fn stats(&self) -> RecordStats {
        let mut s = self.stats.clone();
        s.sequences_checked = self.track;
        s.publishers = self.run.rows().to_vec();
        s.publishers_overflow = self.run.overflow;
        s
    }

    /// Accounts for one received message: a batch frame record by record ([`Self::on_frame`] for each, in
    /// order, all with the same capture time), anything else as one frame. Returns how many records it held.
    pub fn on_message(
        &mut self,
        batch: &mut Batch<'_>,
        capture_ns: u64,
        message: &[u8],
    ) -> Result<usize, RecorderError> {
        if !tickbox_wire::is_batch(message) {
            self.on_frame(batch, capture_ns, message)?;
            return Ok(1);
        }
        self.stats.batch_frames += 1;
        let records = match tickbox_wire::batch_records(message) {
            Ok(records) => records,
            Err(err) => {
                self.invalid(message.len(), &err);
                return Ok(0);
            }
        };
        let mut n = 0;
        for record in records {
            match record {
                Ok(record) => self.on_frame(batch, capture_ns, record)?,
                Err(err) => self.invalid(message.len(), &err),
            }
            n += 1;
        }
        Ok(n)
    }

    fn invalid(&mut self, len: usize, err: &dyn std::fmt::Display) {
        self.stats.invalid_frames += 1;
        if self.stats.invalid_frames <= 5 {
            tracing::warn!(len, "not recording an invalid frame: {err}");
        }
    }

    /// Accounts for one received frame and appends what belongs in the journal to `batch`: a gap notice first if
    /// the frame reveals a loss, then the frame itself (unless it is a duplicate, a tap event or not a frame).
    pub fn on_frame(
        &mut self,
        batch: &mut Batch<'_>,
        capture_ns: u64,
        frame: &[u8],
    ) -> Result<(), RecorderError> {
        if frame.first() == Some(&TAP_EVENT_MARKER) {
            self.stats.tap_events += 1;
            return Ok(());
        }
        // Matched where it lies, and its header read in place: moving the decoded message out and copying its
        // header loaded wide words over the decoder's narrower stores, which waited for them (28 % of this
        // function's samples in a `bench record` profile).
        let decoded = MessageRef::decode(frame);
        let msg = match &decoded {
            Ok(m) => m,
            Err(err) => {
                self.invalid(frame.len(), err);
                return Ok(());
            }
        };
        if frame.len() > self.max_payload {
            self.stats.invalid_frames += 1;
            tracing::warn!(
                len = frame.len(),
                max_payload = self.max_payload,
                "frame larger than the journal accepts; dropped"
            );
            return Ok(());
        }
        let h = msg.header();
        let event = if self.track {
            self.tracker.on_message(msg)
        } else {
            SequenceEvent::InOrder
        };
        let mut believed = true;
        match event {
            SequenceEvent::Duplicate { .. } => {
                self.stats.duplicates += 1;
                return Ok(());
            }
            SequenceEvent::Gap {
                publisher,
                session,
                first_missing,
                last_missing,
            } => {
                self.write_notice(
                    batch,
                    capture_ns,
                    publisher,
                    session,
                    first_missing,
                    last_missing,
                )?;
            }
            SequenceEvent::Restart { .. } => self.stats.restarts += 1,
            SequenceEvent::Reordered { .. } => self.stats.reordered += 1,
            SequenceEvent::Anomaly { .. } => {
                self.stats.anomalies += 1;
                believed = false;
            }
            SequenceEvent::Untracked { .. } => self.stats.untracked += 1,
            SequenceEvent::Exempt
            | SequenceEvent::InOrder
            | SequenceEvent::First { .. }
            | SequenceEvent::RecordedGap { .. } => {}
        }
        self.append(batch, capture_ns, frame)?;
        self.stats.messages += 1;
        if h.flags.contains(Flags::CACHED) {
            self.stats.cached += 1;
            return Ok(());
        }
        match h.kind {
            Kind::Heartbeat => self.stats.heartbeats += 1,
            Kind::Gap => {
                // An upstream notice (we are recording a replay): the journal lacks what it names too.
                self.stats.upstream_gap_notices += 1;
                if let (true, Ok(Payload::Gap(n))) = (believed, msg.payload()) {
                    // Only the part not already covered by what this publisher's sequence had reached.
                    let first = match event {
                        SequenceEvent::RecordedGap { first_missing, .. } => first_missing,
                        _ => n.first_missing,
                    };
                    if first <= h.sequence {
                        self.stats.missing += h.sequence - first + 1;
                        for l in [&mut self.run, &mut self.journal] {
                            l.on_gap(h.publisher_id, h.session, first, h.sequence);
                        }
                    }
                }
            }
            _ => {
                self.stats.recorded += 1;
                for l in [&mut self.run, &mut self.journal] {
                    l.on_recorded(h.publisher_id, h.session, h.sequence, believed);
                }
            }
        }
        Ok(())
    }

    fn append(
        &mut self,
        batch: &mut Batch<'_>,
        capture_ns: u64,
        frame: &[u8],
    ) -> Result<u64, RecorderError> {
        let seq = batch.append(capture_ns, frame)?;
        self.stats.first_seq.get_or_insert(seq);
        self.stats.last_seq = Some(seq);
        self.stats.bytes += frame.len() as u64;
        self.journal_bytes += (tickbox_journal::RECORD_HEADER_SIZE + frame.len() as u64 + 7) & !7;
        Ok(seq)
    }

    /// Writes a gap notice for `first..=last` of a publisher: topic `G.<publisher>`, the publisher's id and
    /// session, sequence `last` (so a downstream tracker takes it as the last sequence accounted for).
    fn write_notice(
        &mut self,
        batch: &mut Batch<'_>,
        capture_ns: u64,
        publisher: u32,
        session: u64,
        first: u64,
        last: u64,
    ) -> Result<(), RecorderError> {
        let now = tickbox_wire::now_ns();
        let header = Header::live(Kind::Gap, publisher, last, now).with_session(session);
        let notice = GapNotice {
            first_missing: first,
            last_missing: last,
            detected_ns: now,
            cause: GapCause::NotReceived,
        };
        let topic = format!("G.{publisher}");
        self.scratch.clear();
        self.scratch
            .resize(tickbox_wire::encoded_len(&topic, Kind::Gap), 0);
        tickbox_wire::encode(&mut self.scratch, &topic, &header, &notice.into())
            .map_err(|e| RecorderError::InvalidOption(format!("encoding a gap notice: {e}")))?;
        let frame = std::mem::take(&mut self.scratch);
        let result = self.append(batch, capture_ns, &frame);
        self.scratch = frame;
        result?;
        let n = notice.missing();
        self.stats.gap_events += 1;
        self.stats.missing += n;
        for l in [&mut self.run, &mut self.journal] {
            l.on_gap(publisher, session, first, last);
        }
        if self.stats.gap_events <= 20 {
            tracing::warn!(
                publisher,
                first_missing = first,
                last_missing = last,
                "recorder lost {n} message(s) before they reached it; gap notice written"
            );
        } else if self.stats.gap_events == 21 {
            tracing::warn!("more gaps: further gap notices are written without a log line");
        }
        Ok(())
    }

    /// After a batch commit: attribute what the ring overwrote, warn once per lap, persist the ledger.
    pub fn after_commit(&mut self, writer: &mut Writer) -> Result<(), RecorderError> {
        let drained = journal_ext::overwrite_sink::<Tally>(writer)
            .map(std::mem::take)
            .unwrap_or_default();
        for (publisher, n) in &drained.per_publisher {
            for l in [&mut self.run, &mut self.journal] {
                l.on_overwritten(*publisher, *n);
            }
        }
        self.run.other_overwritten += drained.other;
        self.journal.other_overwritten += drained.other;
        // The journal counts laps itself (records, bytes, laps in its header).
        let o = journal_ext::overwritten(writer);
        if o.laps > self.last_overwrite.laps || (o.records > 0 && self.last_overwrite.records == 0)
        {
            tracing::warn!(
                lap = o.laps,
                overwritten_records = o.records,
                overwritten_bytes = o.bytes,
                capacity = self.ring_capacity.unwrap_or(0),
                "journal ring lapped: it is overwriting unread history (a ring keeps only its capacity; record \
                 into an archive, the default, to keep everything)"
            );
        }
        self.last_overwrite = o;
        self.stats.overwritten = o;
        self.persist(writer)
    }

    /// After a commit of records: the times the recording thread reserved disk itself so far. Read here only,
    /// so that the end-of-run summary and the last metrics scrape agree.
    fn note_reserve_stalls(&mut self, writer: &Writer) {
        self.stats.reserve_stalls = self.reserve_stalls_earlier + writer.reserve_stalls();
    }

    fn persist(&mut self, writer: &mut Writer) -> Result<(), RecorderError> {
        self.journal.journal_next_seq = writer.next_seq();
        journal_ext::set_app_meta(writer, &self.journal.encode(APP_META_MAX))?;
        Ok(())
    }

    fn on_elapsed(&mut self, elapsed: Duration) {
        self.stats.elapsed = elapsed;
    }
}

/// When the journal being appended to ends: a record captured at or after `before_ns`, or once it holds
/// `max_bytes` of records, goes into the next one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollCheck {
    /// The end of the current period, ns since the epoch (capture time).
    pub before_ns: Option<u64>,
    /// The size of a journal, in bytes of records (framing included).
    pub max_bytes: Option<u64>,
}

impl RollCheck {
    /// Whether a record captured at `capture_ns` goes into a new journal, the current one holding `bytes`.
    #[inline]
    pub fn due(&self, capture_ns: u64, bytes: u64) -> bool {
        self.before_ns.is_some_and(|end| capture_ns >= end)
            || self.max_bytes.is_some_and(|max| bytes >= max)
    }
}

/// Where a recording appends: one journal, or a history that starts a new journal at each roll
/// ([`crate::HistoryWriter`]). The recording loops ask before each record whether it starts a new journal, so a
/// roll falls exactly between two records: none is lost or written twice.
pub trait Journals {
    /// The journal being appended to.
    fn writer(&mut self) -> &mut Writer;
    /// When the current journal ends (checked before each record; never, for one journal).
    fn roll_check(&self) -> RollCheck {
        RollCheck::default()
    }
    /// Starts the next journal for a record captured at `capture_ns` (the current one is committed): moves
    /// `recorder`'s accounting over ([`Recorder::continue_into`]) and closes the old journal.
    fn roll(&mut self, _recorder: &mut Recorder, _capture_ns: u64) -> Result<(), RecorderError> {
        Ok(())
    }
}

impl Journals for Writer {
    fn writer(&mut self) -> &mut Writer {
        self
    }
}

/// Records until `stop` is set, the duration passes or `max_messages` are recorded. Calls `progress` about every
/// `progress_every`. The SUB sockets live and die inside this call.
///
/// One endpoint is read on this thread, which also appends. Several endpoints (the shards of a feed) are each read
/// by their own SUB on their own thread (pinned to `reader_cores[i]` where given), which hands what it takes off
/// the socket to this thread, the journal's one writer, over a bounded queue: a full queue stops that reader
/// (back-pressure into libzmq's HWM and the publisher, never a drop here). Each queue is first in, first out and a
/// publisher lives on one shard, so every publisher's records reach the journal in the order they were sent.
pub fn record(
    ctx: &zmq::Context,
    writer: &mut Writer,
    opts: &RecordOptions,
    stop: &AtomicBool,
    progress: impl FnMut(&RecordStats),
) -> Result<RecordStats, RecorderError> {
    let mut rec = Recorder::new(writer)?;
    record_with(ctx, writer, &mut rec, opts, stop, progress)
}

/// [`record`] into any [`Journals`] (a history that rolls), with a recorder made for its current journal.
pub fn record_with<J: Journals>(
    ctx: &zmq::Context,
    journals: &mut J,
    rec: &mut Recorder,
    opts: &RecordOptions,
    stop: &AtomicBool,
    progress: impl FnMut(&RecordStats),
) -> Result<RecordStats, RecorderError> {
    if opts.connect.is_empty() {
        return Err(RecorderError::InvalidOption(
            "no endpoint to connect to".into(),
        ));
    }
    if !opts.topics.is_empty() {
        tracing::info!(
            "recording a topic subset: publisher sequences have holes by design and are not checked (no gap notices)"
        );
        rec.set_sequence_tracking(false);
    }
    if opts.connect.len() == 1 {
        let (sub, watch) = subscriber(ctx, opts, &opts.connect)?;
        return record_inline(&sub, watch, rec, journals, opts, stop, progress);
    }
    let subs = opts
        .connect
        .iter()
        .map(|ep| subscriber(ctx, opts, std::slice::from_ref(ep)))
        .collect::<Result<Vec<_>, _>>()?;
    record_sharded(subs, rec, journals, opts, stop, progress)
}

/// How often a reader looks at its socket's handshakes (refusals to count, redials due).
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// A SUB socket set up for recording and connected to `endpoints`, and the watch on its handshakes.
fn subscriber(
    ctx: &zmq::Context,
    opts: &RecordOptions,
    endpoints: &[String],
) -> Result<(zmq::Socket, HandshakeWatch), RecorderError> {
    let sub = ctx.socket(zmq::SUB)?;
    sub.set_linger(0)?;
    sub.set_rcvhwm(opts.receive_hwm)?;
    tickbox_zmqx::profile::apply(&sub, &opts.socket_profile)?;
    opts.security.client(&sub, "record")?;
    if opts.topics.is_empty() {
        sub.set_subscribe(b"")?;
        // The batch opt-in: a publisher whose every reader asks for it sends many records per message, which
        // `Recorder::on_message` appends one by one. (A prefix never receives a batch, so a subset does not ask.)
        sub.set_subscribe(tickbox_wire::BATCH_TOPIC.as_bytes())?;
    } else {
        for t in &opts.topics {
            sub.set_subscribe(t.as_bytes())?;
        }
    }
    // Before connecting, so no handshake is missed: a refused one is counted and connected again.
    let watch = HandshakeWatch::start(ctx, &sub, opts.security.public_key(), "recorder")?;
    for ep in endpoints {
        sub.connect(ep).map_err(|source| RecorderError::Endpoint {
            endpoint: ep.clone(),
            source,
        })?;
    }
    Ok((sub, watch))
}

/// Reads `watch` when `LOOK_EVERY` has passed since `next_look`: counts refusals into `refused` and connects
/// again where a redial is due.
fn look(
    sub: &zmq::Socket,
    watch: &mut HandshakeWatch,
    next_look: &mut Instant,
    refused: &AtomicU64,
) {
    let now = Instant::now();
    if now < *next_look {
        return;
    }
    *next_look = now + LOOK_EVERY;
    refused.fetch_add(watch.look(sub, now).refused, Ordering::Relaxed);
}

/// Whether the run is over: asked to stop, out of time, or `max_messages` appended.
fn finished(rec: &Recorder, opts: &RecordOptions, stop: &AtomicBool) -> bool {
    rec.stats.disk_full.is_some()
        || stop.load(Ordering::Relaxed)
        || opts.duration.is_some_and(|d| rec.stats.elapsed >= d)
        || opts.max_messages.is_some_and(|m| rec.stats.messages >= m)
}

/// What a reader took off its socket.
enum Received {
    /// A single-part message and when it was taken off the socket.
    Frame { capture_ns: u64, msg: zmq::Message },
    /// A multipart message, drained and dropped (not a tickbox frame).
    Multipart,
}

impl Received {
    /// When it was taken off the socket (`None`: a dropped multipart, which is never appended).
    fn capture_ns(&self) -> Option<u64> {
        match self {
            Received::Frame { capture_ns, .. } => Some(*capture_ns),
            Received::Multipart => None,
        }
    }
}

/// Takes one message off `sub` without waiting (`None`: nothing there); a multipart message is drained whole.
fn take(sub: &zmq::Socket) -> Result<Option<Received>, RecorderError> {
    let mut msg = zmq::Message::new();
    match sub.recv(&mut msg, zmq::DONTWAIT) {
        Ok(()) => {}
        Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let capture_ns = tickbox_wire::now_ns();
    if !msg.get_more() {
        return Ok(Some(Received::Frame { capture_ns, msg }));
    }
    while msg.get_more() {
        match sub.recv(&mut msg, 0) {
            Ok(()) | Err(zmq::Error::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(Received::Multipart))
}

impl Recorder {
    /// Appends what a reader took off a socket; returns the journal records it made (a dropped multipart: 0).
    fn on_received(
        &mut self,
        batch: &mut Batch<'_>,
        received: &Received,
    ) -> Result<usize, RecorderError> {
        match received {
            Received::Frame { capture_ns, msg } => self.on_message(batch, *capture_ns, msg),
            Received::Multipart => {
                self.stats.multipart_messages += 1;
                if self.stats.multipart_messages <= 5 {
                    tracing::warn!("dropped a multipart message (tickbox frames are single-part)");
                }
                Ok(0)
            }
        }
    }
}

impl Recorder {
    /// Whether `received` starts a new journal.
    #[inline]
    fn starts_journal(&self, check: &RollCheck, received: &Received) -> bool {
        received
            .capture_ns()
            .is_some_and(|t| check.due(t, self.journal_bytes))
    }

    /// A full disk ends the recording cleanly (kept in the stats, `Ok`); any other error is returned.
    fn stop_if_full(&mut self, result: Result<(), RecorderError>) -> Result<(), RecorderError> {
        match result {
            Err(e) if e.is_disk_full() => {
                tracing::error!(
                    "{e}: the disk is full; recording stops (every record before this is kept)"
                );
                self.stats.disk_full.get_or_insert_with(|| e.to_string());
                Ok(())
            }
            other => other,
        }
    }

    /// Accounts for what a reader took off a socket ([`Recorder::on_received`]); a full disk stops the recording.
    fn take_in(
        &mut self,
        batch: &mut Batch<'_>,
        received: &Received,
    ) -> Result<usize, RecorderError> {
        match self.on_received(batch, received) {
            Ok(n) => Ok(n),
            Err(e) => self.stop_if_full(Err(e)).map(|()| 0),
        }
    }

    /// After a batch (`committed`: how its commit went): accounts for a batch that held records, then makes the
    /// roll `next` asks for (its record goes first into the next batch, in the new journal). A full disk stops
    /// the recording here.
    fn after_batch<J: Journals>(
        &mut self,
        journals: &mut J,
        committed: Result<(), tickbox_journal::JournalError>,
        in_batch: usize,
        next: Option<&Received>,
    ) -> Result<(), RecorderError> {
        self.stop_if_full(committed.map_err(RecorderError::from))?;
        if in_batch > 0 {
            self.stats.batches += 1;
            let persisted = self.after_commit(journals.writer());
            self.stop_if_full(persisted)?;
            self.note_reserve_stalls(journals.writer());
        }
        if let (Some(t), None) = (next.and_then(Received::capture_ns), &self.stats.disk_full) {
            let rolled = journals.roll(self, t);
            self.stop_if_full(rolled)?;
        }
        Ok(())
    }

    /// The end of a recording loop: what was taken off the sockets for the new journal of a roll (`carried`) is
    /// recorded there unless the disk is full, then the ledger is persisted a last time.
    fn finish<'a, J: Journals>(
        &mut self,
        journals: &mut J,
        carried: impl Iterator<Item = &'a Received>,
        started: Instant,
    ) -> Result<RecordStats, RecorderError> {
        if self.stats.disk_full.is_none() {
            let mut batch = journals.writer().batch();
            for received in carried {
                self.take_in(&mut batch, received)?;
            }
            let committed = batch.commit().map_err(RecorderError::from);
            self.stop_if_full(committed)?;
        }
        self.on_elapsed(started.elapsed());
        let persisted = self.after_commit(journals.writer());
        self.stop_if_full(persisted)?;
        Ok(self.stats())
    }
}

/// One socket, read and appended on this thread.
fn record_inline<J: Journals>(
    sub: &zmq::Socket,
    mut watch: HandshakeWatch,
    rec: &mut Recorder,
    journals: &mut J,
    opts: &RecordOptions,
    stop: &AtomicBool,
    mut progress: impl FnMut(&RecordStats),
) -> Result<RecordStats, RecorderError> {
    let batch_max = opts.batch_max.max(1);
    let started = Instant::now();
    let mut last_progress = started;
    // A record taken off the socket that starts the next journal: appended first, after the roll.
    let mut carried: Option<Received> = None;
    let refused = AtomicU64::new(0);
    let mut next_look = started;
    loop {
        rec.on_elapsed(started.elapsed());
        if finished(rec, opts, stop) {
            break;
        }
        look(sub, &mut watch, &mut next_look, &refused);
        rec.stats.handshakes_refused = refused.load(Ordering::Relaxed);
        if last_progress.elapsed() >= opts.progress_every {
            last_progress = Instant::now();
            progress(&rec.stats());
        }
        if carried.is_none() {
            match sub.poll(zmq::POLLIN, 100) {
                Ok(0) => continue,
                Ok(_) => {}
                // A signal (Ctrl-C) interrupted the wait: loop round to look at the stop flag.
                Err(zmq::Error::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let check = journals.roll_check();
        let mut batch = journals.writer().batch();
        let mut in_batch = 0;
        let mut next_journal = None;
        while in_batch < batch_max {
            let received = match carried.take() {
                Some(received) => received,
                None => match take(sub)? {
                    Some(received) => received,
                    None => break,
                },
            };
            if rec.starts_journal(&check, &received) {
                next_journal = Some(received);
                break;
            }
            // A batch frame's records go in whole, even past `max_messages`, so none is left half recorded.
            in_batch += rec.take_in(&mut batch, &received)?.max(1);
            if opts.max_messages.is_some_and(|m| rec.stats.messages >= m)
                || rec.stats.disk_full.is_some()
            {
                break;
            }
        }
        let committed = batch.commit();
        rec.after_batch(journals, committed, in_batch, next_journal.as_ref())?;
        carried = next_journal;
    }
    // A record taken off the socket for the new journal is recorded there before the run ends.
    rec.finish(journals, carried.iter(), started)
}

/// Most messages a reader takes off its socket before handing them over.
const READ_BURST: usize = 256;
/// Bursts queued between a reader and the writer before the reader waits.
const READ_QUEUE: usize = 64;
/// How often a waiting reader or writer looks at the stop flags.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// A reader's half of its queue: bursts out, emptied vectors back.
struct ReaderLink {
    bursts: crossbeam_channel::Sender<Vec<Received>>,
    spare: crossbeam_channel::Receiver<Vec<Received>>,
}

/// The writer's half of the readers' queues: bursts in (one queue per reader), emptied vectors back.
struct WriterLinks {
    bursts: Vec<crossbeam_channel::Receiver<Vec<Received>>>,
    spares: Vec<crossbeam_channel::Sender<Vec<Received>>>,
}

/// Reads `sub` in bursts until `done` is set or the writer is gone.
fn read_shard(
    sub: &zmq::Socket,
    mut watch: HandshakeWatch,
    link: &ReaderLink,
    done: &AtomicBool,
    refused: &AtomicU64,
) -> Result<(), RecorderError> {
    let mut next_look = Instant::now();
    while !done.load(Ordering::Relaxed) {
        look(sub, &mut watch, &mut next_look, refused);
        match sub.poll(zmq::POLLIN, WAIT_SLICE.as_millis() as i64) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(zmq::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let mut burst = link
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(READ_BURST));
        while burst.len() < READ_BURST {
            match take(sub)? {
                Some(received) => burst.push(received),
                None => break,
            }
        }
        if burst.is_empty() {
            continue;
        }
        // A full queue is back-pressure: wait for the writer (the socket's HWM, then the publisher, absorb it).
        loop {
            match link.bursts.send_timeout(burst, WAIT_SLICE) {
                Ok(()) => break,
                Err(crossbeam_channel::SendTimeoutError::Timeout(b)) => {
                    if done.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    burst = b;
                }
                Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => return Ok(()),
            }
        }
    }
    Ok(())
}

/// One reader thread per socket, this thread appending what they hand over.
fn record_sharded<J: Journals>(
    subs: Vec<(zmq::Socket, HandshakeWatch)>,
    rec: &mut Recorder,
    journals: &mut J,
    opts: &RecordOptions,
    stop: &AtomicBool,
    mut progress: impl FnMut(&RecordStats),
) -> Result<RecordStats, RecorderError> {
    let done = AtomicBool::new(false);
    let refused = AtomicU64::new(0);
    let mut from_readers = WriterLinks {
        bursts: Vec::with_capacity(subs.len()),
        spares: Vec::with_capacity(subs.len()),
    };
    let mut links = Vec::with_capacity(subs.len());
    for _ in &subs {
        let (btx, brx) = crossbeam_channel::bounded(READ_QUEUE);
        let (stx, srx) = crossbeam_channel::bounded(READ_QUEUE);
        from_readers.bursts.push(brx);
        from_readers.spares.push(stx);
        links.push(ReaderLink {
            bursts: btx,
            spare: srx,
        });
    }
    std::thread::scope(|scope| {
        let done = &done;
        let refused = &refused;
        let readers: Vec<_> = subs
            .into_iter()
            .zip(links)
            .enumerate()
            .map(|(i, ((sub, watch), link))| {
                let core = opts.reader_cores.get(i).copied();
                std::thread::Builder::new()
                    .name(format!("record-rd{i}"))
                    .spawn_scoped(scope, move || {
                        tickbox_zmqx::pin_if_configured(core, &format!("record reader {i}"));
                        read_shard(&sub, watch, &link, done, refused)
                    })
            })
            .collect::<Result<_, _>>()
            .map_err(|e| {
                done.store(true, Ordering::Relaxed);
                RecorderError::InvalidOption(format!("cannot start a reader thread: {e}"))
            })?;
        let written = write_bursts(
            &from_readers,
            refused,
            rec,
            journals,
            opts,
            stop,
            &mut progress,
        );
        done.store(true, Ordering::Relaxed);
        drop(from_readers);
        let mut failed = None;
        for (i, r) in readers.into_iter().enumerate() {
            let outcome = r.join().unwrap_or_else(|_| {
                Err(RecorderError::InvalidOption(format!(
                    "reader of {} panicked",
                    opts.connect[i]
                )))
            });
            if let Err(e) = outcome {
                tracing::error!(endpoint = %opts.connect[i], "reader failed: {e}");
                failed.get_or_insert(e);
            }
        }
        // A reader's own error says more than the writer's "the reader stopped".
        match failed {
            Some(e) => Err(e),
            // Refusals the readers saw after the writer's last look count too.
            None => written.map(|mut stats| {
                stats.handshakes_refused = refused.load(Ordering::Relaxed);
                stats
            }),
        }
    })
}

/// The writer's side of [`record_sharded`]: waits for any reader, then appends what every reader has queued, one
/// burst from each in turn, so a busy shard cannot starve the others.
fn write_bursts<J: Journals>(
    from_readers: &WriterLinks,
    refused: &AtomicU64,
    rec: &mut Recorder,
    journals: &mut J,
    opts: &RecordOptions,
    stop: &AtomicBool,
    progress: &mut impl FnMut(&RecordStats),
) -> Result<RecordStats, RecorderError> {
    let WriterLinks { bursts, spares } = from_readers;
    let batch_max = opts.batch_max.max(1);
    let started = Instant::now();
    let mut last_progress = started;
    let mut select = crossbeam_channel::Select::new();
    for rx in bursts {
        select.recv(rx);
    }
    let mut next = 0;
    // A burst cut short by a roll: its reader, the burst, and where the next journal starts in it.
    let mut carried: Option<(usize, Vec<Received>, usize)> = None;
    loop {
        rec.on_elapsed(started.elapsed());
        if finished(rec, opts, stop) {
            break;
        }
        rec.stats.handshakes_refused = refused.load(Ordering::Relaxed);
        if last_progress.elapsed() >= opts.progress_every {
            last_progress = Instant::now();
            progress(&rec.stats());
        }
        if carried.is_none() && select.ready_timeout(WAIT_SLICE).is_err() {
            continue;
        }
        let check = journals.roll_check();
        let mut batch = journals.writer().batch();
        let mut in_batch = 0;
        let mut idle = 0;
        let mut cut = None;
        'fill: while in_batch < batch_max && idle < bursts.len() {
            let (i, mut burst, from) = match carried.take() {
                Some(c) => c,
                None => {
                    let i = next;
                    next = (next + 1) % bursts.len();
                    match bursts[i].try_recv() {
                        Ok(burst) => (i, burst, 0),
                        Err(crossbeam_channel::TryRecvError::Empty) => {
                            idle += 1;
                            continue;
                        }
                        // A reader ends early only when it failed; its error is reported once all have stopped.
                        Err(crossbeam_channel::TryRecvError::Disconnected) => {
                            batch.commit()?;
                            return Err(RecorderError::InvalidOption(format!(
                                "the reader of {} stopped",
                                opts.connect[i]
                            )));
                        }
                    }
                }
            };
            idle = 0;
            for (k, received) in burst.iter().enumerate().skip(from) {
                if rec.starts_journal(&check, received) {
                    cut = Some((i, burst, k));
                    break 'fill;
                }
                in_batch += rec.take_in(&mut batch, received)?.max(1);
                // What a reader took past `max_messages` is not recorded, as what is still in a socket is not.
                if opts.max_messages.is_some_and(|m| rec.stats.messages >= m)
                    || rec.stats.disk_full.is_some()
                {
                    break 'fill;
                }
            }
            burst.clear();
            // The writer never waits on a reader: a full spare queue lets the vector go.
            let _ = spares[i].try_send(burst);
        }
        let first_of_next = cut.as_ref().map(|(_, burst, k)| &burst[*k]);
        let committed = batch.commit();
        rec.after_batch(journals, committed, in_batch, first_of_next)?;
        carried = cut;
    }
    // What was taken off the sockets for the new journal is recorded there before the run ends.
    let rest = carried
        .as_ref()
        .map_or(&[][..], |(_, burst, k)| &burst[*k..]);
    rec.finish(journals, rest.iter(), started)
}
