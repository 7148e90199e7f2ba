//! Transports a bench runs over, and endpoints for them that never collide between runs or processes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::BenchError;

/// The libzmq transport a benchmark runs over; serialised and displayed as `tcp`, `ipc`, `inproc`.
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
    /// Every transport, in the order sweeps run them.
    pub const ALL: [Transport; 3] = [Transport::Tcp, Transport::Ipc, Transport::Inproc];

    /// The lowercase name used in labels, file names and reports.
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

/// Parses a rate in the one grammar every flag uses (`tickbox-units`: `100000`, `100k`, `1.5m`); `max` is not a
/// rate a bench can schedule.
pub fn parse_rate(s: &str) -> Result<u64, BenchError> {
    match s.parse::<tickbox_units::Rate>() {
        Ok(tickbox_units::Rate::PerSecond(n)) => Ok(n),
        Ok(tickbox_units::Rate::Max) => Err(BenchError::InvalidArgument(format!(
            "rate {s:?}: a bench schedules a finite rate (e.g. 100k)"
        ))),
        Err(e) => Err(BenchError::InvalidArgument(e.to_string())),
    }
}

/// Parses a duration in the one grammar every flag uses (`tickbox-units`: `2s`, `500ms`, `1.5s`, `100us`, `1m`).
pub fn parse_duration(s: &str) -> Result<Duration, BenchError> {
    tickbox_units::parse_duration(s).map_err(|e| BenchError::InvalidArgument(e.to_string()))
}

/// Reads an XPUB's subscription messages until the first subscribe arrives (`Ok(true)`), so nothing sent before a
/// subscriber joined is dropped, or until `give_up` says stop (`Ok(false)`). The socket's receive timeout decides
/// how often `give_up` is asked.
pub fn await_subscriber(
    xpub: &zmq::Socket,
    mut give_up: impl FnMut() -> bool,
) -> Result<bool, BenchError> {
    loop {
        match xpub.recv_bytes(0) {
            Ok(sub) if sub.first() == Some(&1) => return Ok(true),
            Ok(_) | Err(zmq::Error::EAGAIN) => {}
            Err(e) => {
                return Err(BenchError::Zmq {
                    what: "recv subscription",
                    source: e,
                })
            }
        }
        if give_up() {
            return Ok(false);
        }
    }
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
        assert_eq!(
            parse_duration("1.5s").unwrap(),
            Duration::from_millis(1_500)
        );
        // One grammar for every flag: a bare number is refused with a hint rather than guessed.
        assert!(parse_duration("1.5").is_err());
        assert!(parse_rate("max").is_err(), "a bench needs a finite rate");
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
