//! `bench record`: how fast the recorder writes a batched feed to its journal, beside a Black Box reading the same
//! feed and a raw SUB that only copies what it receives into an mmap'd file.
//!
//! * **Feed.** A real [`tickbox_feed::Feed`] as `tickbox feed --batch auto --rate max --back-pressure block` runs it: its
//!   synthetic market on `shards` publisher shards over `tcp://127.0.0.1:*`, lossless (XPUB_NODROP, so the reader
//!   sets the pace), batch frames (`#B`) for readers that opt in, `records` data messages in all, started once a
//!   reader has subscribed. A fresh feed (same seed, so the same stream) for every run.
//! * **tickbox-record.** [`tickbox_recorder::record`] with the `[recorder]` defaults (`batch_max`, `rcvhwm`; one
//!   pinned reader thread per shard when there are several) into a fresh archive journal: every record of a batch
//!   frame appended as its own journal record, with the per-publisher ledger and gap records. Missing records are
//!   what the ledger says (its `missing`), and never fewer than `records − appended`.
//! * **tickbox-subscribe.** The Black Box as `tickbox subscribe --workers 1` runs it (a SUB shard per feed shard,
//!   gap accounting, one worker that decodes every record), the figure the recorder is held against.
//! * **raw-mmap.** One SUB connected to every shard, opted in to batch frames like the others, appending each
//!   message it receives, unchanged behind a 4-byte length, to an mmap'd file whose blocks are reserved up front
//!   (rolled to a new one when full) with `memcpy`: the least any recorder of these frames can do. It reads only
//!   the record count of a batch frame's header (and the kind of a single frame) to know when it has everything.
//! * Every clock runs from the feed's first send (its schedule start) to the arrival of the last data record (the
//!   recorder's capture time of it, stored in the journal; the raw SUB's receipt; the worker's dequeue). Each repeat runs all three, in an order that alternates
//!   (`T S R`, then `R S T`, …), and the ratios are taken per repeat.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_feed::{BatchMode, Feed, FeedConfig, FeedHandle, PublisherShardConfig, Rate};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_recorder::{record, RecordOptions, RecordStats, RecorderConfig};
use tickbox_subscriber::{HumanDuration, Subscriber, SubscriberConfig, SubscriberShardConfig};
use tickbox_wire::{now_ns, Kind, MessageRef};
use tickbox_workers::WorkerPoolConfig;

use crate::env::{drift_warning, Environment, Warning, WarningKind};
use crate::plot::{write_repeat_plot, RepeatColumn, RepeatGroup};
use crate::replay::{wait_delivered, TouchWorker};
use crate::report::{BenchRecord, RecordResult, RunDocument};
use crate::stats::{fmt_sig, order_label_of, run_order, summary_table, FigureSummary};
use crate::BenchError;

/// The recorder's system name in results.
pub const RECORD: &str = "tickbox-record";
/// The Black Box's system name in results.
pub const SUBSCRIBE: &str = "tickbox-subscribe";
/// The raw baseline's system name in results.
pub const RAW: &str = "raw-mmap";

/// What `bench record` runs.
#[derive(Debug, Clone)]
pub struct RecordBenchConfig {
    /// Data records the feed sends per run, over all shards (rounded up to a multiple of `shards`).
    pub records: u64,
    /// Feed shards.
    pub shards: usize,
    /// Runs of each system (at least 1).
    pub repeats: usize,
    /// Feed seed (the same stream every run).
    pub seed: u64,
    /// Size of a journal segment, and of a raw file.
    pub segment_size: u64,
    /// Also run the Black Box (`tickbox-subscribe`), the figure the recorder is held against.
    pub subscribe: bool,
    /// How long a system may go without a new record before the rest counts as lost.
    pub drain: Duration,
}

impl Default for RecordBenchConfig {
    fn default() -> Self {
        RecordBenchConfig {
            records: 500_000,
            shards: 1,
            repeats: 3,
            seed: FeedConfig::default().seed,
            segment_size: RecorderConfig::default().segment_size.0,
            subscribe: true,
            drain: Duration::from_secs(10),
        }
    }
}

impl RecordBenchConfig {
    fn per_shard(&self) -> u64 {
        self.records.div_ceil(self.shards.max(1) as u64)
    }

    /// Data records a run sends: `records` rounded up to a multiple of the shard count.
    pub fn expected(&self) -> u64 {
        self.per_shard() * self.shards.max(1) as u64
    }
}

/// The feed `tickbox feed --batch auto --rate max --back-pressure block --max-messages N` runs, on `shards` shards.
pub fn feed_config(config: &RecordBenchConfig) -> FeedConfig {
    FeedConfig {
        shards: vec![PublisherShardConfig::default(); config.shards.max(1)],
        rate: Rate::Max,
        back_pressure: tickbox_zmqx::BackPressure::Block,
        batch: Some(BatchMode::Auto),
        max_messages_per_shard: Some(config.per_shard()),
        wait_for_subscribers: 1,
        seed: config.seed,
        ..FeedConfig::default()
    }
}

/// A count that has not moved for `drain` (the reader is done, whatever is missing is lost).
struct Stalled {
    last: u64,
    since: Instant,
    drain: Duration,
}

impl Stalled {
    fn new(drain: Duration) -> Self {
        Stalled {
            last: 0,
            since: Instant::now(),
            drain,
        }
    }

    fn check(&mut self, count: u64) -> bool {
        if count != self.last {
            self.last = count;
            self.since = Instant::now();
        }
        self.since.elapsed() >= self.drain
    }
}

/// A feed started for one run, stopped and joined by [`RunFeed::finish`] (or on drop).
struct RunFeed {
    handle: Option<FeedHandle>,
}

impl RunFeed {
    fn start(gate: &tickbox_auth::Gate, config: &RecordBenchConfig) -> Result<RunFeed, BenchError> {
        let handle = Feed::start(gate, feed_config(config))
            .map_err(|e| BenchError::Pipeline(format!("feed: {e}")))?;
        Ok(RunFeed {
            handle: Some(handle),
        })
    }

    fn endpoints(&self) -> Vec<String> {
        self.handle
            .as_ref()
            .map(FeedHandle::endpoints)
            .unwrap_or_default()
    }

    /// Stops the feed (its reader is done) and returns when its first shard started sending and its own rate.
    fn finish(mut self) -> Result<(u64, f64), BenchError> {
        let Some(handle) = self.handle.take() else {
            return Err(BenchError::Pipeline("feed already finished".into()));
        };
        let report = handle
            .stop_and_join()
            .map_err(|e| BenchError::Pipeline(format!("feed: {e}")))?;
        let start = report
            .shards
            .iter()
            .map(|s| s.schedule_start_ns)
            .filter(|&t| t > 0)
            .min()
            .unwrap_or(0);
        Ok((start, report.total_rate()))
    }
}

impl Drop for RunFeed {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            let _ = handle.stop_and_join();
        }
    }
}

/// What one run of one system measured, before the feed's figures are added.
struct Measured {
    delivered: u64,
    accounted_missing: Option<u64>,
    batch_frames: u64,
    bytes_written: Option<u64>,
    /// When the last record arrived (0 if none did).
    end_ns: u64,
    workers: usize,
    receive_hwm: i32,
    /// Times the recorder's recording thread reserved disk itself (none for the others).
    reserve_stalls: Option<u64>,
}

fn finish_result(
    system: &str,
    config: &RecordBenchConfig,
    measured: Measured,
    feed: RunFeed,
) -> Result<RecordResult, BenchError> {
    let (start_ns, feed_rate) = feed.finish()?;
    let expected = config.expected();
    let elapsed_ns = measured.end_ns.saturating_sub(start_ns).max(1);
    let elapsed_s = elapsed_ns as f64 / 1e9;
    let lost = expected
        .saturating_sub(measured.delivered)
        .max(measured.accounted_missing.unwrap_or(0));
    Ok(RecordResult {
        system: system.into(),
        transport: "tcp".into(),
        shards: config.shards.max(1),
        records: expected,
        delivered: measured.delivered,
        lost,
        accounted_missing: measured.accounted_missing,
        batch_frames: measured.batch_frames,
        bytes_written: measured.bytes_written,
        elapsed_s,
        records_per_s: if measured.end_ns == 0 {
            0.0
        } else {
            measured.delivered as f64 / elapsed_s
        },
        feed_rate,
        workers: measured.workers,
        receive_hwm: measured.receive_hwm,
        repeat: 1,
        reserve_stalls: measured.reserve_stalls,
        prefaulted_bytes_before_staging: None,
    })
}

fn journal_err(path: &Path) -> impl Fn(tickbox_journal::JournalError) -> BenchError + '_ {
    move |e| BenchError::Setup(format!("journal {}: {e}", path.display()))
}

fn temp_dir(prefix: &str) -> Result<tempfile::TempDir, BenchError> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| BenchError::io(&std::env::temp_dir(), e))
}

/// One run of the recorder: a fresh feed recorded into a fresh archive journal, as `tickbox record` does with the
/// default `[recorder]` config.
pub fn tickbox_record(
    gate: &tickbox_auth::Gate,
    config: &RecordBenchConfig,
    stop: &AtomicBool,
) -> Result<RecordResult, BenchError> {
    let dir = temp_dir("tickbox-bench-record-")?;
    let path = dir.path().join("journal");
    let cfg = RecorderConfig::default();
    let options = WriterOptions::archive(config.segment_size)
        .durability(cfg.durability())
        .description("tickbox bench record");
    let mut writer = Writer::open(&path, &options).map_err(journal_err(&path))?;
    let feed = RunFeed::start(gate, config)?;
    let options = RecordOptions {
        connect: feed.endpoints(),
        batch_max: cfg.batch_max,
        receive_hwm: cfg.receive_hwm,
        reader_cores: cfg.reader_cores.clone(),
        // The progress callback ends the run once every record is in: soon after the last.
        progress_every: Duration::from_millis(1),
        ..RecordOptions::default()
    };
    let expected = config.expected();
    let done = AtomicBool::new(false);
    let mut stalled = Stalled::new(config.drain);
    let stats: RecordStats = record(
        gate.context(),
        &mut writer,
        &options,
        &done,
        |s: &RecordStats| {
            if s.recorded >= expected || stalled.check(s.recorded) || stop.load(Ordering::Relaxed) {
                done.store(true, Ordering::Relaxed);
            }
        },
    )
    .map_err(|e| BenchError::Pipeline(format!("record: {e}")))?;
    writer.close().map_err(journal_err(&path))?;
    let end_ns = last_data_capture(&path, &stats)?;
    if stats.invalid_frames > 0 || stats.multipart_messages > 0 {
        tracing::warn!(
            invalid = stats.invalid_frames,
            multipart = stats.multipart_messages,
            "the recorder refused frames of the feed"
        );
    }
    let measured = Measured {
        delivered: stats.recorded,
        accounted_missing: Some(stats.missing),
        batch_frames: stats.batch_frames,
        bytes_written: Some(stats.bytes),
        end_ns,
        workers: 0,
        receive_hwm: options.receive_hwm,
        reserve_stalls: Some(stats.reserve_stalls),
    };
    finish_result(RECORD, config, measured, feed)
}

/// The capture time (taken on receipt) of the last data record the run appended: the closing heartbeats that
/// follow it are not data.
fn last_data_capture(path: &Path, stats: &RecordStats) -> Result<u64, BenchError> {
    let (Some(first), Some(last)) = (stats.first_seq, stats.last_seq) else {
        return Ok(0);
    };
    let mut reader = tickbox_journal::Reader::open(path).map_err(journal_err(path))?;
    reader
        .seek_seq(last.saturating_sub(1024).max(first))
        .map_err(journal_err(path))?;
    let mut end_ns = 0;
    while let Some(rec) = reader.next().map_err(journal_err(path))? {
        let data = MessageRef::decode(rec.payload)
            .is_ok_and(|m| !matches!(m.kind(), Kind::Heartbeat | Kind::Gap));
        if data {
            end_ns = rec.capture_time_ns;
        }
    }
    Ok(end_ns)
}

/// One run of the Black Box with one worker on a fresh feed, as `tickbox subscribe --workers 1` runs it.
pub fn tickbox_subscribe(
    gate: &tickbox_auth::Gate,
    config: &RecordBenchConfig,
    stop: &AtomicBool,
) -> Result<RecordResult, BenchError> {
    let feed = RunFeed::start(gate, config)?;
    let sub_config = SubscriberConfig {
        shards: feed
            .endpoints()
            .into_iter()
            .map(|e| SubscriberShardConfig {
                connect: vec![e],
                ..SubscriberShardConfig::default()
            })
            .collect(),
        // The bench measures throughput; lateness is not its business.
        max_lateness: HumanDuration(Duration::ZERO),
        ..SubscriberConfig::default()
    };
    let receive_hwm = sub_config.receive_hwm;
    let workers = WorkerPoolConfig {
        count: Some(1),
        ..WorkerPoolConfig::default()
    };
    let delivered = Arc::new(AtomicU64::new(0));
    let subscriber = Subscriber::start(gate.context(), &sub_config, &workers, |_| {
        TouchWorker::new(Arc::clone(&delivered))
    })
    .map_err(|e| BenchError::Pipeline(e.to_string()))?;
    wait_delivered(
        || delivered.load(Ordering::Relaxed),
        config.expected(),
        config.drain,
        stop,
    );
    let report = subscriber
        .shutdown()
        .map_err(|e| BenchError::Pipeline(e.to_string()))?;
    let undecodable: u64 = report.workers.iter().map(|w| w.worker.undecodable()).sum();
    if undecodable > 0 {
        tracing::warn!(undecodable, "the worker got records that did not decode");
    }
    let measured = Measured {
        delivered: report.workers.iter().map(|w| w.worker.count()).sum(),
        accounted_missing: Some(report.sequence_totals().missing),
        batch_frames: report.batches(),
        bytes_written: None,
        end_ns: report
            .workers
            .iter()
            .map(|w| w.worker.last_ns())
            .max()
            .unwrap_or(0),
        workers: 1,
        receive_hwm,
        reserve_stalls: None,
    };
    finish_result(SUBSCRIBE, config, measured, feed)
}

/// Data records in one received message: a batch frame's declared count, 1 for a single data frame, 0 for a
/// heartbeat or anything that is not a tickbox frame.
fn records_in(frame: &[u8]) -> u64 {
    if tickbox_wire::is_batch(frame) {
        return tickbox_wire::batch_records(frame).map_or(0, |b| u64::from(b.declared_count()));
    }
    match MessageRef::decode(frame) {
        Ok(m) if m.kind() != Kind::Heartbeat => 1,
        _ => 0,
    }
}

/// The raw baseline's file: mmap'd segments of a fixed size, created and reserved like a journal segment, each
/// message appended behind its length with `memcpy`.
pub struct RawFile {
    dir: PathBuf,
    capacity: usize,
    map: memmap2::MmapMut,
    at: usize,
    segments: u32,
    /// Bytes appended (length prefixes included).
    pub bytes: u64,
}

const RAW_PREFIX: usize = 4;

impl RawFile {
    /// Creates the first segment in `dir` (an existing directory).
    pub fn create(dir: &Path, capacity: u64) -> Result<RawFile, BenchError> {
        let capacity = usize::try_from(capacity)
            .map_err(|_| BenchError::InvalidArgument(format!("segment size {capacity}")))?;
        if capacity < 1 << 16 {
            return Err(BenchError::InvalidArgument(format!(
                "segment size {capacity} B is below 64 KiB"
            )));
        }
        let map = Self::segment(dir, 0, capacity)?;
        Ok(RawFile {
            dir: dir.to_path_buf(),
            capacity,
            map,
            at: 0,
            segments: 1,
            bytes: 0,
        })
    }

    // Reserves the file's blocks and maps it: the raw baseline's file is an mmap, as a journal segment is.
    #[allow(unsafe_code)]
    fn segment(dir: &Path, n: u32, capacity: usize) -> Result<memmap2::MmapMut, BenchError> {
        let path = dir.join(format!("raw-{n:06}.seg"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| BenchError::io(&path, e))?;
        file.set_len(capacity as u64)
            .map_err(|e| BenchError::io(&path, e))?;
        // Blocks reserved before anything is written there, as the journal's are (it reserves a step at a time
        // ahead of its writer, off the recording thread), so neither pays for block allocation in a page fault.
        // SAFETY: a plain syscall on a file descriptor this function owns.
        let rc = unsafe {
            libc::posix_fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                capacity as libc::off_t,
            )
        };
        if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
            return Err(BenchError::io(&path, std::io::Error::from_raw_os_error(rc)));
        }
        // SAFETY: the file was created (truncated) by this process for this map alone; nothing else maps or
        // resizes it while the map lives.
        unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| BenchError::io(&path, e))
    }

    /// Appends `message` behind its length, rolling to a new segment when this one cannot hold it.
    pub fn append(&mut self, message: &[u8]) -> Result<(), BenchError> {
        let need = RAW_PREFIX + message.len();
        if need > self.capacity {
            return Err(BenchError::InvalidArgument(format!(
                "a {} B message does not fit a {} B raw segment",
                message.len(),
                self.capacity
            )));
        }
        if self.at + need > self.capacity {
            self.map = Self::segment(&self.dir, self.segments, self.capacity)?;
            self.segments += 1;
            self.at = 0;
        }
        let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
        self.map[self.at..self.at + RAW_PREFIX].copy_from_slice(&len.to_le_bytes());
        self.map[self.at + RAW_PREFIX..self.at + need].copy_from_slice(message);
        self.at += need;
        self.bytes += need as u64;
        Ok(())
    }

    /// Segments created so far.
    pub fn segments(&self) -> u32 {
        self.segments
    }
}

fn zerr(what: &'static str) -> impl Fn(zmq::Error) -> BenchError {
    move |e| BenchError::Zmq { what, source: e }
}

/// One run of the raw baseline: a SUB on every shard of a fresh feed, each message copied into a [`RawFile`].
pub fn raw_record(
    gate: &tickbox_auth::Gate,
    config: &RecordBenchConfig,
    stop: &AtomicBool,
) -> Result<RecordResult, BenchError> {
    let dir = temp_dir("tickbox-bench-raw-")?;
    let mut file = RawFile::create(dir.path(), config.segment_size)?;
    let receive_hwm = RecorderConfig::default().receive_hwm;
    let feed = RunFeed::start(gate, config)?;
    let sub = gate.context().socket(zmq::SUB).map_err(zerr("socket"))?;
    sub.set_linger(0).map_err(zerr("linger"))?;
    sub.set_rcvhwm(receive_hwm).map_err(zerr("rcvhwm"))?;
    sub.set_rcvtimeo(20).map_err(zerr("rcvtimeo"))?;
    sub.set_subscribe(b"").map_err(zerr("subscribe"))?;
    // The batch opt-in, as the recorder and the Black Box send it: the feed batches only for readers that ask.
    sub.set_subscribe(tickbox_wire::BATCH_TOPIC.as_bytes())
        .map_err(zerr("subscribe"))?;
    for endpoint in feed.endpoints() {
        sub.connect(&endpoint).map_err(zerr("connect"))?;
    }
    let expected = config.expected();
    let mut msg = zmq::Message::new();
    let (mut delivered, mut batch_frames, mut end_ns) = (0u64, 0u64, 0u64);
    let mut stalled = Stalled::new(config.drain);
    while delivered < expected && !stop.load(Ordering::Relaxed) {
        match sub.recv(&mut msg, 0) {
            Ok(()) => {
                // Taken on receipt, as the recorder's capture time is.
                let arrived = now_ns();
                file.append(&msg)?;
                let n = records_in(&msg);
                batch_frames += u64::from(tickbox_wire::is_batch(&msg));
                if n > 0 {
                    delivered += n;
                    end_ns = arrived;
                }
            }
            Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => {
                if stalled.check(delivered) {
                    break;
                }
            }
            Err(e) => return Err(zerr("recv")(e)),
        }
    }
    drop(sub);
    let measured = Measured {
        delivered,
        accounted_missing: None,
        batch_frames,
        bytes_written: Some(file.bytes),
        end_ns,
        workers: 0,
        receive_hwm,
        reserve_stalls: None,
    };
    finish_result(RAW, config, measured, feed)
}

/// The systems a record bench runs, in the order of its even repeats (odd ones reverse it: [`run_order`]).
fn systems(subscribe: bool) -> &'static [&'static str] {
    if subscribe {
        &[RECORD, SUBSCRIBE, RAW]
    } else {
        &[RECORD, RAW]
    }
}

/// The run order over `repeats`, e.g. `T S R R S T` (T = the recorder, S = the Black Box, R = raw).
pub fn order_label(repeats: usize, subscribe: bool) -> String {
    let letters: &[&str] = if subscribe {
        &["T", "S", "R"]
    } else {
        &["T", "R"]
    };
    order_label_of(repeats, letters)
}

/// What a record bench wrote.
pub struct RecordOutcome {
    /// Every run, in run order.
    pub results: Vec<RecordResult>,
    /// The result document (JSON).
    pub json: PathBuf,
    /// The per-repeat plot (PNG; an SVG of the same name sits beside it).
    pub plot: PathBuf,
    /// The document's contents.
    pub document: RunDocument,
}

impl RecordOutcome {
    /// The bench as `tickbox bench record` prints it: the machine, what was measured, the summary, every run and
    /// where the files are.
    pub fn report(&self) -> String {
        format!(
            "{}\n{}\n{}{}files: {} (results), {} and .svg (plot)\n",
            self.document.environment.summary_line(),
            "a batched lossless feed (feed --batch auto --rate max --back-pressure block) read flat out over tcp \
             loopback; tickbox-record = the recorder into an archive journal (the [recorder] defaults), \
             tickbox-subscribe = a Black Box with one worker decoding every record, raw-mmap = one SUB appending \
             each message to an mmap'd file with memcpy; records/s from the feed's first send to the last data \
             record's arrival; lost = records not delivered, or what the system's own accounting (the recorder's \
             ledger) says missing",
            record_table(&self.document.summary),
            record_runs_table(&self.results),
            self.json.display(),
            self.plot.display()
        )
    }
}

/// Runs every system `repeats` times in alternating order; writes `<out>/<stamp>-record.json` and
/// `<out>/<stamp>-record.{png,svg}`. Stops between runs when `stop` is set.
pub fn run_record_bench(
    gate: &tickbox_auth::Gate,
    config: &RecordBenchConfig,
    out: &Path,
    stamp: &str,
    stop: &AtomicBool,
) -> Result<RecordOutcome, BenchError> {
    if config.records == 0 {
        return Err(BenchError::InvalidArgument(
            "a record bench needs at least one record".into(),
        ));
    }
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, e))?;
    let mut environment = Environment::capture();
    let repeats = config.repeats.max(1);
    let mut results = Vec::new();
    'outer: for repeat in 0..repeats {
        for system in run_order(repeat, systems(config.subscribe)) {
            if stop.load(Ordering::Relaxed) {
                tracing::warn!("interrupted: reporting the runs finished so far");
                break 'outer;
            }
            tracing::info!(
                "record: {system}, {} records on {} shard(s), repeat {}/{repeats}",
                config.expected(),
                config.shards.max(1),
                repeat + 1
            );
            let mut r = match system {
                RECORD => tickbox_record(gate, config, stop)?,
                SUBSCRIBE => tickbox_subscribe(gate, config, stop)?,
                _ => raw_record(gate, config, stop)?,
            };
            r.repeat = repeat as u32 + 1;
            results.push(r);
        }
    }
    if results.is_empty() {
        return Err(BenchError::NoSamples("record bench"));
    }
    environment.finish();
    let mut warnings = record_warnings(&results);
    warnings.extend(environment.warnings());
    let document = RunDocument {
        bench: "record".into(),
        environment,
        repeats,
        order: order_label(repeats, config.subscribe),
        records: results.iter().cloned().map(BenchRecord::Record).collect(),
        summary: record_summaries(&results),
        warnings,
    };
    let json = out.join(format!("{stamp}-record.json"));
    document.write(&json)?;
    let plot = out.join(format!("{stamp}-record.png"));
    let title = format!(
        "record of a batched lossless feed over tcp, {} records, {repeats} repeat(s): recorder beside Black Box and \
         raw mmap",
        config.expected()
    );
    let groups = [record_group(&results)];
    write_repeat_plot(&plot, &title, "records per second", &groups)?;
    write_repeat_plot(
        &plot.with_extension("svg"),
        &title,
        "records per second",
        &groups,
    )?;
    Ok(RecordOutcome {
        results,
        json,
        plot,
        document,
    })
}

fn by_system<'a>(results: &'a [RecordResult], system: &str) -> Vec<&'a RecordResult> {
    let mut v: Vec<&RecordResult> = results.iter().filter(|r| r.system == system).collect();
    v.sort_by_key(|r| r.repeat);
    v
}

fn record_group(results: &[RecordResult]) -> RepeatGroup {
    let column = |system: &str, label: &str, baseline: bool| {
        let rows = by_system(results, system);
        RepeatColumn {
            label: label.into(),
            baseline,
            // The Black Box beside the recorder is tickbox too; only the mmap copy is raw libzmq.
            raw: system == RAW,
            values: rows.iter().map(|r| r.records_per_s).collect(),
            lost: rows.iter().map(|r| r.lost).sum(),
            sent: rows.iter().map(|r| r.records).sum(),
        }
    };
    let mut columns = vec![column(RECORD, "record", false)];
    if !by_system(results, SUBSCRIBE).is_empty() {
        columns.push(column(SUBSCRIBE, "subscribe -w 1", true));
    }
    columns.push(column(RAW, "raw mmap", true));
    RepeatGroup {
        label: format!("{} records", results.first().map_or(0, |r| r.records)),
        columns,
    }
}

/// Every figure of a record bench over its repeats: the recorder's records/s against raw and against the Black
/// Box (ratios per repeat), and what each system lost (the recorder's ledger's missing among them).
pub fn record_summaries(results: &[RecordResult]) -> Vec<FigureSummary> {
    let record = by_system(results, RECORD);
    let subscribe = by_system(results, SUBSCRIBE);
    let raw = by_system(results, RAW);
    let repeats = record.len().max(raw.len());
    let first = results.first();
    let frames: u64 = record.iter().map(|r| r.batch_frames).sum();
    let delivered: u64 = record.iter().map(|r| r.delivered).sum();
    let name = format!(
        "record of feed --batch auto --rate max --back-pressure block, tcp loopback, {} records on {} shard(s) ({:.1} records \
         per batch frame at the recorder), {repeats} repeat(s), order {}",
        first.map_or(0, |r| r.records),
        first.map_or(1, |r| r.shards),
        delivered as f64 / frames.max(1) as f64,
        order_label(repeats, !subscribe.is_empty())
    );
    let values = |rows: &[&RecordResult], f: fn(&RecordResult) -> f64| -> Vec<f64> {
        rows.iter().map(|r| f(r)).collect()
    };
    let rate: fn(&RecordResult) -> f64 = |r| r.records_per_s;
    let lost: fn(&RecordResult) -> f64 = |r| r.lost as f64;
    let mut out = vec![FigureSummary::new(
        &name,
        "records/s ×raw",
        &values(&record, rate),
        RAW,
        &values(&raw, rate),
        true,
    )];
    if !subscribe.is_empty() {
        out.push(FigureSummary::new(
            &name,
            "records/s ×subscribe",
            &values(&record, rate),
            SUBSCRIBE,
            &values(&subscribe, rate),
            true,
        ));
    }
    out.push(FigureSummary::new(
        &name,
        "lost",
        &values(&record, lost),
        RAW,
        &values(&raw, lost),
        false,
    ));
    out.push(FigureSummary::new(
        &name,
        "ledger missing",
        &values(&record, |r| r.accounted_missing.unwrap_or(0) as f64),
        RAW,
        &[],
        false,
    ));
    if !subscribe.is_empty() {
        out.push(FigureSummary::new(
            &name,
            "subscribe lost",
            &values(&subscribe, lost),
            RAW,
            &[],
            false,
        ));
    }
    out
}

/// Formats a record figure: rates with three significant digits, counts whole.
pub fn format_record_figure(figure: &str, v: f64) -> String {
    if figure.starts_with("records/s") {
        fmt_sig(v)
    } else {
        format!("{v:.0}")
    }
}

/// The stdout table of a record bench.
pub fn record_table(summaries: &[FigureSummary]) -> String {
    summary_table(summaries, format_record_figure)
}

/// One line per run: system, records/s and the per-repeat ratios are in the table; this shows every run's counts.
pub fn record_runs_table(results: &[RecordResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<18} {:>6} {:>12} {:>10} {:>8} {:>10} {:>12} {:>12} {:>12}",
        "run",
        "repeat",
        "records/s",
        "delivered",
        "lost",
        "missing",
        "batch frames",
        "feed msg/s",
        "reserve stalls"
    );
    for r in results {
        let _ = writeln!(
            out,
            "  {:<18} {:>6} {:>12} {:>10} {:>8} {:>10} {:>12} {:>12} {:>12}",
            r.system,
            r.repeat,
            fmt_sig(r.records_per_s),
            r.delivered,
            r.lost,
            r.accounted_missing
                .map_or_else(|| "-".to_string(), |m| m.to_string()),
            r.batch_frames,
            fmt_sig(r.feed_rate),
            r.reserve_stalls
                .map_or_else(|| "-".to_string(), |s| s.to_string())
        );
    }
    out
}

/// The warnings of a record bench: any record lost (a lossless feed should lose none) and a raw baseline that
/// moved more than 20 % between repeats.
pub fn record_warnings(results: &[RecordResult]) -> Vec<Warning> {
    let mut out: Vec<Warning> = results
        .iter()
        .filter(|r| r.lost > 0)
        .map(|r| {
            Warning::new(
                WarningKind::Lost,
                format!(
                    "record {} repeat {}: {} of {} records lost (a lossless feed should lose none)",
                    r.system, r.repeat, r.lost, r.records
                ),
            )
        })
        .collect();
    let raw: Vec<f64> = by_system(results, RAW)
        .iter()
        .map(|r| r.records_per_s)
        .collect();
    out.extend(drift_warning("record: raw-mmap records/s", &raw));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_file_rolls_and_counts_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = RawFile::create(dir.path(), 1 << 16).unwrap();
        let message = [7u8; 1000];
        for _ in 0..100 {
            file.append(&message).unwrap();
        }
        assert_eq!(file.bytes, 100 * 1004);
        // 65 messages of 1004 B fill a 64 KiB segment.
        assert_eq!(file.segments(), 2);
        assert!(file.append(&vec![0u8; 1 << 16]).is_err());
        assert!(RawFile::create(dir.path(), 1024).is_err());
    }

    #[test]
    fn records_in_counts_batches_by_their_header_and_skips_heartbeats() {
        let header = tickbox_wire::Header::live(Kind::Trade, 1, 1, 1);
        let trade = tickbox_wire::Payload::Trade(tickbox_wire::Trade {
            instrument_id: 1,
            price: 1,
            size: 1,
            aggressor: tickbox_wire::Side::Buy,
            trade_id: 1,
            venue_time_ns: 0,
        });
        let frame = tickbox_wire::encode_to_vec("T.X.A", &header, &trade).unwrap();
        assert_eq!(records_in(&frame), 1);
        let mut batch = tickbox_wire::BatchBuilder::new(4096, 64);
        for _ in 0..3 {
            assert!(batch.try_push(&frame));
        }
        assert_eq!(records_in(batch.frame()), 3);
        let hb = tickbox_wire::Header::live(Kind::Heartbeat, 1, 1, 1);
        let beat = tickbox_wire::encode_to_vec(
            "H.1",
            &hb,
            &tickbox_wire::Payload::Heartbeat(tickbox_wire::Heartbeat::default()),
        )
        .unwrap();
        assert_eq!(records_in(&beat), 0);
        assert_eq!(records_in(b"junk"), 0);
    }

    #[test]
    fn the_order_alternates() {
        assert_eq!(order_label(2, true), "T S R R S T");
        assert_eq!(order_label(1, false), "T R");
    }
}
