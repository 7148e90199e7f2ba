//! The real tickbox pipeline under test: a feed publisher shard ([`tickbox_feed::Publisher`] on the socket
//! [`tickbox_feed::open_publisher_socket`] makes) → optionally the LVC proxy → the Black Box subscriber
//! ([`tickbox_subscriber::Subscriber`]: SUB shard, decode, snail/gap checks, per-worker queues) → a worker
//! ([`tickbox_workers::Worker`]) that records latency or counts.
//!
//! The bench drives the publisher itself instead of running the synthetic `Feed`, so it owns the open-loop
//! schedule exactly (message `k` carries sequence `k + 1`) and can choose the frame size; the send path —
//! stamp with `now_ns`, encode into a reused buffer, send on the shard's PUB — is the feed's own.
//!
//! Frames are trades on a topic padded to reach the requested size (`T.B…`); the smallest possible frame is
//! [`min_frame_size`] bytes.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tickbox_feed::{open_publisher_socket, FeedConfig, Publisher, PublisherShardConfig};
use tickbox_subscriber::{HumanDuration, Subscriber, SubscriberConfig, SubscriberShardConfig};
use tickbox_wire::{Flags, Kind, MessageRef, Payload, Side, Trade, HEADER_LEN};
use tickbox_workers::{Delivery, Worker, WorkerPoolConfig};
use tickbox_zmqx::BackPressure;

use crate::latency::{wait_connected, LatencyConfig, LatencyRun};
use crate::measure::{LatencyRecorder, LatencySamples};
use crate::pace::{drive_schedule, RunState, Stall};
use crate::raw::{run_phases, throughput_result, PhaseCounter, ThroughputConfig, Turnout};
use crate::report::ThroughputResult;
use crate::BenchError;

const TOPIC_PREFIX: &str = "T.B";

/// The smallest tickbox frame the bench can send (a trade on a 3-byte topic).
pub const fn min_frame_size() -> usize {
    TOPIC_PREFIX.len() + 1 + HEADER_LEN + Payload::encoded_len(Kind::Trade)
}

/// The frame size a requested size turns into (requests below the minimum are raised to it).
pub fn frame_size(requested: usize) -> usize {
    requested.max(min_frame_size())
}

/// A trade topic whose frame is exactly `frame_size(requested)` bytes.
pub fn topic_for_size(requested: usize) -> String {
    let pad = frame_size(requested) - min_frame_size();
    let mut topic = String::with_capacity(TOPIC_PREFIX.len() + pad);
    topic.push_str(TOPIC_PREFIX);
    topic.extend(std::iter::repeat_n('X', pad));
    topic
}

fn bench_trade(k: u64) -> Payload {
    Payload::Trade(Trade {
        instrument_id: 1,
        price: 100 * tickbox_wire::PRICE_SCALE + (k % 100) as i64,
        size: 100,
        aggressor: Side::Buy,
        trade_id: k,
        venue_time_ns: 0,
    })
}

fn feed_config(hwm: i32, back_pressure: BackPressure) -> FeedConfig {
    FeedConfig {
        send_hwm: hwm,
        back_pressure,
        ..FeedConfig::default()
    }
}

fn subscriber_config(
    endpoints: Vec<String>,
    hwm: i32,
    handoff: tickbox_subscriber::Handoff,
) -> SubscriberConfig {
    SubscriberConfig {
        shards: endpoints
            .into_iter()
            .map(|e| SubscriberShardConfig {
                connect: vec![e],
                ..SubscriberShardConfig::default()
            })
            .collect(),
        // The bench measures lateness; it must not die of it.
        max_lateness: HumanDuration(Duration::ZERO),
        receive_hwm: hwm,
        handoff_hwm: hwm,
        poll_interval: HumanDuration(Duration::from_millis(20)),
        drain_timeout: HumanDuration(Duration::from_secs(2)),
        // The bench sends one topic: by-topic dispatch would hand everything to one worker.
        dispatch: tickbox_subscriber::Dispatch::RoundRobin,
        handoff,
        ..SubscriberConfig::default()
    }
}

/// The hand-off the latency bench's subscriber (one shard, one worker) runs when asked for `handoff`: `auto`
/// resolved as `tickbox subscribe --workers 1` resolves it, with the reason.
pub fn latency_handoff(handoff: tickbox_subscriber::Handoff) -> tickbox_subscriber::HandoffChoice {
    tickbox_subscriber::choose_handoff(
        &subscriber_config(vec![String::new()], 1, handoff),
        &workers_config(1, 1),
    )
}

fn workers_config(count: usize, hwm: i32) -> WorkerPoolConfig {
    WorkerPoolConfig {
        count: Some(count),
        hwm,
        poll_interval: HumanDuration(Duration::from_millis(20)),
        ..WorkerPoolConfig::default()
    }
}

fn sub_err(e: tickbox_subscriber::SubscriberError) -> BenchError {
    BenchError::Pipeline(e.to_string())
}

// ------------------------------------------------------------------------------------------------------------
// Latency

/// Records latency at the worker: receive time is when the worker took the message off its PULL socket.
pub struct LatencyWorker {
    state: Arc<RunState>,
    log_interval: Duration,
    stall: Option<Stall>,
    recorder: Option<LatencyRecorder>,
    count: u64,
}

impl LatencyWorker {
    /// A worker of the run sharing `state`; its recorder is built once the publisher has set the schedule.
    pub fn new(state: Arc<RunState>, log_interval: Duration, stall: Option<Stall>) -> Self {
        LatencyWorker {
            state,
            log_interval,
            stall,
            recorder: None,
            count: 0,
        }
    }

    /// What this worker recorded; `None` if no message reached it after the schedule was set.
    pub fn finish(self) -> Option<LatencySamples> {
        self.recorder.map(LatencyRecorder::finish)
    }
}

impl Worker for LatencyWorker {
    #[inline]
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) {
        let header = msg.header();
        if header.kind == Kind::Heartbeat {
            // The probe made it through every hop: the path is up.
            self.state.connected.store(true, Ordering::Release);
            return;
        }
        if header.flags.contains(Flags::CACHED) || header.sequence == 0 {
            return;
        }
        let recorder = match self.recorder.as_mut() {
            Some(r) => r,
            None => match self.state.schedule.get() {
                Some(s) => self
                    .recorder
                    .insert(LatencyRecorder::new(*s, self.log_interval)),
                None => return,
            },
        };
        let index = header.sequence - 1;
        recorder.record(index, header.send_time_ns, delivery.dequeued_ns);
        self.state.progress.store(index + 1, Ordering::Release);
        self.count += 1;
        if let Some(stall) = &self.stall {
            stall.maybe_stall(self.count);
        }
    }
}

/// One-way latency through feed shard → LVC → Black Box shard → worker at the configured open-loop rate.
pub fn tickbox_latency(
    gate: &tickbox_auth::Gate,
    config: &LatencyConfig,
) -> Result<LatencyRun, BenchError> {
    tickbox_latency_with(gate, config, &|_, _| {})
}

/// How `tickbox tune sweep` adjusts the pipeline's subscriber and worker pool for one of its points.
pub type Tune<'a> = &'a dyn Fn(&mut SubscriberConfig, &mut WorkerPoolConfig);

/// [`tickbox_latency`] with the subscriber and worker configs adjusted by `tune`.
pub fn tickbox_latency_with(
    gate: &tickbox_auth::Gate,
    config: &LatencyConfig,
    tune: Tune<'_>,
) -> Result<LatencyRun, BenchError> {
    let size = frame_size(config.size);
    let state = RunState::new();
    let (ep_tx, ep_rx) = mpsc::channel::<Result<String, BenchError>>();
    let publisher = {
        let gate = gate.clone();
        let state = Arc::clone(&state);
        let config = config.clone();
        thread::Builder::new()
            .name("bench-feed".into())
            .spawn(move || {
                let result = publish_schedule(&gate, &config, &state, ep_tx);
                if result.is_err() {
                    state.abort.store(true, Ordering::Relaxed);
                }
                result
            })
            .map_err(BenchError::Thread)?
    };
    let measured = measure_pipeline(gate, config, &state, ep_rx, tune);
    if measured.is_err() {
        state.abort.store(true, Ordering::Relaxed);
    }
    let published = publisher
        .join()
        .map_err(|_| BenchError::ThreadPanicked("bench-feed"))?;
    let samples = measured?;
    published?;
    Ok(LatencyRun {
        system: "tickbox".into(),
        config: config.clone(),
        size,
        samples,
        repeat: 1,
    })
}

fn measure_pipeline(
    gate: &tickbox_auth::Gate,
    config: &LatencyConfig,
    state: &Arc<RunState>,
    ep_rx: mpsc::Receiver<Result<String, BenchError>>,
    tune: Tune<'_>,
) -> Result<LatencySamples, BenchError> {
    let feed_endpoint = ep_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| BenchError::Setup("feed shard did not bind".into()))??;
    let lvc = if config.via_lvc {
        let lvc_config = tickbox_lvc::LvcConfig {
            upstream: vec![feed_endpoint.clone()],
            bind: config.transport.bind_endpoint("lvc"),
            upstream_hwm: config.hwm,
            downstream_hwm: config.hwm,
            stats_interval: tickbox_units::HumanDuration(std::time::Duration::ZERO),
            ..Default::default()
        };
        Some(
            tickbox_lvc::spawn(gate, lvc_config)
                .map_err(|e| BenchError::Pipeline(format!("lvc: {e}")))?,
        )
    } else {
        None
    };
    let sub_endpoint = match &lvc {
        Some(handle) => handle.endpoints().downstream.clone(),
        None => feed_endpoint,
    };
    let (mut sub_config, mut pool) = (
        subscriber_config(vec![sub_endpoint], config.hwm, config.handoff),
        WorkerPoolConfig {
            idle_spin: tickbox_units::HumanDuration(config.idle_spin),
            shard_runs_asleep: config.shard_runs_asleep,
            ..workers_config(1, config.hwm)
        },
    );
    sub_config.security = config.security.clone();
    tune(&mut sub_config, &mut pool);
    let subscriber = Subscriber::start(gate.context(), &sub_config, &pool, |_| {
        LatencyWorker::new(Arc::clone(state), config.log_interval, config.stall)
    })
    .map_err(sub_err)?;
    let scraping = crate::scrape::scrape_subscriber(&subscriber, &sub_config.shards);
    let connected = wait_connected(state, Duration::from_secs(10));
    if connected.is_ok() {
        // Wait for the publisher to finish its schedule, then for the tail to arrive.
        while state.publisher_done_ns.load(Ordering::Acquire) == 0
            && !state.abort.load(Ordering::Relaxed)
        {
            thread::sleep(Duration::from_millis(2));
        }
        state.wait_drained(config.drain);
    }
    drop(scraping);
    let report = subscriber.shutdown().map_err(sub_err)?;
    if let Some(lvc) = lvc {
        if let Err(e) = lvc.join() {
            tracing::warn!("lvc: {e}");
        }
    }
    connected?;
    let parts: Vec<LatencySamples> = report
        .workers
        .into_iter()
        .filter_map(|w| w.worker.finish())
        .collect();
    LatencySamples::merge(parts).ok_or(BenchError::NoSamples("tickbox"))
}

fn publish_schedule(
    gate: &tickbox_auth::Gate,
    config: &LatencyConfig,
    state: &RunState,
    ep_tx: mpsc::Sender<Result<String, BenchError>>,
) -> Result<(), BenchError> {
    let mut feed = feed_config(config.hwm, config.back_pressure);
    feed.security = config.security.clone();
    let shard = PublisherShardConfig {
        endpoint: config.transport.bind_endpoint("feed"),
        ..PublisherShardConfig::default()
    };
    let (socket, endpoint) = match open_publisher_socket(gate, 0, &shard, &feed) {
        Ok(opened) => opened,
        Err(e) => {
            let err = BenchError::Pipeline(format!("feed shard: {e}"));
            let _ = ep_tx.send(Err(BenchError::Pipeline(format!("feed shard: {e}"))));
            return Err(err);
        }
    };
    let _ = ep_tx.send(Ok(endpoint));
    let mut publisher = Publisher::new(socket, 0, feed.publisher_id_base, 1_000_000);
    let pub_err = |e: tickbox_feed::FeedError| BenchError::Pipeline(format!("publish: {e}"));

    // Heartbeats probe the path; they carry sequence 0 and are not part of the schedule.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !state.connected.load(Ordering::Acquire)
        && !state.abort.load(Ordering::Relaxed)
        && std::time::Instant::now() < deadline
    {
        publisher.heartbeat().map_err(pub_err)?;
        thread::sleep(Duration::from_millis(1));
    }
    wait_connected(state, Duration::ZERO)?;

    let topic = topic_for_size(config.size);
    drive_schedule(state, &config.pace(), |k| {
        let payload = bench_trade(k);
        // `None`: a no-drop pipe stayed full for the send timeout; the sequence was not used, so retry.
        while publisher
            .publish(&topic, &payload)
            .map_err(pub_err)?
            .is_none()
        {
            if state.abort.load(Ordering::Relaxed) {
                return Ok(false);
            }
        }
        Ok(true)
    })
}

// ------------------------------------------------------------------------------------------------------------
// Throughput

/// Counts messages taken during the measured phase.
pub struct CountingWorker {
    phase: Arc<AtomicU8>,
    counter: PhaseCounter,
}

impl Worker for CountingWorker {
    #[inline]
    fn on_message(&mut self, msg: &MessageRef<'_>, _delivery: &Delivery) {
        if msg.kind() != Kind::Heartbeat {
            self.counter.tick(1, &self.phase);
        }
    }
}

/// Flat-out throughput: `shards` feed publishers (no-drop, so back-pressure instead of loss) → a Black Box with
/// `shards` SUB shards → `shards` workers counting.
pub fn tickbox_throughput(
    gate: &tickbox_auth::Gate,
    config: &ThroughputConfig,
) -> Result<ThroughputResult, BenchError> {
    tickbox_throughput_with(gate, config, &|_, _| {})
}

/// The system name of [`tickbox_throughput_batched`]'s results.
pub const BATCHED: &str = "tickbox-batched";

/// [`tickbox_throughput`] with batch frames, as `feed --batch auto` sends them to a Black Box (which opts in):
/// each shard packs up to the feed's `batch_max_records` messages (`batch_max_bytes`) into one `#B` frame and
/// sends what it has after every `max_batch` messages, the feed's step at `--rate max`. Counted per record.
pub fn tickbox_throughput_batched(
    gate: &tickbox_auth::Gate,
    config: &ThroughputConfig,
) -> Result<ThroughputResult, BenchError> {
    let mut result = throughput_run(gate, config, &|_, _| {}, true)?;
    result.system = BATCHED.into();
    Ok(result)
}

/// [`tickbox_throughput`] with the subscriber and worker configs adjusted by `tune` (its worker count wins over
/// one per shard).
pub fn tickbox_throughput_with(
    gate: &tickbox_auth::Gate,
    config: &ThroughputConfig,
    tune: Tune<'_>,
) -> Result<ThroughputResult, BenchError> {
    throughput_run(gate, config, tune, false)
}

fn throughput_run(
    gate: &tickbox_auth::Gate,
    config: &ThroughputConfig,
    tune: Tune<'_>,
    batched: bool,
) -> Result<ThroughputResult, BenchError> {
    let shards = config.shards.max(1);
    let phase = Arc::new(AtomicU8::new(crate::raw::PHASE_WARMUP));
    let turnout = Arc::new(Turnout::default());
    let mut publishers = Vec::new();
    let mut endpoints = Vec::new();
    for shard in 0..shards {
        let (ep_tx, ep_rx) = mpsc::channel::<Result<String, BenchError>>();
        let gate = gate.clone();
        let thread_phase = Arc::clone(&phase);
        let config = config.clone();
        publishers.push(
            thread::Builder::new()
                .name(format!("bench-feed-{shard}"))
                .spawn(move || {
                    flat_out_publisher(&gate, shard, &config, &thread_phase, ep_tx, batched)
                })
                .map_err(BenchError::Thread)?,
        );
        match ep_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(e)) => endpoints.push(e),
            Ok(Err(e)) => {
                phase.store(crate::raw::PHASE_STOP, Ordering::Relaxed);
                return Err(e);
            }
            Err(_) => {
                phase.store(crate::raw::PHASE_STOP, Ordering::Relaxed);
                return Err(BenchError::Setup("feed shard did not bind".into()));
            }
        }
    }
    let (mut sub_config, mut pool) = (
        subscriber_config(
            endpoints,
            config.hwm,
            tickbox_subscriber::Handoff::default(),
        ),
        workers_config(shards, config.hwm),
    );
    sub_config.security = config.security.clone();
    tune(&mut sub_config, &mut pool);
    let subscriber = Subscriber::start(gate.context(), &sub_config, &pool, |_| CountingWorker {
        phase: Arc::clone(&phase),
        counter: PhaseCounter::new(Arc::clone(&turnout)),
    });
    let subscriber = match subscriber {
        Ok(s) => s,
        Err(e) => {
            phase.store(crate::raw::PHASE_STOP, Ordering::Relaxed);
            return Err(sub_err(e));
        }
    };
    let scraping = crate::scrape::scrape_subscriber(&subscriber, &sub_config.shards);
    let elapsed = run_phases(&phase, &turnout, config.warmup, config.duration);
    drop(scraping);
    let joined = crate::raw::join_all(publishers, "bench-feed");
    let report = subscriber.shutdown().map_err(sub_err)?;
    joined?;
    let elapsed = elapsed?;
    let messages: u64 = report
        .workers
        .iter()
        .map(|w| w.worker.counter.measured())
        .sum();
    if report.gaps() > 0 {
        tracing::warn!(
            gaps = report.gaps(),
            missing = report.missing(),
            "tickbox throughput run saw sequence gaps"
        );
    }
    let mut result = throughput_result("tickbox", config, messages, elapsed, BackPressure::Block);
    result.size = frame_size(config.size);
    result.mb_per_s = result.msgs_per_s * result.size as f64 / 1e6;
    Ok(result)
}

fn flat_out_publisher(
    gate: &tickbox_auth::Gate,
    shard: usize,
    config: &ThroughputConfig,
    phase: &AtomicU8,
    ep_tx: mpsc::Sender<Result<String, BenchError>>,
    batched: bool,
) -> Result<(), BenchError> {
    let feed = FeedConfig {
        security: config.security.clone(),
        ..feed_config(config.hwm, BackPressure::Block)
    };
    let shard_config = PublisherShardConfig {
        endpoint: config.transport.bind_endpoint(&format!("feed{shard}")),
        ..PublisherShardConfig::default()
    };
    let (socket, endpoint) = match open_publisher_socket(gate, shard, &shard_config, &feed) {
        Ok(opened) => opened,
        Err(e) => {
            let _ = ep_tx.send(Err(BenchError::Pipeline(format!(
                "feed shard {shard}: {e}"
            ))));
            return Ok(());
        }
    };
    let _ = ep_tx.send(Ok(endpoint));
    // A no-drop XPUB with no subscriber yet has nowhere to send: wait for the subscription to arrive.
    socket.set_rcvtimeo(100).map_err(|e| BenchError::Zmq {
        what: "rcvtimeo",
        source: e,
    })?;
    if !crate::transport::await_subscriber(&socket, || {
        phase.load(Ordering::Relaxed) == crate::raw::PHASE_STOP
    })? {
        return Ok(());
    }
    let publisher_id = feed.publisher_id_base + shard as u32;
    let mut publisher = Publisher::new(socket, shard, publisher_id, 1_000_000);
    let pub_err = |e: tickbox_feed::FeedError| BenchError::Pipeline(format!("publish: {e}"));
    // The Black Box subscribes to "" and to the batch topic, so `feed --batch auto` batches for it.
    let step = if batched {
        publisher = publisher.with_batch(feed.batch_max_bytes, feed.batch_max_records);
        publisher.set_batching(true).map_err(pub_err)?;
        feed.max_batch.max(1) as u64
    } else {
        u64::MAX
    };
    let topic = topic_for_size(config.size);
    let mut k = 0u64;
    let mut send_time = 0;
    while phase.load(Ordering::Relaxed) != crate::raw::PHASE_STOP {
        // Stamped as the feed's shard stamps at full speed: one clock read per CLOCK_EVERY messages.
        if k.is_multiple_of(tickbox_feed::CLOCK_EVERY) {
            send_time = tickbox_wire::now_ns();
        }
        publisher
            .publish_at(&topic, &bench_trade(k), send_time)
            .map_err(pub_err)?;
        k += 1;
        // The feed sends what it has batched at the end of every pacer step; at `--rate max` a step is
        // `max_batch` messages.
        if k.is_multiple_of(step) {
            publisher.flush().map_err(pub_err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Header};

    #[test]
    fn topics_pad_frames_to_the_requested_size() {
        for requested in [1, 64, 100, 256, 1024] {
            let topic = topic_for_size(requested);
            let header = Header::live(Kind::Trade, 1, 1, 1);
            let frame = encode_to_vec(&topic, &header, &bench_trade(1)).unwrap();
            assert_eq!(frame.len(), frame_size(requested));
            assert_eq!(frame.len(), requested.max(min_frame_size()));
        }
    }
}
