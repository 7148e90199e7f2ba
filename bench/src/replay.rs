//! `bench replay`: how fast a recorded journal replays at `--speed max` into a Black Box, beside raw libzmq sending
//! the same frames.
//!
//! * **Journal.** `records` messages of the feed's synthetic market ([`tickbox_feed::MarketGenerator`], the default
//!   universe of [`tickbox_feed::FeedConfig`]) encoded as one live publisher's frames (sequences 1..=N) and
//!   appended to a temporary archive journal with [`tickbox_journal::Writer`], as `tickbox record` would store
//!   them. Built once per bench, removed at the end.
//! * **tickbox.** [`tickbox_recorder::Replayer`] with the replay defaults of the `[recorder]` config (lossless
//!   XPUB_NODROP, its send HWM, pacing window, heartbeats, batch frames of up to `replay_batch_records`) at
//!   [`Speed::Max`] on `tcp://127.0.0.1:*` → a [`tickbox_subscriber::Subscriber`] (one SUB shard, gap accounting,
//!   snail off) → workers that decode every record's payload. Lost records are counted by the subscriber: the
//!   larger of `records − records the workers touched` and the sequences its gap accounting found missing (the
//!   replay ends with a heartbeat per publisher, so a lost tail is noticed too).
//! * **raw.** One XPUB with `ZMQ_XPUB_NODROP` (same send HWM) → one SUB (same receive HWM), the same journal read
//!   with a [`tickbox_journal::Reader`] and sent one frame per message, unchanged; the SUB counts.
//! * Both clocks run from just before the first send to the arrival of the last record (worker dequeue for
//!   tickbox, SUB receipt for raw), so records still queued when the sender finishes are charged.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tickbox_feed::{FeedConfig, GeneratorParams, MarketGenerator, Universe};
use tickbox_journal::{Reader, Writer, WriterOptions};
use tickbox_recorder::{RecorderConfig, ReplayOptions, Replayer, Speed};
use tickbox_subscriber::{HumanDuration, Subscriber, SubscriberConfig, SubscriberShardConfig};
use tickbox_wire::{now_ns, Header, Kind, MessageRef, SystemClock};
use tickbox_workers::{Delivery, Worker, WorkerPoolConfig};

use crate::env::{drift_warning, Environment, Warning, WarningKind};
use crate::measure::Percentiles;
use crate::plot::{write_repeat_plot, RepeatColumn, RepeatGroup};
use crate::report::{BenchRecord, ReplayResult, RunDocument};
use crate::stats::{order_label, run_order, summary_table, FigureSummary};
use crate::BenchError;

/// What `bench replay` runs.
#[derive(Debug, Clone)]
pub struct ReplayBenchConfig {
    /// Records in the journal (all replayed each repeat).
    pub records: u64,
    /// Workers touching the records in the Black Box.
    pub workers: usize,
    /// Runs of each system, alternating (at least 1).
    pub repeats: usize,
    /// Generator seed (same journal for the same seed).
    pub seed: u64,
    /// Receive HWM of the Black Box's SUB and of the raw SUB, messages.
    pub receive_hwm: i32,
    /// After the sender finishes, how long the receiving end may take to get the rest before the missing records
    /// count as lost.
    pub drain: Duration,
    /// Most records per replayed batch frame; `None` keeps the `[recorder]` default (`replay_batch_records`).
    pub batch: Option<u16>,
    /// Applied to every socket of both systems (`bench replay --security curve`); the caller starts the ZAP
    /// handler in the context.
    pub security: tickbox_auth::Security,
}

impl Default for ReplayBenchConfig {
    fn default() -> Self {
        ReplayBenchConfig {
            records: 1_000_000,
            workers: 1,
            repeats: 3,
            seed: FeedConfig::default().seed,
            receive_hwm: SubscriberConfig::default().receive_hwm,
            drain: Duration::from_secs(10),
            batch: None,
            security: tickbox_auth::Security::default(),
        }
    }
}

/// The replay options `tickbox replay` would use with the default `[recorder]` config, at `--speed max`; `batch`
/// overrides `replay_batch_records` as `replay --batch` does.
pub fn replay_options(bind: String, batch: Option<u16>) -> ReplayOptions {
    let cfg = RecorderConfig::default();
    ReplayOptions {
        bind: vec![bind],
        speed: Speed::Max,
        send_hwm: cfg.send_hwm,
        back_pressure: cfg.back_pressure,
        window: cfg.pacing_window.0,
        heartbeat_interval: cfg.heartbeat_interval.0,
        max_subscription_bytes: cfg.max_subscription_bytes,
        batch_max_records: batch.unwrap_or(cfg.replay_batch_records),
        batch_max_bytes: usize::try_from(cfg.replay_batch_bytes.0).unwrap_or(usize::MAX),
        // Whatever else the replayer grows keeps its default.
        ..ReplayOptions::default()
    }
}

/// A journal of generated market data in a temporary directory, removed on drop.
pub struct GeneratedJournal {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// Records written.
    pub records: u64,
    /// Frame bytes written (the sum of the records' payload lengths).
    pub bytes: u64,
}

impl GeneratedJournal {
    /// The journal (an archive directory).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Mean frame size, bytes.
    pub fn mean_frame(&self) -> f64 {
        self.bytes as f64 / self.records.max(1) as f64
    }
}

/// Writes `records` generated quotes and trades of one publisher (sequences 1..=records, capture times 1 µs apart)
/// to a fresh archive journal.
pub fn generate_journal(records: u64, seed: u64) -> Result<GeneratedJournal, BenchError> {
    if records == 0 {
        return Err(BenchError::InvalidArgument(
            "a replay bench needs at least one record".into(),
        ));
    }
    let dir = tempfile::Builder::new()
        .prefix("tickbox-bench-replay-")
        .tempdir()
        .map_err(|e| BenchError::io(&std::env::temp_dir(), e))?;
    let path = dir.path().join("journal");
    let journal_err = |e: tickbox_journal::JournalError| {
        BenchError::Setup(format!("journal {}: {e}", path.display()))
    };
    let options = WriterOptions::archive(64 << 20).description("tickbox bench replay");
    let mut writer = Writer::open(&path, &options).map_err(journal_err)?;
    let feed = FeedConfig {
        seed,
        ..FeedConfig::default()
    };
    let universe = Universe::from_config(&feed);
    let all: Vec<usize> = (0..universe.symbols().len()).collect();
    let mut generator = MarketGenerator::new(&universe, &all, GeneratorParams::from(&feed), seed);
    let publisher_id = feed.publisher_id_base;
    let start = now_ns();
    let session = start;
    let mut frame = vec![0u8; 512];
    let mut bytes = 0u64;
    let mut seq = 1u64;
    while seq <= records {
        // Appends in batches: one publish per 1024 records, as the recorder does.
        let mut batch = writer.batch();
        let end = (seq + 1024).min(records + 1);
        while seq < end {
            let t = start + seq * 1_000;
            let generated = generator
                .next(t)
                .ok_or_else(|| BenchError::Setup("the feed universe has no symbol".into()))?;
            let kind = generated.payload.kind();
            let header = Header::live(kind, publisher_id, seq, t).with_session(session);
            let len = tickbox_wire::encode(
                &mut frame,
                generator.topic(generated.symbol, kind),
                &header,
                &generated.payload,
            )
            .map_err(|e| BenchError::Setup(format!("encoding record {seq}: {e}")))?;
            batch.append(t, &frame[..len]).map_err(journal_err)?;
            bytes += len as u64;
            seq += 1;
        }
        batch.commit().map_err(journal_err)?;
    }
    writer.close().map_err(journal_err)?;
    Ok(GeneratedJournal {
        _dir: dir,
        path,
        records,
        bytes,
    })
}

/// A Black Box worker that decodes every record's payload (so the bench pays for reading the data, as a real
/// worker would) and counts; `delivered` is published after each record for the bench to watch.
pub struct TouchWorker {
    delivered: Arc<AtomicU64>,
    count: u64,
    last_ns: u64,
    checksum: u64,
    undecodable: u64,
}

impl TouchWorker {
    /// A worker that publishes its count of data records in `delivered`.
    pub fn new(delivered: Arc<AtomicU64>) -> TouchWorker {
        TouchWorker {
            delivered,
            count: 0,
            last_ns: 0,
            checksum: 0,
            undecodable: 0,
        }
    }

    /// Data records touched.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// When the last data record was dequeued (`now_ns`; 0 before any).
    pub fn last_ns(&self) -> u64 {
        self.last_ns
    }

    /// Records whose payload did not decode.
    pub fn undecodable(&self) -> u64 {
        self.undecodable
    }
}

impl Worker for TouchWorker {
    #[inline]
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) {
        if msg.kind() == Kind::Heartbeat {
            return;
        }
        match msg.payload() {
            Ok(tickbox_wire::Payload::Quote(q)) => {
                self.checksum = self.checksum.wrapping_add(q.bid_px as u64)
            }
            Ok(tickbox_wire::Payload::Trade(t)) => {
                self.checksum = self.checksum.wrapping_add(t.price as u64)
            }
            Ok(_) => {}
            Err(_) => self.undecodable += 1,
        }
        self.count += 1;
        self.last_ns = delivery.dequeued_ns;
        // A plain store, not a read-modify-write: only this thread writes it.
        self.delivered.store(self.count, Ordering::Relaxed);
    }
}

fn latency_or_none(hist: &tickbox_subscriber::Histogram<u64>) -> Option<Percentiles> {
    (!hist.is_empty()).then(|| Percentiles::of(hist))
}

/// One tickbox repeat: Replayer → Black Box over tcp loopback.
pub fn tickbox_replay(
    gate: &tickbox_auth::Gate,
    journal: &GeneratedJournal,
    config: &ReplayBenchConfig,
    stop: &AtomicBool,
) -> Result<ReplayResult, BenchError> {
    let options = ReplayOptions {
        security: config.security.clone(),
        ..replay_options("tcp://127.0.0.1:*".into(), config.batch)
    };
    let batch = u64::from(options.batch_max_records.max(1));
    let send_hwm = options.send_hwm;
    let rec_err = |e: tickbox_recorder::RecorderError| BenchError::Pipeline(format!("replay: {e}"));
    let mut replayer = Replayer::bind(gate, options).map_err(rec_err)?;
    let endpoint = replayer.endpoints()[0].clone();
    let sub_config = SubscriberConfig {
        shards: vec![SubscriberShardConfig {
            connect: vec![endpoint],
            ..SubscriberShardConfig::default()
        }],
        // The bench measures lateness; it must not die of it.
        max_lateness: HumanDuration(Duration::ZERO),
        receive_hwm: config.receive_hwm,
        poll_interval: HumanDuration(Duration::from_millis(20)),
        security: config.security.clone(),
        ..SubscriberConfig::default()
    };
    let count = config.workers.max(1);
    let workers = WorkerPoolConfig {
        count: Some(count),
        poll_interval: HumanDuration(Duration::from_millis(20)),
        ..WorkerPoolConfig::default()
    };
    let counters: Vec<Arc<AtomicU64>> = (0..count).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let subscriber = Subscriber::start(gate.context(), &sub_config, &workers, |i| {
        TouchWorker::new(Arc::clone(&counters[i]))
    })
    .map_err(|e| BenchError::Pipeline(e.to_string()))?;
    let run = (|| -> Result<(u64, tickbox_recorder::ReplayStats), BenchError> {
        if !replayer
            .wait_subscribers(1, Some(Duration::from_secs(10)), stop)
            .map_err(rec_err)?
        {
            return Err(BenchError::NotConnected(Duration::from_secs(10)));
        }
        let mut reader =
            Reader::open(journal.path()).map_err(|e| BenchError::Setup(format!("journal: {e}")))?;
        let start_ns = now_ns();
        let stats = replayer
            .run(&mut reader, &SystemClock, stop, |_| {})
            .map_err(rec_err)?;
        wait_delivered(
            || counters.iter().map(|c| c.load(Ordering::Relaxed)).sum(),
            journal.records,
            config.drain,
            stop,
        );
        Ok((start_ns, stats))
    })();
    let report = subscriber
        .shutdown()
        .map_err(|e| BenchError::Pipeline(e.to_string()))?;
    let (start_ns, stats) = run?;
    if stats.sent != journal.records {
        tracing::warn!(
            sent = stats.sent,
            records = journal.records,
            "the replay sent a different number of records than the journal holds"
        );
    }
    let delivered: u64 = report.workers.iter().map(|w| w.worker.count).sum();
    let undecodable: u64 = report.workers.iter().map(|w| w.worker.undecodable).sum();
    if undecodable > 0 {
        tracing::warn!(
            undecodable,
            "workers got records whose payload did not decode"
        );
    }
    let end_ns = report
        .workers
        .iter()
        .map(|w| w.worker.last_ns)
        .max()
        .unwrap_or(start_ns);
    let gap_missing = report.sequence_totals().missing;
    let lost = journal.records.saturating_sub(delivered).max(gap_missing);
    let mut r = result(
        "tickbox",
        journal,
        delivered,
        lost,
        Some(gap_missing),
        batch,
        end_ns.saturating_sub(start_ns),
        latency_or_none(&report.receive_lateness()),
        latency_or_none(&report.dequeue_lateness()),
        count,
        send_hwm,
        config.receive_hwm,
    );
    r.frames = Some(stats.frames_sent);
    Ok(r)
}

/// Waits until `delivered()` reaches `records`, or nothing arrived for `drain`, or `stop`.
pub(crate) fn wait_delivered(
    delivered: impl Fn() -> u64,
    records: u64,
    drain: Duration,
    stop: &AtomicBool,
) {
    let mut last = delivered();
    let mut last_change = Instant::now();
    while last < records && !stop.load(Ordering::Relaxed) && last_change.elapsed() < drain {
        thread::sleep(Duration::from_millis(2));
        let now = delivered();
        if now != last {
            last = now;
            last_change = Instant::now();
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn result(
    system: &str,
    journal: &GeneratedJournal,
    delivered: u64,
    lost: u64,
    gap_missing: Option<u64>,
    batch: u64,
    elapsed_ns: u64,
    lateness_receive: Option<Percentiles>,
    lateness_dequeue: Option<Percentiles>,
    workers: usize,
    send_hwm: i32,
    receive_hwm: i32,
) -> ReplayResult {
    let secs = (elapsed_ns as f64 / 1e9).max(1e-9);
    let rate = delivered as f64 / secs;
    ReplayResult {
        system: system.into(),
        transport: "tcp".into(),
        records: journal.records,
        bytes: journal.bytes,
        delivered,
        lost,
        gap_missing,
        batch,
        frames: None,
        elapsed_s: secs,
        records_per_s: rate,
        mb_per_s: rate * journal.mean_frame() / 1e6,
        lateness_receive,
        lateness_dequeue,
        workers,
        send_hwm,
        receive_hwm,
        repeat: 1,
    }
}

fn zerr(what: &'static str) -> impl Fn(zmq::Error) -> BenchError {
    move |e| BenchError::Zmq { what, source: e }
}

/// One raw repeat: the journal's frames, one per message, XPUB_NODROP → SUB over tcp loopback.
pub fn raw_replay(
    gate: &tickbox_auth::Gate,
    journal: &GeneratedJournal,
    config: &ReplayBenchConfig,
    stop: &AtomicBool,
) -> Result<ReplayResult, BenchError> {
    let send_hwm = replay_options(String::new(), None).send_hwm;
    let mut xpub = gate
        .socket(zmq::XPUB, "bench.raw")
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    xpub.set_linger(100).map_err(zerr("linger"))?;
    xpub.set_sndhwm(send_hwm).map_err(zerr("sndhwm"))?;
    xpub.set_sndtimeo(100).map_err(zerr("sndtimeo"))?;
    xpub.set_rcvtimeo(100).map_err(zerr("rcvtimeo"))?;
    tickbox_zmqx::set_xpub_nodrop(&mut xpub, true).map_err(|e| BenchError::Setup(e.to_string()))?;
    let endpoint = tickbox_zmqx::bind_resolved(&xpub, "tcp://127.0.0.1:*")
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let received = Arc::new(AtomicU64::new(0));
    let sender_done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let gate = gate.clone();
        let received = Arc::clone(&received);
        let sender_done = Arc::clone(&sender_done);
        let records = journal.records;
        let receive_hwm = config.receive_hwm;
        let drain = config.drain;
        let security = config.security.clone();
        thread::Builder::new()
            .name("raw-replay-sub".into())
            .spawn(move || -> Result<(u64, u64), BenchError> {
                let sub = gate.context().socket(zmq::SUB).map_err(zerr("socket"))?;
                sub.set_linger(0).map_err(zerr("linger"))?;
                sub.set_rcvhwm(receive_hwm).map_err(zerr("rcvhwm"))?;
                sub.set_rcvtimeo(50).map_err(zerr("rcvtimeo"))?;
                security
                    .client(&sub, "bench.raw")
                    .map_err(|e| BenchError::Setup(e.to_string()))?;
                sub.connect(&endpoint).map_err(zerr("connect"))?;
                sub.set_subscribe(b"").map_err(zerr("subscribe"))?;
                let mut msg = zmq::Message::new();
                let (mut count, mut last_ns, mut touched) = (0u64, 0u64, 0u64);
                let mut idle_since: Option<Instant> = None;
                while count < records {
                    match sub.recv(&mut msg, 0) {
                        Ok(()) => {
                            last_ns = now_ns();
                            touched = touched.wrapping_add(msg.len() as u64);
                            count += 1;
                            idle_since = None;
                            if count.is_multiple_of(1024) {
                                received.store(count, Ordering::Relaxed);
                            }
                        }
                        Err(zmq::Error::EAGAIN) => {
                            if sender_done.load(Ordering::Acquire) {
                                let since = *idle_since.get_or_insert_with(Instant::now);
                                if since.elapsed() >= drain {
                                    break;
                                }
                            }
                        }
                        Err(e) => {
                            return Err(BenchError::Zmq {
                                what: "recv",
                                source: e,
                            })
                        }
                    }
                }
                received.store(count, Ordering::Relaxed);
                std::hint::black_box(touched);
                Ok((count, last_ns))
            })
            .map_err(BenchError::Thread)?
    };
    let sent = (|| -> Result<(u64, u64), BenchError> {
        // The SUB's subscription must arrive before the first frame, or the first frames go nowhere.
        let deadline = Instant::now() + Duration::from_secs(10);
        if !crate::transport::await_subscriber(&xpub, || {
            Instant::now() > deadline || stop.load(Ordering::Relaxed)
        })? {
            return Err(BenchError::NotConnected(Duration::from_secs(10)));
        }
        let mut reader =
            Reader::open(journal.path()).map_err(|e| BenchError::Setup(format!("journal: {e}")))?;
        reader.seek_oldest();
        let start_ns = now_ns();
        let mut sent = 0u64;
        while let Some(rec) = reader
            .next()
            .map_err(|e| BenchError::Setup(format!("journal: {e}")))?
        {
            loop {
                match xpub.send(rec.payload, 0) {
                    Ok(()) => break,
                    // At the HWM (no-drop): wait, as the replayer does.
                    Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => {
                        if stop.load(Ordering::Relaxed) {
                            return Ok((start_ns, sent));
                        }
                    }
                    Err(e) => {
                        return Err(BenchError::Zmq {
                            what: "send",
                            source: e,
                        })
                    }
                }
            }
            sent += 1;
        }
        Ok((start_ns, sent))
    })();
    // Also on failure: the receiver stops waiting once the sender is done and the pipe stays empty.
    sender_done.store(true, Ordering::Release);
    let received_result = receiver
        .join()
        .map_err(|_| BenchError::ThreadPanicked("raw-replay-sub"))?;
    let (start_ns, sent) = sent?;
    let (count, last_ns) = received_result?;
    if sent != journal.records {
        tracing::warn!(sent, records = journal.records, "raw replay stopped early");
    }
    let mut r = result(
        "raw-pubsub",
        journal,
        count,
        journal.records.saturating_sub(count),
        None,
        1,
        last_ns.saturating_sub(start_ns),
        None,
        None,
        0,
        send_hwm,
        config.receive_hwm,
    );
    r.frames = Some(sent);
    Ok(r)
}

/// What a replay bench wrote.
pub struct ReplayOutcome {
    /// Every repeat of both systems, in run order.
    pub results: Vec<ReplayResult>,
    /// The result document (JSON).
    pub json: PathBuf,
    /// The per-repeat plot (PNG; an SVG of the same name sits beside it).
    pub plot: PathBuf,
    /// The document's contents.
    pub document: RunDocument,
    /// Mean frame size of the journal, bytes.
    pub mean_frame: f64,
}

impl ReplayOutcome {
    /// The bench as `tickbox bench replay` prints it: the machine, what was measured, the summary and where the
    /// files are.
    pub fn report(&self) -> String {
        format!(
            "{}\n{}\n{}files: {} (results), {} and .svg (plot)\n",
            self.document.environment.summary_line(),
            "journal replayed flat out (--speed max, lossless XPUB_NODROP) over tcp loopback; tickbox = Replayer \
             (batch frames as configured) → Black Box (gap accounting, workers decode every record), raw = the same \
             frames one per message, XPUB_NODROP → SUB; lost is counted by the receiver (tickbox: the subscriber's \
             accounting); lateness = receive − replay send stamp",
            replay_table(&self.document.summary),
            self.json.display(),
            self.plot.display()
        )
    }
}

/// Generates the journal, then runs tickbox and raw `repeats` times each, alternating; writes
/// `<out>/<stamp>-replay.json` and `<out>/<stamp>-replay.{png,svg}`. Stops between runs when `stop` is set.
pub fn run_replay_bench(
    gate: &tickbox_auth::Gate,
    config: &ReplayBenchConfig,
    out: &Path,
    stamp: &str,
    stop: &AtomicBool,
) -> Result<ReplayOutcome, BenchError> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, e))?;
    let mut environment = Environment::capture();
    let repeats = config.repeats.max(1);
    tracing::info!(
        "replay: writing {} generated records to a temporary journal",
        config.records
    );
    let journal = generate_journal(config.records, config.seed)?;
    let mut results = Vec::new();
    'outer: for repeat in 0..repeats {
        for system in run_order(repeat, &["tickbox", "raw"]) {
            if stop.load(Ordering::Relaxed) {
                tracing::warn!("interrupted: reporting the runs finished so far");
                break 'outer;
            }
            tracing::info!(
                "replay: {system}, {} records, repeat {}/{repeats}",
                journal.records,
                repeat + 1
            );
            let mut r = if system == "tickbox" {
                tickbox_replay(gate, &journal, config, stop)?
            } else {
                raw_replay(gate, &journal, config, stop)?
            };
            r.repeat = repeat as u32 + 1;
            results.push(r);
        }
    }
    if results.is_empty() {
        return Err(BenchError::NoSamples("replay bench"));
    }
    environment.finish();
    let mut warnings = replay_warnings(&results);
    warnings.extend(environment.warnings());
    let summary = replay_summaries(&results, journal.mean_frame());
    let document = RunDocument {
        bench: "replay".into(),
        environment,
        repeats,
        order: order_label(repeats),
        records: results.iter().cloned().map(BenchRecord::Replay).collect(),
        summary,
        warnings,
    };
    let json = out.join(format!("{stamp}-replay.json"));
    document.write(&json)?;
    let plot = out.join(format!("{stamp}-replay.png"));
    let title = format!(
        "replay at --speed max over tcp, {} records, {repeats} repeat(s): tickbox beside raw libzmq",
        journal.records
    );
    let groups = [replay_group(&results, journal.records)];
    write_repeat_plot(&plot, &title, "records delivered per second", &groups)?;
    write_repeat_plot(
        &plot.with_extension("svg"),
        &title,
        "records delivered per second",
        &groups,
    )?;
    Ok(ReplayOutcome {
        results,
        json,
        plot,
        document,
        mean_frame: journal.mean_frame(),
    })
}

fn by_system<'a>(results: &'a [ReplayResult], system: &str) -> Vec<&'a ReplayResult> {
    let mut v: Vec<&ReplayResult> = results.iter().filter(|r| r.system == system).collect();
    v.sort_by_key(|r| r.repeat);
    v
}

fn replay_group(results: &[ReplayResult], records: u64) -> RepeatGroup {
    let column = |system: &str, label: &str, baseline: bool| {
        let rows = by_system(results, system);
        RepeatColumn {
            label: label.into(),
            baseline,
            raw: baseline,
            values: rows.iter().map(|r| r.records_per_s).collect(),
            lost: rows.iter().map(|r| r.lost).sum(),
            sent: records * rows.len() as u64,
        }
    };
    RepeatGroup {
        label: format!("{records} records"),
        columns: vec![
            column("tickbox", "tickbox", false),
            column("raw-pubsub", "raw pub/sub", true),
        ],
    }
}

/// Every figure of a replay bench over its repeats: records/s and MB/s (with ratios), lost, and tickbox's
/// lateness percentiles on receipt and on dequeue (µs; raw has none).
pub fn replay_summaries(results: &[ReplayResult], mean_frame: f64) -> Vec<FigureSummary> {
    let tickbox = by_system(results, "tickbox");
    let raw = by_system(results, "raw-pubsub");
    let repeats = tickbox.len().max(raw.len());
    let first = results.first();
    let frames: u64 = tickbox.iter().filter_map(|r| r.frames).sum();
    let records: u64 = tickbox.iter().map(|r| r.records).sum();
    let name = format!(
        "replay --speed max, tcp loopback, {} records (mean {mean_frame:.1} B), batch up to {} ({:.1} records per \
         message sent), {} worker(s), {repeats} repeat(s), order {}",
        first.map_or(0, |r| r.records),
        tickbox.first().map_or(1, |r| r.batch),
        records as f64 / frames.max(1) as f64,
        tickbox.first().map_or(0, |r| r.workers),
        order_label(repeats)
    );
    let values = |rows: &[&ReplayResult], f: &dyn Fn(&ReplayResult) -> Option<f64>| -> Vec<f64> {
        rows.iter().filter_map(|r| f(r)).collect()
    };
    let mut out = Vec::new();
    type Get = fn(&ReplayResult) -> Option<f64>;
    let figures: [(&str, Get, bool); 3] = [
        ("records/s", |r| Some(r.records_per_s), true),
        ("MB/s", |r| Some(r.mb_per_s), true),
        ("lost", |r| Some(r.lost as f64), false),
    ];
    for (figure, get, ratio) in figures {
        out.push(FigureSummary::new(
            &name,
            figure,
            &values(&tickbox, &get),
            "raw-pubsub",
            &values(&raw, &get),
            ratio,
        ));
    }
    type Pct = fn(&Percentiles) -> u64;
    let pcts: [(&str, Pct); 4] = [
        ("p50", |p| p.p50),
        ("p99", |p| p.p99),
        ("p99.9", |p| p.p999),
        ("max", |p| p.max),
    ];
    for (stage, pick) in [
        (
            "receive",
            (|r: &ReplayResult| r.lateness_receive) as fn(&ReplayResult) -> Option<Percentiles>,
        ),
        ("dequeue", |r: &ReplayResult| r.lateness_dequeue),
    ] {
        for (label, pct) in pcts {
            out.push(FigureSummary::new(
                &name,
                &format!("late {stage} {label} µs"),
                &values(&tickbox, &|r| pick(r).map(|p| pct(&p) as f64 / 1_000.0)),
                "raw-pubsub",
                &[],
                false,
            ));
        }
    }
    out
}

/// Formats a replay figure: rates with three digits, MB/s and µs with one decimal, counts whole.
pub fn format_replay_figure(figure: &str, v: f64) -> String {
    if figure == "records/s" {
        crate::stats::fmt_sig(v)
    } else if figure == "lost" {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The stdout table of a replay bench.
pub fn replay_table(summaries: &[FigureSummary]) -> String {
    summary_table(summaries, format_replay_figure)
}

/// The warnings of a replay bench: any record lost (the method promises none), and a raw baseline that moved
/// more than 20 % between repeats.
pub fn replay_warnings(results: &[ReplayResult]) -> Vec<Warning> {
    let mut out: Vec<Warning> = results
        .iter()
        .filter(|r| r.lost > 0)
        .map(|r| {
            Warning::new(
                WarningKind::Lost,
                format!(
                    "replay {} repeat {}: {} of {} records lost (lossless replay should lose none)",
                    r.system, r.repeat, r.lost, r.records
                ),
            )
        })
        .collect();
    let raw: Vec<f64> = by_system(results, "raw-pubsub")
        .iter()
        .map(|r| r.records_per_s)
        .collect();
    out.extend(drift_warning("replay: raw-pubsub records/s", &raw));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_journal_holds_every_record_in_order() {
        let journal = generate_journal(5_000, 7).unwrap();
        assert_eq!(journal.records, 5_000);
        let mut reader = Reader::open(journal.path()).unwrap();
        reader.seek_oldest();
        let mut n = 0u64;
        let mut bytes = 0u64;
        while let Some(rec) = reader.next().unwrap() {
            let msg = MessageRef::decode(rec.payload).unwrap();
            n += 1;
            assert_eq!(msg.header().sequence, n);
            assert!(matches!(msg.kind(), Kind::Quote | Kind::Trade));
            bytes += rec.payload.len() as u64;
        }
        assert_eq!(n, 5_000);
        assert_eq!(bytes, journal.bytes);
        assert!(
            (60.0..=120.0).contains(&journal.mean_frame()),
            "{}",
            journal.mean_frame()
        );
        assert!(generate_journal(0, 7).is_err());
    }

    #[test]
    fn both_systems_deliver_every_record() {
        let gate = tickbox_auth::Gate::open(&zmq::Context::new());
        let journal = generate_journal(20_000, 3).unwrap();
        let config = ReplayBenchConfig {
            records: 20_000,
            drain: Duration::from_secs(5),
            ..ReplayBenchConfig::default()
        };
        let stop = AtomicBool::new(false);
        let t = tickbox_replay(&gate, &journal, &config, &stop).unwrap();
        assert_eq!(t.delivered, 20_000, "{t:?}");
        assert_eq!(t.lost, 0);
        assert_eq!(t.gap_missing, Some(0));
        assert!(t.records_per_s > 0.0 && t.elapsed_s > 0.0);
        let late = t.lateness_receive.expect("receive lateness");
        // The final heartbeat is judged too.
        assert!(late.count >= 20_000, "{late:?}");
        assert!(late.p50 <= late.max);
        // The replay config's default batching is in effect: fewer messages than records.
        assert_eq!(
            t.batch,
            u64::from(RecorderConfig::default().replay_batch_records)
        );
        assert!(t.frames.unwrap() < 20_000, "{t:?}");
        let r = raw_replay(&gate, &journal, &config, &stop).unwrap();
        assert_eq!(r.delivered, 20_000, "{r:?}");
        assert_eq!(r.lost, 0);
        assert_eq!(r.frames, Some(20_000));
        assert!(r.lateness_receive.is_none());
        // --batch 1: one record per message, still none lost.
        let single = ReplayBenchConfig {
            batch: Some(1),
            ..config.clone()
        };
        let one = tickbox_replay(&gate, &journal, &single, &stop).unwrap();
        assert_eq!(
            (one.delivered, one.lost, one.batch),
            (20_000, 0, 1),
            "{one:?}"
        );
        assert_eq!(one.frames, Some(20_000));
        let summaries = replay_summaries(&[t, r], journal.mean_frame());
        let rate = summaries.iter().find(|s| s.figure == "records/s").unwrap();
        assert!(rate.ratio.is_some());
    }
}
