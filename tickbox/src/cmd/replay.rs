//! `tickbox replay`: publish a journal onto publisher shards at original pacing, a multiple of it, or flat out.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use tickbox_journal::Reader;
use tickbox_recorder::{Position, ReplayOptions, ReplayStats, Replayer, Speed};
use tickbox_wire::SystemClock;

use super::journal::{first_capture_ns, fmt_bytes, fmt_time, parse_duration, parse_time};
use crate::config::TickboxConfig;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Journal to replay (ring file or archive directory).
    #[arg(long)]
    journal: PathBuf,
    /// Publisher shard endpoints to bind, comma-separated; symbols are spread over them by stable hash.
    #[arg(long, value_delimiter = ',', required = true)]
    bind: Vec<String>,
    /// 1 = original pacing, N = N times faster (0.5 = half speed), max = as fast as subscribers take it.
    #[arg(long, default_value = "1", value_parser = parse_speed)]
    speed: Speed,
    /// Start at this capture time: ns since the epoch, RFC 3339, or +DURATION after the first record.
    #[arg(long, conflicts_with = "from_seq")]
    from: Option<String>,
    /// Start at this journal sequence.
    #[arg(long)]
    from_seq: Option<u64>,
    /// Stop before this capture time (same forms as --from).
    #[arg(long, conflicts_with = "to_seq")]
    to: Option<String>,
    /// Stop before this journal sequence.
    #[arg(long)]
    to_seq: Option<u64>,
    /// Before starting, wait until every shard has N subscriptions (counted on XPUB).
    #[arg(long, default_value_t = 0)]
    wait_subscribers: u64,
    /// Give up waiting for subscribers after this long (default: wait until Ctrl-C).
    #[arg(long, value_parser = parse_duration_arg)]
    wait_timeout: Option<Duration>,
    /// At the end of the journal keep tailing it (replay a recording in progress).
    #[arg(long)]
    follow: bool,
    /// Drop messages for slow subscribers like a live PUB, instead of waiting for them.
    #[arg(long)]
    allow_drop: bool,
    /// Publisher id of shard 0 (shard i is base + i). Default from config (9000).
    #[arg(long)]
    publisher_id: Option<u32>,
    /// No progress line on stderr.
    #[arg(long)]
    quiet: bool,
}

fn parse_speed(s: &str) -> Result<Speed, String> {
    s.parse()
}

fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| format!("{e:#}"))
}

pub fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let cfg = &config.recorder;
    let journal = args.journal.clone();
    let first = || first_capture_ns(&journal);
    let from = match (&args.from, args.from_seq) {
        (Some(t), _) => Some(Position::Time(parse_time(t, first)?)),
        (None, Some(s)) => Some(Position::Seq(s)),
        _ => None,
    };
    let to = match (&args.to, args.to_seq) {
        (Some(t), _) => Some(Position::Time(parse_time(t, || {
            first_capture_ns(&journal)
        })?)),
        (None, Some(s)) => Some(Position::Seq(s)),
        _ => None,
    };
    let mut reader = Reader::open(&args.journal)
        .with_context(|| format!("opening {}", args.journal.display()))?;
    let opts = ReplayOptions {
        bind: args.bind.clone(),
        speed: args.speed,
        from,
        to,
        publisher_id_base: args.publisher_id.unwrap_or(cfg.publisher_id_base),
        sndhwm: cfg.sndhwm,
        lossless: cfg.lossless && !args.allow_drop,
        window: Duration::from_micros(cfg.pacing_window_us),
        heartbeat_interval: Duration::from_millis(cfg.heartbeat_interval_ms),
        follow: args.follow,
        progress_every: Duration::from_secs(1),
    };
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let mut replayer = Replayer::bind(&ctx, opts)?;
    for (i, ep) in replayer.endpoints().iter().enumerate() {
        eprintln!("replay: shard {i} publishing on {ep}");
    }
    if args.wait_subscribers > 0 {
        eprintln!(
            "replay: waiting for {} subscriber(s) per shard",
            args.wait_subscribers
        );
        if !replayer.wait_subscribers(args.wait_subscribers, args.wait_timeout, &stop)? {
            if stop.load(Ordering::Relaxed) {
                eprintln!("replay: interrupted while waiting for subscribers");
                return Ok(ExitCode::SUCCESS);
            }
            anyhow::bail!(
                "timed out waiting for {} subscriber(s) per shard (have {:?})",
                args.wait_subscribers,
                replayer.poll_subscriptions()?
            );
        }
    }
    let start_seq = reader.position_seq();
    let quiet = args.quiet;
    let mut last = (0u64, Instant::now());
    let stats = replayer.run(&mut reader, &SystemClock, &stop, |s: &ReplayStats| {
        if quiet {
            return;
        }
        let dt = last.1.elapsed().as_secs_f64().max(1e-9);
        let rate = (s.sent - last.0) as f64 / dt;
        last = (s.sent, Instant::now());
        let pos = s.last_seq.unwrap_or(0);
        let begin = s.first_seq.or(start_seq).unwrap_or(1);
        let end = s.end_seq.max(pos + 1);
        let done = (pos + 1).saturating_sub(begin) as f64 / (end - begin).max(1) as f64;
        let eta = if rate > 0.0 {
            format!("{:.1}s", end.saturating_sub(pos + 1) as f64 / rate)
        } else {
            "-".into()
        };
        eprint!(
            "\rreplay: seq {pos} of {} ({:.1}%), at {}, {:.0} msg/s, ETA {eta}      ",
            end - 1,
            done * 100.0,
            s.last_capture_ns.map(fmt_time).unwrap_or_default(),
            rate
        );
    })?;
    if !quiet {
        eprintln!();
    }
    print_summary(&stats, args.speed, stop.load(Ordering::Relaxed));
    Ok(ExitCode::SUCCESS)
}

fn print_summary(s: &ReplayStats, speed: Speed, interrupted: bool) {
    println!("speed         {speed}");
    println!("sent          {}", s.sent);
    println!("bytes         {}", fmt_bytes(s.bytes));
    println!("per shard     {:?}", s.per_shard);
    println!(
        "duration      {:.3} s{}",
        s.elapsed.as_secs_f64(),
        if interrupted { " (interrupted)" } else { "" }
    );
    println!("rate          {:.0} msg/s", s.rate());
    if let (Some(a), Some(b)) = (s.first_seq, s.last_seq) {
        println!("journal seqs  {a} ..= {b}");
    }
    if let (Some(a), Some(b)) = (s.first_capture_ns, s.last_capture_ns) {
        println!(
            "captured      {} .. {} ({:.3} s)",
            fmt_time(a),
            fmt_time(b),
            b.saturating_sub(a) as f64 / 1e9
        );
    }
    println!("max late      {:.3} ms", s.max_late_ns as f64 / 1e6);
    println!(
        "heartbeats    {} sent, {} recorded ones skipped",
        s.heartbeats_sent, s.skipped_heartbeats
    );
    println!("invalid       {}", s.skipped_invalid);
    if s.lapped > 0 {
        println!(
            "lapped        {} (the recorder overwrote records before they were replayed)",
            s.lapped
        );
    }
    println!("subscriptions {:?}", s.subscriptions);
}
