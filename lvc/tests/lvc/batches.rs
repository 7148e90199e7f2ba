//! Batch frames through the LVC: the proxy asks its publishers for them, caches every record inside as if it had
//! come alone, and hands a batch on whole only to a side (subscribers, tap) where every reader opted in.

use crate::lvc_util;

use std::time::Duration;

use lvc_util::*;
use tickbox_lvc::LvcConfig;
use tickbox_wire::{batch_records, is_batch, BatchBuilder, BATCH_TOPIC};

const SECOND: Duration = Duration::from_secs(1);
const TOPICS: u64 = 20;
const AWARE: &[&[u8]] = &[BATCH_TOPIC.as_bytes(), b""];

/// One batch frame of a quote for each of the `TOPICS` topics, sequences `first..`, bid `bid`.
fn batch(first: u64, bid: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(8192, 64);
    for i in 0..TOPICS {
        let seq = first + i;
        assert!(b.try_push(&quote_frame(&format!("Q.XNAS.S{i:02}"), 7, seq, seq, bid)));
    }
    b.frame().to_vec()
}

/// Every record a reader received, unpacked, and whether any message was a batch.
fn records(frames: &[Vec<u8>]) -> (Vec<Vec<u8>>, usize) {
    let mut out = Vec::new();
    let mut batches = 0;
    for f in frames {
        if is_batch(f) {
            batches += 1;
            out.extend(batch_records(f).unwrap().map(|r| r.unwrap().to_vec()));
        } else {
            out.push(f.clone());
        }
    }
    (out, batches)
}

fn live(frames: &[Vec<u8>]) -> usize {
    records(frames).0.iter().filter(|f| !is_cached(f)).count()
}

#[test]
fn batches_are_cached_per_record_and_forwarded_whole_only_to_readers_that_asked() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let config = LvcConfig {
        tap: Some("tcp://127.0.0.1:*".into()),
        ..lossless(lvc_config(&publisher.endpoint))
    };
    let lvc = start(&ctx, config, &publisher);
    // The opt-in beside "", so a publisher whose readers all asked sends batches to the proxy.
    let opt_in = publisher.next_subscription(5 * SECOND);
    assert_eq!(opt_in.as_deref(), Some(&b"\x01#B"[..]));

    // Phase 1: every reader, downstream and on the tap, opted in: the batch goes on whole, once each.
    let aware = subscriber(&ctx, &lvc.endpoints().downstream, AWARE);
    let tap = subscriber(&ctx, lvc.endpoints().tap.as_ref().unwrap(), AWARE);
    assert!(wait_until(5 * SECOND, || {
        let s = lvc.stats();
        s.subscribes == 2 && s.tap_subscriptions == 2
    }));
    publisher.send(&batch(1, 1));
    let got = recv_until(&aware, 5 * SECOND, |g| live(g) >= TOPICS as usize);
    let (recs, batches) = records(&got);
    assert_eq!(
        (recs.len(), batches),
        (TOPICS as usize, 1),
        "one whole batch"
    );
    let tapped = recv_until(&tap, 5 * SECOND, |g| {
        records(g).0.iter().filter(|f| f[0] != 0).count() >= TOPICS as usize
    });
    assert_eq!(
        tapped.iter().filter(|f| is_batch(f)).count(),
        1,
        "the tap carries the batch whole"
    );
    // The proxy publishes its counters every 50 ms.
    assert!(
        wait_until(5 * SECOND, || {
            let s = lvc.stats();
            (
                s.batches_in,
                s.batches_out,
                s.tap_batches,
                s.messages_in,
                s.messages_out,
            ) == (1, 1, 1, TOPICS, TOPICS)
        }),
        "{}",
        lvc.stats()
    );

    // Phase 2: a plain Guide SUB on "" and a prefix subscriber join: nobody gets a batch any more, every record
    // goes out alone, and the prefix subscriber sees exactly its topics.
    let plain = subscriber(&ctx, &lvc.endpoints().downstream, &[b""]);
    let prefix = subscriber(&ctx, &lvc.endpoints().downstream, &[b"Q.XNAS.S1"]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes == 4));
    publisher.send(&batch(TOPICS + 1, 2));
    let want = TOPICS as usize;
    for (name, sock, n) in [
        ("aware", &aware, want),
        ("plain", &plain, want),
        ("prefix", &prefix, 10),
    ] {
        let got = recv_quiet(sock, Duration::from_millis(300), 5 * SECOND);
        assert!(got.iter().all(|f| !is_batch(f)), "{name} got a batch frame");
        let live: Vec<_> = got.iter().filter(|f| !is_cached(f)).collect();
        assert_eq!(live.len(), n, "{name}");
        assert!(live.iter().all(|f| bid(f) == 2), "{name}");
    }

    // A late joiner gets the last value of every topic, though each only ever travelled inside a batch.
    let late = subscriber(&ctx, &lvc.endpoints().downstream, &[b""]);
    let cached = recv_until(&late, 5 * SECOND, |g| g.len() >= want);
    assert_eq!(cached.len(), want);
    assert!(cached.iter().all(|f| is_cached(f) && bid(f) == 2));
    let s = lvc.join().unwrap();
    assert_eq!((s.batches_in, s.batches_out), (2, 1), "{s}");
    assert_eq!(s.messages_in, 2 * TOPICS, "{s}");
    assert_eq!(s.topics_cached, TOPICS, "{s}");
    assert_eq!(s.malformed + s.downstream_dropped, 0, "{s}");
}

#[test]
fn a_broken_batch_is_counted_and_only_its_valid_records_go_on() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let lvc = start(&ctx, lossless(lvc_config(&publisher.endpoint)), &publisher);
    let sub = subscriber(&ctx, &lvc.endpoints().downstream, &[b""]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes == 1));
    let mut frame = batch(1, 1);
    // Cut into the last record: 19 intact records, then a truncated one.
    frame.truncate(frame.len() - 3);
    publisher.send(&frame);
    let got = recv_quiet(&sub, Duration::from_millis(300), 5 * SECOND);
    assert_eq!(got.len(), TOPICS as usize - 1);
    assert!(got.iter().all(|f| !is_batch(f)));
    let s = lvc.join().unwrap();
    assert_eq!(
        (s.malformed, s.messages_in, s.messages_out),
        (1, TOPICS, TOPICS - 1),
        "{s}"
    );
}
