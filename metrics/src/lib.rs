//! Prometheus/OpenMetrics for tickbox's long-running commands (`--metrics ADDR`, `[metrics] bind`).
//!
//! A component never counts twice for metrics: it keeps the counters its summary and `--json` already print, and
//! hands the endpoint a [`Source`] that reads them when Prometheus scrapes. The source fills a [`Scrape`] (families
//! of counters, gauges, info metrics and histograms under the [`label`] conventions), which the Prometheus
//! project's own client (`prometheus-client`) encodes as OpenMetrics text. Nothing here runs per message: the
//! cost of a metric is paid at scrape time, by the scraper's thread.
//!
//! The HTTP side ([`Endpoint`]) is a few hundred lines of `std::net`, bounded in every direction: a fixed number
//! of handler threads, a short queue of accepted connections (past it a connection gets `503` at once and is
//! counted), a request head of at most 8 KiB read with a timeout, one response per connection. Anything but
//! `GET /metrics` is answered `404` (or `405`/`400`) and counted.

mod buckets;
mod config;
mod http;
mod published;
mod scrape;
pub mod text;
pub mod top;

pub use buckets::{Buckets, BUCKET_BOUNDS_NS};
pub use config::{is_loopback, resolve_bind, MetricsConfig};
pub use http::{fetch, Endpoint, ServerCounts, HANDLERS, QUEUE, REQUEST_HEAD_MAX};
pub use published::{Published, PUBLISH_EVERY};
pub use scrape::{render, HistogramSnapshot, Labels, Scrape, Source};

/// The label names every component uses, so one query works across roles (`sum by (shard)`, `{role="record"}`).
pub mod label {
    /// The command that serves the endpoint (`feed`, `subscribe`, `record`, ...); set on every sample.
    pub const ROLE: &str = "role";
    /// A shard's index (a publisher shard, a SUB shard, a recorder reader).
    pub const SHARD: &str = "shard";
    /// A publisher id from the wire header.
    pub const PUBLISHER: &str = "publisher";
    /// A worker thread's index.
    pub const WORKER: &str = "worker";
    /// A ZeroMQ endpoint as configured.
    pub const ENDPOINT: &str = "endpoint";
    /// A network interface name (`--nic`); empty where none was asked for.
    pub const NIC: &str = "nic";
    /// A CPU a thread is pinned to; empty where it is not pinned.
    pub const CORE: &str = "core";
    /// A libzmq I/O thread index (a shard's `io_thread`); empty where libzmq chooses.
    pub const IO_THREAD: &str = "io_thread";
    /// A Majordomo service name.
    pub const SERVICE: &str = "service";
    /// An outcome (`200`, `403`, `404`, `500`, ...).
    pub const STATUS: &str = "status";
    /// Why something was refused or dropped.
    pub const REASON: &str = "reason";
    /// A phase or state (`catch_up`, `live`, `leading`, ...).
    pub const STATE: &str = "state";
}

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address did not parse or resolve.
    #[error("metrics address {bind:?}: {why} (give PORT, HOST:PORT or [IPv6]:PORT; PORT alone is loopback)")]
    Address {
        /// As given.
        bind: String,
        /// What was wrong with it.
        why: String,
    },
    /// The address is taken or not ours to bind.
    #[error("metrics address {addr}: {source}{hint}")]
    Bind {
        /// The resolved address.
        addr: std::net::SocketAddr,
        /// The operating system's answer.
        source: std::io::Error,
        /// What to do about it.
        hint: &'static str,
    },
    /// A thread could not be started.
    #[error("metrics endpoint: starting a thread: {0}")]
    Thread(std::io::Error),
}

/// Bytes free (to an unprivileged writer) and in all on the filesystem that holds `path`; `None` when it cannot be
/// asked (the path is gone). One `statvfs` call: for a scrape, never a hot path.
#[allow(unsafe_code)]
pub fn disk_space(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path that outlives the call, and `st` points at writable memory the size of
    // a `statvfs`, which the call fills in whole when it returns 0.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised `st`.
    let st = unsafe { st.assume_init() };
    let block = st.f_frsize;
    Some((
        st.f_bavail.saturating_mul(block),
        st.f_blocks.saturating_mul(block),
    ))
}

#[cfg(test)]
mod disk_tests {
    #[test]
    fn the_disk_of_a_real_path_has_room_and_a_missing_one_has_no_answer() {
        let (free, total) =
            super::disk_space(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert!(total > 0 && free <= total);
        assert!(super::disk_space(std::path::Path::new("/no/such/path/at/all")).is_none());
    }
}
