//! `tickbox demo`: its command-line arguments (what it parses; `cmd::demo` wires them).

use tickbox_feed::Rate;
use tickbox_subscriber::{Dispatch, HumanDuration, SnailMode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Transport {
    Inproc,
    Tcp,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How long the feed publishes.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub(crate) duration: HumanDuration,
    /// Feed rate over all shards (100k, 1.5m) or `max` for flat out.
    #[arg(long, default_value = "100k", value_name = "RATE")]
    pub(crate) rate: Rate,
    /// Feed shards, and as many subscriber shards; at most 64.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = crate::bounds::shards)]
    pub(crate) shards: usize,
    /// Worker threads; at most 256.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = crate::bounds::workers)]
    pub(crate) workers: usize,
    #[arg(long, value_enum, default_value = "inproc")]
    pub(crate) transport: Transport,
    /// Publish on a plain (lossy) PUB: a full subscriber pipe drops messages (reported as gaps). Default is
    /// XPUB with ZMQ_XPUB_NODROP, which back-pressures the feed instead.
    #[arg(long)]
    pub(crate) lossy: bool,
    /// Synthetic universe size (at most 1000000).
    #[arg(long, default_value_t = 1_000, value_name = "N", value_parser = crate::bounds::symbols)]
    pub(crate) symbols: usize,
    /// Suicidal Snail threshold (default from the config, 1s).
    #[arg(long, value_name = "DURATION")]
    pub(crate) max_lateness: Option<HumanDuration>,
    /// How shards hand messages to workers: by_topic (one worker per symbol, in order) or round_robin. Default
    /// from the config (by_topic).
    #[arg(long, value_name = "by_topic|round_robin")]
    pub(crate) dispatch: Option<Dispatch>,
    /// How the snail measures lateness: strict or skew_tolerant. Default from the config (strict).
    #[arg(long, value_name = "strict|skew_tolerant")]
    pub(crate) snail_mode: Option<SnailMode>,
    /// Skip the raw libzmq baseline loop.
    #[arg(long)]
    pub(crate) no_baseline: bool,
    /// How long each raw baseline mode runs.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub(crate) baseline_duration: HumanDuration,
    /// Print the summary as one JSON object on stdout instead of the tables.
    #[arg(long)]
    pub(crate) json: bool,
}
