//! Sweep grids with plan points on a fixture host, and the winning configuration read back by the crates' own
//! config types.

use crate::common;

use tickbox_tuning::sweep::{winner_toml, PointResult, Sample};
use tickbox_tuning::{DispatchMode, Grid, Pinning, PlanBasis};

fn grid(pinning: Vec<Pinning>) -> Grid {
    Grid {
        shards: vec![2],
        workers: vec![2],
        hwms: vec![5000],
        batches: vec![64],
        dispatch: vec![DispatchMode::ByTopic],
        io_threads: vec![2],
        pinning,
        cpus: vec![31, 30],
        plan: Some(PlanBasis {
            topology: common::read("two_socket_smt"),
            nic: "eth2".into(),
        }),
    }
}

#[test]
fn plan_points_pin_shards_workers_and_io_threads_where_the_planner_does() {
    let g = grid(vec![Pinning::No, Pinning::Plan]);
    let t = common::read("two_socket_smt");
    let points = g.points();
    assert_eq!(points.len(), 2);
    let plan = &points[1];
    assert_eq!(plan.pinning, Pinning::Plan);
    assert_eq!(plan.shard_cores.len(), 2);
    assert_eq!(plan.worker_cores.len(), 2);
    // eth2 is on node 1: every planned thread is there, the plan's I/O thread is thread 0 and the shards use it.
    let eth2 = t.nic("eth2").unwrap().numa_node;
    for &cpu in plan.shard_cores.iter().chain(&plan.worker_cores) {
        assert_eq!(t.node_of(cpu), eth2, "{plan:?}");
    }
    assert_eq!(t.node_of(plan.io_cpus[0]), eth2, "{plan:?}");
    assert_eq!(plan.io_cpus.len(), 2, "one CPU per I/O thread");
    assert_eq!(plan.shard_io_thread, Some(0));
    assert!(g.plan_problems().is_empty());
    // The unpinned point pins nothing.
    assert!(points[0].io_cpus.is_empty() && points[0].shard_cores.is_empty());
}

#[test]
fn a_plan_winner_loads_into_the_crates_config_types() {
    #[derive(serde::Deserialize)]
    struct Winner {
        context: tickbox_zmqx::context::ContextConfig,
        subscriber: tickbox_subscriber::SubscriberConfig,
        workers: tickbox_workers::WorkerPoolConfig,
    }
    let point = grid(vec![Pinning::Plan]).points().remove(0);
    let best = PointResult::of(
        point.clone(),
        vec![Sample {
            msgs_per_s: 1e6,
            p99_us: Some(20.0),
        }],
    );
    let text = winner_toml(&best, None, 1);
    let w: Winner = toml::from_str(&text).unwrap();
    assert_eq!(w.context.io_threads, 2);
    assert_eq!(w.context.io_thread_cpus, point.io_cpus);
    assert_eq!(w.subscriber.dispatch, tickbox_workers::Dispatch::ByTopic);
    assert_eq!(
        (w.subscriber.receive_hwm, w.subscriber.handoff_hwm),
        (5000, 5000)
    );
    let cores: Vec<Option<usize>> = w.subscriber.shards.iter().map(|s| s.core).collect();
    assert_eq!(
        cores,
        point
            .shard_cores
            .iter()
            .copied()
            .map(Some)
            .collect::<Vec<_>>()
    );
    assert!(w.subscriber.shards.iter().all(|s| s.io_thread == Some(0)));
    assert_eq!(
        (w.workers.count, w.workers.batch, w.workers.hwm),
        (Some(2), 64, 5000)
    );
    assert_eq!(w.workers.cores, point.worker_cores);
}
