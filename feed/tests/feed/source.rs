//! `feed --source` through the one shard publisher (`SourceFeed` over `Shards`): a recording handed over
//! record by record reaches a reader as the feed's own publisher, and `duration` ends a run even while a
//! subscriber that never reads holds it.

use std::time::{Duration, Instant};

use tickbox_feed::{
    FeedConfig, PublisherShardConfig, RecordSource, SourceFeed, SourceItem, SourceRecord,
};
use tickbox_testkit::bind_loopback;
use tickbox_units::Speed;
use tickbox_wire::{Flags, Kind, MessageRef, Payload, Quote};

/// `n` quotes on `Q.XNAS.S<i % 7>`, 1 µs apart, with one unpublishable item after every tenth.
struct Quotes {
    n: u64,
    at: u64,
    skip_next: bool,
    frame: Vec<u8>,
}

impl RecordSource for Quotes {
    fn next_item(&mut self) -> Result<Option<SourceItem<'_>>, tickbox_feed::SourceError> {
        if std::mem::take(&mut self.skip_next) {
            return Ok(Some(SourceItem::Skipped("no tickbox form".into())));
        }
        if self.at == self.n {
            return Ok(None);
        }
        self.at += 1;
        self.skip_next = self.at.is_multiple_of(10);
        let time_ns = 1_700_000_000_000_000_000 + self.at * 1_000;
        let record = SourceRecord::encode(
            &mut self.frame,
            time_ns,
            time_ns,
            &format!("Q.XNAS.S{}", self.at % 7),
            &Payload::Quote(Quote {
                instrument_id: self.at as u32,
                ..Quote::default()
            }),
        )
        .unwrap();
        Ok(Some(SourceItem::Record(record)))
    }
}

fn config(endpoint: String, connect: bool) -> FeedConfig {
    FeedConfig {
        shards: vec![PublisherShardConfig {
            endpoint,
            connect,
            core: None,
        }],
        wait_for_subscribers: 1,
        publisher_id_base: 700,
        ..FeedConfig::default()
    }
}

/// A shard that connects (as into an LVC's frontend) to a SUB that binds: every record arrives once, in order,
/// restamped as publisher 700 with gap-free sequences and its event time as origin time, not marked replayed;
/// the report counts what was read, published and skipped.
#[test]
fn a_connecting_shard_delivers_every_record_in_order_as_the_feed() {
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvhwm(0).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub.set_rcvtimeo(5_000).unwrap();
    let endpoint = bind_loopback(&sub);
    let n = 500;
    let run = SourceFeed::start(
        &tickbox_auth::Gate::open(&ctx),
        config(endpoint, true),
        Box::new(Quotes {
            n,
            at: 0,
            skip_next: false,
            frame: Vec::new(),
        }),
        Speed::Max,
    )
    .unwrap();
    let mut seqs = Vec::new();
    let mut sessions = std::collections::BTreeSet::new();
    while (seqs.len() as u64) < n {
        let msg = sub.recv_bytes(0).expect("every record arrives within 5 s");
        let m = MessageRef::decode(&msg).unwrap();
        let h = m.header();
        if h.kind == Kind::Heartbeat {
            continue;
        }
        assert_eq!(h.publisher_id, 700);
        assert!(!h.flags.contains(Flags::REPLAY), "the feed's own message");
        let Payload::Quote(q) = m.payload().unwrap() else {
            panic!("a quote")
        };
        assert_eq!(
            h.origin_time_ns,
            1_700_000_000_000_000_000 + u64::from(q.instrument_id) * 1_000
        );
        assert_eq!(m.topic(), format!("Q.XNAS.S{}", q.instrument_id % 7));
        sessions.insert(h.session);
        seqs.push(h.sequence);
    }
    assert_eq!(seqs, (1..=n).collect::<Vec<_>>());
    assert_eq!(sessions.len(), 1, "one session");
    let report = run.join().unwrap();
    let totals = report.source.as_ref().unwrap();
    assert_eq!(totals.published, n);
    assert_eq!(
        totals.total_skipped(),
        n / 10 - 1 + u64::from(n.is_multiple_of(10))
    );
    assert_eq!(totals.read, totals.published + totals.total_skipped());
    assert!(totals.complete);
    assert_eq!(report.shards[0].last_sequence, n);
    assert_eq!(report.shards[0].counts.quotes, n);
}

/// Back-pressure on, a subscriber that never reads, a source far longer than the run: `duration` still ends the
/// run (a timer raises the halt while the publisher is blocked), the report says the source was not read to its
/// end, and what libzmq still held at the close is counted as undelivered.
#[test]
fn duration_ends_a_run_blocked_on_a_reader_that_never_reads() {
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvhwm(10).unwrap();
    sub.set_rcvbuf(4096).unwrap();
    sub.set_subscribe(b"").unwrap();
    let mut config = config("tcp://127.0.0.1:*".into(), false);
    config.back_pressure = tickbox_zmqx::BackPressure::Block;
    config.send_hwm = 10;
    // Small kernel buffers: the pipe is full after a few hundred quotes, however fast the machine.
    config.socket_profile.sndbuf = Some(4096);
    // Long enough that a publisher starved by a loaded machine still fills the pipe before the end: it holds
    // 130-160 quotes here (with 7-10 left in libzmq at the close), and a run of 300 ms on a loaded machine once
    // published only 106, all of which the drain then let go (nothing undelivered to count).
    config.duration = Some(Duration::from_secs(1).into());
    config.drain_timeout = Duration::from_millis(100).into();
    let run = SourceFeed::start(
        &tickbox_auth::Gate::open(&ctx),
        config,
        Box::new(Quotes {
            n: u64::MAX,
            at: 0,
            skip_next: false,
            frame: Vec::new(),
        }),
        Speed::Max,
    )
    .unwrap();
    sub.connect(&run.shards()[0].endpoint).unwrap();
    let started = Instant::now();
    // Joined on another thread, so a run that never ends fails the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(run.join()));
    let report = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the run ends by its duration")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "ended by duration, took {:?}",
        started.elapsed()
    );
    let totals = report.source.as_ref().unwrap();
    assert!(!totals.complete);
    assert!(totals.published > 0);
    assert!(report.shards[0].counts.would_block > 0, "{report:?}");
    assert_eq!(report.shards[0].subscribers_at_close, 1, "{report:?}");
    assert!(report.total_undelivered() > 0, "{report:?}");
}
