//! The sans-IO part of `tickbox tune sweep`: the grid, the repeat schedule, median and spread, ranking, and the
//! winning configuration. The caller measures each point (the bench pipeline); this module never runs anything.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use serde::Serialize;

use crate::plan::{plan, PlanRequest, Role};
use crate::topology::Topology;

/// How the subscriber's shards hand messages to workers (`[subscriber] dispatch`; same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DispatchMode {
    /// One worker per topic, in order.
    ByTopic,
    /// Messages spread over the workers regardless of topic.
    RoundRobin,
}

impl DispatchMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchMode::ByTopic => "by_topic",
            DispatchMode::RoundRobin => "round_robin",
        }
    }

    /// Parses the config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "by_topic" => Some(DispatchMode::ByTopic),
            "round_robin" => Some(DispatchMode::RoundRobin),
            _ => None,
        }
    }
}

/// What a point pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pinning {
    /// Nothing pinned: the kernel places every thread.
    No,
    /// Only libzmq's I/O threads, on the grid's CPUs (highest first).
    Io,
    /// The pinning plan (`tickbox tune plan`) for the grid's NIC: shards, workers and the NIC's I/O thread each
    /// where the planner puts them, every shard's SUB on that I/O thread.
    Plan,
}

impl Pinning {
    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Pinning::No => "no",
            Pinning::Io => "io",
            Pinning::Plan => "plan",
        }
    }

    /// Parses the CLI spelling (`yes` is the older name of `io`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "no" => Some(Pinning::No),
            "io" | "yes" => Some(Pinning::Io),
            "plan" => Some(Pinning::Plan),
            _ => None,
        }
    }
}

/// What a sweep ranks by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// Throughput and tail latency weighed alike, against the defaults: a point's score is its throughput ratio
    /// divided by its p99 ratio, so ×2 throughput at ×2 p99 scores as the defaults do, and ×1.1 throughput at ×57
    /// p99 far below them. Points whose latency was not measured rank after those whose was.
    #[default]
    Balanced,
    /// Median throughput; within 2 % of each other, the lower median p99 lateness wins.
    Throughput,
    /// Median p99 lateness; within 2 % of each other, the higher median throughput wins.
    Latency,
}

impl Objective {
    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Objective::Balanced => "balanced",
            Objective::Throughput => "throughput",
            Objective::Latency => "latency",
        }
    }

    /// Parses the CLI spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "balanced" => Some(Objective::Balanced),
            "throughput" => Some(Objective::Throughput),
            "latency" => Some(Objective::Latency),
            _ => None,
        }
    }
}

/// One configuration of the bench pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SweepPoint {
    /// Publisher shards and SUB shards of the bench pipeline (one SUB shard per publisher shard).
    pub shards: usize,
    /// Worker threads behind the shards.
    pub workers: usize,
    /// Every HWM of the pipeline (feed `send_hwm`, subscriber `receive_hwm` and `handoff_hwm`, workers `hwm`).
    pub hwm: i32,
    /// Messages a worker handles before its flush is forced (`[workers] batch`).
    pub batch: usize,
    /// How shards hand messages to workers.
    pub dispatch: DispatchMode,
    /// libzmq I/O threads.
    pub io_threads: usize,
    /// What is pinned.
    pub pinning: Pinning,
    /// CPU of each I/O thread; empty leaves them unpinned.
    pub io_cpus: Vec<usize>,
    /// CPU of each SUB shard thread (plan points); empty leaves them unpinned.
    pub shard_cores: Vec<usize>,
    /// CPU of each worker thread (plan points); empty leaves them unpinned.
    pub worker_cores: Vec<usize>,
    /// I/O thread each SUB shard uses (`ZMQ_AFFINITY`, plan points); `None` lets libzmq choose.
    pub shard_io_thread: Option<usize>,
}

fn cpus_label(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl SweepPoint {
    /// What this point changes beyond performance, said plainly; empty when it keeps every guarantee of the
    /// defaults. Round-robin dispatch gives up the per-symbol order a worker sees.
    pub fn semantic_changes(&self) -> Vec<&'static str> {
        let mut changes = Vec::new();
        if self.dispatch == DispatchMode::RoundRobin {
            changes.push(
                "round_robin dispatch: a worker no longer sees each symbol's updates in order",
            );
        }
        changes
    }

    /// A short label: `shards=1 workers=2 hwm=1000 batch=256 rr io=2 pin=io:1,0`.
    pub fn label(&self) -> String {
        let pin = match self.pinning {
            Pinning::No => "no".to_owned(),
            Pinning::Io => format!("io:{}", cpus_label(&self.io_cpus)),
            Pinning::Plan => format!(
                "plan:io{}/s{}/w{}",
                cpus_label(&self.io_cpus),
                cpus_label(&self.shard_cores),
                cpus_label(&self.worker_cores)
            ),
        };
        format!(
            "shards={} workers={} hwm={} batch={} {} io={} pin={pin}",
            self.shards,
            self.workers,
            self.hwm,
            self.batch,
            match self.dispatch {
                DispatchMode::ByTopic => "by_topic",
                DispatchMode::RoundRobin => "rr",
            },
            self.io_threads,
        )
    }
}

/// What `Pinning::Plan` points are planned on: the host and the NIC the shards read through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanBasis {
    /// The host.
    pub topology: Topology,
    /// The NIC (one shard group).
    pub nic: String,
}

/// The grid: every combination of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    /// Shard counts.
    pub shards: Vec<usize>,
    /// Worker counts.
    pub workers: Vec<usize>,
    /// HWMs.
    pub hwms: Vec<i32>,
    /// Worker batch sizes.
    pub batches: Vec<usize>,
    /// Dispatch modes.
    pub dispatch: Vec<DispatchMode>,
    /// I/O thread counts.
    pub io_threads: Vec<usize>,
    /// Pinnings to try.
    pub pinning: Vec<Pinning>,
    /// CPUs pinned I/O threads go to, in order (thread `n` gets `cpus[n % len]`); a plan's extra I/O threads
    /// (beyond its one per NIC) too.
    pub cpus: Vec<usize>,
    /// Where plan points are planned; without it `Pinning::Plan` yields no point.
    pub plan: Option<PlanBasis>,
}

impl Grid {
    /// Every point, in a stable order; points that pinning cannot tell apart are listed once, and plan points
    /// the planner refuses are left out (see [`Grid::plan_problems`]).
    pub fn points(&self) -> Vec<SweepPoint> {
        let mut points = Vec::new();
        for &shards in &self.shards {
            for &workers in &self.workers {
                for &hwm in &self.hwms {
                    for &batch in &self.batches {
                        for &dispatch in &self.dispatch {
                            for &io_threads in &self.io_threads {
                                for &pinning in &self.pinning {
                                    let base = SweepPoint {
                                        shards,
                                        workers,
                                        hwm,
                                        batch,
                                        dispatch,
                                        io_threads,
                                        pinning,
                                        io_cpus: Vec::new(),
                                        shard_cores: Vec::new(),
                                        worker_cores: Vec::new(),
                                        shard_io_thread: None,
                                    };
                                    let Ok(Some(p)) = self.pin(base) else {
                                        continue;
                                    };
                                    if !points.contains(&p) {
                                        points.push(p);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        points
    }

    /// How many points [`Grid::points`] would list at most (before duplicates are dropped): what a budget checks
    /// before anything is planned or run.
    pub fn size(&self) -> usize {
        [
            self.shards.len(),
            self.workers.len(),
            self.hwms.len(),
            self.batches.len(),
            self.dispatch.len(),
            self.io_threads.len(),
            self.pinning.len(),
        ]
        .iter()
        .product()
    }

    /// Why plan points were left out, one line per distinct reason (no basis, or the planner's error).
    pub fn plan_problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.pinning.contains(&Pinning::Plan) {
            return out;
        }
        for &shards in &self.shards {
            for &workers in &self.workers {
                let base = SweepPoint {
                    shards,
                    workers,
                    hwm: 0,
                    batch: 1,
                    dispatch: DispatchMode::RoundRobin,
                    io_threads: 1,
                    pinning: Pinning::Plan,
                    io_cpus: Vec::new(),
                    shard_cores: Vec::new(),
                    worker_cores: Vec::new(),
                    shard_io_thread: None,
                };
                let problem = match self.pin(base) {
                    Ok(Some(_)) => continue,
                    Ok(None) => "no NIC to plan for: plan points skipped".to_owned(),
                    Err(e) => format!("plan for {shards} shard(s), {workers} worker(s): {e}"),
                };
                if !out.contains(&problem) {
                    out.push(problem);
                }
            }
        }
        out
    }

    /// Fills in the CPUs of `p` per its pinning; `Ok(None)` when a plan point has no basis.
    fn pin(&self, mut p: SweepPoint) -> Result<Option<SweepPoint>, crate::PlanError> {
        let spare = |n: usize| -> Option<usize> {
            (!self.cpus.is_empty()).then(|| self.cpus[n % self.cpus.len()])
        };
        match p.pinning {
            Pinning::No => {}
            Pinning::Io => {
                p.io_cpus = (0..p.io_threads).filter_map(spare).collect();
                if p.io_cpus.is_empty() {
                    p.pinning = Pinning::No;
                }
            }
            Pinning::Plan => {
                let Some(basis) = &self.plan else {
                    return Ok(None);
                };
                let planned = plan(
                    &basis.topology,
                    &PlanRequest {
                        nics: vec![basis.nic.clone()],
                        shards_per_nic: p.shards,
                        workers_per_nic: p.workers,
                        connect: Vec::new(),
                    },
                )?;
                let cpus =
                    |role| -> Vec<usize> { planned.of(role).iter().map(|x| x.cpu).collect() };
                // The plan's own I/O thread is thread 0; any further ones go where `Io` points put them.
                let io = cpus(Role::IoThread);
                p.io_cpus = (0..p.io_threads)
                    .map(|n| io.get(n).copied().or_else(|| spare(n)).unwrap_or(io[0]))
                    .collect();
                p.shard_cores = cpus(Role::Shard);
                p.worker_cores = cpus(Role::Worker);
                p.shard_io_thread = planned.io_thread_of(&basis.nic);
            }
        }
        Ok(Some(p))
    }
}

/// One measurement of one point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// Flat-out throughput, messages per second.
    pub msgs_per_s: f64,
    /// 99th percentile one-way lateness at a fixed offered rate, µs (corrected for coordinated omission).
    pub p99_us: Option<f64>,
}

/// Median with the range around it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    /// Median of the repeats.
    pub median: f64,
    /// Smallest repeat.
    pub min: f64,
    /// Largest repeat.
    pub max: f64,
}

/// Median, min and max of `values`, sorting them in place (`None` when empty). The median of an even count is
/// the mean of the middle two. Callers decide what to do with NaN or infinite values first.
pub fn median_min_max(values: &mut [f64]) -> Option<(f64, f64, f64)> {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    let (&min, &max) = (values.first()?, values.last()?);
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    Some((median, min, max))
}

impl Stat {
    /// Median, min and max of `values` (`None` when empty).
    pub fn of(values: &[f64]) -> Option<Stat> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        let (median, min, max) = median_min_max(&mut v)?;
        Some(Stat { median, min, max })
    }

    /// `(max - min) / median`: how far apart the repeats were, as a fraction of the median.
    pub fn spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / self.median
        }
    }
}

/// A point with its repeats summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointResult {
    /// The configuration.
    pub point: SweepPoint,
    /// Every repeat, in the order run.
    pub samples: Vec<Sample>,
    /// Throughput over the repeats (`None` if every repeat failed).
    pub throughput: Option<Stat>,
    /// p99 lateness over the repeats that measured it.
    pub p99_us: Option<Stat>,
}

impl PointResult {
    /// Summarises a point's samples.
    pub fn of(point: SweepPoint, samples: Vec<Sample>) -> Self {
        let tput: Vec<f64> = samples.iter().map(|s| s.msgs_per_s).collect();
        let p99: Vec<f64> = samples.iter().filter_map(|s| s.p99_us).collect();
        Self {
            throughput: Stat::of(&tput),
            p99_us: Stat::of(&p99),
            point,
            samples,
        }
    }
}

/// Runs `repeats` rounds over `points`, each round visiting every point once, so slow drift of the machine
/// (thermal, neighbours) spreads over all points instead of favouring the ones measured first. Returns the
/// points ranked by [`rank`].
pub fn run<E>(
    points: &[SweepPoint],
    repeats: usize,
    objective: Objective,
    defaults: &SweepPoint,
    mut measure: impl FnMut(&SweepPoint, usize) -> Result<Sample, E>,
) -> Result<Vec<PointResult>, E> {
    let mut samples: Vec<Vec<Sample>> = vec![Vec::with_capacity(repeats); points.len()];
    for round in 0..repeats {
        for (i, point) in points.iter().enumerate() {
            samples[i].push(measure(point, round)?);
        }
    }
    let mut results: Vec<PointResult> = points
        .iter()
        .cloned()
        .zip(samples)
        .map(|(p, s)| PointResult::of(p, s))
        .collect();
    rank(&mut results, objective, defaults);
    Ok(results)
}

/// A point's score under `objective`, higher is better: for [`Objective::Balanced`] its throughput ratio over its
/// p99 ratio against `base` (the defaults' medians); `None` when it lacks a figure the objective needs.
pub fn score(r: &PointResult, objective: Objective, base: Option<&PointResult>) -> Option<f64> {
    let t = r.throughput.map(|s| s.median)?;
    match objective {
        Objective::Throughput => Some(t),
        Objective::Latency => r.p99_us.map(|p| -p.median),
        Objective::Balanced => {
            let p = r.p99_us.map(|s| s.median)?;
            let base = base?;
            let t0 = base.throughput.map(|s| s.median).filter(|&t0| t0 > 0.0)?;
            let p0 = base.p99_us.map(|s| s.median).filter(|&p0| p0 > 0.0)?;
            (p > 0.0).then(|| (t / t0) / (p / p0))
        }
    }
}

/// Best first under `objective` (see [`Objective`]), `defaults` being the point the balanced score is measured
/// against. A balanced sweep whose defaults lack a figure falls back to throughput, as does a sweep without
/// latency runs.
pub fn rank(results: &mut [PointResult], objective: Objective, defaults: &SweepPoint) {
    let base = results.iter().find(|r| &r.point == defaults).cloned();
    let objective = match objective {
        Objective::Balanced
            if base
                .as_ref()
                .is_none_or(|b| score(b, Objective::Balanced, Some(b)).is_none()) =>
        {
            Objective::Throughput
        }
        Objective::Latency if results.iter().all(|r| r.p99_us.is_none()) => Objective::Throughput,
        other => other,
    };
    let tput = |r: &PointResult| r.throughput.map_or(0.0, |s| s.median);
    let p99 = |r: &PointResult| r.p99_us.map_or(f64::INFINITY, |s| s.median);
    results.sort_by(|a, b| match objective {
        Objective::Throughput => {
            let (ta, tb) = (tput(a), tput(b));
            if (ta - tb).abs() <= 0.02 * ta.max(tb) {
                p99(a).total_cmp(&p99(b)).then(tb.total_cmp(&ta))
            } else {
                tb.total_cmp(&ta)
            }
        }
        Objective::Latency => {
            let (pa, pb) = (p99(a), p99(b));
            if pa.is_finite() && pb.is_finite() && (pa - pb).abs() <= 0.02 * pa.max(pb) {
                tput(b).total_cmp(&tput(a))
            } else {
                pa.total_cmp(&pb)
            }
        }
        Objective::Balanced => {
            let sa = score(a, objective, base.as_ref()).unwrap_or(f64::NEG_INFINITY);
            let sb = score(b, objective, base.as_ref()).unwrap_or(f64::NEG_INFINITY);
            sb.total_cmp(&sa).then(tput(b).total_cmp(&tput(a)))
        }
    });
}

/// The trade-off of `best` against `baseline` in words: what got better, what got worse, by how much.
pub fn trade_off(best: &PointResult, baseline: &PointResult) -> String {
    let (t, l) = ratios(best, baseline);
    let mut parts = Vec::new();
    match t {
        Some(t) if t >= 1.0 => parts.push(format!("{t:.2}× the defaults' throughput")),
        Some(t) => parts.push(format!("{t:.2}× the defaults' throughput (LOWER)")),
        None => parts.push("throughput not comparable".to_owned()),
    }
    match l {
        Some(l) if l <= 1.0 => parts.push(format!("{l:.2}× their p99 lateness (lower is better)")),
        Some(l) => parts.push(format!("{l:.2}× their p99 lateness (HIGHER: a worse tail)")),
        None => parts.push("p99 lateness not measured".to_owned()),
    }
    parts.join(", ")
}

/// Ratio of `best` to `baseline`: (throughput ratio, p99 ratio), medians.
pub fn ratios(best: &PointResult, baseline: &PointResult) -> (Option<f64>, Option<f64>) {
    let t = match (best.throughput, baseline.throughput) {
        (Some(b), Some(d)) if d.median > 0.0 => Some(b.median / d.median),
        _ => None,
    };
    let p = match (best.p99_us, baseline.p99_us) {
        (Some(b), Some(d)) if d.median > 0.0 => Some(b.median / d.median),
        _ => None,
    };
    (t, p)
}

/// Whether `best`'s throughput range lies wholly above `baseline`'s: when the ranges of the repeats overlap, the
/// ranking between the two is within the noise of the machine and should not be trusted.
pub fn clearly_better(best: &PointResult, baseline: &PointResult) -> bool {
    match (best.throughput, baseline.throughput) {
        (Some(b), Some(d)) => b.min > d.max,
        _ => false,
    }
}

/// The winning point as a tickbox configuration (`--config`), each value with the reason it was chosen.
pub fn winner_toml(best: &PointResult, baseline: Option<&PointResult>, repeats: usize) -> String {
    let p = &best.point;
    let mut out = String::new();
    out.push_str(&format!(
        "# tickbox tune sweep winner: {} (median of {repeats} repeats)\n",
        p.label()
    ));
    if let Some(t) = best.throughput {
        out.push_str(&format!(
            "# throughput {:.0} msg/s (range {:.0}–{:.0}, spread {:.1} %)\n",
            t.median,
            t.min,
            t.max,
            100.0 * t.spread()
        ));
    }
    if let Some(l) = best.p99_us {
        out.push_str(&format!(
            "# p99 lateness {:.1} µs (range {:.1}–{:.1})\n",
            l.median, l.min, l.max
        ));
    }
    for change in p.semantic_changes() {
        out.push_str(&format!(
            "# CHANGES SEMANTICS: {change} (swept because --dispatch asked for it)\n"
        ));
    }
    if let Some(base) = baseline {
        let (t, l) = ratios(best, base);
        out.push_str(&format!(
            "# against the defaults ({}): throughput ×{}, p99 lateness ×{}\n",
            base.point.label(),
            t.map_or("-".into(), |x| format!("{x:.2}")),
            l.map_or("-".into(), |x| format!("{x:.2}"))
        ));
        out.push_str(&format!("# trade-off: {}\n", trade_off(best, base)));
        if !clearly_better(best, base) {
            out.push_str("# The throughput ranges of the repeats overlap: the win is within this machine's noise.\n");
        }
    }
    out.push_str("\n[context]\n");
    out.push_str("# I/O threads of the best point.\n");
    out.push_str(&format!("io_threads = {}\n", p.io_threads));
    out.push_str(match p.pinning {
        Pinning::No => "# Unpinned I/O threads measured best (or pinning was not swept).\n",
        Pinning::Io => "# Pinned I/O threads measured best.\n",
        Pinning::Plan => "# The pinning plan measured best: its I/O thread first.\n",
    });
    out.push_str(&format!(
        "io_thread_cpus = [{}]\n",
        p.io_cpus
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out.push_str("\n[feed]\n# The swept HWM, on the publisher side.\n");
    out.push_str(&format!("send_hwm = {}\n", p.hwm));
    out.push_str(
        "\n[subscriber]\n# The swept HWM, on the SUB sockets and the shard-to-worker hand-off, and the swept dispatch.\n",
    );
    out.push_str(&format!(
        "receive_hwm = {}\nhandoff_hwm = {}\ndispatch = \"{}\"\n",
        p.hwm,
        p.hwm,
        p.dispatch.as_str()
    ));
    for (i, core) in p.shard_cores.iter().enumerate() {
        out.push_str("\n[[subscriber.shards]]\n");
        out.push_str(&format!(
            "# Shard {i} where the plan put it; fill in the publisher endpoint it reads (tcp://HOST:PORT).\nconnect = []\ncore = {core}\n"
        ));
        if let Some(n) = p.shard_io_thread {
            out.push_str(&format!("io_thread = {n}\n"));
        }
    }
    if p.shard_cores.is_empty() && p.shards > 1 {
        out.push_str(&format!(
            "# {} SUB shards measured best: give [[subscriber.shards]] one entry per publisher shard.\n",
            p.shards
        ));
    }
    out.push_str("\n[workers]\n# The swept worker count, batch and HWM.\n");
    out.push_str(&format!(
        "count = {}\nbatch = {}\nhwm = {}\n",
        p.workers, p.batch, p.hwm
    ));
    out.push_str(&format!(
        "cores = [{}]\n",
        p.worker_cores
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out
}

/// The ranked results as the table `tickbox tune sweep` prints (best first, `defaults` marked), followed by how
/// the best compares with the defaults when they were measured.
pub fn table(results: &[PointResult], defaults: &SweepPoint, objective: Objective) -> String {
    let mut out = format!("ranked by {} (best first)\n", objective.as_str());
    out.push_str(&format!(
        "{:<4} {:<72} {:>12} {:>8} {:>10} {:>14}\n",
        "rank", "point", "msg/s", "spread", "p99 us", "p99 range"
    ));
    for (i, r) in results.iter().enumerate() {
        let marker = if &r.point == defaults {
            " (defaults)"
        } else if !r.point.semantic_changes().is_empty() {
            " (!)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{:<4} {:<72} {:>12} {:>8} {:>10} {:>14}\n",
            i + 1,
            format!("{}{marker}", r.point.label()),
            r.throughput
                .map_or("-".into(), |t| format!("{:.0}", t.median)),
            r.throughput
                .map_or("-".into(), |t| format!("{:.1}%", 100.0 * t.spread())),
            r.p99_us.map_or("-".into(), |l| format!("{:.1}", l.median)),
            r.p99_us
                .map_or("-".into(), |l| format!("{:.1}-{:.1}", l.min, l.max)),
        ));
    }
    if results
        .iter()
        .any(|r| !r.point.semantic_changes().is_empty())
    {
        out.push_str("(!) changes semantics, swept because asked: ");
        let mut said: Vec<&str> = results
            .iter()
            .flat_map(|r| r.point.semantic_changes())
            .collect();
        said.dedup();
        out.push_str(&said.join("; "));
        out.push('\n');
    }
    if let Some(base) = results.iter().find(|r| &r.point == defaults) {
        let (t, l) = ratios(&results[0], base);
        out.push_str(&format!(
            "\nbest vs defaults: throughput x{}, p99 lateness x{}\n",
            t.map_or("-".into(), |x| format!("{x:.2}")),
            l.map_or("-".into(), |x| format!("{x:.2}"))
        ));
        out.push_str(&format!("trade-off: {}\n", trade_off(&results[0], base)));
        for change in results[0].point.semantic_changes() {
            out.push_str(&format!("the best point CHANGES SEMANTICS: {change}\n"));
        }
        if !clearly_better(&results[0], base) {
            out.push_str("the throughput ranges of the repeats overlap: the win is within this machine's noise\n");
        }
    }
    out
}

/// The ranked results as one JSON object (`tickbox tune sweep --json`): every result, the winner (the first),
/// the defaults with the winner's ratios against them (when measured), and where the winning config was written.
/// `results` must not be empty.
pub fn summary_json(
    results: &[PointResult],
    defaults: &SweepPoint,
    objective: Objective,
    out: &std::path::Path,
) -> serde_json::Value {
    let best = &results[0];
    let baseline = results.iter().find(|r| &r.point == defaults);
    let (t, l) = baseline.map_or((None, None), |b| ratios(best, b));
    serde_json::json!({
        "objective": objective,
        "results": results,
        "winner": best.point,
        "winner_changes_semantics": best.point.semantic_changes(),
        "defaults": defaults,
        "throughput_ratio": t,
        "p99_ratio": l,
        "clearly_better": baseline.is_some_and(|b| clearly_better(best, b)),
        "out": out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(shards: usize) -> SweepPoint {
        SweepPoint {
            shards,
            workers: 1,
            hwm: 1000,
            batch: 256,
            dispatch: DispatchMode::RoundRobin,
            io_threads: 1,
            pinning: Pinning::No,
            io_cpus: Vec::new(),
            shard_cores: Vec::new(),
            worker_cores: Vec::new(),
            shard_io_thread: None,
        }
    }

    fn grid() -> Grid {
        Grid {
            shards: vec![1],
            workers: vec![1],
            hwms: vec![1000],
            batches: vec![256],
            dispatch: vec![DispatchMode::RoundRobin],
            io_threads: vec![1],
            pinning: vec![Pinning::No],
            cpus: vec![1, 0],
            plan: None,
        }
    }

    #[test]
    fn median_and_spread() {
        let s = Stat::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Stat::of(&[1.0, 3.0]).unwrap().median, 2.0);
        assert!((s.spread() - 1.0).abs() < 1e-9);
        assert!(Stat::of(&[]).is_none());
    }

    #[test]
    fn rounds_interleave_points_and_ranking_uses_the_median() {
        let points = vec![point(1), point(2)];
        let mut order = Vec::new();
        // Point 2 has one huge outlier but a lower median: the median must decide.
        let results = run::<()>(&points, 3, Objective::Throughput, &point(1), |p, round| {
            order.push((p.shards, round));
            let v = match (p.shards, round) {
                (1, _) => 100.0,
                (2, 0) => 1000.0,
                _ => 90.0,
            };
            Ok(Sample {
                msgs_per_s: v,
                p99_us: Some(10.0),
            })
        })
        .unwrap();
        assert_eq!(order, vec![(1, 0), (2, 0), (1, 1), (2, 1), (1, 2), (2, 2)]);
        assert_eq!(results[0].point.shards, 1);
        assert_eq!(results[1].throughput.unwrap().max, 1000.0);
    }

    #[test]
    fn close_throughput_is_decided_by_lateness() {
        let mut results = vec![
            PointResult::of(
                point(1),
                vec![Sample {
                    msgs_per_s: 100.0,
                    p99_us: Some(50.0),
                }],
            ),
            PointResult::of(
                point(2),
                vec![Sample {
                    msgs_per_s: 99.0,
                    p99_us: Some(10.0),
                }],
            ),
        ];
        rank(&mut results, Objective::Throughput, &point(1));
        assert_eq!(results[0].point.shards, 2);
    }

    #[test]
    fn a_throughput_win_with_a_far_worse_tail_loses_the_balanced_ranking() {
        let at = |shards, tput, p99| {
            PointResult::of(
                point(shards),
                vec![Sample {
                    msgs_per_s: tput,
                    p99_us: Some(p99),
                }],
            )
        };
        // The case: a little more throughput at a p99 57 times the defaults'.
        let mut results = vec![at(2, 110.0, 570.0), at(1, 100.0, 10.0), at(3, 105.0, 9.0)];
        rank(&mut results, Objective::Balanced, &point(1));
        let order: Vec<usize> = results.iter().map(|r| r.point.shards).collect();
        assert_eq!(order, vec![3, 1, 2]);
        rank(&mut results, Objective::Throughput, &point(1));
        assert_eq!(
            results[0].point.shards, 2,
            "throughput alone still picks it"
        );
        let base = results
            .iter()
            .find(|r| r.point.shards == 1)
            .unwrap()
            .clone();
        let words = trade_off(&results[0], &base);
        assert!(
            words.contains("57.00× their p99 lateness (HIGHER"),
            "{words}"
        );
        rank(&mut results, Objective::Latency, &point(1));
        assert_eq!(results[0].point.shards, 3);
    }

    #[test]
    fn round_robin_says_it_changes_semantics() {
        let rr = point(1);
        assert_eq!(rr.dispatch, DispatchMode::RoundRobin);
        assert_eq!(rr.semantic_changes().len(), 1);
        let by_topic = SweepPoint {
            dispatch: DispatchMode::ByTopic,
            ..point(1)
        };
        assert!(by_topic.semantic_changes().is_empty());
        let text = winner_toml(&PointResult::of(rr, Vec::new()), None, 1);
        assert!(text.contains("CHANGES SEMANTICS: round_robin"), "{text}");
    }

    #[test]
    fn overlapping_ranges_are_not_a_clear_win() {
        let at = |v: &[f64]| {
            PointResult::of(
                point(1),
                v.iter()
                    .map(|&x| Sample {
                        msgs_per_s: x,
                        p99_us: None,
                    })
                    .collect(),
            )
        };
        assert!(clearly_better(&at(&[110.0, 120.0]), &at(&[90.0, 100.0])));
        assert!(!clearly_better(&at(&[95.0, 120.0]), &at(&[90.0, 100.0])));
        let text = winner_toml(&at(&[95.0, 120.0]), Some(&at(&[90.0, 100.0])), 2);
        assert!(text.contains("within this machine's noise"), "{text}");
    }

    #[test]
    fn grid_lists_each_distinct_point_once() {
        let grid = Grid {
            io_threads: vec![1, 2],
            pinning: vec![Pinning::No, Pinning::Io],
            ..grid()
        };
        let labels: Vec<String> = grid.points().iter().map(|p| p.label()).collect();
        assert_eq!(
            labels,
            vec![
                "shards=1 workers=1 hwm=1000 batch=256 rr io=1 pin=no",
                "shards=1 workers=1 hwm=1000 batch=256 rr io=1 pin=io:1",
                "shards=1 workers=1 hwm=1000 batch=256 rr io=2 pin=no",
                "shards=1 workers=1 hwm=1000 batch=256 rr io=2 pin=io:1,0",
            ]
        );
        assert_eq!(grid.size(), 4);
    }

    #[test]
    fn every_dimension_multiplies_the_grid() {
        let grid = Grid {
            shards: vec![1, 2],
            workers: vec![1, 2, 3],
            hwms: vec![10, 20],
            batches: vec![1, 64],
            dispatch: vec![DispatchMode::RoundRobin, DispatchMode::ByTopic],
            io_threads: vec![1, 2],
            pinning: vec![Pinning::No],
            ..grid()
        };
        let points = grid.points();
        assert_eq!(points.len(), 2 * 3 * 2 * 2 * 2 * 2);
        assert_eq!(grid.size(), points.len());
        assert!(points
            .iter()
            .any(|p| p.workers == 3 && p.batch == 64 && p.dispatch == DispatchMode::ByTopic));
    }

    #[test]
    fn plan_points_need_a_basis_and_say_so() {
        let grid = Grid {
            pinning: vec![Pinning::No, Pinning::Plan],
            ..grid()
        };
        assert_eq!(grid.points().len(), 1);
        assert_eq!(
            grid.plan_problems(),
            vec!["no NIC to plan for: plan points skipped".to_owned()]
        );
        assert_eq!(Pinning::parse("yes"), Some(Pinning::Io));
        assert_eq!(DispatchMode::parse("by_topic"), Some(DispatchMode::ByTopic));
        assert_eq!(DispatchMode::parse("x"), None);
    }

    #[test]
    fn table_marks_the_defaults_and_states_the_win_against_them() {
        let sample = |v: f64| Sample {
            msgs_per_s: v,
            p99_us: None,
        };
        let results = vec![
            PointResult::of(point(2), vec![sample(200.0), sample(210.0)]),
            PointResult::of(point(1), vec![sample(100.0), sample(110.0)]),
        ];
        let text = table(&results, &point(1), Objective::Throughput);
        assert!(text.starts_with("ranked by throughput"), "{text}");
        assert!(
            text.contains("shards=1 workers=1 hwm=1000 batch=256 rr io=1 pin=no (defaults)"),
            "{text}"
        );
        assert!(
            text.contains("best vs defaults: throughput x1.95, p99 lateness x-"),
            "{text}"
        );
        assert!(!text.contains("overlap"), "{text}");
        let json = summary_json(
            &results,
            &point(1),
            Objective::Throughput,
            std::path::Path::new("t.toml"),
        );
        assert_eq!(json["winner"]["shards"], 2);
        assert_eq!(json["clearly_better"], true);
        assert_eq!(json["out"], "t.toml");
    }
}
