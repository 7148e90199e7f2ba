//! Exit codes shared by every subcommand, each command's listed in its `--help` (the `exits` module) and in the
//! book's exit-code chapter (a test checks the two agree).

/// The command ran to completion.
pub const OK: u8 = 0;
/// Bad arguments, bad config, or a runtime error (the message says which).
pub const ERROR: u8 = 1;
/// The Suicidal Snail fired: a message arrived later than `--max-lateness` (or a gap with `gap_policy = "die"`).
pub const SNAIL: u8 = 3;
/// A request got no reply in time (`tickbox call`, `tickbox ctl`).
pub const TIMEOUT: u8 = 4;
/// `tickbox journal verify` found a corrupt record; `tickbox replay` skipped damaged records.
pub const CORRUPT: u8 = 5;
/// `tickbox journal verify --strict`: intact, but incomplete (gap records, or records a ring overwrote).
pub const GAPPY: u8 = 6;
/// The Clone server refused a `ctl set`/`del` and said why (key or value too long, store full, reserved key,
/// unauthorised key), or the broker answered `tickbox call` with `403 unauthorised: SERVICE`.
pub const REFUSED: u8 = 7;
/// A worker thread failed (panicked): the summary covers what the others did, but the run is incomplete.
pub const WORKER_FAILED: u8 = 8;
/// `tickbox replay` selected no record (`--topics`, `--from`/`--to`, `--from-seq`/`--to-seq`); the error
/// says what the journal holds.
pub const EMPTY_SELECTION: u8 = 9;
/// `tickbox bench compare --fail-above`: a figure regressed beyond the ratio, or nothing was comparable.
pub const REGRESSION: u8 = 10;
/// The metrics endpoint could not bind its address (`--metrics`, `[metrics] bind`): taken by another
/// process, or not this host's; nothing was started.
pub const METRICS_BIND: u8 = 11;
/// `tickbox record` stopped because the journal's disk is full (the journal is closed, verifies and holds
/// every record before it; the summary is printed), or found too little free space to start.
pub const DISK_FULL: u8 = 12;
/// `tickbox journal export`, `journal ls`, `replay`: the object store could not be reached, refused the
/// credentials, or failed a request (an export left nothing at the destination; a replay that lost the store
/// midway ends with this code after its summary).
pub const STORE: u8 = 13;
/// Every code above and clap's usage error (2), in order.
pub const ALL: [u8; 14] = [
    OK,
    ERROR,
    2,
    SNAIL,
    TIMEOUT,
    CORRUPT,
    GAPPY,
    REFUSED,
    WORKER_FAILED,
    EMPTY_SELECTION,
    REGRESSION,
    METRICS_BIND,
    DISK_FULL,
    STORE,
];
