//! The harness measures something real: a worker that sleeps 1 ms on every 100th message must move the reported
//! tail (p99) by about 1 ms and leave the median alone. Alone in its own test binary so no other test competes for
//! this 2-core machine's CPUs while it measures.

use std::time::Duration;

use tickbox_bench::pipeline::tickbox_latency;
use tickbox_bench::{LatencyConfig, Percentiles, Stall, Transport};

fn run(ctx: &zmq::Context, stall: Option<Stall>) -> Percentiles {
    let config = LatencyConfig {
        rate: 10_000,
        transport: Transport::Inproc,
        warmup: Duration::from_millis(200),
        duration: Duration::from_secs(1),
        log_interval: Duration::from_millis(250),
        drain: Duration::from_millis(500),
        stall,
        ..LatencyConfig::default()
    };
    let result = tickbox_latency(&tickbox_auth::Gate::open(ctx), &config)
        .unwrap()
        .result();
    assert_eq!(result.lost, 0, "{result:?}");
    result.corrected
}

/// Baseline p99 below which the machine counts as quiet enough to read the shift.
const QUIET_BASELINE_P99_NS: u64 = 350_000;

/// At 10k msg/s a 1 ms sleep every 100 messages delays the next ~9 messages by 0.9, 0.8, … 0.1 ms: 1 % of
/// messages wait ≥ 0.9 ms, so the tail from p99 up rises to ~1 ms while p50 stays at the pipeline's normal
/// latency.
///
/// The lower bound holds on any machine: the message after each sleep is recorded at least 0.9 ms after its
/// intended send time, and those are 1 % of the samples, so a p99.9 under 0.9 ms means the harness lost the
/// delay. "Roughly 1 ms, median unmoved" needs a quiet machine, and is read at p99: p99.9 is the first place a
/// busy spell of a few milliseconds shows, in the stalled run as much as in a baseline (seen in CI: a quiet
/// baseline, then a stalled p99.9 3.5 ms above it), while the stalled run's p99 sat at 0.97–1.01 ms in every run
/// on the development machine, busy spells included. Each stalled run is bracketed by a baseline before and
/// after it (one run's after is the next one's before) and counts as quiet only when both are (p99 < 0.35 ms).
/// Up to four stalled runs; pass on the first quiet one that shows the expected shift; fail if a quiet one never
/// shows it, or if the lower bound ever fails.
#[test]
fn injected_worker_delay_moves_the_tail_not_the_median() {
    let ctx = zmq::Context::new();
    let stall = Stall {
        every: 100,
        pause: Duration::from_millis(1),
    };
    let mut quiet_attempts = 0;
    let mut before = run(&ctx, None);
    let mut log = format!("base    {before:?}\n");
    eprint!("{log}");
    for attempt in 1..=4 {
        let stalled = run(&ctx, Some(stall));
        let after = run(&ctx, None);
        let line = format!("attempt {attempt}\n  stalled {stalled:?}\n  base    {after:?}\n");
        eprint!("{line}");
        log.push_str(&line);
        assert!(
            stalled.p999 >= 900_000,
            "the harness lost the injected delay:\n{log}"
        );
        assert!(
            stalled.p99 >= 100_000,
            "the harness lost the injected delay:\n{log}"
        );
        let base = std::mem::replace(&mut before, after);
        let noisiest = base.p99.max(after.p99);
        if noisiest >= QUIET_BASELINE_P99_NS {
            eprintln!(
                "  a baseline's p99 {} µs: machine too busy to read the shift",
                noisiest / 1_000
            );
            continue;
        }
        quiet_attempts += 1;
        let shift = stalled.p99 as i64 - base.p99 as i64;
        let p50_shift = stalled.p50.abs_diff(base.p50);
        if (600_000..=3_000_000).contains(&shift) && p50_shift < 200_000 {
            return;
        }
    }
    assert_eq!(
        quiet_attempts, 0,
        "with quiet baselines around it the 1 ms stall should move p99 by ~1 ms and p50 by < 0.2 ms:\n{log}"
    );
    eprintln!("machine too busy in every attempt; only the lower bound was checked");
}
