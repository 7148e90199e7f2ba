//! The machine a bench ran on, and the warnings that say a run's figures may not hold.
//!
//! A figure measured on a shared 2-core box at load 3 is not the figure of an idle server, and a baseline that
//! moved 30 % between repeats says the machine, not the code, moved. Every result file therefore carries an
//! [`Environment`] (host, CPU, cores, load at start and end, kernel, build) and the [`Warning`]s raised during the
//! run; warnings are also printed to stderr, and never change the exit code.

use serde::{Deserialize, Serialize};

/// Achieved below this fraction of the requested rate is a warning.
pub const RATE_SHORTFALL: f64 = 0.95;
/// A raw baseline whose max/min − 1 across repeats exceeds this moved too much to trust the ratio.
pub const BASELINE_DRIFT: f64 = 0.20;

/// The three load averages of `/proc/loadavg`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadAverage {
    /// Over 1 minute.
    pub one: f64,
    /// Over 5 minutes.
    pub five: f64,
    /// Over 15 minutes.
    pub fifteen: f64,
}

impl LoadAverage {
    /// Reads `/proc/loadavg`; `None` where there is none (not Linux, no procfs).
    pub fn now() -> Option<LoadAverage> {
        parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
    }
}

impl std::fmt::Display for LoadAverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} {:.2} {:.2}", self.one, self.five, self.fifteen)
    }
}

fn parse_loadavg(text: &str) -> Option<LoadAverage> {
    let mut it = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some(LoadAverage {
        one: it.next()??,
        five: it.next()??,
        fifteen: it.next()??,
    })
}

/// Where and with what a bench ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// The host name.
    pub hostname: String,
    /// CPU model (`model name` of `/proc/cpuinfo`), `unknown` if not found.
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cores: usize,
    /// Load average when the bench started.
    pub load_average_start: Option<LoadAverage>,
    /// Load average when the bench finished.
    pub load_average_end: Option<LoadAverage>,
    /// OS and kernel release, e.g. `Linux 6.8.0-45-generic`.
    pub kernel: String,
    /// The crate version, plus `git describe` of the tree it was built from when git was there at build time.
    pub tickbox_version: String,
    /// Start of the bench, RFC 3339 UTC.
    pub timestamp: String,
}

impl Environment {
    /// Reads the environment now (the start of a bench); call [`Environment::finish`] at the end.
    pub fn capture() -> Environment {
        Environment {
            hostname: read_trimmed("/proc/sys/kernel/hostname")
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| "unknown".into()),
            cpu_model: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|t| cpu_model(&t))
                .unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load_average_start: LoadAverage::now(),
            load_average_end: None,
            kernel: match (
                read_trimmed("/proc/sys/kernel/ostype"),
                read_trimmed("/proc/sys/kernel/osrelease"),
            ) {
                (Some(os), Some(release)) => format!("{os} {release}"),
                (None, Some(release)) => release,
                _ => std::env::consts::OS.to_string(),
            },
            tickbox_version: version(),
            timestamp: tickbox_units::format_rfc3339(tickbox_wire::now_ns()),
        }
    }

    /// Notes the load average at the end of the bench.
    pub fn finish(&mut self) {
        self.load_average_end = LoadAverage::now();
    }

    /// The warnings the machine itself deserves: load average above the core count at start or end.
    pub fn warnings(&self) -> Vec<Warning> {
        let mut out = Vec::new();
        for (when, load) in [
            ("start", self.load_average_start),
            ("end", self.load_average_end),
        ] {
            if let Some(load) = load {
                if load.one > self.cores as f64 {
                    out.push(Warning::new(
                        WarningKind::LoadAboveCores,
                        format!(
                            "load average {load} at the {when} is above the {} core(s): other work competed for the \
                             CPUs, figures are pessimistic and noisy",
                            self.cores
                        ),
                    ));
                }
            }
        }
        out
    }

    /// One line for the top of a report.
    pub fn summary_line(&self) -> String {
        format!(
            "host {} | {} | {} core(s) | load {} → {} | {} | tickbox {} | {}",
            self.hostname,
            self.cpu_model,
            self.cores,
            self.load_average_start
                .map_or("?".into(), |l| l.to_string()),
            self.load_average_end.map_or("?".into(), |l| l.to_string()),
            self.kernel,
            self.tickbox_version,
            self.timestamp
        )
    }
}

/// `CARGO_PKG_VERSION`, with ` (git describe)` when the build saw a git tree.
pub fn version() -> String {
    let describe = env!("TICKBOX_GIT_DESCRIBE");
    if describe.is_empty() {
        env!("CARGO_PKG_VERSION").to_string()
    } else {
        format!("{} ({describe})", env!("CARGO_PKG_VERSION"))
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The first `model name` of a `/proc/cpuinfo` text (x86); ARM kernels name it `Model` or `Hardware` instead.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    for key in ["model name", "Model", "Hardware", "cpu model"] {
        let found = cpuinfo.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key && !v.trim().is_empty()).then(|| v.trim().to_string())
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

/// What a warning is about, for machines reading the JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// A run achieved less than 95 % of the rate it was asked for.
    RateNotAchieved,
    /// A raw baseline's figure moved more than 20 % between repeats.
    BaselineMoved,
    /// The load average exceeded the core count.
    LoadAboveCores,
    /// Messages were lost where the method promises none.
    Lost,
}

/// A reason to doubt a figure; printed to stderr and stored in the result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    /// What it is about.
    pub kind: WarningKind,
    /// The sentence printed.
    pub message: String,
}

impl Warning {
    /// A warning of `kind` saying `message`.
    pub fn new(kind: WarningKind, message: String) -> Warning {
        Warning { kind, message }
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A rate warning when `achieved` is below [`RATE_SHORTFALL`] of `requested`.
pub fn rate_warning(what: &str, requested: f64, achieved: f64) -> Option<Warning> {
    (requested > 0.0 && achieved < RATE_SHORTFALL * requested).then(|| {
        Warning::new(
            WarningKind::RateNotAchieved,
            format!(
                "{what}: achieved {achieved:.0} msg/s, {:.1} % of the {requested:.0} msg/s requested (below {:.0} %)",
                100.0 * achieved / requested,
                100.0 * RATE_SHORTFALL
            ),
        )
    })
}

/// A drift warning when a baseline's values over the repeats spread by more than [`BASELINE_DRIFT`] (max/min − 1).
pub fn drift_warning(what: &str, values: &[f64]) -> Option<Warning> {
    let (min, max) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    if values.len() < 2 || min <= 0.0 {
        return None;
    }
    let drift = max / min - 1.0;
    (drift > BASELINE_DRIFT).then(|| {
        Warning::new(
            WarningKind::BaselineMoved,
            format!(
                "{what}: the raw baseline moved {:.0} % between repeats (min {}, max {}; over {:.0} % means the \
                 machine was not steady, so the ratio is uncertain)",
                100.0 * drift,
                crate::stats::fmt_sig(min),
                crate::stats::fmt_sig(max),
                100.0 * BASELINE_DRIFT
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_machine() {
        let env = Environment::capture();
        assert!(env.cores >= 1);
        assert!(!env.hostname.is_empty());
        assert!(env.tickbox_version.starts_with(env!("CARGO_PKG_VERSION")));
        assert!(env.timestamp.ends_with('Z') && env.timestamp.len() >= 20);
        let json = serde_json::to_value(&env).unwrap();
        for key in [
            "hostname",
            "cpu_model",
            "cores",
            "load_average_start",
            "load_average_end",
            "kernel",
            "tickbox_version",
            "timestamp",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
    }

    #[test]
    fn parses_cpuinfo_and_loadavg() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(
            cpu_model(x86).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        assert_eq!(
            cpu_model("processor : 0\nHardware : BCM2835\n").as_deref(),
            Some("BCM2835")
        );
        assert_eq!(cpu_model("processor : 0\n"), None);
        let l = parse_loadavg("0.52 1.10 2.00 1/345 6789\n").unwrap();
        assert_eq!((l.one, l.five, l.fifteen), (0.52, 1.10, 2.00));
        assert!(parse_loadavg("x").is_none());
    }

    #[test]
    fn warnings_fire_only_past_their_thresholds() {
        assert!(rate_warning("x", 100_000.0, 95_500.0).is_none());
        let w = rate_warning("x", 100_000.0, 90_000.0).unwrap();
        assert_eq!(w.kind, WarningKind::RateNotAchieved);
        assert!(w.message.contains("90.0 %"), "{w}");
        assert!(drift_warning("raw", &[100.0, 119.0, 110.0]).is_none());
        let w = drift_warning("raw", &[100.0, 125.0, 110.0]).unwrap();
        assert_eq!(w.kind, WarningKind::BaselineMoved);
        assert!(w.message.contains("25 %"), "{w}");
        assert!(drift_warning("raw", &[100.0]).is_none());
        let mut env = Environment::capture();
        env.cores = 2;
        env.load_average_start = Some(LoadAverage {
            one: 3.5,
            five: 1.0,
            fifteen: 1.0,
        });
        env.load_average_end = Some(LoadAverage {
            one: 1.0,
            five: 1.0,
            fifteen: 1.0,
        });
        let w = env.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].kind, WarningKind::LoadAboveCores);
        assert!(w[0].message.contains("start"));
    }
}
