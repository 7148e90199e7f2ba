//! End-to-end runs of the real pipeline (feed shard → [LVC] → Black Box → worker) over real sockets.

use std::time::Duration;

use tickbox_bench::pipeline::{frame_size, tickbox_latency, tickbox_throughput};
use tickbox_bench::{LatencyConfig, ThroughputConfig, Transport};

fn quick(transport: Transport, rate: u64) -> LatencyConfig {
    LatencyConfig {
        rate,
        transport,
        warmup: Duration::from_millis(200),
        duration: Duration::from_millis(500),
        log_interval: Duration::from_millis(100),
        drain: Duration::from_millis(500),
        ..LatencyConfig::default()
    }
}

#[test]
fn every_scheduled_message_reaches_the_worker() {
    let ctx = zmq::Context::new();
    for (transport, via_lvc) in [
        (Transport::Tcp, false),
        (Transport::Ipc, false),
        (Transport::Inproc, false),
        (Transport::Tcp, true),
    ] {
        let config = LatencyConfig {
            via_lvc,
            ..quick(transport, 5_000)
        };
        let run = tickbox_latency(&tickbox_auth::Gate::open(&ctx), &config).unwrap();
        let r = run.result();
        assert_eq!(r.system, "tickbox");
        assert_eq!(r.via_lvc, via_lvc);
        assert_eq!(r.size, frame_size(100));
        assert_eq!(r.scheduled, 2_500, "{transport} lvc={via_lvc}");
        assert_eq!(r.received, r.scheduled, "{transport} lvc={via_lvc}: {r:?}");
        assert!(r.corrected.p50 > 0 && r.corrected.p50 <= r.corrected.p999);
        assert!((r.achieved_rate - 5_000.0).abs() < 100.0, "{r:?}");
    }
}

#[test]
fn throughput_counts_through_the_pipeline() {
    let ctx = zmq::Context::new();
    let config = ThroughputConfig {
        transport: Transport::Inproc,
        size: 100,
        shards: 2,
        warmup: Duration::from_millis(100),
        duration: Duration::from_millis(300),
        hwm: 10_000,
        security: Default::default(),
    };
    let r = tickbox_throughput(&tickbox_auth::Gate::open(&ctx), &config).unwrap();
    assert_eq!(r.system, "tickbox");
    assert_eq!(r.shards, 2);
    assert!(r.messages > 1_000, "{r:?}");
    assert!(r.back_pressure.blocks());
}
