//! `tickbox tap`: its command-line arguments (what it parses; `cmd::tap` wires them).

use std::time::Duration;
use tickbox_lvc::tap;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The tap (or publisher) endpoint to connect to.
    #[arg(long, value_name = "EP")]
    pub(crate) connect: String,
    /// Topic prefixes to subscribe to (e.g. `Q.XNAS,T.`); default everything. Without a filter the inspector
    /// checks every publisher's sequence and prints `GAP` lines for what it lost; with one, gaps are expected
    /// and not checked.
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    pub(crate) topics: Vec<String>,
    /// Show only these kinds: quote, trade, heartbeat, book_level.
    #[arg(long, value_delimiter = ',', value_name = "KIND[,KIND…]")]
    pub(crate) kinds: Vec<String>,
    /// Show one message in N (of those passing the filters).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) sample: u64,
    /// Instead of messages, print a table of rates per topic prefix once a second: redrawn in place on a
    /// terminal, appended as plain tables otherwise.
    #[arg(long)]
    pub(crate) top: bool,
    /// Topic parts that make a prefix in `--top` (2: `Q.XNAS`).
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub(crate) depth: usize,
    /// Do not show subscription events.
    #[arg(long)]
    pub(crate) no_events: bool,
    /// How messages are framed: `tickbox` frames, the Guide's `guide` envelope ([topic][body…], as plain
    /// ZeroMQ publishers send through the LVC), or `auto`: a multipart message not led by a tickbox frame is
    /// a Guide envelope. A two-frame envelope whose value is a tickbox frame under its own topic (or a tap event
    /// under the topic `\0`), as `tickbox lvc --tap-framing guide` emits, is shown as that frame.
    #[arg(long, value_name = "tickbox|guide|auto", default_value = "auto")]
    pub(crate) framing: tap::Framing,
    /// Stop after this long (`10s`, `500ms`); default: until Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = tickbox_units::parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// Print the closing summary (frames, shown, malformed, missed) as one JSON object on stdout, after the
    /// messages; without it the summary is one line on stderr.
    #[arg(long)]
    pub(crate) json: bool,
}
