//! `tickbox ctl`: its command-line arguments (what it parses; `cmd::ctl` wires them).

use std::time::Duration;

/// Exit codes: 0 done; 1 error, or `get` of an absent key; 4 no server answered within --timeout; 7 the server
/// refused the update (`set`/`del`) and the printed reason says why (key or value too long, store full, reserved
/// key).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 done; 1 error (or `get`: key absent); 4 no server answered within \
--timeout; 7 refused by the server (set/del): the reason is printed, e.g. too-many-keys, value-too-large."
)]
pub(crate) struct Args {
    /// Server base endpoint(s), comma-separated for a Binary Star pair: tcp://HOST:P[,tcp://HOST2:P2].
    #[arg(
        long = "connect",
        alias = "server",
        default_value = "tcp://localhost:5556",
        value_name = "EP[,EP…]"
    )]
    pub(crate) server: String,
    /// Give up when no server answers within this long (e.g. 500ms, 5s).
    #[arg(long, default_value = "5s", value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) timeout: Duration,
    #[command(subcommand)]
    pub(crate) op: Op,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Op {
    /// Print the value of KEY (exit 1 when absent).
    Get { key: String },
    /// Set KEY to VALUE and wait for the server's acknowledgement (exit 7 with the reason if the server refuses it).
    Set {
        key: String,
        value: String,
        /// Server deletes the key after this long (CHP `ttl` property).
        #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
        ttl: Option<Duration>,
    },
    /// Delete KEY.
    Del { key: String },
    /// List keys (and values) under PREFIX.
    Ls {
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Print changes under PREFIX as they happen: `seq<TAB>key<TAB>value` (value `-` = deleted).
    Watch {
        #[arg(default_value = "")]
        prefix: String,
        /// Stop after this many changes.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Stop after this long.
        #[arg(long = "for", value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
        duration: Option<Duration>,
        /// Print the current entries first.
        #[arg(long)]
        existing: bool,
    },
}
