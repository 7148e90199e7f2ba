//! `tickbox call`: its command-line arguments (what it parses; `cmd::call` wires them).

/// The status services the long-running commands register with a broker (`--broker EP`), listed in `--help`.
pub(crate) const STATUS_SERVICES: &str = "Status services (each registered by its command's --broker EP): \
    tickbox.feed.status (feed), tickbox.subscribe.status (subscribe), tickbox.lvc.status (lvc), \
    tickbox.record.status (record), tickbox.replay.status, tickbox.replay.start and tickbox.replay.stop (replay); \
    Titanic's titanic.request, titanic.reply and titanic.close (titanic); the broker's own mmi.service.";

#[derive(Debug, clap::Args)]
#[command(after_help = format!(
    "{STATUS_SERVICES}\nA service no worker has registered is answered at once: the broker's MMI says 404 (asked \
     before the request, so nothing waits for --timeout), `404` is printed and the exit code is 1. mmi.* services \
     are sent as they are."
))]
pub(crate) struct Args {
    /// Broker endpoint; repeat for a primary/backup pair (tried in turn after each timeout).
    #[arg(long, required = true, value_name = "EP[,EP…]")]
    pub(crate) broker: Vec<String>,
    /// Per-attempt timeout, e.g. `2500ms`.
    #[arg(long, default_value = "2500ms", value_name = "DURATION")]
    pub(crate) timeout: tickbox_units::HumanDuration,
    /// Attempts before giving up (each on a fresh socket).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub(crate) attempts: u32,
    /// Service name, e.g. `echo`, `mmi.service`, `titanic.request`, `tickbox.feed.status`.
    #[arg(value_name = "SERVICE")]
    pub(crate) service: String,
    /// Body frames; none sends one empty frame.
    #[arg(value_name = "TEXT")]
    pub(crate) body: Vec<String>,
}
