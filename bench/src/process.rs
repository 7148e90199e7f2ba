//! The cross-process shape of `bench latency` (`--shape processes`): what users run, measured from outside.
//!
//! * tickbox: a real `tickbox feed` child (one shard, paced at the offered rate, bound to `tcp://127.0.0.1:*`
//!   and read back from its endpoint line) and a real `tickbox subscribe` child (one worker) whose pool runs a
//!   [`LatencyProbe`] beside the standard worker. The probe keeps `(sequence, send stamp, dequeue time)` of every
//!   data record in memory sized up front and writes them to a file when the subscriber exits.
//! * raw: two children of the same binary (`tickbox bench raw-pub` / `raw-sub`): a plain XPUB and SUB sending
//!   `index | send_time_ns | padding` frames, paced by the in-process baseline's own [`drive_schedule`].
//!
//! Both publishers report where their schedule started on the shared wall clock (`now_ns`, the same machine), so
//! the parent rebuilds every message's intended send time with the feed pacer's own formula
//! ([`tickbox_feed::paced_offset_ns`]) and records each sample into the same [`LatencyRecorder`] the in-process
//! runs use: corrected and uncorrected figures, one report format. Nothing is recorded on the hot path but a
//! store into preallocated memory; the file is written after the run.
//!
//! Every child is killed and reaped when the run ends, fails or is interrupted (`ChildGuard`).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tickbox_subscriber::Report;
use tickbox_wire::{now_ns, Flags, Kind, MessageRef};
use tickbox_workers::{Delivery, Record, Worker};

use crate::latency::{LatencyConfig, LatencyRun};
use crate::measure::{LatencyRecorder, Schedule};
use crate::pace::{drive_schedule, RunState};
use crate::raw::RAW_MIN_SIZE;
use crate::BenchError;

/// First bytes of a sample file (format version 1).
const SAMPLE_MAGIC: &[u8; 8] = b"TBXLAT01";
/// Magic, then the sample count, samples not kept, frame bytes and frames counted (each a u64 LE).
const SAMPLE_HEADER_LEN: usize = 8 + 4 * 8;
/// One sample: index, send stamp, receive time (u64 LE each).
const SAMPLE_LEN: usize = 24;
/// How long a child may take to bind and say where.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack on top of a run's own length before a child is declared hung and killed.
const EXIT_SLACK: Duration = Duration::from_secs(15);
/// The feed runs this much past the schedule's end: it stops at its `--duration` even when behind, whereas the
/// in-process publisher sends every message of its schedule however late; messages beyond the end are received
/// but not recorded.
const FEED_OVERRUN: Duration = Duration::from_millis(100);
/// Lines of a child's stderr kept for the error message if it fails.
const STDERR_TAIL: usize = 20;

/// One received message: its place in the schedule, the publisher's send stamp and the receive time (ns since
/// the Unix epoch, both on the machine's real-time clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Position in the open-loop schedule (tickbox: sequence − 1).
    pub index: u64,
    /// The publisher's send stamp.
    pub sent_ns: u64,
    /// When the receiver took it (tickbox: the worker's dequeue time, as in the in-process shape).
    pub recv_ns: u64,
}

/// Samples of one receiver, bounded by the capacity given up front: what does not fit is counted, never grown
/// into (a reallocation would stall the receiver mid-run).
#[derive(Debug, Clone, Default)]
pub struct SampleLog {
    /// The samples kept, in receive order per receiver.
    pub samples: Vec<Sample>,
    /// Samples that did not fit.
    pub overflow: u64,
    /// Bytes of the frames counted in `frames`.
    pub frame_bytes: u64,
    /// Frames whose size was counted.
    pub frames: u64,
}

impl SampleLog {
    /// An empty log that keeps up to `capacity` samples without allocating again.
    pub fn with_capacity(capacity: usize) -> Self {
        SampleLog {
            samples: Vec::with_capacity(capacity),
            ..SampleLog::default()
        }
    }

    /// Keeps `sample` if there is room, else counts it; `frame_len` is its frame's size (0: unknown).
    #[inline]
    pub fn push(&mut self, sample: Sample, frame_len: usize) {
        if self.samples.len() < self.samples.capacity() {
            self.samples.push(sample);
        } else {
            self.overflow += 1;
        }
        if frame_len > 0 {
            self.frame_bytes += frame_len as u64;
            self.frames += 1;
        }
    }

    /// Mean frame size, bytes (0 when none was counted).
    pub fn mean_frame(&self) -> usize {
        self.frame_bytes
            .checked_div(self.frames)
            .map_or(0, |b| b as usize)
    }

    /// All receivers' samples in one log.
    pub fn merge(parts: impl IntoIterator<Item = SampleLog>) -> SampleLog {
        let mut total = SampleLog::default();
        for part in parts {
            total.samples.extend(part.samples);
            total.overflow += part.overflow;
            total.frame_bytes += part.frame_bytes;
            total.frames += part.frames;
        }
        total
    }

    /// Writes the log to `path` (see [`SampleLog::read`] for the format).
    pub fn write(&self, path: &Path) -> Result<(), BenchError> {
        let io = |e| BenchError::io(path, e);
        let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        out.write_all(SAMPLE_MAGIC).map_err(io)?;
        for v in [
            self.samples.len() as u64,
            self.overflow,
            self.frame_bytes,
            self.frames,
        ] {
            out.write_all(&v.to_le_bytes()).map_err(io)?;
        }
        for s in &self.samples {
            for v in [s.index, s.sent_ns, s.recv_ns] {
                out.write_all(&v.to_le_bytes()).map_err(io)?;
            }
        }
        out.flush().map_err(io)
    }

    /// Reads a log written by [`SampleLog::write`]: the magic `TBXLAT01`, then sample count, overflow, frame
    /// bytes and frames counted, then each sample's index, send stamp and receive time, every number a u64 LE.
    /// A file of another length than its count says is refused.
    pub fn read(path: &Path) -> Result<SampleLog, BenchError> {
        let bytes = std::fs::read(path).map_err(|e| BenchError::io(path, e))?;
        SampleLog::decode(&bytes)
            .map_err(|why| BenchError::Report(format!("{}: {why}", path.display())))
    }

    fn decode(bytes: &[u8]) -> Result<SampleLog, String> {
        let word = |at: usize| -> u64 {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        if bytes.len() < SAMPLE_HEADER_LEN || &bytes[..8] != SAMPLE_MAGIC {
            return Err("not a latency sample file".into());
        }
        let count = word(8);
        let body = bytes.len() - SAMPLE_HEADER_LEN;
        if count.checked_mul(SAMPLE_LEN as u64) != Some(body as u64) {
            return Err(format!(
                "says {count} samples but holds {body} bytes of them"
            ));
        }
        let samples = (0..count as usize)
            .map(|i| {
                let at = SAMPLE_HEADER_LEN + i * SAMPLE_LEN;
                Sample {
                    index: word(at),
                    sent_ns: word(at + 8),
                    recv_ns: word(at + 16),
                }
            })
            .collect();
        Ok(SampleLog {
            samples,
            overflow: word(16),
            frame_bytes: word(24),
            frames: word(32),
        })
    }
}

// ------------------------------------------------------------------------------------------------------------
// The subscriber side: a worker for `tickbox subscribe --latency-out`

/// Records each data record's latency sample on a `tickbox subscribe` worker (`--latency-out`): receive time is
/// the worker's dequeue time, as the in-process bench's worker uses. Heartbeats, LVC cached values and sequence
/// 0 are not part of a schedule and are skipped.
#[derive(Debug)]
pub struct LatencyProbe {
    log: SampleLog,
}

impl LatencyProbe {
    /// A probe that keeps up to `capacity` samples (memory reserved now, not during the run).
    pub fn new(capacity: usize) -> Self {
        LatencyProbe {
            log: SampleLog::with_capacity(capacity),
        }
    }

    /// What it recorded.
    pub fn into_log(self) -> SampleLog {
        self.log
    }

    #[inline]
    fn take(&mut self, header: &tickbox_wire::Header, delivery: &Delivery, frame_len: usize) {
        if header.kind == Kind::Heartbeat
            || header.flags.contains(Flags::CACHED)
            || header.sequence == 0
        {
            return;
        }
        self.log.push(
            Sample {
                index: header.sequence - 1,
                sent_ns: header.send_time_ns,
                recv_ns: delivery.dequeued_ns,
            },
            frame_len,
        );
    }
}

impl Worker for LatencyProbe {
    #[inline]
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) {
        self.take(msg.header(), delivery, 0);
    }

    #[inline]
    fn on_record(
        &mut self,
        rec: &Record<'_>,
        delivery: &Delivery,
    ) -> Result<(), tickbox_wire::DecodeError> {
        // The probe needs no topic: skip the UTF-8 check the default would make.
        self.take(rec.header(), delivery, rec.frame().len());
        Ok(())
    }
}

/// Takes the probes out of a subscriber's report, leaving the report of the worker they rode beside (so the
/// usual summary prints unchanged).
pub fn split_probes<W>(
    report: Report<(W, Option<LatencyProbe>)>,
) -> (Report<W>, Vec<LatencyProbe>) {
    let mut probes = Vec::new();
    let report = report.map_workers(|(worker, probe)| {
        probes.extend(probe);
        worker
    });
    (report, probes)
}

// ------------------------------------------------------------------------------------------------------------
// The raw side: `tickbox bench raw-pub` and `raw-sub`

/// What a publisher child says when it is done (one JSON object on stdout): how many messages of the schedule
/// it sent and where the schedule started. `tickbox feed --json` says the same per shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PublisherSummary {
    /// Messages of the schedule sent.
    pub sent: u64,
    /// Intended send time of message 0, ns since the Unix epoch.
    pub schedule_start_ns: u64,
}

fn zerr(what: &'static str) -> impl Fn(zmq::Error) -> BenchError {
    move |e| BenchError::Zmq { what, source: e }
}

/// The raw publisher child: binds an XPUB on `tcp://127.0.0.1:*`, calls `announce` with the endpoint, waits for
/// one subscription (so nothing is sent into a pipe that does not exist yet), then sends `index | send_time_ns |
/// padding` frames of `config.size` bytes on the in-process baseline's open-loop schedule. Stops early when
/// `stop` is set.
pub fn raw_pub_process(
    config: &LatencyConfig,
    stop: &AtomicBool,
    announce: impl FnOnce(&str),
) -> Result<PublisherSummary, BenchError> {
    let size = config.size.max(RAW_MIN_SIZE);
    let ctx = zmq::Context::new();
    let mut socket = ctx.socket(zmq::XPUB).map_err(zerr("socket"))?;
    socket
        .set_linger(config.drain.as_millis().min(i32::MAX as u128) as i32)
        .map_err(zerr("linger"))?;
    socket.set_sndhwm(config.hwm).map_err(zerr("sndhwm"))?;
    socket.set_rcvtimeo(50).map_err(zerr("rcvtimeo"))?;
    tickbox_zmqx::set_xpub_nodrop(&mut socket, config.back_pressure.blocks())
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let endpoint = tickbox_zmqx::bind_resolved(&socket, "tcp://127.0.0.1:*")
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    announce(&endpoint);
    let deadline = Instant::now() + START_TIMEOUT;
    if !crate::transport::await_subscriber(&socket, || {
        stop.load(Ordering::Relaxed) || Instant::now() > deadline
    })? {
        return Err(BenchError::NotConnected(START_TIMEOUT));
    }
    let state = RunState::new();
    state.connected.store(true, Ordering::Release);
    let mut frame = vec![0u8; size];
    drive_schedule(&state, &config.pace(), |k| {
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        frame[..8].copy_from_slice(&k.to_le_bytes());
        frame[8..16].copy_from_slice(&now_ns().to_le_bytes());
        socket.send(&frame[..], 0).map_err(zerr("send"))?;
        Ok(true)
    })?;
    let schedule = state
        .schedule
        .get()
        .ok_or_else(|| BenchError::Setup("the schedule never started".into()))?;
    Ok(PublisherSummary {
        sent: state.sent.load(Ordering::Acquire),
        schedule_start_ns: schedule.start_ns,
    })
}

/// What the raw subscriber child received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RawSubSummary {
    /// Frames received.
    pub received: u64,
    /// Frames shorter than an index and a stamp (not recorded).
    pub malformed: u64,
    /// Samples that did not fit the capacity (not recorded).
    pub overflow: u64,
}

/// The raw subscriber child: SUB connected to `endpoint`, every frame's sample kept (up to `capacity`), until
/// no frame has come for `idle` after the first one (or `stop`); then the samples are written to `out`.
pub fn raw_sub_process(
    endpoint: &str,
    config: &LatencyConfig,
    capacity: usize,
    idle: Duration,
    out: &Path,
    stop: &AtomicBool,
) -> Result<RawSubSummary, BenchError> {
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::SUB).map_err(zerr("socket"))?;
    socket.set_linger(0).map_err(zerr("linger"))?;
    socket.set_rcvhwm(config.hwm).map_err(zerr("rcvhwm"))?;
    socket.set_rcvtimeo(10).map_err(zerr("rcvtimeo"))?;
    socket.connect(endpoint).map_err(zerr("connect"))?;
    socket.set_subscribe(b"").map_err(zerr("subscribe"))?;
    let mut log = SampleLog::with_capacity(capacity);
    let mut msg = zmq::Message::new();
    let (mut received, mut malformed) = (0u64, 0u64);
    let started = Instant::now();
    let mut last = None::<Instant>;
    while !stop.load(Ordering::Relaxed) {
        match socket.recv(&mut msg, 0) {
            Ok(()) => {
                let recv_ns = now_ns();
                received += 1;
                last = Some(Instant::now());
                if msg.len() < RAW_MIN_SIZE {
                    malformed += 1;
                    continue;
                }
                let word = |at: usize| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&msg[at..at + 8]);
                    u64::from_le_bytes(b)
                };
                log.push(
                    Sample {
                        index: word(0),
                        sent_ns: word(8),
                        recv_ns,
                    },
                    msg.len(),
                );
            }
            Err(zmq::Error::EAGAIN) => match last {
                Some(t) if t.elapsed() >= idle => break,
                None if started.elapsed() > START_TIMEOUT + config.warmup + config.duration => {
                    return Err(BenchError::NoSamples("raw-sub"));
                }
                _ => {}
            },
            Err(zmq::Error::EINTR) => {}
            Err(e) => {
                return Err(BenchError::Zmq {
                    what: "recv",
                    source: e,
                })
            }
        }
    }
    log.write(out)?;
    Ok(RawSubSummary {
        received,
        malformed,
        overflow: log.overflow,
    })
}

// ------------------------------------------------------------------------------------------------------------
// The parent: spawning, watching and reaping the children

/// A child process that is killed and reaped when dropped, whatever path the run leaves by.
struct ChildGuard {
    name: &'static str,
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl ChildGuard {
    /// Starts `command` with piped output; stderr lines go to the tail kept for errors and, until one passes
    /// `endpoint_of`, are offered to it: the first endpoint found is sent on the returned channel.
    fn spawn(
        name: &'static str,
        mut command: Command,
        endpoint_of: fn(&str) -> Option<String>,
    ) -> Result<(ChildGuard, mpsc::Receiver<String>), BenchError> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| BenchError::Setup(format!("starting {name}: {e}")))?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        if let Some(pipe) = child.stderr.take() {
            let tail = Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Some(ep) = tx.as_ref().and_then(|_| endpoint_of(&line)) {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(ep);
                        }
                    }
                    if let Ok(mut t) = tail.lock() {
                        if t.len() == STDERR_TAIL {
                            t.remove(0);
                        }
                        t.push(line);
                    }
                }
            });
        }
        let stdout = child.stdout.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = pipe.read_to_string(&mut s);
                s
            })
        });
        Ok((
            ChildGuard {
                name,
                child,
                stderr,
                stdout,
            },
            rx,
        ))
    }

    /// Waits for the endpoint line, at most [`START_TIMEOUT`].
    fn endpoint(&mut self, rx: &mpsc::Receiver<String>) -> Result<String, BenchError> {
        rx.recv_timeout(START_TIMEOUT).map_err(|_| {
            // Give a child that died at start a moment to say why.
            std::thread::sleep(Duration::from_millis(50));
            BenchError::Pipeline(format!(
                "{} did not report its endpoint within {START_TIMEOUT:?}{}",
                self.name,
                self.why()
            ))
        })
    }

    /// Waits for the child to exit, at most `limit` (then it is killed) or until `stop`; returns its stdout.
    fn finish(&mut self, limit: Duration, stop: &AtomicBool) -> Result<String, BenchError> {
        let deadline = Instant::now() + limit;
        let status: ExitStatus = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => return Err(BenchError::Setup(format!("waiting for {}: {e}", self.name))),
            }
            if stop.load(Ordering::Relaxed) {
                return Err(BenchError::Pipeline(format!(
                    "interrupted while {} ran",
                    self.name
                )));
            }
            if Instant::now() > deadline {
                return Err(BenchError::Pipeline(format!(
                    "{} did not finish within {limit:?}; killed{}",
                    self.name,
                    self.why()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let stdout = self
            .stdout
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if !status.success() {
            return Err(BenchError::Pipeline(format!(
                "{} exited with {status}{}",
                self.name,
                self.why()
            )));
        }
        Ok(stdout)
    }

    fn why(&self) -> String {
        let tail = self
            .stderr
            .lock()
            .map(|t| t.join(" | "))
            .unwrap_or_default();
        if tail.is_empty() {
            String::new()
        } else {
            format!(": {tail}")
        }
    }
}

/// Asks the kernel to send the child SIGTERM if the bench dies without reaping it (killed outright, so no
/// [`ChildGuard`] ran): a child must never outlive the run. SIGTERM, not SIGKILL, so it still closes its sockets.
#[allow(unsafe_code)] // prctl between fork and exec
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl, which is async-signal-safe
    // and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The last whitespace-separated token of a line that starts with `prefix`, if it is a tcp endpoint.
fn endpoint_after(line: &str, prefix: &str) -> Option<String> {
    let rest = line.strip_prefix(prefix)?;
    let token = rest.split_whitespace().last()?;
    token.starts_with("tcp://").then(|| token.to_string())
}

fn feed_endpoint(line: &str) -> Option<String> {
    // `feed shard 0 publisher 1 symbols 100 endpoint tcp://127.0.0.1:PORT`
    endpoint_after(line, "feed shard 0 ")
}

fn raw_pub_endpoint(line: &str) -> Option<String> {
    endpoint_after(line, RAW_PUB_ENDPOINT_LINE)
}

/// What `tickbox bench raw-pub` prints on stderr before the endpoint it bound.
pub const RAW_PUB_ENDPOINT_LINE: &str = "raw-pub endpoint ";

/// Samples the receivers need room for: the whole schedule, warm-up included, and some slack.
fn capacity_for(config: &LatencyConfig) -> usize {
    // The feed runs its schedule plus the overrun, and may catch up on a late start: room for a second more at the
    // rate and a quarter on top, so the buffer (a few dozen bytes a sample, sized once) never decides the figures.
    let secs = (config.warmup + config.duration + FEED_OVERRUN).as_secs_f64() + 1.0;
    (config.rate as f64 * secs * 1.25) as usize + 4_096
}

fn duration_arg(d: Duration) -> String {
    format!("{}us", d.as_micros().max(1))
}

/// How long a child may run: its schedule, the drain, and slack for start-up and closing.
fn run_limit(config: &LatencyConfig) -> Duration {
    config.warmup + config.duration + 4 * config.drain + EXIT_SLACK
}

/// Refuses what the processes shape cannot run: another transport than tcp, the LVC, an injected stall.
pub(crate) fn check_config(config: &LatencyConfig) -> Result<(), BenchError> {
    if config.transport != crate::Transport::Tcp {
        return Err(BenchError::InvalidArgument(format!(
            "--shape processes runs over tcp only (asked for {})",
            config.transport
        )));
    }
    if config.via_lvc {
        return Err(BenchError::InvalidArgument(
            "--shape processes does not run the LVC proxy; drop --via-lvc".into(),
        ));
    }
    if config.stall.is_some() {
        return Err(BenchError::InvalidArgument(
            "--shape processes cannot inject a consumer stall; drop --stall-every".into(),
        ));
    }
    Ok(())
}

/// Builds the run from the publisher's schedule start and the receiver's samples, as the in-process shape would
/// have recorded them.
fn assemble(
    system: &str,
    config: &LatencyConfig,
    summary: PublisherSummary,
    log: SampleLog,
    size: usize,
) -> Result<LatencyRun, BenchError> {
    if log.overflow > 0 {
        return Err(BenchError::Pipeline(format!(
            "{system}: {} samples did not fit the receiver's buffer; the figures would miss them",
            log.overflow
        )));
    }
    let schedule = Schedule::new(
        summary.schedule_start_ns,
        config.rate,
        config.warmup,
        config.duration,
    )?;
    let mut samples = log.samples;
    // Receivers' samples interleaved in receive order, as the recorder's intervals expect.
    samples.sort_unstable_by_key(|s| s.recv_ns);
    let mut recorder = LatencyRecorder::new(schedule, config.log_interval);
    for s in &samples {
        recorder.record(s.index, s.sent_ns, s.recv_ns);
    }
    let samples = recorder.finish();
    if samples.measured == 0 {
        return Err(BenchError::NoSamples(if system == "tickbox" {
            "tickbox"
        } else {
            "raw-pubsub"
        }));
    }
    let scheduled_total = (0..).take_while(|&k| schedule.in_schedule(k)).count() as u64;
    if summary.sent < scheduled_total {
        tracing::warn!(
            system,
            sent = summary.sent,
            scheduled = scheduled_total,
            "the publisher sent fewer messages than its schedule held (it fell behind at the end); the rest count as lost"
        );
    }
    Ok(LatencyRun {
        system: system.into(),
        config: config.clone(),
        size,
        samples,
        repeat: 1,
    })
}

/// The tickbox side of `--shape processes`: `tickbox feed` (one shard, paced, tcp) → `tickbox subscribe` (one
/// worker with a [`LatencyProbe`]), two processes of the binary at `exe`, at `config.rate`.
pub fn tickbox_processes_latency(
    exe: &Path,
    config: &LatencyConfig,
    stop: &AtomicBool,
) -> Result<LatencyRun, BenchError> {
    check_config(config)?;
    let dir = tempfile::tempdir().map_err(|e| BenchError::io(Path::new("temp dir"), e))?;
    // A feed that fell behind must catch up rather than skip the schedule it owes (the bench charges every
    // message from its intended time); the receive HWM matches the send HWM, as in the raw pair.
    let toml = dir.path().join("bench.toml");
    std::fs::write(
        &toml,
        format!(
            "[feed]\nmax_catch_up = \"0s\"\n\n[subscriber]\nreceive_hwm = {}\n\n[workers]\nidle_spin = \"{}\"\nshard_runs_asleep = {}\n",
            config.hwm,
            tickbox_units::format_duration(config.idle_spin),
            config.shard_runs_asleep
        ),
    )
    .map_err(|e| BenchError::io(&toml, e))?;
    let samples_path = dir.path().join("tickbox.samples");
    let mut feed = Command::new(exe);
    feed.arg("--config").arg(&toml).args([
        "feed",
        "--bind",
        "tcp://127.0.0.1:*",
        "--mode",
        "paced",
        "--rate",
        &config.rate.to_string(),
        "--duration",
        &duration_arg(config.warmup + config.duration + FEED_OVERRUN),
        "--wait-for-subscribers",
        "1",
        "--send-hwm",
        &config.hwm.to_string(),
        "--json",
    ]);
    if config.back_pressure.blocks() {
        feed.args(["--back-pressure", "block"]);
    }
    let (mut feed, feed_ep) = ChildGuard::spawn("tickbox feed", feed, feed_endpoint)?;
    let endpoint = feed.endpoint(&feed_ep)?;
    let mut sub = Command::new(exe);
    sub.arg("--config").arg(&toml).args([
        "subscribe",
        "--connect",
        &endpoint,
        "--workers",
        "1",
        "--handoff",
        config.handoff.as_str(),
        "--max-lateness",
        "0s",
        "--idle-exit",
        &duration_arg(config.drain),
        "--json",
        "--latency-capacity",
        &capacity_for(config).to_string(),
        "--latency-out",
    ]);
    sub.arg(&samples_path);
    let (mut sub, _) = ChildGuard::spawn("tickbox subscribe", sub, |_| None)?;
    let feed_out = feed.finish(run_limit(config), stop)?;
    sub.finish(run_limit(config), stop)?;
    let summary = feed_summary(&feed_out)?;
    let log = SampleLog::read(&samples_path)?;
    let size = log.mean_frame();
    assemble("tickbox", config, summary, log, size)
}

/// Reads the one shard's schedule start and sent count out of `tickbox feed --json`.
fn feed_summary(stdout: &str) -> Result<PublisherSummary, BenchError> {
    let bad = |why: &str| BenchError::Pipeline(format!("tickbox feed --json: {why}"));
    let doc: serde_json::Value = serde_json::from_str(stdout.trim())
        .map_err(|e| bad(&format!("not one JSON object ({e})")))?;
    let shard = doc["shards"]
        .as_array()
        .and_then(|s| s.first())
        .ok_or_else(|| bad("no shard"))?;
    let field = |name: &str| {
        shard[name]
            .as_u64()
            .ok_or_else(|| bad(&format!("no {name}")))
    };
    if field("skipped_ns")? > 0 {
        return Err(bad("the pacer skipped part of its schedule"));
    }
    Ok(PublisherSummary {
        sent: field("sent")?,
        schedule_start_ns: field("schedule_start_ns")?,
    })
}

/// The raw side of `--shape processes`: `tickbox bench raw-pub` → `tickbox bench raw-sub`, two processes of the
/// binary at `exe`, plain libzmq XPUB → SUB over tcp at `config.rate` and `config.size`.
pub fn raw_processes_latency(
    exe: &Path,
    config: &LatencyConfig,
    stop: &AtomicBool,
) -> Result<LatencyRun, BenchError> {
    check_config(config)?;
    let dir = tempfile::tempdir().map_err(|e| BenchError::io(Path::new("temp dir"), e))?;
    let samples_path: PathBuf = dir.path().join("raw.samples");
    let common = |c: &mut Command| {
        c.args([
            "--rate",
            &config.rate.to_string(),
            "--warmup",
            &duration_arg(config.warmup),
            "--duration",
            &duration_arg(config.duration),
            "--size",
            &config.size.to_string(),
            "--hwm",
            &config.hwm.to_string(),
            "--drain",
            &duration_arg(config.drain),
        ]);
        if config.back_pressure.blocks() {
            c.args(["--back-pressure", "block"]);
        }
    };
    let mut publisher = Command::new(exe);
    publisher.args(["bench", "raw-pub"]);
    common(&mut publisher);
    let (mut publisher, pub_ep) = ChildGuard::spawn("raw-pub", publisher, raw_pub_endpoint)?;
    let endpoint = publisher.endpoint(&pub_ep)?;
    let mut sub = Command::new(exe);
    sub.args(["bench", "raw-sub", "--connect", &endpoint]);
    common(&mut sub);
    sub.arg("--capacity")
        .arg(capacity_for(config).to_string())
        .arg("--out")
        .arg(&samples_path);
    let (mut sub, _) = ChildGuard::spawn("raw-sub", sub, |_| None)?;
    let pub_out = publisher.finish(run_limit(config), stop)?;
    sub.finish(run_limit(config), stop)?;
    let summary: PublisherSummary = serde_json::from_str(pub_out.trim())
        .map_err(|e| BenchError::Pipeline(format!("raw-pub summary: {e}")))?;
    let log = SampleLog::read(&samples_path)?;
    assemble(
        "raw-pubsub",
        config,
        summary,
        log,
        config.size.max(RAW_MIN_SIZE),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_files_round_trip_and_refuse_damage() {
        let mut log = SampleLog::with_capacity(2);
        for i in 0..3 {
            log.push(
                Sample {
                    index: i,
                    sent_ns: 10 + i,
                    recv_ns: 20 + i,
                },
                100,
            );
        }
        assert_eq!(
            (log.samples.len(), log.overflow, log.mean_frame()),
            (2, 1, 100)
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        log.write(&path).unwrap();
        let back = SampleLog::read(&path).unwrap();
        assert_eq!(back.samples, log.samples);
        assert_eq!((back.overflow, back.frames), (1, 3));
        let bytes = std::fs::read(&path).unwrap();
        for cut in [0, 7, SAMPLE_HEADER_LEN, bytes.len() - 1] {
            assert!(SampleLog::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut lying = bytes.clone();
        lying[8] = 200;
        assert!(SampleLog::decode(&lying).is_err());
    }

    #[test]
    fn endpoint_lines_are_recognised() {
        assert_eq!(
            feed_endpoint("feed shard 0 publisher 1 symbols 50 endpoint tcp://127.0.0.1:4242")
                .as_deref(),
            Some("tcp://127.0.0.1:4242")
        );
        assert_eq!(
            feed_endpoint("feed shard 1 publisher 2 endpoint tcp://x:1"),
            None
        );
        assert_eq!(
            raw_pub_endpoint("raw-pub endpoint tcp://127.0.0.1:1").as_deref(),
            Some("tcp://127.0.0.1:1")
        );
        assert_eq!(
            raw_pub_endpoint("INFO raw-pub endpoint tcp://127.0.0.1:1"),
            None
        );
    }

    #[test]
    fn samples_are_charged_from_the_rebuilt_schedule() {
        let config = LatencyConfig {
            rate: 1_000,
            warmup: Duration::from_millis(100),
            duration: Duration::from_millis(200),
            ..LatencyConfig::default()
        };
        let start = 1_000_000_000_000;
        let schedule = Schedule::new(start, 1_000, config.warmup, config.duration).unwrap();
        let mut log = SampleLog::with_capacity(1_000);
        for k in 0..300 {
            // Sent 5 µs late, received 20 µs after sending.
            let sent = schedule.intended_ns(k) + 5_000;
            log.push(
                Sample {
                    index: k,
                    sent_ns: sent,
                    recv_ns: sent + 20_000,
                },
                0,
            );
        }
        let summary = PublisherSummary {
            sent: 300,
            schedule_start_ns: start,
        };
        let r = assemble("raw-pubsub", &config, summary, log, 100)
            .unwrap()
            .result();
        assert_eq!((r.scheduled, r.received, r.lost), (200, 200, 0));
        assert!((24_900..=25_100).contains(&r.corrected.p50), "{r:?}");
        assert!((19_900..=20_100).contains(&r.uncorrected.max), "{r:?}");
    }
}
