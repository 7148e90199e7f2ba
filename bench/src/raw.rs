//! Raw libzmq baselines: the same rate, size and transport as the tickbox run, with nothing of tickbox in the
//! path (no wire codec, no sharding, no hand-off), so the table can say how much tickbox costs.
//!
//! Raw latency frames are `index u64 LE | send_time_ns u64 LE | padding` up to the configured size.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tickbox_wire::now_ns;
use tickbox_zmqx::BackPressure;

use crate::latency::{wait_connected, LatencyConfig, LatencyRun};
use crate::measure::{LatencyRecorder, LatencySamples};
use crate::pace::{drive_schedule, RunState};
use crate::report::ThroughputResult;
use crate::transport::Transport;
use crate::BenchError;

/// Index value marking a connection probe (not part of the schedule).
const PROBE: u64 = u64::MAX;
/// Smallest raw latency frame: index and timestamp.
pub const RAW_MIN_SIZE: usize = 16;

fn zerr(what: &'static str) -> impl Fn(zmq::Error) -> BenchError {
    move |e| BenchError::Zmq { what, source: e }
}

/// Raw PUB→SUB latency at the configured rate and size. PUB binds, SUB connects, as a feed would.
pub fn raw_pubsub_latency(
    gate: &tickbox_auth::Gate,
    config: &LatencyConfig,
) -> Result<LatencyRun, BenchError> {
    let size = config.size.max(RAW_MIN_SIZE);
    let state = RunState::new();
    let (ep_tx, ep_rx) = mpsc::channel::<String>();

    let sub = {
        let gate = gate.clone();
        let state = Arc::clone(&state);
        let config = config.clone();
        thread::Builder::new()
            .name("raw-sub".into())
            .spawn(move || -> Result<LatencySamples, BenchError> {
                let result = raw_sub_loop(&gate, &config, &state, ep_rx);
                if result.is_err() {
                    state.abort.store(true, Ordering::Relaxed);
                }
                result
            })
            .map_err(BenchError::Thread)?
    };
    let publish = raw_pub_loop(gate, config, size, &state, ep_tx);
    if publish.is_err() {
        state.abort.store(true, Ordering::Relaxed);
    }
    let samples = sub
        .join()
        .map_err(|_| BenchError::ThreadPanicked("raw-sub"))??;
    publish?;
    Ok(LatencyRun {
        system: "raw-pubsub".into(),
        config: config.clone(),
        size,
        samples,
        repeat: 1,
    })
}

fn raw_pub_loop(
    gate: &tickbox_auth::Gate,
    config: &LatencyConfig,
    size: usize,
    state: &RunState,
    ep_tx: mpsc::Sender<String>,
) -> Result<(), BenchError> {
    let mut socket = gate
        .socket(
            if config.back_pressure.blocks() {
                zmq::XPUB
            } else {
                zmq::PUB
            },
            "bench.raw",
        )
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    socket.set_linger(0).map_err(zerr("linger"))?;
    socket.set_sndhwm(config.hwm).map_err(zerr("sndhwm"))?;
    if config.back_pressure.blocks() {
        tickbox_zmqx::set_xpub_nodrop(&mut socket, true)
            .map_err(|e| BenchError::Setup(e.to_string()))?;
    }
    let endpoint = tickbox_zmqx::bind_resolved(&socket, &config.transport.bind_endpoint("raw-lat"))
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let _ = ep_tx.send(endpoint);

    let mut frame = vec![0u8; size];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !state.connected.load(Ordering::Acquire) {
        if Instant::now() > deadline || state.abort.load(Ordering::Relaxed) {
            break;
        }
        frame[..8].copy_from_slice(&PROBE.to_le_bytes());
        let _ = socket.send(&frame[..], zmq::DONTWAIT);
        thread::sleep(Duration::from_millis(1));
    }
    wait_connected(state, Duration::ZERO)?;

    drive_schedule(state, &config.pace(), |k| {
        frame[..8].copy_from_slice(&k.to_le_bytes());
        frame[8..16].copy_from_slice(&now_ns().to_le_bytes());
        socket.send(&frame[..], 0).map_err(zerr("send"))?;
        Ok(true)
    })
}

fn raw_sub_loop(
    gate: &tickbox_auth::Gate,
    config: &LatencyConfig,
    state: &RunState,
    ep_rx: mpsc::Receiver<String>,
) -> Result<LatencySamples, BenchError> {
    let endpoint = ep_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| BenchError::Setup("publisher did not bind".into()))?;
    let socket = gate.context().socket(zmq::SUB).map_err(zerr("socket"))?;
    socket.set_linger(0).map_err(zerr("linger"))?;
    socket.set_rcvhwm(config.hwm).map_err(zerr("rcvhwm"))?;
    socket.set_rcvtimeo(50).map_err(zerr("rcvtimeo"))?;
    config
        .security
        .client(&socket, "bench.raw")
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    socket.connect(&endpoint).map_err(zerr("connect"))?;
    socket.set_subscribe(b"").map_err(zerr("subscribe"))?;

    let mut msg = zmq::Message::new();
    let mut recorder: Option<LatencyRecorder> = None;
    let mut count = 0u64;
    loop {
        match socket.recv(&mut msg, 0) {
            Ok(()) => {
                let recv_ns = now_ns();
                if msg.len() < RAW_MIN_SIZE {
                    continue;
                }
                let index = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
                if index == PROBE {
                    state.connected.store(true, Ordering::Release);
                    continue;
                }
                let sent = u64::from_le_bytes(msg[8..16].try_into().expect("8 bytes"));
                let rec = match recorder.as_mut() {
                    Some(r) => r,
                    None => match state.schedule.get() {
                        Some(s) => recorder.insert(LatencyRecorder::new(*s, config.log_interval)),
                        None => continue,
                    },
                };
                rec.record(index, sent, recv_ns);
                state.progress.store(index + 1, Ordering::Release);
                count += 1;
                if let Some(stall) = &config.stall {
                    stall.maybe_stall(count);
                }
                let sent_total = state.sent.load(Ordering::Acquire);
                if sent_total != 0 && index + 1 >= sent_total {
                    break;
                }
            }
            Err(zmq::Error::EAGAIN) => {}
            Err(e) => {
                return Err(BenchError::Zmq {
                    what: "recv",
                    source: e,
                })
            }
        }
        if state.receiver_should_stop(config.drain) {
            break;
        }
    }
    match recorder {
        Some(r) => Ok(r.finish()),
        None => Err(BenchError::NoSamples("raw-pubsub")),
    }
}

// ------------------------------------------------------------------------------------------------------------
// Throughput

/// Which raw pattern a throughput baseline uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawPattern {
    /// PUSH → PULL: back-pressured.
    PushPull,
    /// XPUB with `ZMQ_XPUB_NODROP` → SUB: back-pressured, so no silent drops inflate the rate.
    PubSub,
    /// XPUB without NODROP → SUB: drops at the HWM like a plain PUB; the rate counts what arrived.
    LossyPubSub,
}

impl RawPattern {
    /// The `system` name in reports, e.g. `raw-pushpull`.
    pub fn system(self) -> &'static str {
        match self {
            RawPattern::PushPull => "raw-pushpull",
            RawPattern::PubSub => "raw-pubsub",
            RawPattern::LossyPubSub => "raw-pubsub-lossy",
        }
    }

    /// Whether the sender waits at the HWM (`Block`) or drops.
    pub fn back_pressure(self) -> BackPressure {
        if self == RawPattern::LossyPubSub {
            BackPressure::Drop
        } else {
            BackPressure::Block
        }
    }

    fn is_pubsub(self) -> bool {
        matches!(self, RawPattern::PubSub | RawPattern::LossyPubSub)
    }
}

/// Throughput run parameters shared by raw baselines and the tickbox run.
#[derive(Debug, Clone)]
pub struct ThroughputConfig {
    /// How senders and receivers are connected.
    pub transport: Transport,
    /// Message size in bytes.
    pub size: usize,
    /// Independent sender → receiver pairs (raw) or feed shards (tickbox), at least 1.
    pub shards: usize,
    /// Sent flat out before counting starts.
    pub warmup: Duration,
    /// The counted window.
    pub duration: Duration,
    /// Send and receive high-water marks (messages).
    pub hwm: i32,
    /// Applied to every socket of both sides (`bench throughput --security curve`); the caller starts the ZAP
    /// handler in the context.
    pub security: tickbox_auth::Security,
}

/// How many messages of `size` bytes the feed packs into one batch frame (`feed --batch auto`, the feed's
/// default `batch_max_records` and `batch_max_bytes`): what a raw baseline with the same batching packs into one
/// ZeroMQ message.
pub fn records_per_batch(size: usize) -> usize {
    let feed = tickbox_feed::FeedConfig::default();
    let mut n = usize::from(feed.batch_max_records).max(1);
    while n > 1 && tickbox_wire::batch_frame_len(n * size, n) > feed.batch_max_bytes {
        n -= 1;
    }
    n
}

/// Phases a throughput run's threads follow. The coordinator moves them along, except to `PHASE_FLOWING`, which the
/// first receiver to take a message sets during the warm-up: the measured window opens only once messages flow,
/// so a subscriber that joins late on a loaded machine delays the window instead of leaving it empty (a tuning
/// sweep once ranked a point on a throughput of 0 for that).
pub(crate) const PHASE_WARMUP: u8 = 0;
pub(crate) const PHASE_FLOWING: u8 = 1;
pub(crate) const PHASE_MEASURE: u8 = 2;
pub(crate) const PHASE_STOP: u8 = 3;

/// How long a run waits past its warm-up for the first message before it gives up on the path.
const FLOW_TIMEOUT: Duration = Duration::from_secs(10);

/// Which receivers have taken a message, and which of them have seen the measured window: the window closes only
/// once every receiver that takes messages has seen it. A receiver the machine starves through the whole window
/// (a loaded 2-core box running a debug build) would otherwise count nothing in it, and a tuning sweep ranked a
/// point on a throughput of 0 for that.
///
/// Receivers that report no count of their own elsewhere (the raw ones) add what they counted to `measured`.
#[derive(Debug, Default)]
pub(crate) struct Turnout {
    flowing: AtomicUsize,
    measuring: AtomicUsize,
    measured: AtomicU64,
}

/// Counts messages a receiver got during the measured phase. The hot loop only bumps a local counter and reads
/// the phase (a relaxed load); the shared [`Turnout`] is touched at this receiver's first message and when it
/// first sees the window, nowhere else.
pub(crate) struct PhaseCounter {
    phase: u8,
    count: u64,
    at_start: u64,
    flowed: bool,
    in_window: bool,
    turnout: Arc<Turnout>,
}

impl PhaseCounter {
    pub(crate) fn new(turnout: Arc<Turnout>) -> Self {
        PhaseCounter {
            phase: PHASE_WARMUP,
            count: 0,
            at_start: 0,
            flowed: false,
            in_window: false,
            turnout,
        }
    }

    /// Counts `n` messages unless the run is over (then returns false and stops counting).
    #[inline]
    pub(crate) fn tick(&mut self, n: u64, phase: &AtomicU8) -> bool {
        if !self.observe(phase) {
            return false;
        }
        if !self.flowed {
            self.flowed = true;
            self.turnout.flowing.fetch_add(1, Ordering::AcqRel);
        }
        if self.phase == PHASE_WARMUP {
            // This receiver's first message; once one has come, the coordinator may open the measured window.
            let _ = phase.compare_exchange(
                PHASE_WARMUP,
                PHASE_FLOWING,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            self.phase = PHASE_FLOWING;
        }
        self.count += n;
        true
    }

    /// Notes a phase change; returns false when the run is over.
    #[inline]
    pub(crate) fn observe(&mut self, phase: &AtomicU8) -> bool {
        let now = phase.load(Ordering::Relaxed);
        if now != self.phase {
            if self.phase < PHASE_MEASURE && now == PHASE_MEASURE {
                self.at_start = self.count;
                self.in_window = true;
                self.turnout.measuring.fetch_add(1, Ordering::AcqRel);
            }
            self.phase = now;
        }
        self.phase != PHASE_STOP
    }

    /// Adds what it counted in the window to the run's total.
    pub(crate) fn report(&self) {
        self.turnout
            .measured
            .fetch_add(self.measured(), Ordering::AcqRel);
    }

    /// What it counted in the measured window: nothing when it never saw the window.
    pub(crate) fn measured(&self) -> u64 {
        if self.in_window {
            self.count - self.at_start
        } else {
            0
        }
    }
}

/// Drives the phases: warm-up, measure, stop. Returns the measured wall time, which runs past `duration` while a
/// receiver that has taken messages has not yet seen the window.
pub(crate) fn run_phases(
    phase: &AtomicU8,
    turnout: &Turnout,
    warmup: Duration,
    duration: Duration,
) -> Result<Duration, BenchError> {
    run_phases_within(phase, turnout, warmup, duration, FLOW_TIMEOUT)
}

fn run_phases_within(
    phase: &AtomicU8,
    turnout: &Turnout,
    warmup: Duration,
    duration: Duration,
    flow_timeout: Duration,
) -> Result<Duration, BenchError> {
    thread::sleep(warmup);
    let deadline = Instant::now() + flow_timeout;
    while phase.load(Ordering::Relaxed) == PHASE_WARMUP {
        if Instant::now() >= deadline {
            phase.store(PHASE_STOP, Ordering::Relaxed);
            return Err(BenchError::NotConnected(warmup + flow_timeout));
        }
        thread::sleep(Duration::from_millis(1));
    }
    let start = Instant::now();
    phase.store(PHASE_MEASURE, Ordering::Relaxed);
    thread::sleep(duration);
    let deadline = Instant::now() + flow_timeout;
    while turnout.measuring.load(Ordering::Acquire) < turnout.flowing.load(Ordering::Acquire)
        && Instant::now() < deadline
    {
        thread::sleep(Duration::from_millis(1));
    }
    phase.store(PHASE_STOP, Ordering::Relaxed);
    Ok(start.elapsed())
}

/// Flat-out raw throughput: `shards` independent sender→receiver pairs, each a thread per end, one message per
/// ZeroMQ message.
pub fn raw_throughput(
    gate: &tickbox_auth::Gate,
    pattern: RawPattern,
    config: &ThroughputConfig,
) -> Result<ThroughputResult, BenchError> {
    raw_throughput_packed(gate, pattern, config, 1)
}

/// [`raw_throughput`] with the same batching as tickbox's batched run: [`records_per_batch`] messages of
/// `config.size` bytes concatenated into each ZeroMQ message, each counted as that many messages received. The
/// system is the pattern's name with `-batched`.
pub fn raw_throughput_batched(
    gate: &tickbox_auth::Gate,
    pattern: RawPattern,
    config: &ThroughputConfig,
) -> Result<ThroughputResult, BenchError> {
    let mut result = raw_throughput_packed(gate, pattern, config, records_per_batch(config.size))?;
    result.system = format!("{}-batched", pattern.system());
    Ok(result)
}

fn raw_throughput_packed(
    gate: &tickbox_auth::Gate,
    pattern: RawPattern,
    config: &ThroughputConfig,
    per_message: usize,
) -> Result<ThroughputResult, BenchError> {
    let phase = Arc::new(AtomicU8::new(PHASE_WARMUP));
    let turnout = Arc::new(Turnout::default());
    let mut handles = Vec::new();
    for shard in 0..config.shards.max(1) {
        let (ep_tx, ep_rx) = mpsc::channel::<String>();
        let send_gate = gate.clone();
        let send_phase = Arc::clone(&phase);
        let cfg = config.clone();
        handles.push(
            thread::Builder::new()
                .name(format!("raw-send-{shard}"))
                .spawn(move || {
                    raw_sender(&send_gate, pattern, &cfg, per_message, &send_phase, ep_tx)
                })
                .map_err(BenchError::Thread)?,
        );
        let recv_gate = gate.clone();
        let recv_phase = Arc::clone(&phase);
        let recv_turnout = Arc::clone(&turnout);
        let cfg = config.clone();
        handles.push(
            thread::Builder::new()
                .name(format!("raw-recv-{shard}"))
                .spawn(move || {
                    raw_receiver(
                        &recv_gate,
                        pattern,
                        &cfg,
                        per_message as u64,
                        &recv_phase,
                        recv_turnout,
                        ep_rx,
                    )
                })
                .map_err(BenchError::Thread)?,
        );
    }
    let elapsed = run_phases(&phase, &turnout, config.warmup, config.duration);
    join_all(handles, "raw throughput")?;
    let elapsed = elapsed?;
    let messages = turnout.measured.load(Ordering::Acquire);
    Ok(throughput_result(
        pattern.system(),
        config,
        messages,
        elapsed,
        pattern.back_pressure(),
    ))
}

pub(crate) fn throughput_result(
    system: &str,
    config: &ThroughputConfig,
    messages: u64,
    elapsed: Duration,
    back_pressure: BackPressure,
) -> ThroughputResult {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let rate = messages as f64 / secs;
    ThroughputResult {
        system: system.to_string(),
        transport: config.transport.to_string(),
        size: config.size,
        shards: config.shards.max(1),
        duration_s: secs,
        messages,
        msgs_per_s: rate,
        mb_per_s: rate * config.size as f64 / 1e6,
        send_hwm: config.hwm,
        receive_hwm: config.hwm,
        back_pressure,
        repeat: 1,
    }
}

fn raw_sender(
    gate: &tickbox_auth::Gate,
    pattern: RawPattern,
    config: &ThroughputConfig,
    per_message: usize,
    phase: &AtomicU8,
    ep_tx: mpsc::Sender<String>,
) -> Result<(), BenchError> {
    let mut socket = gate
        .socket(
            match pattern {
                RawPattern::PushPull => zmq::PUSH,
                RawPattern::PubSub | RawPattern::LossyPubSub => zmq::XPUB,
            },
            "bench.raw",
        )
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    socket.set_linger(0).map_err(zerr("linger"))?;
    socket.set_sndhwm(config.hwm).map_err(zerr("sndhwm"))?;
    socket.set_sndtimeo(100).map_err(zerr("sndtimeo"))?;
    if pattern.is_pubsub() {
        tickbox_zmqx::set_xpub_nodrop(&mut socket, pattern.back_pressure().blocks())
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        socket.set_rcvtimeo(100).map_err(zerr("rcvtimeo"))?;
    }
    let endpoint = tickbox_zmqx::bind_resolved(&socket, &config.transport.bind_endpoint("raw-thr"))
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let _ = ep_tx.send(endpoint);
    // Wait for the subscription so nothing sent before the subscriber joins is dropped.
    if pattern.is_pubsub()
        && !crate::transport::await_subscriber(&socket, || {
            phase.load(Ordering::Relaxed) == PHASE_STOP
        })?
    {
        return Ok(());
    }
    let frame = vec![0x5Au8; config.size * per_message.max(1)];
    while phase.load(Ordering::Relaxed) != PHASE_STOP {
        match socket.send(&frame[..], 0) {
            Ok(()) | Err(zmq::Error::EAGAIN) => {}
            Err(e) => {
                return Err(BenchError::Zmq {
                    what: "send",
                    source: e,
                })
            }
        }
    }
    Ok(())
}

fn raw_receiver(
    gate: &tickbox_auth::Gate,
    pattern: RawPattern,
    config: &ThroughputConfig,
    per_message: u64,
    phase: &AtomicU8,
    turnout: Arc<Turnout>,
    ep_rx: mpsc::Receiver<String>,
) -> Result<(), BenchError> {
    let endpoint = ep_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| BenchError::Setup("sender did not bind".into()))?;
    let socket = gate
        .context()
        .socket(match pattern {
            RawPattern::PushPull => zmq::PULL,
            RawPattern::PubSub | RawPattern::LossyPubSub => zmq::SUB,
        })
        .map_err(zerr("socket"))?;
    socket.set_linger(0).map_err(zerr("linger"))?;
    socket.set_rcvhwm(config.hwm).map_err(zerr("rcvhwm"))?;
    socket.set_rcvtimeo(100).map_err(zerr("rcvtimeo"))?;
    config
        .security
        .client(&socket, "bench.raw")
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    socket.connect(&endpoint).map_err(zerr("connect"))?;
    if pattern.is_pubsub() {
        socket.set_subscribe(b"").map_err(zerr("subscribe"))?;
    }
    let mut msg = zmq::Message::new();
    let mut counter = PhaseCounter::new(turnout);
    loop {
        match socket.recv(&mut msg, 0) {
            Ok(()) => {
                if !counter.tick(per_message, phase) {
                    break;
                }
            }
            Err(zmq::Error::EAGAIN) => {
                if !counter.observe(phase) {
                    break;
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
    counter.report();
    Ok(())
}

/// Joins every sender thread (so none outlives the run) and reports the first failure, a panic included.
pub(crate) fn join_all(
    handles: Vec<thread::JoinHandle<Result<(), BenchError>>>,
    what: &'static str,
) -> Result<(), BenchError> {
    let mut first_err = None;
    for handle in handles {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(BenchError::ThreadPanicked(what));
            }
        }
    }
    first_err.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::Stall;

    /// The coordinator's side of a run: a 10 ms warm-up, then a window of `window`, with the usual 10 s bounds.
    fn coordinate(phase: &AtomicU8, turnout: &Turnout, window: Duration) -> Duration {
        run_phases_within(
            phase,
            turnout,
            Duration::from_millis(10),
            window,
            Duration::from_secs(10),
        )
        .unwrap()
    }

    #[test]
    fn a_receiver_that_joins_after_the_warm_up_still_gets_a_measured_window() {
        let phase = Arc::new(AtomicU8::new(PHASE_WARMUP));
        let turnout = Arc::new(Turnout::default());
        let (p, t) = (Arc::clone(&phase), Arc::clone(&turnout));
        let receiver = thread::spawn(move || {
            // Its first message comes after the warm-up and the window it would have had, as a subscriber joining late
            // on a loaded machine sees it.
            thread::sleep(Duration::from_millis(150));
            let mut counter = PhaseCounter::new(t);
            while counter.tick(1, &p) {
                thread::sleep(Duration::from_micros(200));
            }
            counter.measured()
        });
        let window = Duration::from_millis(100);
        let elapsed = coordinate(&phase, &turnout, window);
        let measured = receiver.join().unwrap();
        assert!(measured > 0, "the window opened before anything flowed");
        assert!(elapsed >= window);
    }

    /// A receiver that took messages in the warm-up and then got no time at all until after the window would have
    /// ended (as a starved shard thread on a loaded machine): the window stays open until it has seen it, so it
    /// counts what it takes in the window instead of 0, and none of its warm-up.
    #[test]
    fn a_receiver_starved_through_the_window_still_counts_in_it() {
        let phase = Arc::new(AtomicU8::new(PHASE_WARMUP));
        let turnout = Arc::new(Turnout::default());
        let (p, t) = (Arc::clone(&phase), Arc::clone(&turnout));
        let receiver = thread::spawn(move || {
            let mut counter = PhaseCounter::new(t);
            assert!(counter.tick(1_000, &p), "the warm-up's messages");
            while p.load(Ordering::Relaxed) == PHASE_FLOWING {
                thread::sleep(Duration::from_millis(1));
            }
            thread::sleep(Duration::from_millis(150));
            let mut ticks = 0;
            while counter.tick(1, &p) {
                ticks += 1;
                thread::sleep(Duration::from_micros(200));
            }
            (counter.measured(), ticks)
        });
        let elapsed = coordinate(&phase, &turnout, Duration::from_millis(50));
        let (measured, ticks) = receiver.join().unwrap();
        assert!(measured > 0, "the window closed before the receiver saw it");
        assert_eq!(measured, ticks, "only what it took in the window");
        assert!(elapsed >= Duration::from_millis(150), "{elapsed:?}");
    }

    #[test]
    fn a_receiver_that_never_sees_the_window_counts_nothing_not_its_warm_up() {
        let phase = AtomicU8::new(PHASE_WARMUP);
        let mut counter = PhaseCounter::new(Arc::default());
        assert!(counter.tick(500, &phase));
        phase.store(PHASE_STOP, Ordering::Relaxed);
        assert!(!counter.tick(1, &phase));
        assert_eq!(counter.measured(), 0);
    }

    #[test]
    fn a_path_nothing_crosses_is_an_error_not_a_rate_of_zero() {
        let phase = AtomicU8::new(PHASE_WARMUP);
        let err = run_phases_within(
            &phase,
            &Turnout::default(),
            Duration::from_millis(5),
            Duration::from_millis(5),
            Duration::from_millis(50),
        )
        .unwrap_err();
        assert!(matches!(err, BenchError::NotConnected(_)), "{err}");
        assert_eq!(
            phase.load(Ordering::Relaxed),
            PHASE_STOP,
            "the threads are told to stop"
        );
    }

    fn quick(transport: Transport, rate: u64) -> LatencyConfig {
        LatencyConfig {
            rate,
            transport,
            warmup: Duration::from_millis(100),
            duration: Duration::from_millis(300),
            log_interval: Duration::from_millis(100),
            drain: Duration::from_millis(300),
            ..LatencyConfig::default()
        }
    }

    #[test]
    fn raw_latency_measures_every_scheduled_message() {
        let gate = tickbox_auth::Gate::open(&zmq::Context::new());
        for transport in Transport::ALL {
            let run = raw_pubsub_latency(&gate, &quick(transport, 5_000)).unwrap();
            let r = run.result();
            assert_eq!(r.scheduled, 1_500, "{transport}");
            assert_eq!(r.received, r.scheduled, "{transport}: {r:?}");
            assert_eq!(r.lost, 0);
            assert!(r.corrected.p50 > 0 && r.corrected.p50 < 50_000_000, "{r:?}");
            assert!(r.corrected.max >= r.corrected.p50);
            assert!((r.achieved_rate - 5_000.0).abs() < 100.0, "{r:?}");
            assert!(run.samples.intervals.len() >= 2);
        }
    }

    /// Real sockets: a consumer stall back-pressures a no-drop publisher, which then stamps late. The
    /// uncorrected histogram hides most of the stall; the corrected one shows it.
    #[test]
    fn correction_raises_the_tail_when_the_consumer_stalls() {
        let gate = tickbox_auth::Gate::open(&zmq::Context::new());
        let config = LatencyConfig {
            hwm: 10,
            back_pressure: BackPressure::Block,
            stall: Some(Stall {
                every: 1_000,
                pause: Duration::from_millis(20),
            }),
            duration: Duration::from_millis(600),
            ..quick(Transport::Inproc, 10_000)
        };
        let r = raw_pubsub_latency(&gate, &config).unwrap().result();
        assert_eq!(r.lost, 0, "no-drop publisher lost messages: {r:?}");
        // ~20 % of messages were due while the consumer slept 20 ms per 100 ms.
        assert!(r.corrected.p90 > 2_000_000, "corrected {:?}", r.corrected);
        assert!(
            r.uncorrected.p90 < r.corrected.p90 / 4,
            "uncorrected {:?} corrected {:?}",
            r.uncorrected,
            r.corrected
        );
    }

    #[test]
    fn raw_throughput_counts_messages() {
        let gate = tickbox_auth::Gate::open(&zmq::Context::new());
        for pattern in [RawPattern::PushPull, RawPattern::PubSub] {
            let config = ThroughputConfig {
                transport: Transport::Inproc,
                size: 64,
                shards: 2,
                warmup: Duration::from_millis(50),
                duration: Duration::from_millis(200),
                hwm: 1_000,
                security: Default::default(),
            };
            let r = raw_throughput(&gate, pattern, &config).unwrap();
            assert!(r.messages > 1_000, "{r:?}");
            assert!((r.mb_per_s - r.msgs_per_s * 64.0 / 1e6).abs() < 1e-6);
            assert_eq!(r.shards, 2);
        }
    }
}
