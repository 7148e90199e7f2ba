//! Latency run configuration, outcome, and the report files of a latency sweep.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tickbox_zmqx::BackPressure;

use crate::measure::{LatencySamples, Percentiles};
use crate::pace::{RunState, Stall};
use crate::report::{self, LatencyResult};
use crate::stats::FigureSummary;
use crate::transport::Transport;
use crate::BenchError;

pub use crate::report::Shape;

/// One latency configuration.
#[derive(Debug, Clone)]
pub struct LatencyConfig {
    /// Threads of one process, or separate processes.
    pub shape: Shape,
    /// Offered rate, msg/s (open loop).
    pub rate: u64,
    /// How publisher and receivers are connected.
    pub transport: Transport,
    /// Sent at the offered rate before measuring, so connections and caches are warm; not recorded.
    pub warmup: Duration,
    /// The measured window after the warm-up.
    pub duration: Duration,
    /// Frame size for the raw baseline; the tickbox run uses its own frame size and reports it.
    pub size: usize,
    /// Send and receive high-water marks (messages).
    pub hwm: i32,
    /// Raw baseline only: `Block` uses XPUB with `ZMQ_XPUB_NODROP`, so the publisher blocks instead of dropping at
    /// the HWM.
    pub back_pressure: BackPressure,
    /// Optional injected consumer stall.
    pub stall: Option<Stall>,
    /// Length of each `.hlog` interval.
    pub log_interval: Duration,
    /// How long receivers wait for in-flight messages after the publisher finishes.
    pub drain: Duration,
    /// Route the tickbox run through the LVC proxy.
    pub via_lvc: bool,
    /// How the tickbox subscriber's shard hands records to its worker (`inline` needs one worker per shard).
    pub handoff: tickbox_subscriber::Handoff,
    /// `[workers] idle_spin` of the tickbox subscriber (`--idle-spin`): what a ring hand-off's worker does when
    /// its queue runs dry.
    pub idle_spin: Duration,
    /// `[workers] shard_runs_asleep` of the tickbox subscriber (`--shard-runs-asleep`): whether a ring hand-off's
    /// shard runs the end of a burst on its sleeping worker instead of waking it.
    pub shard_runs_asleep: bool,
    /// Applied to every socket of both systems (`bench latency --security curve`, in-process shape); the sweep's
    /// gate is started from the same section.
    pub security: tickbox_auth::Security,
    /// Busy threads run for the whole sweep, beside both systems (`--background-load`).
    pub background: crate::load::LoadSpec,
}

impl LatencyConfig {
    /// The schedule its publishers keep.
    pub fn pace(&self) -> crate::pace::Pace {
        crate::pace::Pace {
            rate: self.rate,
            warmup: self.warmup,
            duration: self.duration,
            drain: self.drain,
        }
    }
}

impl Default for LatencyConfig {
    fn default() -> Self {
        LatencyConfig {
            shape: Shape::InProcess,
            rate: 100_000,
            transport: Transport::Tcp,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(5),
            size: 100,
            hwm: 100_000,
            back_pressure: BackPressure::Drop,
            stall: None,
            log_interval: Duration::from_secs(1),
            drain: Duration::from_millis(500),
            via_lvc: false,
            handoff: tickbox_subscriber::Handoff::default(),
            idle_spin: tickbox_workers::WorkerPoolConfig::default().idle_spin.0,
            shard_runs_asleep: tickbox_workers::WorkerPoolConfig::default().shard_runs_asleep,
            security: tickbox_auth::Security::default(),
            background: crate::load::LoadSpec::default(),
        }
    }
}

/// What one latency run measured.
#[derive(Debug, Clone)]
pub struct LatencyRun {
    /// `tickbox` or `raw-pubsub`.
    pub system: String,
    /// The configuration it ran with.
    pub config: LatencyConfig,
    /// Frame size actually sent.
    pub size: usize,
    /// Every recorded latency, corrected and uncorrected.
    pub samples: LatencySamples,
    /// Which repeat of its configuration this run is (1-based).
    pub repeat: u32,
}

impl LatencyRun {
    /// A short name for plot legends and file names, e.g. `tickbox-tcp-100k`.
    pub fn label(&self) -> String {
        format!(
            "{}-{}{}{}-{}",
            self.system,
            self.config.transport,
            if self.config.shape == Shape::Processes {
                "-proc"
            } else {
                ""
            },
            if self.config.via_lvc && self.system == "tickbox" {
                "-lvc"
            } else {
                ""
            },
            rate_label(self.config.rate)
        )
    }

    /// The result line; `file_prefix` is what [`LatencyRun::write_files`] was given.
    pub fn result_with_files(&self, file_prefix: &str) -> LatencyResult {
        let mut r = self.result();
        r.files = format!("{file_prefix}{}", self.file_label());
        r
    }

    /// [`LatencyRun::label`] with the repeat, e.g. `tickbox-tcp-100k-r2`: one set of files per repeat.
    pub fn file_label(&self) -> String {
        format!("{}-r{}", self.label(), self.repeat)
    }

    /// The result line (percentiles, drops, achieved rate) without file names.
    pub fn result(&self) -> LatencyResult {
        let scheduled = self.samples.schedule.measured_messages();
        let secs = self.samples.schedule.measured_duration().as_secs_f64();
        // The ring's own settings are reported only for a tickbox run through a ring.
        let ring =
            self.system == "tickbox" && self.config.handoff == tickbox_subscriber::Handoff::Ring;
        LatencyResult {
            system: self.system.clone(),
            shape: self.config.shape,
            transport: self.config.transport.to_string(),
            via_lvc: self.config.via_lvc && self.system == "tickbox",
            handoff: (self.system == "tickbox").then_some(self.config.handoff),
            idle_spin: ring.then_some(tickbox_units::HumanDuration(self.config.idle_spin)),
            shard_runs_asleep: ring.then_some(self.config.shard_runs_asleep),
            rate: self.config.rate,
            size: self.size,
            duration_s: secs,
            warmup_s: self.config.warmup.as_secs_f64(),
            scheduled,
            received: self.samples.measured,
            lost: scheduled.saturating_sub(self.samples.measured),
            achieved_rate: self.samples.measured as f64 / secs,
            corrected: Percentiles::of(&self.samples.corrected),
            uncorrected: Percentiles::of(&self.samples.uncorrected),
            send_hwm: self.config.hwm,
            receive_hwm: self.config.hwm,
            files: self.file_label(),
            repeat: self.repeat,
            background: self.config.background,
        }
    }

    /// Writes `<prefix><label>.hlog`, `<prefix><label>.hgrm` (corrected) and `<prefix><label>.uncorrected.hgrm`
    /// into `dir`.
    pub fn write_files(&self, dir: &Path, file_prefix: &str) -> Result<(), BenchError> {
        let stem = format!("{file_prefix}{}", self.file_label());
        report::write_hlog(
            &dir.join(format!("{stem}.hlog")),
            &self.samples.intervals,
            &format!(
                "tickbox bench latency: {}, {} msg/s offered, {} B frames, warm-up {:?} excluded",
                self.file_label(),
                self.config.rate,
                self.size,
                self.config.warmup
            ),
        )?;
        report::write_hgrm(&dir.join(format!("{stem}.hgrm")), &self.samples.corrected)?;
        report::write_hgrm(
            &dir.join(format!("{stem}.uncorrected.hgrm")),
            &self.samples.uncorrected,
        )
    }
}

/// `100k`, `1m`, `2500`.
pub fn rate_label(rate: u64) -> String {
    if rate >= 1_000_000 && rate.is_multiple_of(1_000_000) {
        format!("{}m", rate / 1_000_000)
    } else if rate >= 1_000 && rate.is_multiple_of(1_000) {
        format!("{}k", rate / 1_000)
    } else {
        rate.to_string()
    }
}

/// Fails the run if the path never connected; used by both raw and tickbox runners.
pub(crate) fn wait_connected(state: &RunState, timeout: Duration) -> Result<(), BenchError> {
    let deadline = std::time::Instant::now() + timeout;
    while !state.connected.load(Ordering::Acquire) {
        if std::time::Instant::now() > deadline || state.abort.load(Ordering::Relaxed) {
            return Err(BenchError::NotConnected(timeout));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// A configuration's name, tickbox's repeats and its raw baseline's repeats, each in repeat order.
type LatencyGroup<'a> = (String, Vec<&'a LatencyResult>, Vec<&'a LatencyResult>);

/// The configurations of a latency sweep, in run order.
fn latency_groups(results: &[LatencyResult]) -> Vec<LatencyGroup<'_>> {
    let mut groups: Vec<LatencyGroup<'_>> = Vec::new();
    for r in results.iter().filter(|r| r.system == "tickbox") {
        let frames = match r.shape {
            Shape::InProcess => format!("{} B frames", r.size),
            // The feed sends its synthetic market (quotes and trades, their own sizes); the raw pair sends --size.
            Shape::Processes => {
                "processes (tickbox feed → tickbox subscribe; raw-pub → raw-sub)".to_string()
            }
        };
        let name = format!(
            "{} {} msg/s, {frames}{}{}{}{}",
            r.transport,
            rate_label(r.rate),
            if r.via_lvc { ", via LVC" } else { "" },
            r.handoff
                .map_or(String::new(), |h| format!(", tickbox handoff {h}")),
            match (r.idle_spin, r.shard_runs_asleep) {
                (Some(d), Some(false)) => format!(" (idle spin {d}, always woken)"),
                (Some(d), _) => format!(" (idle spin {d})"),
                (None, _) => String::new(),
            },
            if r.background.threads > 0 {
                format!(", background load {}", r.background.describe())
            } else {
                String::new()
            }
        );
        match groups.iter_mut().find(|g| g.0 == name) {
            Some(g) => g.1.push(r),
            None => {
                let raws = results
                    .iter()
                    .filter(|b| {
                        b.system.starts_with("raw")
                            && b.transport == r.transport
                            && b.rate == r.rate
                            && b.shape == r.shape
                    })
                    .collect();
                groups.push((name, vec![r], raws));
            }
        }
    }
    for g in &mut groups {
        g.1.sort_by_key(|r| r.repeat);
        g.2.sort_by_key(|r| r.repeat);
    }
    groups
}

/// Every figure of every configuration of a latency sweep over its repeats: corrected p50 … max and mean,
/// uncorrected p99.9 and max (µs), achieved rate and lost messages, each beside the raw baseline's.
pub fn latency_summaries(results: &[LatencyResult]) -> Vec<FigureSummary> {
    type Get = fn(&LatencyResult) -> f64;
    fn us(ns: u64) -> f64 {
        ns as f64 / 1_000.0
    }
    let figures: [(&str, Get, bool); 11] = [
        ("p50 µs", |r| us(r.corrected.p50), true),
        ("p90 µs", |r| us(r.corrected.p90), true),
        ("p99 µs", |r| us(r.corrected.p99), true),
        ("p99.9 µs", |r| us(r.corrected.p999), true),
        ("p99.99 µs", |r| us(r.corrected.p9999), true),
        ("max µs", |r| us(r.corrected.max), true),
        ("mean µs", |r| r.corrected.mean / 1_000.0, true),
        ("unc p99.9 µs", |r| us(r.uncorrected.p999), true),
        ("unc max µs", |r| us(r.uncorrected.max), true),
        ("achieved msg/s", |r| r.achieved_rate, true),
        ("lost", |r| r.lost as f64, false),
    ];
    let mut out = Vec::new();
    for (name, tickbox, raws) in latency_groups(results) {
        let baseline = raws
            .first()
            .map_or("raw-pubsub".to_string(), |r| r.system.clone());
        let config = format!(
            "{name}, {} repeat(s), order {}",
            tickbox.len().max(raws.len()),
            crate::stats::order_label(tickbox.len().max(raws.len()))
        );
        for (figure, get, ratio) in figures {
            let t: Vec<f64> = tickbox.iter().map(|r| get(r)).collect();
            let r: Vec<f64> = raws.iter().map(|r| get(r)).collect();
            out.push(FigureSummary::new(
                &config, figure, &t, &baseline, &r, ratio,
            ));
        }
    }
    out
}

/// Formats a latency figure: µs with one decimal, rates and counts whole.
pub fn format_latency_figure(figure: &str, v: f64) -> String {
    if figure.ends_with("µs") {
        format!("{v:.1}")
    } else if figure == "lost" {
        format!("{v:.0}")
    } else {
        crate::stats::fmt_sig(v)
    }
}

/// The stdout table of a latency sweep: per configuration, each figure as tickbox's median (min–max over the
/// repeats), the raw baseline's, and tickbox/raw as the ratio of the medians (per-repeat ratio range).
pub fn latency_table(results: &[LatencyResult]) -> String {
    crate::stats::summary_table(&latency_summaries(results), format_latency_figure)
}

/// The warnings a latency sweep's figures raise: a repeat short of 95 % of its offered rate, and a raw baseline
/// whose p50 moved more than 20 % between repeats.
pub fn latency_warnings(results: &[LatencyResult]) -> Vec<crate::env::Warning> {
    let mut out: Vec<crate::env::Warning> = results
        .iter()
        .filter_map(|r| {
            crate::env::rate_warning(
                &format!(
                    "{}-{}-{} repeat {}",
                    r.system,
                    r.transport,
                    rate_label(r.rate),
                    r.repeat
                ),
                r.rate as f64,
                r.achieved_rate,
            )
        })
        .collect();
    for (name, _, raws) in latency_groups(results) {
        let p50_us: Vec<f64> = raws
            .iter()
            .map(|r| r.corrected.p50 as f64 / 1_000.0)
            .collect();
        out.extend(crate::env::drift_warning(
            &format!("{name}: raw p50 µs"),
            &p50_us,
        ));
    }
    out
}
