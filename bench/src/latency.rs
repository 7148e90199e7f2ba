//! Latency run configuration, outcome, and the report files of a latency sweep.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::measure::{LatencySamples, Percentiles};
use crate::pace::{RunState, Stall};
use crate::report::{self, LatencyResult};
use crate::transport::Transport;
use crate::BenchError;

/// One latency configuration.
#[derive(Debug, Clone)]
pub struct LatencyConfig {
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
    /// Raw baseline only: use XPUB with `ZMQ_XPUB_NODROP` so the publisher blocks instead of dropping at the HWM.
    pub no_drop: bool,
    /// Optional injected consumer stall.
    pub stall: Option<Stall>,
    /// Length of each `.hlog` interval.
    pub log_interval: Duration,
    /// How long receivers wait for in-flight messages after the publisher finishes.
    pub drain: Duration,
    /// Route the tickbox run through the LVC proxy.
    pub via_lvc: bool,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        LatencyConfig {
            rate: 100_000,
            transport: Transport::Tcp,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(5),
            size: 100,
            hwm: 100_000,
            no_drop: false,
            stall: None,
            log_interval: Duration::from_secs(1),
            drain: Duration::from_millis(500),
            via_lvc: false,
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
}

impl LatencyRun {
    /// A short name for plot legends and file names, e.g. `tickbox-tcp-100k`.
    pub fn label(&self) -> String {
        format!(
            "{}-{}{}-{}",
            self.system,
            self.config.transport,
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
        r.files = format!("{file_prefix}{}", self.label());
        r
    }

    /// The result line (percentiles, drops, achieved rate) without file names.
    pub fn result(&self) -> LatencyResult {
        let scheduled = self.samples.schedule.measured_messages();
        let secs = self.samples.schedule.measured_duration().as_secs_f64();
        LatencyResult {
            system: self.system.clone(),
            transport: self.config.transport.to_string(),
            via_lvc: self.config.via_lvc && self.system == "tickbox",
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
            recv_hwm: self.config.hwm,
            files: self.label(),
        }
    }

    /// Writes `<prefix><label>.hlog`, `<prefix><label>.hgrm` (corrected) and `<prefix><label>.uncorrected.hgrm`
    /// into `dir`.
    pub fn write_files(&self, dir: &Path, file_prefix: &str) -> Result<(), BenchError> {
        let stem = format!("{file_prefix}{}", self.label());
        report::write_hlog(
            &dir.join(format!("{stem}.hlog")),
            &self.samples.intervals,
            &format!(
                "tickbox bench latency: {}, {} msg/s offered, {} B frames, warm-up {:?} excluded",
                self.label(),
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

/// The stdout table of a latency sweep: corrected percentiles (µs), uncorrected p99.9 and max, rates, losses,
/// and the ratio of tickbox's corrected p50/p99.9 to the raw baseline's in the same run.
pub fn latency_table(results: &[LatencyResult]) -> String {
    use std::fmt::Write as _;
    let us = |ns: u64| ns as f64 / 1_000.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} | {:>9} {:>10} | {:>11} {:>8} | {:>9}",
        "configuration (µs)",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "p99.99",
        "max",
        "mean",
        "unc p99.9",
        "unc max",
        "achieved/s",
        "lost",
        "p50 ×raw"
    );
    for r in results {
        let raw = results.iter().find(|b| {
            b.system.starts_with("raw") && b.transport == r.transport && b.rate == r.rate
        });
        let ratio = match raw {
            Some(b) if r.system == "tickbox" && b.corrected.p50 > 0 => {
                format!("{:.2}", r.corrected.p50 as f64 / b.corrected.p50 as f64)
            }
            _ => "-".into(),
        };
        let c = &r.corrected;
        let _ = writeln!(
            out,
            "{:<26} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1} | {:>9.1} {:>10.1} | {:>11.0} {:>8} | {:>9}",
            format!(
                "{}-{}{}-{}",
                r.system,
                r.transport,
                if r.via_lvc { "-lvc" } else { "" },
                rate_label(r.rate)
            ),
            us(c.p50),
            us(c.p90),
            us(c.p99),
            us(c.p999),
            us(c.p9999),
            us(c.max),
            c.mean / 1_000.0,
            us(r.uncorrected.p999),
            us(r.uncorrected.max),
            r.achieved_rate,
            r.lost,
            ratio
        );
    }
    out
}
