//! `tickbox top`: its command-line arguments (what it parses; `cmd::top` wires them).

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each ADDR is a command's metrics endpoint (`--metrics`): HOST:PORT or http://HOST:PORT/metrics. \
    One table per role (feed, lvc, subscribe, record, replay, broker), one row per process: rates between two \
    scrapes, totals since the process started, lateness p99 over the last interval, refusals, and whether a \
    recorder leads its election. Columns that do not fit the terminal's width are left out, least important \
    first. Processes that do not answer are listed under `unreachable`. Ctrl-C quits."
)]
pub(crate) struct Args {
    /// Metrics endpoints to watch (at most 256).
    #[arg(required = true, value_name = "HOST:PORT", num_args = 1..=MAX_ADDRS)]
    pub(crate) addrs: Vec<String>,
    /// Refresh this often; with --once, the time between the two scrapes the rates come from.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub(crate) interval: tickbox_units::HumanDuration,
    /// Print one snapshot and exit: 0 when every process answered, 1 otherwise.
    #[arg(long)]
    pub(crate) once: bool,
    /// Width to fit the tables to (default: the terminal's, else $COLUMNS, else 80).
    #[arg(long, value_name = "N")]
    pub(crate) width: Option<usize>,
}

/// The most processes one view watches (each is one HTTP request per refresh).
pub(crate) const MAX_ADDRS: usize = 256;
