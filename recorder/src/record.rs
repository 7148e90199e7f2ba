//! The recorder: a SUB socket on a tap (or any tickbox PUB endpoint) appending every frame, with its capture time,
//! to a journal in batches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tickbox_journal::Writer;
use tickbox_wire::MessageRef;

use crate::error::RecorderError;

/// What to record and how.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Endpoints to connect the SUB socket to.
    pub connect: Vec<String>,
    /// Topic prefixes to subscribe to; empty means everything.
    pub topics: Vec<String>,
    /// Most frames appended per journal batch (one publish, one msync under per-batch durability).
    pub batch_max: usize,
    pub rcvhwm: i32,
    /// Stop after this many recorded messages.
    pub max_messages: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// How often the progress callback runs.
    pub progress_every: Duration,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            connect: Vec::new(),
            topics: Vec::new(),
            batch_max: 1024,
            rcvhwm: 1_000_000,
            max_messages: None,
            duration: None,
            progress_every: Duration::from_secs(1),
        }
    }
}

/// Counters of a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Frames appended to the journal.
    pub messages: u64,
    /// Payload bytes appended.
    pub bytes: u64,
    pub batches: u64,
    /// Frames that are not tickbox wire messages (not recorded; the first few are logged).
    pub invalid_frames: u64,
    /// Multipart messages (the wire format is single-frame; not recorded).
    pub multipart_messages: u64,
    /// Journal sequences of the first and last recorded message.
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    pub elapsed: Duration,
}

impl RecordStats {
    pub fn rate(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.messages as f64 / s
        } else {
            0.0
        }
    }
}

/// Records until `stop` is set, the duration passes or `max_messages` are recorded. Calls `progress` about every
/// `progress_every`. The SUB socket lives and dies inside this call (this thread).
pub fn record(
    ctx: &zmq::Context,
    writer: &mut Writer,
    opts: &RecordOptions,
    stop: &AtomicBool,
    mut progress: impl FnMut(&RecordStats),
) -> Result<RecordStats, RecorderError> {
    if opts.connect.is_empty() {
        return Err(RecorderError::InvalidOption(
            "no endpoint to connect to".into(),
        ));
    }
    let sub = ctx.socket(zmq::SUB)?;
    sub.set_linger(0)?;
    sub.set_rcvhwm(opts.rcvhwm)?;
    if opts.topics.is_empty() {
        sub.set_subscribe(b"")?;
    } else {
        for t in &opts.topics {
            sub.set_subscribe(t.as_bytes())?;
        }
    }
    for ep in &opts.connect {
        sub.connect(ep).map_err(|source| RecorderError::Endpoint {
            endpoint: ep.clone(),
            source,
        })?;
    }
    let batch_max = opts.batch_max.max(1);
    let started = Instant::now();
    let mut stats = RecordStats::default();
    let mut last_progress = started;
    let mut msg = zmq::Message::new();
    let max_payload = writer.max_payload();
    loop {
        stats.elapsed = started.elapsed();
        if stop.load(Ordering::Relaxed)
            || opts.duration.is_some_and(|d| stats.elapsed >= d)
            || opts.max_messages.is_some_and(|m| stats.messages >= m)
        {
            break;
        }
        if last_progress.elapsed() >= opts.progress_every {
            last_progress = Instant::now();
            progress(&stats);
        }
        match sub.poll(zmq::POLLIN, 100) {
            Ok(0) => continue,
            Ok(_) => {}
            // A signal (Ctrl-C) interrupted the wait: loop round to look at the stop flag.
            Err(zmq::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let mut batch = writer.batch();
        let mut in_batch = 0;
        while in_batch < batch_max {
            match sub.recv(&mut msg, zmq::DONTWAIT) {
                Ok(()) => {}
                Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => break,
                Err(e) => return Err(e.into()),
            }
            let capture_ns = tickbox_wire::now_ns();
            if msg.get_more() {
                // Drain and drop the rest of a multipart message: not a tickbox frame.
                while msg.get_more() {
                    match sub.recv(&mut msg, 0) {
                        Ok(()) | Err(zmq::Error::EINTR) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                stats.multipart_messages += 1;
                if stats.multipart_messages <= 5 {
                    tracing::warn!("dropped a multipart message (tickbox frames are single-part)");
                }
                continue;
            }
            if let Err(err) = MessageRef::decode(&msg) {
                stats.invalid_frames += 1;
                if stats.invalid_frames <= 5 {
                    tracing::warn!(len = msg.len(), "not recording an invalid frame: {err}");
                }
                continue;
            }
            if msg.len() > max_payload {
                stats.invalid_frames += 1;
                tracing::warn!(
                    len = msg.len(),
                    max_payload,
                    "frame larger than the journal accepts; dropped"
                );
                continue;
            }
            let seq = batch.append(capture_ns, &msg)?;
            stats.first_seq.get_or_insert(seq);
            stats.last_seq = Some(seq);
            stats.messages += 1;
            stats.bytes += msg.len() as u64;
            in_batch += 1;
            if opts.max_messages.is_some_and(|m| stats.messages >= m) {
                break;
            }
        }
        batch.commit()?;
        if in_batch > 0 {
            stats.batches += 1;
        }
    }
    stats.elapsed = started.elapsed();
    Ok(stats)
}
