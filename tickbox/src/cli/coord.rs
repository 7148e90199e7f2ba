//! `tickbox coord`: its command-line arguments (what it parses; `cmd::coord` wires them).

use std::time::Duration;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// ZooKeeper ensemble: HOST:PORT[,HOST:PORT…]. Default: `[coord] zk` from the config, else 127.0.0.1:2181.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT…]")]
    pub(crate) zk: Option<String>,
    /// Session timeout asked of the server: a lock or leadership of a dead process moves after this long.
    /// Default: `[coord] session_timeout` (6s).
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) session_timeout: Option<Duration>,
    /// Give up connecting after this long (exit 4). Default: `[coord] connect_timeout` (10s).
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) connect_timeout: Option<Duration>,
    #[command(subcommand)]
    pub(crate) op: Op,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Op {
    /// List the children of PATH, each recipe among them with its state after a tab (group members, shard
    /// owners, leader and token, barrier parties and flag, lock holder); a first line `.` describes PATH itself
    /// when it is a recipe.
    Ls { path: String },
    /// Print the data of PATH (exit 1 when absent); `--stat` adds its metadata on stderr.
    Get {
        path: String,
        #[arg(long)]
        stat: bool,
    },
    /// Print every change under PATH (`KIND<TAB>PATH`), until Ctrl-C, `--count` events or `--for` elapses.
    Watch {
        path: String,
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        #[arg(long = "for", value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
        duration: Option<Duration>,
    },
    /// Show the recipes under PATH: lock holders and tokens, leaders, barriers, queues, groups, transactions.
    State {
        #[arg(default_value = "/")]
        path: String,
        /// One JSON object (`recipes`: one entry per recipe) instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Take the exclusive lock at PATH and print `HELD <token>`; with `--hold` keep it until Ctrl-C (or its loss:
    /// `LOST <reason>`, exit 1), else release at once.
    Lock {
        path: String,
        #[arg(long)]
        hold: bool,
        /// Give up waiting after this long (exit 4).
        #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
        timeout: Option<Duration>,
    },
    /// Stand in the election at PATH and print leadership changes until Ctrl-C or the candidacy is lost.
    Elect {
        path: String,
        /// Stored in the candidate's node (default: host name and pid).
        #[arg(long, value_name = "ID")]
        id: Option<String>,
    },
}
