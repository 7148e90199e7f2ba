//! The sans-IO part of `tickbox tune sweep`: the grid, the repeat schedule, median and spread, ranking, and the
//! winning configuration. The caller measures each point (the bench pipeline); this module never runs anything.

use serde::Serialize;

/// One configuration of the bench pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SweepPoint {
    /// Publisher shards, SUB shards and workers of the bench pipeline (it runs one of each per shard).
    pub shards: usize,
    /// Every HWM of the pipeline (feed `sndhwm`, subscriber `rcv_hwm` and `handoff_hwm`, workers `hwm`).
    pub hwm: i32,
    /// libzmq I/O threads.
    pub io_threads: usize,
    /// CPU of each I/O thread; empty leaves them unpinned.
    pub io_cpus: Vec<usize>,
}

impl SweepPoint {
    /// A short label: `shards=2 hwm=1000 io=2 pin=1,0`.
    pub fn label(&self) -> String {
        format!(
            "shards={} hwm={} io={} pin={}",
            self.shards,
            self.hwm,
            self.io_threads,
            if self.io_cpus.is_empty() {
                "no".to_owned()
            } else {
                self.io_cpus
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            }
        )
    }
}

/// The grid: every combination of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    /// Shard counts.
    pub shards: Vec<usize>,
    /// HWMs.
    pub hwms: Vec<i32>,
    /// I/O thread counts.
    pub io_threads: Vec<usize>,
    /// Whether to pin the I/O threads (`true`) or leave them unpinned (`false`).
    pub pin_io: Vec<bool>,
    /// CPUs pinned I/O threads go to, in order (thread `n` gets `cpus[n % len]`).
    pub cpus: Vec<usize>,
}

impl Grid {
    /// Every point, in a stable order; points that pinning cannot tell apart are listed once.
    pub fn points(&self) -> Vec<SweepPoint> {
        let mut points = Vec::new();
        for &shards in &self.shards {
            for &hwm in &self.hwms {
                for &io_threads in &self.io_threads {
                    for &pin in &self.pin_io {
                        let io_cpus = if pin && !self.cpus.is_empty() {
                            (0..io_threads)
                                .map(|n| self.cpus[n % self.cpus.len()])
                                .collect()
                        } else {
                            Vec::new()
                        };
                        let p = SweepPoint {
                            shards,
                            hwm,
                            io_threads,
                            io_cpus,
                        };
                        if !points.contains(&p) {
                            points.push(p);
                        }
                    }
                }
            }
        }
        points
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

impl Stat {
    /// Median, min and max of `values` (`None` when empty).
    pub fn of(values: &[f64]) -> Option<Stat> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stat {
            median,
            min: v[0],
            max: v[n - 1],
        })
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
    rank(&mut results);
    Ok(results)
}

/// Best first: highest median throughput; within 2 % of each other, the lower median p99 lateness wins.
pub fn rank(results: &mut [PointResult]) {
    results.sort_by(|a, b| {
        let ta = a.throughput.map_or(0.0, |s| s.median);
        let tb = b.throughput.map_or(0.0, |s| s.median);
        let close = (ta - tb).abs() <= 0.02 * ta.max(tb);
        if close {
            let pa = a.p99_us.map_or(f64::INFINITY, |s| s.median);
            let pb = b.p99_us.map_or(f64::INFINITY, |s| s.median);
            pa.total_cmp(&pb).then(tb.total_cmp(&ta))
        } else {
            tb.total_cmp(&ta)
        }
    });
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
    if let Some(base) = baseline {
        let (t, l) = ratios(best, base);
        out.push_str(&format!(
            "# against the defaults ({}): throughput ×{}, p99 lateness ×{}\n",
            base.point.label(),
            t.map_or("-".into(), |x| format!("{x:.2}")),
            l.map_or("-".into(), |x| format!("{x:.2}"))
        ));
        if !clearly_better(best, base) {
            out.push_str("# The throughput ranges of the repeats overlap: the win is within this machine's noise.\n");
        }
    }
    out.push_str("\n[context]\n");
    out.push_str("# I/O threads of the best point.\n");
    out.push_str(&format!("io_threads = {}\n", p.io_threads));
    out.push_str(if p.io_cpus.is_empty() {
        "# Unpinned I/O threads measured best (or pinning was not swept).\n"
    } else {
        "# Pinned I/O threads measured best.\n"
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
    out.push_str(&format!("sndhwm = {}\n", p.hwm));
    out.push_str(
        "\n[subscriber]\n# The swept HWM, on the SUB sockets and the shard-to-worker hand-off.\n",
    );
    out.push_str(&format!("rcv_hwm = {}\nhandoff_hwm = {}\n", p.hwm, p.hwm));
    out.push_str("\n[workers]\n# One worker per shard, as the bench pipeline ran it; the swept HWM on their PULL sockets.\n");
    out.push_str(&format!("count = {}\nhwm = {}\n", p.shards, p.hwm));
    out
}

/// The ranked results as the table `tickbox tune sweep` prints (best first, `defaults` marked), followed by how
/// the best compares with the defaults when they were measured.
pub fn table(results: &[PointResult], defaults: &SweepPoint) -> String {
    let mut out = format!(
        "{:<4} {:<46} {:>12} {:>8} {:>10} {:>14}\n",
        "rank", "point", "msg/s", "spread", "p99 us", "p99 range"
    );
    for (i, r) in results.iter().enumerate() {
        let marker = if &r.point == defaults {
            " (defaults)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{:<4} {:<46} {:>12} {:>8} {:>10} {:>14}\n",
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
    if let Some(base) = results.iter().find(|r| &r.point == defaults) {
        let (t, l) = ratios(&results[0], base);
        out.push_str(&format!(
            "\nbest vs defaults: throughput x{}, p99 lateness x{}\n",
            t.map_or("-".into(), |x| format!("{x:.2}")),
            l.map_or("-".into(), |x| format!("{x:.2}"))
        ));
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
    out: &std::path::Path,
) -> serde_json::Value {
    let best = &results[0];
    let baseline = results.iter().find(|r| &r.point == defaults);
    let (t, l) = baseline.map_or((None, None), |b| ratios(best, b));
    serde_json::json!({
        "results": results,
        "winner": best.point,
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
            hwm: 1000,
            io_threads: 1,
            io_cpus: Vec::new(),
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
        let results = run::<()>(&points, 3, |p, round| {
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
        rank(&mut results);
        assert_eq!(results[0].point.shards, 2);
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
            shards: vec![1],
            hwms: vec![1000],
            io_threads: vec![1, 2],
            pin_io: vec![false, true],
            cpus: vec![1, 0],
        };
        let labels: Vec<String> = grid.points().iter().map(|p| p.label()).collect();
        assert_eq!(
            labels,
            vec![
                "shards=1 hwm=1000 io=1 pin=no",
                "shards=1 hwm=1000 io=1 pin=1",
                "shards=1 hwm=1000 io=2 pin=no",
                "shards=1 hwm=1000 io=2 pin=1,0",
            ]
        );
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
        let text = table(&results, &point(1));
        assert!(text.starts_with("rank "), "{text}");
        assert!(
            text.contains("shards=1 hwm=1000 io=1 pin=no (defaults)"),
            "{text}"
        );
        assert!(
            text.contains("best vs defaults: throughput x1.95, p99 lateness x-"),
            "{text}"
        );
        assert!(!text.contains("overlap"), "{text}");
        let json = summary_json(&results, &point(1), std::path::Path::new("t.toml"));
        assert_eq!(json["winner"]["shards"], 2);
        assert_eq!(json["clearly_better"], true);
        assert_eq!(json["out"], "t.toml");
    }
}
