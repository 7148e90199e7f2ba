//! `tickbox subscribe`: its command-line arguments (what it parses; `cmd::subscribe` wires them).

use crate::live::LiveArgs;
use tickbox_subscriber::{Dispatch, GapPolicy, Handoff, HumanDuration, SnailMode};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "One shard (SUB socket + thread) per --connect endpoint. With --dispatch by_topic (the default) each \
    shard sends every message of a symbol (Q.V.S and T.V.S alike) to one worker, chosen by a stable hash, so a \
    worker sees each symbol's updates in order; round_robin spreads messages evenly with no order per symbol.\n\
    The Suicidal Snail checks lateness (receive time - publisher send time) at each shard and again when a worker \
    dequeues, so a backlog behind slow workers also counts. Past --max-lateness the subscriber logs one ERROR \
    line, prints `SNAIL {json}` on stderr and exits with code 3. LVC cached values and gap notices are exempt. \
    Each publisher's clock offset is estimated as its minimum observed delay and reported; --snail-mode \
    skew_tolerant judges lateness relative to it instead of the publisher's clock.\n\
    Sequences are checked per publisher only when subscribed to everything (no --topics): only this hop's own \
    losses count as gaps (and trip --gap-policy die); restarts, duplicates, reordered arrivals, recorded gaps \
    (gap notices from a replayed journal) and implausible jumps (anomalies) are counted apart.\n\
    Exits 1 when it received nothing at all, when every frame it received was malformed (nothing usable: a \
    foreign publisher), or when a --nic does not exist or has no IPv4 address.\n\
    With --clone: /config/subscriber/max_lateness overrides the threshold while running (deleting it reverts to \
    the command line/config value; an invalid value is logged and ignored), the subscriber registers under \
    /members/subscribers/ID with a TTL, and a fatal event is also written to /alerts/subscribers/ID."
)]
pub(crate) struct Args {
    /// Publisher endpoints, one shard each (e.g. tcp://10.0.0.1:5556,tcp://10.0.1.1:5556). Overrides
    /// `[[subscriber.shards]]` from the config.
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP…]")]
    pub(crate) connect: Vec<String>,
    /// Network interface per shard (one name applies to all shards); connects as tcp://IFACE:0;HOST:PORT. An
    /// interface that does not exist or has no IPv4 address is an error at start.
    #[arg(long, value_delimiter = ',', value_name = "IFACE[,IFACE…]")]
    pub(crate) nic: Vec<String>,
    /// Worker threads (each pulls from every shard); at most 256. Default: one per shard (`[workers] count`), which
    /// lets one shard hand off inline.
    #[arg(long, value_name = "N", value_parser = crate::bounds::workers)]
    pub(crate) workers: Option<usize>,
    /// Stop after this long (250ms, 10s, 5m); runs until Ctrl-C otherwise.
    #[arg(long, value_name = "DURATION")]
    pub(crate) duration: Option<HumanDuration>,
    /// Stop once no frame has arrived for this long (since the last one, or since the start when none comes at
    /// all): subscribe to a replay until it ends. A publisher's heartbeats count as arriving, so point it at a
    /// stream that goes quiet when done. A run that has received nothing says so after 3 s either way.
    #[arg(long, value_name = "DURATION")]
    pub(crate) idle_exit: Option<HumanDuration>,
    /// Suicidal Snail threshold (250us, 5ms, 1s); 0 disables. Default 1s.
    #[arg(long, value_name = "DURATION")]
    pub(crate) max_lateness: Option<HumanDuration>,
    /// Topic prefixes to subscribe to (Q.XNAS.,T.); heartbeats (H.) are always added. Default: everything.
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    pub(crate) topics: Vec<String>,
    /// CPU ids: the first one per shard pins the shards, the rest pin the workers in order.
    #[arg(long, value_delimiter = ',', value_name = "CPU[,CPU…]")]
    pub(crate) cores: Vec<usize>,
    /// What a sequence gap (this hop's own loss) does: warn (log and count) or die (exit like the snail).
    #[arg(long, value_name = "warn|die")]
    pub(crate) gap_policy: Option<GapPolicy>,
    /// How shards hand messages to workers: by_topic (one worker per symbol, in order; default) or round_robin.
    #[arg(long, value_name = "by_topic|round_robin")]
    pub(crate) dispatch: Option<Dispatch>,
    /// How shards hand records to workers: auto (default: inline when there is one worker per shard and one shard
    /// or round_robin, else ring; the summary says which it chose and why), ring (in-process lock-free channels),
    /// zmq (inproc PUSH/PULL per worker, as in the ZeroMQ Guide) or inline (each shard runs its own worker: as many
    /// workers as shards, no hand-off, lowest latency). Overrides `[subscriber] handoff`.
    #[arg(long, value_name = "auto|ring|zmq|inline")]
    pub(crate) handoff: Option<Handoff>,
    /// How messages are read: `tickbox` frames (default), the ZeroMQ Guide's `guide` envelope ([topic][body], as
    /// plain ZeroMQ publishers send: each body goes to the worker owning its topic, with no snail or sequence
    /// check since it has no header; per-topic counts are in the summary; one frame or more than two is
    /// malformed), or `auto`: a multipart message not led by a tickbox frame is a Guide message. The framing
    /// enum of `tickbox tap --framing`. Overrides `[subscriber] framing`.
    #[arg(long, value_name = "tickbox|guide|auto")]
    pub(crate) framing: Option<tickbox_subscriber::Framing>,
    /// How the snail measures lateness: strict (against the publisher's clock; default) or skew_tolerant
    /// (relative to the publisher's best observed delay).
    #[arg(long, value_name = "strict|skew_tolerant")]
    pub(crate) snail_mode: Option<SnailMode>,
    /// Warn when a publisher's estimated clock offset exceeds this either way (0 never). Default 100ms.
    #[arg(long, value_name = "DURATION")]
    pub(crate) clock_skew_warn: Option<HumanDuration>,
    /// An LVC's snapshot endpoint (`tickbox lvc --snapshot`): once subscribed, ask it for the last value of every
    /// topic under --topics, sent to this subscriber alone, and process them as CACHED values. The summary says
    /// how many arrived and whether the snapshot was complete. Overrides `[subscriber] lvc_snapshot`.
    #[arg(long, value_name = "EP")]
    pub(crate) lvc_snapshot: Option<String>,
    /// How long the LVC snapshot may take before it is reported as timed out. Default 5s.
    #[arg(long, value_name = "DURATION")]
    pub(crate) lvc_snapshot_timeout: Option<HumanDuration>,
    /// A recorder's history service (`tickbox record --serve`): hold the live stream, fetch the history from
    /// --from, then go live with no gap and no duplicate at the seam. `zk:PATH` asks the leader of the recorders'
    /// election at PATH (`record --elect PATH --serve EP`; ZooKeeper from --zk). Overrides `[subscriber] catch_up`.
    #[arg(long, value_name = "EP")]
    pub(crate) catch_up: Option<String>,
    /// Where --catch-up's history starts: `start` (the journal's oldest record), RFC 3339 or ns since the epoch
    /// (origin time). Overrides `[subscriber] catch_up_from`. Default start.
    #[arg(long = "from", value_name = "TIME", requires = "catch_up")]
    pub(crate) catch_up_from: Option<String>,
    /// The most live data held while catching up (`256MiB`); past it the subscriber stops with an error naming
    /// this budget. Overrides `[subscriber] catch_up_budget`.
    #[arg(long, value_name = "SIZE")]
    pub(crate) catch_up_budget: Option<tickbox_units::ByteSize>,
    /// Print the summary as one JSON object on stdout instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write one NDJSON line per record a worker handled to PATH (topic, kind, publisher, sequence, origin time,
    /// cached, worker; each worker's lines in its handling order), written in 64 KiB chunks and at exit. The
    /// lines written are reported on stderr; a write error is exit 1. See docs/book/src/black-box.md, "The tape".
    #[arg(long, value_name = "PATH", conflicts_with = "group")]
    pub(crate) tape: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) live_view: LiveArgs,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
    /// Testing aid: every worker sleeps this long per message, to show that a slow consumer trips the snail.
    #[arg(long, value_name = "DURATION", hide = true)]
    pub(crate) debug_worker_delay: Option<HumanDuration>,
    /// For `bench latency --shape processes`: every worker also keeps each data record's (sequence, send stamp,
    /// dequeue time) and the samples are written to PATH at exit (tickbox-bench's sample file).
    #[arg(long, value_name = "PATH", hide = true, conflicts_with = "group")]
    pub(crate) latency_out: Option<std::path::PathBuf>,
    /// With --latency-out: samples each worker makes room for before the run (more are counted, not kept).
    #[arg(long, value_name = "N", hide = true, requires = "latency_out", default_value_t = 1 << 20)]
    pub(crate) latency_capacity: usize,
    /// Clone key-value servers (tcp://HOST:PORT, or two for a Binary Star pair) for live configuration,
    /// membership and alerts. Overrides `[subscriber] clone`.
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP…]")]
    pub(crate) clone: Vec<String>,
    /// Identity under /members/subscribers/ and /alerts/subscribers/. Default: HOSTNAME-PID.
    #[arg(long, value_name = "ID")]
    pub(crate) member_id: Option<String>,
    /// Membership lease: the entry disappears this long after the subscriber dies. Default 3s.
    #[arg(long, value_name = "DURATION")]
    pub(crate) member_ttl: Option<HumanDuration>,
    /// Majordomo broker to register `tickbox.subscribe.status` with.
    #[arg(long, value_name = "EP")]
    pub(crate) broker: Option<String>,
    /// ZooKeeper ensemble for --start-barrier and --group: HOST:PORT[,HOST:PORT…]. Default: `[coord] zk`.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT…]")]
    pub(crate) zk: Option<String>,
    /// Double barrier (ZooKeeper path) shared with a `tickbox replay --start-barrier PATH --parties N` and the
    /// other subscribers: enter once connected and subscribed (the replay sends nothing before all are in),
    /// leave once stopped (--idle-exit, --duration, Ctrl-C) and exit when every party has left.
    #[arg(long, value_name = "PATH", requires = "parties")]
    pub(crate) start_barrier: Option<String>,
    /// Subscribers in --start-barrier, this one included (the replay is one more party).
    #[arg(long, value_name = "N", requires = "start_barrier", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) parties: Option<u32>,
    /// Share the --connect shards with the other subscribers of the group at PATH (ZooKeeper): each shard is
    /// consumed by one member, its lock holder; a dead member's shards move to the others within the session
    /// timeout, and a joining member takes over its fair share. One summary per shard owned.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["start_barrier", "clone", "broker"])]
    pub(crate) group: Option<String>,
}
