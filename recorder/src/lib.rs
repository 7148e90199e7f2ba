//! `tickbox-recorder`: records a tickbox stream into a [`tickbox_journal`] journal and replays it onto publisher
//! shards at 1x, Nx or maximum speed.
//!
//! * [`record`] — SUB on a tap or any tickbox PUB endpoint; every valid frame is appended with its capture time
//!   (ns since the Unix epoch, taken on receipt), in batches of up to `batch_max` frames.
//! * [`Replayer`] — one XPUB per endpoint; frames are sharded by [`tickbox_wire::shard_for`] of the topic's
//!   symbol key, re-stamped in place (publisher id `base + shard`, gap-free per-shard sequence, replay send time,
//!   [`tickbox_wire::Flags::REPLAY`]; origin time and payload kept) and paced by the sans-IO [`Pacer`] on the
//!   recorded capture times. Recorded heartbeats are dropped; each idle shard sends its own, like a live publisher.
//!   `wait_subscribers` counts XPUB subscriptions before starting, so nobody misses the first messages.

mod config;
mod error;
mod pacer;
mod record;
mod replay;

pub use config::{DurabilityConfig, RecorderConfig};
pub use error::RecorderError;
pub use pacer::{Pace, Pacer, Speed};
pub use record::{record, RecordOptions, RecordStats};
pub use replay::{Position, ReplayOptions, ReplayStats, Replayer};
