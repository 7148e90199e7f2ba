//! tickbox-bench: honest latency and throughput measurement of the tickbox pipeline, always beside a raw-libzmq
//! baseline measured in the same run at the same rate, size and transport.
//!
//! * Latency is **open-loop**: messages are scheduled at a fixed offered rate and each is charged from its
//!   *intended* send time ([`measure`]), so a stall anywhere cannot hide its delay (coordinated omission).
//!   Both the corrected and the uncorrected (from the publisher's actual stamp) distributions are kept.
//! * One-way latency is the receive time at the worker minus the publisher's send time, both on the
//!   [`tickbox_wire::now_ns`] clock, through the real pipeline (feed shard → LVC → Black Box shard → worker).
//! * Reports: a stdout table, an HdrHistogram interval log (`.hlog`) and percentile distribution (`.hgrm`) per
//!   configuration, a percentile plot (SVG), and JSON-lines results that `compare` diffs.
//! * Throughput is flat-out with back-pressure (no silent drops), per message size and shard count, beside raw
//!   PUSH/PULL and PUB/SUB pairs with the same parallelism.
//! * Two shapes ([`Shape`]): every part a thread of the bench process (any transport), or separate processes
//!   over tcp ([`process`]): a real `tickbox feed` and `tickbox subscribe` beside a raw PUB and SUB process, so
//!   the figure is the product's as users run it.
//! * Replay ([`replay`]): a journal of generated market data replayed at `--speed max` into a Black Box, beside a
//!   raw XPUB → SUB sending the same frames.
//! * Record ([`record`]): a batched lossless feed written by the recorder to a journal, beside the Black Box on
//!   the same feed and a raw SUB copying the same messages into an mmap'd file.
//! * Every figure is measured `repeats` times, tickbox and raw alternating ([`stats`]), and reported as the median
//!   with its min–max; result files carry the machine's [`env::Environment`] and the run's [`env::Warning`]s.

pub mod compress;
pub mod demo;
pub mod env;
pub mod latency;
pub mod load;
pub mod measure;
pub mod pace;
pub mod pipeline;
pub mod plot;
pub mod process;
pub mod raw;
pub mod record;
pub mod replay;
pub mod report;
pub mod request;
pub mod scrape;
pub mod stats;
pub mod sweep;
pub mod transport;

pub use latency::{latency_table, LatencyConfig, LatencyRun, Shape};
pub use measure::{LatencyRecorder, LatencySamples, Percentiles, Schedule};
pub use pace::Stall;
pub use pipeline::{tickbox_latency, tickbox_throughput};
pub use raw::{
    raw_pubsub_latency, raw_throughput, raw_throughput_batched, records_per_batch, RawPattern,
    ThroughputConfig,
};
pub use report::{
    BenchRecord, LatencyResult, RecordResult, ReplayResult, RunDocument, ThroughputResult,
};
pub use transport::{parse_duration, parse_rate, Transport};

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything that can go wrong in a bench run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A rate, size, duration or option is out of range; nothing was run.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A libzmq call failed.
    #[error("zmq {what}: {source}")]
    Zmq {
        /// The operation, e.g. `"bind"` or `"send"`.
        what: &'static str,
        /// The libzmq error.
        #[source]
        source: zmq::Error,
    },
    /// A socket, thread or component of the measured path could not be set up.
    #[error("setup failed: {0}")]
    Setup(String),
    /// No probe crossed the path end to end within this time (slow joiner, wrong endpoint).
    #[error("the path never connected within {0:?}")]
    NotConnected(Duration),
    /// The named system recorded nothing in the measured window (all dropped or all late).
    #[error("{0}: no message of the measured window arrived")]
    NoSamples(&'static str),
    /// The OS refused a new thread.
    #[error("could not start a thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The named thread (publisher, receiver, …) panicked.
    #[error("{0} thread panicked")]
    ThreadPanicked(&'static str),
    /// Reading or writing a result file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A report could not be read, compared or plotted.
    #[error("report: {0}")]
    Report(String),
    /// A tickbox component (feed, LVC, subscriber) failed during the run.
    #[error("pipeline: {0}")]
    Pipeline(String),
}

impl BenchError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
