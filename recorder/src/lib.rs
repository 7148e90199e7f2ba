//! `tickbox-recorder`: records a tickbox stream into a [`tickbox_journal`] journal and replays it onto publisher
//! shards at 1x, Nx or maximum speed.
//!
//! * [`record`] / [`Recorder`] — SUB on a tap or any tickbox PUB endpoint; every valid frame is appended with its
//!   capture time (ns since the Unix epoch, taken on receipt), in batches of up to `batch_max` frames. Every
//!   publisher sequence is accounted for: each loss becomes a gap-notice record ([`tickbox_wire::GapNotice`],
//!   topic `G.<publisher>`) written where it was noticed, and the per-publisher [`Ledger`] (recorded, missing,
//!   overwritten) is kept in the journal's application metadata. Tap subscription events are skipped and counted.
//! * [`Replayer`] — one XPUB per endpoint. By default every record keeps its original publisher id, session and
//!   sequence (only the send time is re-stamped, and [`tickbox_wire::Flags::REPLAY`] set; origin time and payload
//!   kept), each publisher stays on one shard, gap notices are re-published as they are and cached values keep
//!   theirs, so a subscriber of the replay tells the journal's holes apart from its own transport loss. Recorded
//!   heartbeats are dropped; the replay sends its own per original publisher while idle and at the end.
//!   [`Identity::Restamp`] gives the old behaviour (per-shard publishers with fresh gap-free sequences).
//!   `wait_subscribers` counts XPUB subscriptions before starting, so nobody misses the first messages. It reads
//!   any [`ReplayInput`] (a journal [`tickbox_journal::Reader`], a history) and publishes through the feed's
//!   shard publishers (`tickbox_feed::Publisher`, `tickbox_feed::Shards`: batching, heartbeats, the subscriber
//!   tally, the drain), keeping only the journal's semantics here. `feed --source` is the feed's
//!   (`tickbox_feed::SourceFeed`).

mod catalog;
mod config;
mod control;
mod error;
mod history;
mod history_check;
mod history_dir;
mod history_reader;
mod history_server;
mod input;
mod inspect;
mod journal_ext;
mod journal_view;
mod keeper;
// `flock` on lease files: a libc call, each in its own block with its SAFETY.
#[allow(unsafe_code)]
mod lease;
mod ledger;
mod live_lines;
mod local_feed;
mod local_feed_view;
mod merge;
mod metrics;
mod progress;
mod record;
mod record_session;
mod replay;
mod replay_session;
mod retention;
mod roll;
mod selection;
mod stitch;
mod summary;

pub use catalog::{
    bytes_on_disk, card_path, is_compressed, stamp_of, JournalCard, Verified, HISTORY_FILE,
    SUMMARY_SUFFIX,
};
pub use config::{DurabilityConfig, JournalModeConfig, RecorderConfig};
pub use control::{
    fmt_position, parse_position, parse_start, Effect, ReplayController, ReplayShared, RunSpec,
    RunState,
};
pub use error::{HistoryError, RecorderError, SelectionError};
pub use history::{HistoryAction, HistoryService, HistoryServiceConfig, HistoryServiceReport};
pub use history_check::{Catalog, ChainBreak, HistoryCheck, JournalCheck};
pub use history_dir::{Closed, HistoryDir, HistoryJournal, HistoryWriter};
pub use history_reader::{first_capture_ns, HistoryReader};
pub use history_server::{
    election_id, history_endpoint_in, HistoryServer, HistoryServerOptions, HistoryServerReport,
};
pub use input::{Input, Position, PublisherPositions, ReplayInput};
pub use inspect::{
    dump_header, format_dump_line, format_metadata_repairs, format_summary, format_verdict,
    JournalAccounting, JournalVerdict, PublisherAccount, RecordScan, ScanRow, MAX_SCAN_PUBLISHERS,
};
pub use journal_ext::{overwritten, overwritten_at, read_app_meta, OverwriteStats, APP_META_MAX};
pub use journal_view::{compress_line, JournalView, ViewError};
pub use keeper::{AfterClose, AfterCloseFn, Keeper, KeeperReport};
pub use lease::{lease_path, writer_holds, Lease, LEASE_SUFFIX};
pub use ledger::{Ledger, LedgerError, LedgerOverflow, LedgerRow, MAX_LEDGER_PUBLISHERS};
pub use live_lines::{record_line, replay_line};
pub use local_feed::{LocalFeed, LocalFeedReport, LOOK_BACK};
pub use merge::{open_input, MergedInput};
pub use metrics::{RecordMetrics, ReplayMetrics};
pub use progress::{stop_seq_of, ReplayProgress};
pub use record::{
    record, record_with, Journals, RecordOptions, RecordStats, Recorder, RollCheck,
    TAP_EVENT_MARKER,
};
pub use record_session::{
    DiskCheck, HistoryRun, RecordObserver, RecordOutcome, RecordRequest, RecordSession,
    RecordSettings, ELECTED_PROGRESS_EVERY, PROGRESS_EVERY,
};
pub use replay::{Closing, Identity, ReplayOptions, ReplayStats, Replayer};
pub use replay_session::{
    ReplayExit, ReplayObserver, ReplayOutcome, ReplayRequest, ReplaySession, RunSummary,
};
pub use retention::{prune, PruneReport, Pruned, Retention};
pub use roll::{Period, Roll, RollError, MIN_ROLL_SIZE};
pub use selection::{
    empty_selection, format_in_zone, parse_zone, JournalOverview, ReplayAsk, ReplayPlan,
    ReplaySelection, TimeZone, When, CLOCK_SLACK,
};
pub use stitch::{
    stitch, Hole, InputReport, LeaderSpan, StitchInput, StitchReport, MAX_RANGES, MAX_WAITING,
};
pub use tickbox_units::{Pace, ReplayPacer, Speed};
