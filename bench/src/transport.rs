//! Transports a bench runs over, and endpoints for them that never collide between runs or processes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::BenchError;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Loopback TCP (`tcp://127.0.0.1:*`, port chosen by the OS).
    Tcp,
    /// Unix domain socket in the temp directory.
    Ipc,
    /// In-process (both ends share the context).
    Inproc,
}

impl Transport {
    pub const ALL: [Transport; 3] = [Transport::Tcp, Transport::Ipc, Transport::Inproc];

    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Ipc => "ipc",
            Transport::Inproc => "inproc",
        }
    }

    /// A fresh endpoint to bind. For TCP it contains a wildcard port: read the real one back after binding.
    pub fn bind_endpoint(self, what: &str) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        match self {
            Transport::Tcp => "tcp://127.0.0.1:*".to_string(),
            Transport::Ipc => {
                let path: PathBuf =
                    std::env::temp_dir().join(format!("tickbox-bench-{pid}-{n}-{what}.ipc"));
                format!("ipc://{}", path.display())
            }
            Transport::Inproc => format!("inproc://tickbox-bench-{n}-{what}"),
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Transport {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tcp" => Ok(Transport::Tcp),
            "ipc" => Ok(Transport::Ipc),
            "inproc" => Ok(Transport::Inproc),
            other => Err(BenchError::InvalidArgument(format!(
                "unknown transport {other:?} (expected tcp, ipc or inproc)"
            ))),
        }
    }
}

/// Parses a rate such as `100000`, `100k`, `1.5m`, `1M`.
pub fn parse_rate(s: &str) -> Result<u64, BenchError> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = match t.strip_suffix('k') {
        Some(n) => (n, 1_000.0),
        None => match t.strip_suffix('m') {
            Some(n) => (n, 1_000_000.0),
            None => (t.as_str(), 1.0),
        },
    };
    let value: f64 = num.parse().map_err(|_| {
        BenchError::InvalidArgument(format!("bad rate {s:?} (e.g. 100000, 100k, 1m)"))
    })?;
    let rate = (value * mult).round();
    if !(1.0..=1e9).contains(&rate) {
        return Err(BenchError::InvalidArgument(format!(
            "rate {s:?} out of range (1 to 1e9 msg/s)"
        )));
    }
    Ok(rate as u64)
}

/// Parses a duration such as `2s`, `500ms`, `1.5s`, `100us`, `1m`. A bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, BenchError> {
    let t = s.trim().to_ascii_lowercase();
    let bad = || BenchError::InvalidArgument(format!("bad duration {s:?} (e.g. 2s, 500ms, 1m)"));
    let (num, unit_ns) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60e9)
    } else {
        (t.as_str(), 1e9)
    };
    let value: f64 = num.trim().parse().map_err(|_| bad())?;
    let ns = value * unit_ns;
    if !(0.0..=86_400e9).contains(&ns) {
        return Err(bad());
    }
    Ok(Duration::from_nanos(ns as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates_durations_transports() {
        assert_eq!(parse_rate("100k").unwrap(), 100_000);
        assert_eq!(parse_rate("1m").unwrap(), 1_000_000);
        assert_eq!(parse_rate("1.5M").unwrap(), 1_500_000);
        assert_eq!(parse_rate("2500").unwrap(), 2_500);
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1_500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!("TCP".parse::<Transport>().unwrap(), Transport::Tcp);
        assert!("udp".parse::<Transport>().is_err());
        assert_ne!(
            Transport::Ipc.bind_endpoint("a"),
            Transport::Ipc.bind_endpoint("a")
        );
    }
}
