//! The history service's socket loop (`record --serve`): a ROUTER, one journal reader per asker, and the
//! [`HistoryService`] engine deciding who is served. The journal is read while the recorder writes it, so an
//! asker is served up to the head it reaches, then sent the end marker.
//!
//! What an asker receives is what the journal holds, selected as a replay selects ([`ReplaySelection`]): records
//! and cached values of its prefixes from its start time, gap notices when it names `G.` (or names no prefix);
//! recorded heartbeats never. Records are sent as they were recorded (same publisher, session, sequence and
//! times), in batch frames.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tickbox_auth::Gate;
use tickbox_journal::JournalError;
use tickbox_zmqx::socket::unless_stale_full;

use crate::history_reader::HistoryReader;
use tickbox_wire::history::{batch_head_len, HistoryRequest, Refusal, ServiceMessage, StartPoint};
use tickbox_wire::{BatchCursor, Kind, MessageRef};
use tickbox_zmqx::zero_copy::ZeroCopySender;

use crate::history::{HistoryAction, HistoryService, HistoryServiceConfig, HistoryServiceReport};
use crate::record::TAP_EVENT_MARKER;
use crate::selection::{ReplaySelection, TimeZone};
use crate::RecorderError;

/// How the service is run.
#[derive(Debug, Clone)]
pub struct HistoryServerOptions {
    /// Where the ROUTER binds (`tcp://*:6100`; `tcp://127.0.0.1:*` picks a port, read back with
    /// [`HistoryServer::endpoint`]).
    pub endpoint: String,
    /// The engine's bounds.
    pub service: HistoryServiceConfig,
    /// Records in one batch at most.
    pub batch_records: u16,
}

impl Default for HistoryServerOptions {
    fn default() -> Self {
        HistoryServerOptions {
            endpoint: "tcp://127.0.0.1:*".to_owned(),
            service: HistoryServiceConfig::default(),
            batch_records: 1024,
        }
    }
}

/// The id a recorder stands in an election with (`record --elect`): who it is, its journal and, when it serves
/// one, where its history service is, so late joiners find the canonical recorder's service through the election
/// ([`history_endpoint_in`]).
pub fn election_id(member: &str, journal: &str, history: Option<&str>) -> String {
    match history {
        Some(endpoint) => format!("{member} {journal} history={endpoint}"),
        None => format!("{member} {journal}"),
    }
}

/// The history service endpoint in an election id written by [`election_id`] (`None`: that recorder serves none).
pub fn history_endpoint_in(id: &str) -> Option<&str> {
    id.split_whitespace()
        .rev()
        .find_map(|word| word.strip_prefix("history="))
}

/// A batch frame's size: room for the largest record a batch can hold, so any record fits an empty batch.
const BATCH_BYTES: usize = 128 * 1024;

/// The service's report: the engine's counters and what the loop met in the journal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HistoryServerReport {
    /// The engine's counters (askers, refusals, batches, records).
    #[serde(flatten)]
    pub service: HistoryServiceReport,
    /// Journal records that are not wire frames (damaged, or not tickbox's): skipped.
    pub undecodable_records: u64,
    /// Damaged stretches of the journal passed over while serving (each also logged).
    pub damaged_stretches: u64,
    /// Times a ring reader was lapped by the writer (the asker's history has a hole there, which its sequence
    /// accounting shows).
    pub readers_lapped: u64,
    /// Askers that vanished while being served (the ROUTER could not route to them).
    pub askers_unreachable: u64,
}

impl HistoryServerReport {
    /// The one line `tickbox record` prints for the service at its end.
    pub fn summary_line(&self) -> String {
        let r = self;
        format!(
            "history service: {} askers served ({} completed, {} cancelled, {} abandoned), {} refused busy, \
             {} refused malformed, {} records in {} batches; journal: {} undecodable, {} damaged stretches, {} \
             lapped readers, {} askers gone",
            r.service.askers_accepted,
            r.service.askers_completed,
            r.service.askers_cancelled,
            r.service.askers_abandoned,
            r.service.refused_busy,
            r.service.refused_malformed,
            r.service.records_sent,
            r.service.batches_sent,
            r.undecodable_records,
            r.damaged_stretches,
            r.readers_lapped,
            r.askers_unreachable
        )
    }
}

/// Never raised: a send buffer is taken without waiting (the sender allocates when its pool is out), so nothing
/// waits to stop.
static NO_WAIT: AtomicBool = AtomicBool::new(false);

struct Cursor {
    reader: HistoryReader,
    selection: ReplaySelection,
    /// A record read from the journal that did not fit the last batch, its identity and capture time: sent first
    /// in the next.
    carry: Vec<u8>,
    carry_id: (u32, u64, u64),
    carry_capture_ns: u64,
}

/// A bound history service (see the module docs).
pub struct HistoryServer {
    router: zmq::Socket,
    endpoint: String,
    journal: PathBuf,
    engine: HistoryService,
    cursors: HashMap<Vec<u8>, Cursor>,
    /// Each `BATCH` message is built in one of its buffers and sent as it is: journal records are copied once,
    /// from the journal's map into the message libzmq writes to the socket.
    sender: ZeroCopySender,
    batch_records: u16,
    /// The batch being built: each run of one session's records, as its last (publisher, session, sequence).
    runs: Vec<(u32, u64, u64)>,
    captures: Vec<u64>,
    report: HistoryServerReport,
    revocations: tickbox_auth::Revocations,
}

impl HistoryServer {
    /// Binds the ROUTER (made by `gate`, secured as role `recorder.history` under `[security]`) to serve
    /// `journal`.
    pub fn bind(
        gate: &Gate,
        journal: &Path,
        options: &HistoryServerOptions,
    ) -> Result<HistoryServer, RecorderError> {
        let router = gate.socket(zmq::ROUTER, "recorder.history")?;
        router.set_linger(0)?;
        // Unroutable sends fail instead of vanishing, so an asker that went away is noticed and counted.
        router.set_router_mandatory(true)?;
        // Credit bounds what is queued per asker; the HWM is only a backstop above it.
        let hwm = i32::try_from(
            options
                .service
                .max_credit
                .saturating_mul(2)
                .saturating_add(8),
        )
        .unwrap_or(i32::MAX);
        router.set_sndhwm(hwm)?;
        router.set_rcvhwm(1000)?;
        router.set_maxmsgsize(64 * 1024)?;
        let endpoint =
            tickbox_zmqx::bind_resolved(&router, &options.endpoint).map_err(|e| match e {
                tickbox_zmqx::ZmqxError::Zmq(source) => RecorderError::Endpoint {
                    endpoint: options.endpoint.clone(),
                    source,
                },
                other => RecorderError::Zmqx(other),
            })?;
        Ok(HistoryServer {
            router,
            endpoint,
            journal: journal.to_path_buf(),
            engine: HistoryService::new(options.service),
            cursors: HashMap::new(),
            // One buffer per batch an asker's credit lets be on its way; past that (several askers, or libzmq
            // still writing) a one-off buffer, so the loop never waits for a slow asker's socket.
            sender: ZeroCopySender::new(
                usize::try_from(options.service.max_credit).unwrap_or(usize::MAX),
                batch_head_len(usize::from(options.batch_records.max(1))) + BATCH_BYTES,
            ),
            batch_records: options.batch_records.max(1),
            runs: Vec::new(),
            captures: Vec::with_capacity(usize::from(options.batch_records.max(1))),
            report: HistoryServerReport::default(),
            revocations: gate.security().revocations(),
        })
    }

    /// The endpoint the ROUTER is bound to, read back (a `*` port resolved).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Serves until `stop` is set, checking it at least every 100 ms; returns what it did.
    pub fn run(mut self, stop: &AtomicBool) -> Result<HistoryServerReport, RecorderError> {
        while !stop.load(Ordering::Relaxed) {
            if self.revocations.due() {
                // A key left the allow directory: every asker handshakes again, and the revoked one is refused.
                self.revocations.reset_sessions(
                    &self.router,
                    "recorder.history",
                    std::slice::from_ref(&self.endpoint),
                )?;
            }
            self.poll_once(Duration::from_millis(100))?;
        }
        Ok(self.report())
    }

    /// What the service did so far.
    pub fn report(&self) -> HistoryServerReport {
        HistoryServerReport {
            service: self.engine.report(),
            ..self.report
        }
    }

    /// One round: serve one batch to each asker holding credit, then wait for a message up to `idle` (less when
    /// an idle timeout is due, not at all when batches are waiting to go).
    pub fn poll_once(&mut self, idle: Duration) -> Result<(), RecorderError> {
        let mut served = 0;
        let askers = self.engine.askers();
        while served < askers {
            let Some(asker) = self.engine.poll_asker() else {
                break;
            };
            self.serve(&asker)?;
            served += 1;
        }
        let now = Instant::now();
        for action in self.engine.handle_timeout(now) {
            self.act(action)?;
        }
        let wait = if served > 0 {
            Duration::ZERO
        } else {
            self.engine
                .poll_timeout()
                .map_or(idle, |due| due.saturating_duration_since(now).min(idle))
        };
        let timeout = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        match self.router.poll(zmq::POLLIN, timeout) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(zmq::Error::EINTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        // Drain what is queued, bounded so a flood of requests cannot starve the askers being served.
        for _ in 0..256 {
            let identity = match self.router.recv_bytes(zmq::DONTWAIT) {
                Ok(identity) => identity,
                Err(zmq::Error::EAGAIN) | Err(zmq::Error::EINTR) => break,
                Err(e) => return Err(e.into()),
            };
            let frame = if self.router.get_rcvmore()? {
                self.router.recv_bytes(0)?
            } else {
                Vec::new()
            };
            // A multipart request is not ours: drain it and let the engine refuse the first part.
            let mut extra = false;
            while self.router.get_rcvmore()? {
                self.router.recv_bytes(0)?;
                extra = true;
            }
            let frame = if extra { Vec::new() } else { frame };
            if let Some(action) = self.engine.handle_input(Instant::now(), &identity, &frame) {
                self.act(action)?;
            }
        }
        Ok(())
    }

    fn act(&mut self, action: HistoryAction) -> Result<(), RecorderError> {
        match action {
            HistoryAction::Start { asker, request } => match self.open_cursor(&request) {
                Ok(cursor) => {
                    self.cursors.insert(asker, cursor);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "history: cannot read the journal for an asker");
                    self.engine.finish(&asker);
                    self.send(
                        &asker,
                        &ServiceMessage::Refused(Refusal::Malformed).encode(),
                    )?;
                }
            },
            HistoryAction::Refuse { asker, refusal } => {
                tracing::debug!(?refusal, "history: refused an asker");
                self.send(&asker, &ServiceMessage::Refused(refusal).encode())?;
            }
            HistoryAction::Forget { asker } => {
                self.cursors.remove(&asker);
            }
        }
        Ok(())
    }

    fn open_cursor(&self, request: &HistoryRequest) -> Result<Cursor, RecorderError> {
        let mut reader = HistoryReader::open(&self.journal)?;
        let from_ns = match request.start {
            StartPoint::Start => None,
            StartPoint::Time(ns) => Some(ns),
        };
        let topics = request
            .prefixes
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        // An empty prefix asks for everything, as a SUB's empty subscription does.
        let topics = if request.prefixes.iter().any(|p| p.is_empty()) {
            Vec::new()
        } else {
            topics
        };
        let selection = ReplaySelection::new(topics, from_ns, None, &TimeZone::UTC)
            .map_err(|e| RecorderError::InvalidOption(e.to_string()))?;
        match selection.seek_capture_ns() {
            Some(ns) => reader.seek_time(ns)?,
            None => reader.seek_oldest()?,
        }
        Ok(Cursor {
            reader,
            selection,
            carry: Vec::new(),
            carry_id: (0, 0, 0),
            carry_capture_ns: 0,
        })
    }

    /// Sends `asker` one batch from its reader, or the end marker when the reader is at the journal's head.
    fn serve(&mut self, asker: &[u8]) -> Result<(), RecorderError> {
        let Some(cursor) = self.cursors.get_mut(asker) else {
            // Started and refused in the same round: nothing to read.
            self.engine.finish(asker);
            return Ok(());
        };
        // The batch frame is written after room for the longest head (capture times of a full batch); the head
        // is written just in front of it once the count is known, and the message is the two together.
        let frame_at = batch_head_len(usize::from(self.batch_records));
        let mut buf = self.sender.buffer(&NO_WAIT);
        let mut batch = BatchCursor::start(&mut buf[frame_at..], self.batch_records);
        self.runs.clear();
        self.captures.clear();
        let note = |runs: &mut Vec<(u32, u64, u64)>, id: (u32, u64, u64)| match runs.last_mut() {
            Some(run) if (run.0, run.1) == (id.0, id.1) => run.2 = id.2,
            _ => runs.push(id),
        };
        if !cursor.carry.is_empty() {
            // Any record fits an empty batch (BATCH_BYTES is above the largest record a batch holds).
            if let Some(slot) = batch.push_with(&mut buf[frame_at..], cursor.carry.len()) {
                slot.copy_from_slice(&cursor.carry);
                note(&mut self.runs, cursor.carry_id);
                self.captures.push(cursor.carry_capture_ns);
            }
            cursor.carry.clear();
        }
        loop {
            let record = match cursor.reader.next() {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(JournalError::Lapped { .. }) => {
                    self.report.readers_lapped += 1;
                    tracing::warn!("history: the journal's writer lapped an asker's reader; its history has a hole");
                    continue;
                }
                Err(JournalError::CorruptRecord { .. })
                | Err(JournalError::CorruptHeader { .. }) => {
                    self.report.damaged_stretches += 1;
                    match cursor.reader.skip_damage() {
                        Ok(skipped) => {
                            tracing::warn!(
                                ?skipped,
                                "history: passed over a damaged stretch of the journal"
                            );
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            };
            let frame = record.payload;
            if frame.first() == Some(&TAP_EVENT_MARKER) {
                continue;
            }
            let message = match MessageRef::decode(frame) {
                Ok(message) => message,
                Err(_) => {
                    self.report.undecodable_records += 1;
                    continue;
                }
            };
            if message.kind() == Kind::Heartbeat
                || !cursor.selection.selects(message.topic(), message.header())
            {
                continue;
            }
            let header = message.header();
            let id = (header.publisher_id, header.session, header.sequence);
            let Some(slot) = batch.push_with(&mut buf[frame_at..], frame.len()) else {
                cursor.carry.extend_from_slice(frame);
                cursor.carry_id = id;
                cursor.carry_capture_ns = record.capture_time_ns;
                break;
            };
            slot.copy_from_slice(frame);
            note(&mut self.runs, id);
            self.captures.push(record.capture_time_ns);
        }
        if batch.is_empty() {
            if let Some(end) = self.engine.finish(asker) {
                self.cursors.remove(asker);
                self.send(asker, &end)?;
            }
            return Ok(());
        }
        let records = batch.len();
        let frame_len = batch.finish(&mut buf[frame_at..]);
        let head_at = frame_at - batch_head_len(records);
        ServiceMessage::write_batch_head(&self.captures, &mut buf[head_at..frame_at]);
        if self.send_batch(asker, buf, head_at..frame_at + frame_len)? {
            self.engine.batch_sent(
                Instant::now(),
                asker,
                records as u64,
                self.runs.iter().copied(),
            );
        }
        Ok(())
    }

    /// Sends one `BATCH` message, `buf[range]`, to `asker` with no copy; false (and the asker forgotten,
    /// counted) when it is gone.
    fn send_batch(
        &mut self,
        asker: &[u8],
        buf: tickbox_zmqx::zero_copy::PoolBuf,
        range: std::ops::Range<usize>,
    ) -> Result<bool, RecorderError> {
        let router = &self.router;
        match unless_stale_full(router, || router.send(asker, zmq::SNDMORE | zmq::DONTWAIT)) {
            Ok(()) => {}
            Err(zmq::Error::EHOSTUNREACH) | Err(zmq::Error::EAGAIN) => {
                self.unreachable(asker);
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        }
        // The identity frame went: a ROUTER routes the rest of the message without refusing it.
        match self
            .sender
            .send(&mut self.router, buf, range, zmq::DONTWAIT)
        {
            Ok(true) => Ok(true),
            Ok(false) => {
                self.sender.discard_pending();
                self.unreachable(asker);
                Ok(false)
            }
            Err(tickbox_zmqx::ZmqxError::Zmq(zmq::Error::EHOSTUNREACH)) => {
                self.unreachable(asker);
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// `asker` cannot be reached or is not reading what it asked for: forgotten and counted.
    fn unreachable(&mut self, asker: &[u8]) {
        // Once per asker: later sends to one already forgotten (a refusal, an end marker) fail too, and counting
        // each made one vanished asker read as several.
        if self.cursors.remove(asker).is_some() {
            self.report.askers_unreachable += 1;
        }
        self.engine.finish(asker);
    }

    /// Sends one message to `asker`; false (and the asker forgotten, counted) when it is gone.
    fn send(&mut self, asker: &[u8], message: &[u8]) -> Result<bool, RecorderError> {
        let router = &self.router;
        let sent = unless_stale_full(router, || router.send(asker, zmq::SNDMORE | zmq::DONTWAIT))
            .and_then(|()| router.send(message, zmq::DONTWAIT));
        match sent {
            Ok(()) => Ok(true),
            // Gone (EHOSTUNREACH), or its queue is full although credit said it had room (EAGAIN): either way
            // it is not reading what it asked for.
            Err(zmq::Error::EHOSTUNREACH) | Err(zmq::Error::EAGAIN) => {
                self.unreachable(asker);
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::thread;

    use tickbox_journal::{Durability, Writer, WriterOptions};
    use tickbox_wire::{batch_records, encode_to_vec, Header, Heartbeat, Quote};

    use super::*;
    use tickbox_wire::history::{AskerMessage, SessionEnd};

    const SESSION: u64 = 7;

    fn quote(topic: &str, publisher: u32, sequence: u64, origin_ns: u64) -> Vec<u8> {
        encode_to_vec(
            topic,
            &Header::live(Kind::Quote, publisher, sequence, origin_ns).with_session(SESSION),
            &Quote::default().into(),
        )
        .unwrap()
    }

    /// A journal of 1000 quotes from publisher 1 (`Q.A`) and 500 from publisher 2 (`Q.B`), interleaved, origin
    /// time = capture time = sequence order, plus a heartbeat, a tap event and a record that is not a frame.
    fn journal(dir: &Path) -> PathBuf {
        let path = dir.join("day.tbj");
        let options = WriterOptions::ring(16 << 20).durability(Durability::None);
        let mut writer = Writer::open(&path, &options).unwrap();
        let mut t = 1_000_000_000u64;
        let mut next_b = 1;
        for a in 1..=1000u64 {
            t += 1000;
            writer.append(t, &quote("Q.A", 1, a, t)).unwrap();
            if a % 2 == 0 {
                writer.append(t, &quote("Q.B", 2, next_b, t)).unwrap();
                next_b += 1;
            }
            if a == 500 {
                let beat = Heartbeat {
                    interval_ns: 1,
                    messages_sent: a,
                };
                let frame = encode_to_vec(
                    "H.1",
                    &Header::live(Kind::Heartbeat, 1, a, t).with_session(SESSION),
                    &beat.into(),
                )
                .unwrap();
                writer.append(t, &frame).unwrap();
                writer.append(t, &[TAP_EVENT_MARKER, 1, 2, 3]).unwrap();
                writer.append(t, b"not a frame").unwrap();
            }
        }
        path
    }

    struct Running {
        endpoint: String,
        stop: Arc<AtomicBool>,
        thread: Option<thread::JoinHandle<HistoryServerReport>>,
    }

    impl Running {
        fn start(ctx: &zmq::Context, journal: &Path, service: HistoryServiceConfig) -> Running {
            let options = HistoryServerOptions {
                service,
                batch_records: 64,
                ..HistoryServerOptions::default()
            };
            let server = HistoryServer::bind(&Gate::open(ctx), journal, &options).unwrap();
            let endpoint = server.endpoint().to_owned();
            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            let thread = thread::spawn(move || server.run(&flag).unwrap());
            Running {
                endpoint,
                stop,
                thread: Some(thread),
            }
        }

        fn stop(mut self) -> HistoryServerReport {
            self.stop.store(true, Ordering::Relaxed);
            self.thread.take().unwrap().join().unwrap()
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    fn asker(ctx: &zmq::Context, endpoint: &str) -> zmq::Socket {
        let dealer = ctx.socket(zmq::DEALER).unwrap();
        dealer.set_linger(0).unwrap();
        dealer.connect(endpoint).unwrap();
        dealer
    }

    fn receive(dealer: &zmq::Socket) -> Vec<u8> {
        assert!(
            dealer.poll(zmq::POLLIN, 10_000).unwrap() > 0,
            "no answer from the history service in 10 s"
        );
        dealer.recv_bytes(0).unwrap()
    }

    fn ask(dealer: &zmq::Socket, prefixes: &[&str], start: StartPoint, credit: u32) {
        let request = AskerMessage::Request(HistoryRequest {
            prefixes: prefixes.iter().map(|p| p.as_bytes().to_vec()).collect(),
            start,
            credit,
        });
        dealer.send(request.encode(), 0).unwrap();
    }

    /// Reads a whole history, granting one credit per batch; returns (publisher, sequence) in arrival order and
    /// the end marker.
    fn read_history(dealer: &zmq::Socket) -> (Vec<(u32, u64)>, Vec<SessionEnd>) {
        let mut records = Vec::new();
        loop {
            let frame = receive(dealer);
            match ServiceMessage::decode(&frame).unwrap() {
                ServiceMessage::Batch(batch) => {
                    assert!((0..batch.len())
                        .all(|i| batch.capture_ns(i).is_some_and(|ns| ns > 1_000_000_000)));
                    for record in batch_records(batch.frame()).unwrap() {
                        let message = MessageRef::decode(record.unwrap()).unwrap();
                        records.push((message.header().publisher_id, message.header().sequence));
                    }
                    dealer.send(AskerMessage::Credit(1).encode(), 0).unwrap();
                }
                ServiceMessage::End(end) => return (records, end),
                ServiceMessage::Refused(refusal) => panic!("refused: {refusal:?}"),
            }
        }
    }

    #[test]
    fn a_history_holds_every_selected_record_once_in_order_and_ends_with_the_last_sequences() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        let ctx = zmq::Context::new();
        let server = Running::start(&ctx, &journal, HistoryServiceConfig::default());
        let dealer = asker(&ctx, &server.endpoint);
        ask(&dealer, &[], StartPoint::Start, 4);
        let (records, end) = read_history(&dealer);
        let a: Vec<u64> = records.iter().filter(|r| r.0 == 1).map(|r| r.1).collect();
        let b: Vec<u64> = records.iter().filter(|r| r.0 == 2).map(|r| r.1).collect();
        assert_eq!(
            a,
            (1..=1000).collect::<Vec<_>>(),
            "heartbeats are never served"
        );
        assert_eq!(b, (1..=500).collect::<Vec<_>>());
        assert_eq!(
            end,
            vec![
                SessionEnd {
                    publisher: 1,
                    session: SESSION,
                    last_sequence: 1000
                },
                SessionEnd {
                    publisher: 2,
                    session: SESSION,
                    last_sequence: 500
                }
            ]
        );
        drop(dealer);
        let report = server.stop();
        assert_eq!(report.undecodable_records, 1);
        assert_eq!(report.service.records_sent, 1500);
        assert_eq!(report.service.askers_completed, 1);
    }

    #[test]
    fn an_election_id_names_the_history_service() {
        let id = election_id("host-1-42", "/data/day 1", Some("tcp://10.0.0.5:6100"));
        assert_eq!(history_endpoint_in(&id), Some("tcp://10.0.0.5:6100"));
        assert_eq!(
            history_endpoint_in(&election_id("host-1-42", "/data/day", None)),
            None
        );
    }

    #[test]
    fn prefixes_and_a_start_time_select_as_a_replay_does() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        let ctx = zmq::Context::new();
        let server = Running::start(&ctx, &journal, HistoryServiceConfig::default());
        let dealer = asker(&ctx, &server.endpoint);
        // Publisher 1's record 801 has origin time 1e9 + 801 µs.
        ask(
            &dealer,
            &["Q.A"],
            StartPoint::Time(1_000_000_000 + 801_000),
            2,
        );
        let (records, end) = read_history(&dealer);
        assert_eq!(records, (801..=1000).map(|s| (1, s)).collect::<Vec<_>>());
        assert_eq!(end.len(), 1);
        drop(dealer);
        server.stop();
    }

    /// Two askers and one that stops granting credit: the two get everything, the silent one is abandoned and
    /// counted, and an asker past the bound is refused.
    #[test]
    fn a_slow_asker_is_abandoned_the_others_finish() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        let ctx = zmq::Context::new();
        let server = Running::start(
            &ctx,
            &journal,
            HistoryServiceConfig {
                max_askers: 3,
                max_credit: 8,
                idle_timeout: Duration::from_millis(300),
            },
        );
        let silent = asker(&ctx, &server.endpoint);
        ask(&silent, &[], StartPoint::Start, 1);
        assert!(matches!(
            ServiceMessage::decode(&receive(&silent)).unwrap(),
            ServiceMessage::Batch(_)
        ));
        let readers: Vec<zmq::Socket> = (0..2).map(|_| asker(&ctx, &server.endpoint)).collect();
        // Requests on different connections reach the ROUTER in no set order: the fourth asks only once both
        // readers are being served (their first batch is here), so it is the one past the bound.
        let mut first_batches = Vec::new();
        for reader in &readers {
            ask(reader, &[], StartPoint::Start, 2);
            let frame = receive(reader);
            let ServiceMessage::Batch(batch) = ServiceMessage::decode(&frame).unwrap() else {
                panic!("a reader was not served");
            };
            first_batches.push(batch.len());
            reader.send(AskerMessage::Credit(1).encode(), 0).unwrap();
        }
        let extra = asker(&ctx, &server.endpoint);
        ask(&extra, &[], StartPoint::Start, 1);
        assert_eq!(
            ServiceMessage::decode(&receive(&extra)).unwrap(),
            ServiceMessage::Refused(Refusal::Busy)
        );
        for (reader, first) in readers.iter().zip(first_batches) {
            let (records, _) = read_history(reader);
            assert_eq!(first + records.len(), 1500);
        }
        // The silent asker is abandoned 300 ms after its only batch; wait for that, bounded.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(
                Instant::now() < deadline,
                "the silent asker was not abandoned in 10 s"
            );
            // A grant of nothing is answered only once the asker is forgotten: the observable sign of abandonment.
            silent.send(AskerMessage::Credit(0).encode(), 0).unwrap();
            if silent.poll(zmq::POLLIN, 200).unwrap() > 0 {
                let answer = silent.recv_bytes(0).unwrap();
                assert_eq!(
                    ServiceMessage::decode(&answer).unwrap(),
                    ServiceMessage::Refused(Refusal::Unknown)
                );
                break;
            }
        }
        let report = server.stop();
        assert_eq!(report.service.askers_abandoned, 1);
        assert_eq!(report.service.askers_completed, 2);
        assert_eq!(report.service.refused_busy, 1);
    }

    /// Under `[security]` the service is CURVE with the ZAP handler, like every server socket: a listed key reads
    /// a history; a key the allow directory does not list gets nothing, and its refused handshake is counted.
    #[test]
    fn under_security_a_listed_key_reads_and_a_stranger_is_refused_and_counted() {
        use tickbox_auth::{Allow, MechanismName, Security, SecurityConfig};
        let keys = tempfile::tempdir().unwrap();
        let allow = keys.path().join("allow");
        std::fs::create_dir(&allow).unwrap();
        let server_cert = tickbox_auth::fresh_pair().unwrap();
        server_cert.save_pair(keys.path(), "recorder").unwrap();
        let listed = tickbox_auth::fresh_pair().unwrap();
        listed.save_pair(keys.path(), "subscriber").unwrap();
        std::fs::write(allow.join("subscriber"), listed.public_text()).unwrap();
        tickbox_auth::fresh_pair()
            .unwrap()
            .save_pair(keys.path(), "stranger")
            .unwrap();
        let security = |certificate: &str| {
            Security::from_config(&SecurityConfig {
                mechanism: Some(MechanismName::Curve),
                certificate: Some(keys.path().join(format!("{certificate}_secret"))),
                server_key: Some(server_cert.public_z85()),
                allow: Some(Allow::Dir(allow.clone())),
                ..SecurityConfig::default()
            })
            .unwrap()
        };

        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path());
        let ctx = zmq::Context::new();
        let server_security = security("recorder");
        let gate = server_security.gate(&ctx).unwrap();
        let options = HistoryServerOptions {
            batch_records: 64,
            ..HistoryServerOptions::default()
        };
        let server = HistoryServer::bind(&gate, &journal, &options).unwrap();
        let endpoint = server.endpoint().to_owned();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || server.run(&flag).unwrap());

        let asker_as = |certificate: &str| {
            let dealer = ctx.socket(zmq::DEALER).unwrap();
            dealer.set_linger(0).unwrap();
            security(certificate)
                .client(&dealer, "recorder.history")
                .unwrap();
            dealer.connect(&endpoint).unwrap();
            dealer
        };
        let stranger = asker_as("stranger");
        ask(&stranger, &[], StartPoint::Start, 4);
        let listed_asker = asker_as("subscriber");
        ask(&listed_asker, &[], StartPoint::Start, 4);
        let (records, _) = read_history(&listed_asker);
        assert_eq!(records.len(), 1500);
        // The stranger's handshake was refused: nothing arrives, and the refusal is counted for this role.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let refused = server_security
                .summary()
                .and_then(|s| s.by_role.get("recorder.history").map(|r| r.refused))
                .unwrap_or(0);
            if refused >= 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the stranger's refusal was never counted"
            );
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            stranger.poll(zmq::POLLIN, 200).unwrap(),
            0,
            "the stranger got an answer"
        );
        stop.store(true, Ordering::Relaxed);
        let report = thread.join().unwrap();
        assert_eq!(
            report.service.askers_accepted, 1,
            "only the listed key was ever served"
        );
    }
}
