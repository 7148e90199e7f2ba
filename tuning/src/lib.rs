//! tickbox-tuning: see the host, check it, plan where the hot threads go, and rank sweep results.
//!
//! * [`topology`] reads CPUs, cores, SMT siblings, NUMA nodes, caches, isolation, governors, transparent huge
//!   pages, NICs (driver, speed, node, local CPUs, queues and their IRQs) and network sysctls from sysfs and
//!   procfs **under a root path**, so tests run on fixture trees and the real machine is read with root `/`.
//! * [`check()`] is a pure function from a topology and the planned placement to findings, each with a severity and
//!   the exact command that fixes it.
//! * [`plan()`] is a pure function from a topology and a request (NICs, shards per NIC, workers per NIC) to a
//!   placement of every hot thread with the reason for each choice and the compromises a small host forced, and
//!   renders it as a tickbox TOML configuration.
//! * [`sweep`] is the sans-IO part of `tickbox tune sweep`: the grid, repeats, median and spread, ranking, and the
//!   winning configuration; the caller supplies the measurement (the bench pipeline).

#![deny(missing_docs)]

pub mod basis;
pub mod check;
pub mod cpulist;
pub mod plan;
pub mod sweep;
mod sweep_flags;
pub mod topology;

pub use check::{
    check, check_admission, check_exposure, check_metrics_exposure, hot_threads, render_findings,
    Admission, CheckInput, Finding, HotThread, Severity,
};
pub use cpulist::{format_cpulist, parse_cpulist, CpuListError};
pub use plan::{plan, Placement, Plan, PlanError, PlanRequest, Role};
pub use sweep::{
    median_min_max, DispatchMode, Grid, Objective, Pinning, PlanBasis, PointResult, Sample, Stat,
    SweepPoint,
};
pub use topology::{Topology, TopologyError};
