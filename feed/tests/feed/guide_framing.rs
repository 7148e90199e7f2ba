//! `framing = "guide"`: the pathological publisher sends the Guide's envelope, `[topic][tickbox frame]`, every
//! message of it (heartbeats too), and only the pathological pattern may.

use std::time::{Duration, Instant};

use tickbox_feed::{Feed, FeedConfig, Framing, Pattern, PublisherShardConfig};
use tickbox_wire::MessageRef;

#[test]
fn the_pathological_publisher_speaks_the_guides_two_frames() {
    let ctx = zmq::Context::new();
    let config = FeedConfig {
        shards: vec![PublisherShardConfig {
            endpoint: "inproc://guide-framing".into(),
            ..PublisherShardConfig::default()
        }],
        symbols: 5,
        pattern: Pattern::Pathological,
        pathological_interval: Duration::from_millis(20).into(),
        heartbeat_interval: Duration::from_millis(5).into(),
        framing: Framing::Guide,
        wait_for_subscribers: 1,
        duration: Some(Duration::from_millis(300).into()),
        ..FeedConfig::default()
    };
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_subscribe(b"").unwrap();
    let feed = Feed::start(&tickbox_auth::Gate::open(&ctx), config).unwrap();
    sub.connect("inproc://guide-framing").unwrap();
    let mut topics = std::collections::BTreeSet::new();
    let mut heartbeats = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && !(feed.is_finished() && sub.poll(zmq::POLLIN, 0).unwrap() == 0)
    {
        if sub.poll(zmq::POLLIN, 20).unwrap() == 0 {
            continue;
        }
        let parts = sub.recv_multipart(0).unwrap();
        assert_eq!(parts.len(), 2, "{parts:?}");
        let msg = MessageRef::decode(&parts[1]).unwrap();
        assert_eq!(
            parts[0],
            msg.topic().as_bytes(),
            "frame 1 is the body's topic"
        );
        if msg.topic().starts_with("H.") {
            heartbeats += 1;
        } else {
            topics.insert(msg.topic().to_owned());
        }
    }
    let report = feed.join().unwrap();
    // Every symbol's quote and trade topic in the opening burst, then the random updates.
    assert_eq!(topics.len(), 10, "{topics:?}");
    assert!(report.total_data() > 10, "{report}");
    assert!(heartbeats > 0);
}

#[test]
fn only_the_pathological_pattern_may_use_the_guides_framing() {
    let config = FeedConfig {
        framing: Framing::Guide,
        ..FeedConfig::default()
    };
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("framing"), "{err}");
    assert_eq!("GUIDE".parse::<Framing>().unwrap(), Framing::Guide);
    assert!("espresso".parse::<Framing>().is_err());
}
