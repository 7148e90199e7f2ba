//! `tickbox`: the command-line edge of the pipeline, as a library so the binary is one call ([`run`]). Each
//! subcommand has what it parses under `cli/` (its clap `Args`, flag value types and parsers) and its wiring
//! under `cmd/` (library crates put together); this file sets up logging, dispatches and maps errors to exit
//! codes.

// Output goes through `out::{out, outln, errln}`, which survive a closed pipe: `print!` and `eprint!` panic there.
#![warn(clippy::print_stdout, clippy::print_stderr)]

mod auth_report;
mod bounds;
mod cli;
mod cmd;
mod config;
#[cfg(test)]
mod docs_check;
pub mod exit_code;
mod exits;
mod flags;
mod live;
mod metrics;
mod out;
mod outcome;
mod shutdown;
mod spelling;
mod status;
mod zk;

use std::process::ExitCode;

use clap::{FromArgMatches, Parser, Subcommand};

use crate::out::errln;

/// The help heading of the options every command takes, apart from each command's own.
const GLOBAL: &str = "Global options";

/// The command line as `--help`, `man` and the completions show it: the derive's definition with every command's
/// exit codes added ([`exits`]).
pub(crate) fn command() -> clap::Command {
    exits::annotate(<Cli as clap::CommandFactory>::command())
}

#[derive(Debug, Parser)]
#[command(
    name = "tickbox",
    version,
    about = "Market-data pub-sub on ZeroMQ: feed, Black Box subscriber, LVC proxy, recorder/replayer, control plane, bench.",
    after_help = "Logging: to stderr; -q for warnings and errors only, -v for debug, -vv for trace; RUST_LOG overrides both (e.g. RUST_LOG=tickbox=debug)."
)]
pub(crate) struct Cli {
    /// TOML deployment config; every field has a default, so it is optional.
    #[arg(long, global = true, value_name = "PATH", help_heading = GLOBAL)]
    config: Option<std::path::PathBuf>,

    /// Only warnings and errors on stderr, and no progress lines.
    #[arg(short, long, global = true, conflicts_with = "verbose", help_heading = GLOBAL)]
    quiet: bool,

    /// More log detail on stderr: -v debug, -vv trace.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, help_heading = GLOBAL)]
    verbose: u8,

    /// Log line format on stderr: `text` for people, `json` (one object per line) for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, help_heading = GLOBAL)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run sharded publishers fed by the synthetic market generator.
    Feed(cli::feed::Args),
    /// Run the Black Box subscriber (SUB shards -> PUSH/PULL workers) with the Suicidal Snail guard.
    Subscribe(cli::subscribe::Args),
    /// Feed, subscriber and workers in one process for --duration, then a summary table.
    Demo(cli::demo::Args),
    /// Last Value Cache proxy (XSUB -> XPUB) with the Espresso tap.
    Lvc(cli::lvc::Args),
    /// Live inspector of an Espresso tap (or any tickbox PUB endpoint).
    Tap(cli::tap::Args),
    /// Record a stream into an mmap journal.
    Record(cli::record::Args),
    /// Replay a journal onto publisher shards at 1x, Nx or max speed.
    Replay(cli::replay::Args),
    /// Inspect a journal: info, verify, dump.
    Journal(cli::journal::Args),
    /// Import DBN files (Databento Binary Encoding) into a new journal.
    Import(cli::import::Args),
    /// Latency and throughput benchmarks beside a raw-libzmq baseline.
    Bench(cli::bench::Args),
    /// Clone (CHP) key-value server, optionally as a Binary Star pair.
    CloneServer(cli::clone_server::Args),
    /// Client for the Clone key-value store: get, set, del, ls, watch.
    Ctl(cli::ctl::Args),
    /// ZooKeeper recipes: ls, get, watch, state (locks, leaders, barriers, queues), lock, elect.
    Coord(cli::coord::Args),
    /// Majordomo broker (MDP 0.1 + MMI), optionally as a Binary Star pair.
    Broker(cli::broker::Args),
    /// Titanic durable request-reply service on a Majordomo broker.
    Titanic(cli::titanic::Args),
    /// Freelance (FLP) server.
    FreelanceServer(cli::freelance_server::Args),
    /// Send one request to a Majordomo service and print the reply frames.
    Call(cli::call::Args),
    /// Paranoid Pirate queue (6/PPP): Lazy Pirate clients to heartbeating workers, LRU.
    Queue(cli::queue::Args),
    /// Make a CURVE key pair: NAME (public) and NAME_secret (mode 0600), czmq's certificate format.
    Keygen(cli::keygen::Args),
    /// Print the effective configuration (defaults merged with --config) as TOML.
    Config(cli::config::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cli::docs::CompletionsArgs),
    /// Print the man page (roff): `tickbox man > tickbox.1`.
    Man(cli::docs::ManArgs),
    /// See the host, check it, plan the pinning per NIC, and sweep to the best configuration.
    Tune(cli::tune::Args),
    /// The fleet in one terminal: several processes' --metrics, one live table per role (like AeronStat).
    Top(cli::top::Args),
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines; coloured only when stderr is a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// Set once from `-q`: commands that draw progress lines on stderr leave them out.
static QUIET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Whether `-q` was given.
pub(crate) fn quiet() -> bool {
    QUIET.get().copied().unwrap_or(false)
}

/// The whole program: parses the command line and the config, sets up logging, runs the command and maps its
/// outcome to an exit code ([`exit_code`]).
pub fn run() -> ExitCode {
    metrics::mark_start();
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    let _ = QUIET.set(cli.quiet);
    init_logging(cli.quiet, cli.verbose, cli.log_format);
    spelling::warn_old_spellings();
    let config = match config::TickboxConfig::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(err) => {
            report_error(&err);
            return ExitCode::from(exit_code::ERROR);
        }
    };
    // Long-running servers take connections from peers, one file descriptor each: their soft limit is raised to
    // the hard one at start (docs/book/src/bounds.md).
    if matches!(
        cli.command,
        Command::Feed(_)
            | Command::Lvc(_)
            | Command::Tap(_)
            | Command::Record(_)
            | Command::Replay(_)
            | Command::CloneServer(_)
            | Command::Broker(_)
            | Command::Titanic(_)
            | Command::FreelanceServer(_)
            | Command::Queue(_)
            | Command::Demo(_)
    ) {
        bounds::raise_fd_limit();
    }
    let result = match cli.command {
        Command::Feed(args) => cmd::feed::run(args, &config),
        Command::Subscribe(args) => cmd::subscribe::run(args, &config),
        Command::Demo(args) => cmd::demo::run(args, &config),
        Command::Lvc(args) => cmd::lvc::run(args, &config),
        Command::Tap(args) => cmd::tap::run(args, &config),
        Command::Record(args) => cmd::record::run(args, &config),
        Command::Replay(args) => cmd::replay::run(args, &config),
        Command::Journal(args) => cmd::journal::run(args, &config),
        Command::Import(args) => cmd::import::run(args, &config),
        Command::Bench(args) => cmd::bench::run(args, &config),
        Command::CloneServer(args) => cmd::clone_server::run(args, &config),
        Command::Ctl(args) => cmd::ctl::run(args, &config),
        Command::Coord(args) => cmd::coord::run(args, &config),
        Command::Broker(args) => cmd::broker::run(args, &config),
        Command::Titanic(args) => cmd::titanic::run(args, &config),
        Command::FreelanceServer(args) => cmd::freelance_server::run(args, &config),
        Command::Call(args) => cmd::call::run(args, &config),
        Command::Queue(args) => cmd::queue::run(args, &config),
        Command::Keygen(args) => cmd::keygen::run(args, &config),
        Command::Config(args) => cmd::config::run(args, &config),
        Command::Completions(args) => cmd::docs::completions(args, &config),
        Command::Man(args) => cmd::docs::man(args, &config),
        Command::Tune(args) => cmd::tune::run(args, &config),
        Command::Top(args) => cmd::top::run(args, &config),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            report_error(&err);
            // A journal whose header is damaged (a zeroed ring header, every archive segment's) is corruption,
            // whichever command met it: the line names the file and the offset.
            if err.chain().any(|c| {
                matches!(
                    c.downcast_ref::<tickbox_metrics::MetricsError>(),
                    Some(tickbox_metrics::MetricsError::Bind { .. })
                )
            }) {
                return ExitCode::from(exit_code::METRICS_BIND);
            }
            if err.chain().any(|c| {
                matches!(
                    c.downcast_ref::<tickbox_journal::JournalError>(),
                    Some(tickbox_journal::JournalError::CorruptHeader { .. })
                )
            }) {
                return ExitCode::from(exit_code::CORRUPT);
            }
            ExitCode::from(exit_code::ERROR)
        }
    }
}

/// Prints a failure once, as one line: what went wrong, then each underlying cause that adds something.
fn report_error(err: &anyhow::Error) {
    errln!("error: {}", error_line(err));
}

/// `err` and its causes joined by `: `, leaving out a cause whose text the line already holds (libraries often
/// repeat their source in their own message: `zmq: Invalid argument: Invalid argument`).
pub(crate) fn error_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn init_logging(quiet: bool, verbose: u8, format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let level = match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    // RUST_LOG, when set, is the operator's explicit choice and wins over -q/-v.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{level},zookeeper_client=warn")));
    // Logs go to stderr so stdout stays clean for tables and machine-readable output.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Its complaint about a failed write is an `eprintln!`, which panics when stderr is closed.
        .log_internal_errors(false)
        .with_target(false);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        // clap checks every subcommand: no two flags share a name or a short letter, globals included.
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    /// One metavar per value type: every value an option or argument takes is named from one vocabulary (an
    /// endpoint is `EP`, a list of them `EP[,EP…]`, a duration `DURATION`, ...), or lists its choices (`a|b`).
    #[test]
    fn every_value_is_named_from_one_vocabulary() {
        const NAMES: &[&str] = &[
            "EP",
            "EP[,EP…]",
            "DURATION",
            "TIME",
            "N",
            "N[,N…]",
            "BYTES",
            "BYTES[,BYTES…]",
            "SIZE",
            "PATH",
            "PATH[,PATH…]",
            "URL",
            "PATH|URL",
            "DIR",
            "RATE",
            "RATE[,RATE…]",
            "RATIO",
            "SPEED",
            "CPU",
            "CPU[,CPU…]",
            "PREFIX",
            "PREFIX[,PREFIX…]",
            "KIND[,KIND…]",
            "HOST:PORT[,HOST:PORT…]",
            "IFACE",
            "IFACE[,IFACE…]",
            "ZONE",
            "HOST:PORT",
            "HH:MM",
            "ID",
            "NAME",
            "TEXT",
            "KEY",
            "VALUE",
            "SERVICE",
            "COMMAND",
        ];
        fn walk(c: &clap::Command, path: &str, wrong: &mut Vec<String>) {
            for arg in c.get_arguments() {
                if arg.is_hide_set() || !arg.get_num_args().is_some_and(|n| n.takes_values()) {
                    continue;
                }
                // A value enum lists its possible values itself.
                if !arg.get_possible_values().is_empty() {
                    continue;
                }
                for name in arg.get_value_names().unwrap_or_default() {
                    let name = name.as_str();
                    if !(NAMES.contains(&name) || name.contains('|')) {
                        wrong.push(format!("{path} {}: <{name}>", arg.get_id()));
                    }
                }
                if arg.get_value_names().is_none() {
                    wrong.push(format!("{path} {}: no value name", arg.get_id()));
                }
            }
            for sub in c.get_subcommands().filter(|s| !s.is_hide_set()) {
                walk(sub, &format!("{path} {}", sub.get_name()), wrong);
            }
        }
        let mut wrong = Vec::new();
        let mut cli = command();
        cli.build();
        walk(&cli, "tickbox", &mut wrong);
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn an_error_line_names_each_cause_once() {
        let inner = anyhow::anyhow!("Invalid argument");
        let err = inner
            .context("zmq: Invalid argument")
            .context("--connect tcp://x:1");
        assert_eq!(
            error_line(&err),
            "--connect tcp://x:1: zmq: Invalid argument"
        );
    }
}
