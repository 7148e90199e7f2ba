//! One module per subcommand holding what it parses: its `Args` (clap derive) and the value enums and
//! subcommands of its flags. The wiring that runs them is in `cmd`, under the same name.

use std::path::PathBuf;

pub(crate) mod bench;
pub(crate) mod broker;
pub(crate) mod call;
pub(crate) mod clone_server;
pub(crate) mod config;
pub(crate) mod coord;
pub(crate) mod ctl;
pub(crate) mod demo;
pub(crate) mod docs;
pub(crate) mod export;
pub(crate) mod feed;
pub(crate) mod freelance_server;
pub(crate) mod import;
pub(crate) mod journal;
pub(crate) mod keygen;
pub(crate) mod lvc;
pub(crate) mod queue;
pub(crate) mod record;
pub(crate) mod replay;
pub(crate) mod subscribe;
pub(crate) mod tap;
pub(crate) mod titanic;
pub(crate) mod top;
pub(crate) mod tune;

/// `--tz ZONE`: an IANA time zone name (or `UTC`).
pub(crate) fn parse_tz(s: &str) -> Result<tickbox_units::TimeZone, String> {
    tickbox_units::parse_zone(s).map_err(|e| e.to_string())
}

/// `--from`/`--to TIME`: RFC 3339, a local date-time or time of day, ns since the epoch or +DURATION (the
/// replay's time grammar).
pub(crate) fn parse_when(s: &str) -> Result<tickbox_units::When, String> {
    tickbox_units::When::parse(s).map_err(|e| e.to_string())
}

/// The journal (or history directory) a subcommand reads: `--journal PATH`, as `record`, `replay` and `import`
/// name it. The bare path of the old spelling is still taken for one release, and says so.
#[derive(Debug, clap::Args)]
pub(crate) struct JournalArg {
    /// A journal (ring file or archive directory) or a history directory (`record --roll`).
    #[arg(
        long = "journal",
        value_name = "PATH",
        required_unless_present = "path",
        conflicts_with = "path"
    )]
    pub(crate) journal: Option<PathBuf>,
    /// Deprecated spelling of `--journal PATH`.
    #[arg(value_name = "PATH", hide = true)]
    pub(crate) path: Option<PathBuf>,
}

impl JournalArg {
    pub(crate) fn path(&self) -> PathBuf {
        match (self.journal.clone(), self.path.clone()) {
            (Some(journal), _) => journal,
            (None, Some(path)) => {
                tracing::warn!(
                    "a bare journal path is deprecated: write --journal {} (accepted until the next release)",
                    path.display()
                );
                path
            }
            // clap requires one of the two.
            (None, None) => PathBuf::new(),
        }
    }
}
