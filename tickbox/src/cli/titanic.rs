//! `tickbox titanic`: its command-line arguments (what it parses; `cmd::titanic` wires them).

use std::path::PathBuf;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Fsync {
    PerRequest,
    Periodic,
    None,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum RedispatchArg {
    /// At most once: a request that reached a worker and got no reply within the job timeout is marked failed
    /// (`titanic.reply` answers 400 "outcome unknown"); one the broker reports undelivered is sent again.
    Never,
    /// Re-send with the same request id after each job timeout (exactly once if the service dedupes).
    AfterTimeout,
}

impl From<Fsync> for tickbox_majordomo::titanic::FsyncPolicy {
    fn from(f: Fsync) -> Self {
        match f {
            Fsync::PerRequest => Self::PerRequest,
            Fsync::Periodic => Self::Periodic,
            Fsync::None => Self::None,
        }
    }
}

impl From<RedispatchArg> for tickbox_majordomo::titanic::Redispatch {
    fn from(r: RedispatchArg) -> Self {
        match r {
            RedispatchArg::Never => Self::Never,
            RedispatchArg::AfterTimeout => Self::AfterTimeout,
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Majordomo broker endpoint to register with.
    #[arg(long, value_name = "EP")]
    pub(crate) broker: String,
    /// Journal directory (created if missing; an existing one is recovered).
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: PathBuf,
    /// When to force the journal to disk (overrides `[titanic] fsync`).
    #[arg(long, value_enum)]
    pub(crate) fsync: Option<Fsync>,
    /// Worker heartbeat interval, e.g. `2500ms` (must match the broker).
    #[arg(long, value_name = "DURATION")]
    pub(crate) heartbeat: Option<tickbox_units::HumanDuration>,
    /// Dispatcher rescan interval, e.g. `1s`.
    #[arg(long, value_name = "DURATION")]
    pub(crate) scan: Option<tickbox_units::HumanDuration>,
    /// After this long without a reply a dispatched request is logged as slow (never re-sent for it).
    #[arg(long, value_name = "DURATION")]
    pub(crate) dispatch_timeout: Option<tickbox_units::HumanDuration>,
    /// How long one attempt may run before it counts as lost (overrides `[titanic] job_timeout`).
    #[arg(long, value_name = "DURATION")]
    pub(crate) job_timeout: Option<tickbox_units::HumanDuration>,
    /// What a lost attempt leads to (overrides `[titanic] redispatch`).
    #[arg(long, value_enum)]
    pub(crate) redispatch: Option<RedispatchArg>,
    /// Sends per request in all under `--redispatch after-timeout`.
    #[arg(long, value_name = "N")]
    pub(crate) max_attempts: Option<u32>,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
    /// Print the final counters (and, with `[security]`, the auth counts) as one JSON object on stdout instead of
    /// the text lines.
    #[arg(long)]
    pub(crate) json: bool,
}
