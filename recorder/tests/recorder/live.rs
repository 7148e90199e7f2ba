//! Recorder and replayer in one process, on real sockets: a live stream is recorded while a `--follow` replay
//! tails the journal and re-publishes it to a subscriber.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tickbox_journal::{Reader, Writer, WriterOptions};
use tickbox_recorder::{record, RecordOptions, ReplayOptions, Replayer, Speed};
use tickbox_wire::{encode_to_vec, Flags, Header, Kind, MessageRef, SystemClock, Trade};

const N: u64 = 2_000;

fn frame(i: u64) -> Vec<u8> {
    let t = Trade {
        trade_id: i,
        ..Trade::default()
    };
    encode_to_vec(
        &format!("T.XNAS.S{}", i % 7),
        &Header::live(Kind::Trade, 3, i, i),
        &t.into(),
    )
    .unwrap()
}

#[test]
fn follow_replay_tails_a_recording_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("live.tbj");
    let ctx = zmq::Context::new();
    let stop = Arc::new(AtomicBool::new(false));

    // Source publisher.
    let source = ctx.socket(zmq::XPUB).unwrap();
    source.set_linger(0).unwrap();
    source.set_sndhwm(0).unwrap();
    let source_ep = tickbox_testkit::bind_loopback(&source);

    // Recorder thread. The journal exists before the replayer opens it.
    let mut writer = Writer::open(&journal, &WriterOptions::ring(8 << 20)).unwrap();
    let (rctx, rstop) = (ctx.clone(), Arc::clone(&stop));
    let recorder = std::thread::spawn(move || {
        let opts = RecordOptions {
            connect: vec![source_ep],
            max_messages: Some(N),
            duration: Some(Duration::from_secs(15)),
            ..RecordOptions::default()
        };
        record(&rctx, &mut writer, &opts, &rstop, |_| {}).unwrap()
    });

    // Replayer (this thread) and its subscriber thread.
    let mut replayer = Replayer::bind(
        &tickbox_auth::Gate::open(&ctx),
        ReplayOptions {
            bind: vec!["tcp://127.0.0.1:*".into()],
            speed: Speed::Max,
            follow: true,
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    let replay_ep = replayer.endpoints()[0].clone();
    let (sctx, sstop) = (ctx.clone(), Arc::clone(&stop));
    let (ready_tx, ready_rx) = mpsc::channel();
    let subscriber = std::thread::spawn(move || {
        let s = sctx.socket(zmq::SUB).unwrap();
        s.set_linger(0).unwrap();
        s.set_subscribe(b"T.").unwrap();
        s.connect(&replay_ep).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(15);
        while (got.len() as u64) < N && Instant::now() < deadline {
            if s.poll(zmq::POLLIN, 50).unwrap() > 0 {
                let f = s.recv_bytes(0).unwrap();
                let m = MessageRef::decode(&f).unwrap();
                assert!(m.header().flags.contains(Flags::REPLAY));
                got.push((m.header().sequence, m.header().origin_time_ns));
            }
        }
        sstop.store(true, Ordering::Relaxed);
        got
    });
    ready_rx.recv().unwrap();
    assert!(replayer
        .wait_subscribers(1, Some(Duration::from_secs(10)), &stop)
        .unwrap());

    // Start the source once the recorder is subscribed, then replay while it records.
    source.set_rcvtimeo(10_000).unwrap();
    assert_eq!(source.recv_bytes(0).unwrap(), b"\x01");
    let feeder = std::thread::spawn(move || {
        for i in 1..=N {
            source.send(frame(i), 0).unwrap();
            if i % 100 == 99 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        source
    });
    let mut reader = Reader::open(&journal).unwrap();
    let stats = replayer
        .run(&mut reader, &SystemClock, &stop, |_| {})
        .unwrap();
    let got = subscriber.join().unwrap();
    let rec = recorder.join().unwrap();
    drop(feeder.join().unwrap());

    assert_eq!(rec.messages, N);
    assert_eq!(stats.sent, N, "{stats:?}");
    // The original sequences, in order (origin time = the source's sequence here).
    assert_eq!(got.len() as u64, N);
    for (k, (seq, origin)) in got.iter().enumerate() {
        assert_eq!((*seq, *origin), (k as u64 + 1, k as u64 + 1));
    }
}

#[test]
fn idle_publishers_get_heartbeats_in_their_own_name_and_recorded_ones_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("gap.tbj");
    {
        let mut w = Writer::open(&journal, &WriterOptions::ring(1 << 20)).unwrap();
        let t0 = 1_767_364_200_000_000_000u64;
        w.append(t0, &frame(1)).unwrap();
        // An original publisher's heartbeat: not replayed as such.
        let hb = tickbox_wire::Heartbeat {
            interval_ns: 1,
            messages_sent: 1,
        };
        let hb =
            encode_to_vec("H.3", &Header::live(Kind::Heartbeat, 3, 1, t0), &hb.into()).unwrap();
        w.append(t0 + 100_000_000, &hb).unwrap();
        w.append(t0 + 600_000_000, &frame(2)).unwrap();
    }
    let ctx = zmq::Context::new();
    let mut replayer = Replayer::bind(
        &tickbox_auth::Gate::open(&ctx),
        ReplayOptions {
            bind: vec!["tcp://127.0.0.1:*".into()],
            speed: Speed::Times(1.0),
            heartbeat_interval: Duration::from_millis(100),
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub.connect(&replayer.endpoints()[0]).unwrap();
    let stop = AtomicBool::new(false);
    assert!(replayer
        .wait_subscribers(1, Some(Duration::from_secs(10)), &stop)
        .unwrap());
    let mut reader = Reader::open(&journal).unwrap();
    let stats = replayer
        .run(&mut reader, &SystemClock, &stop, |_| {})
        .unwrap();
    assert_eq!((stats.sent, stats.skipped_heartbeats), (2, 1));
    assert_eq!((stats.subscribers, stats.publishers), (1, 1));
    let mut seen = Vec::new();
    while sub.poll(zmq::POLLIN, 200).unwrap() > 0 {
        let f = sub.recv_bytes(0).unwrap();
        let m = MessageRef::decode(&f).unwrap();
        seen.push((
            m.kind(),
            m.topic().to_string(),
            m.header().publisher_id,
            m.header().sequence,
        ));
    }
    // data 1, then heartbeats of publisher 3 repeating sequence 1 during the 600 ms gap, then data 2 and a final
    // heartbeat naming 2 (so a lost last message would be noticed).
    assert_eq!(seen[0], (Kind::Trade, "T.XNAS.S1".to_string(), 3, 1));
    let n = seen.len();
    assert_eq!(seen[n - 2], (Kind::Trade, "T.XNAS.S2".to_string(), 3, 2));
    assert_eq!(seen[n - 1], (Kind::Heartbeat, "H.3".to_string(), 3, 2));
    let hbs = &seen[1..n - 2];
    assert!((3..=7).contains(&hbs.len()), "{seen:?}");
    assert!(
        hbs.iter()
            .all(|h| *h == (Kind::Heartbeat, "H.3".to_string(), 3, 1)),
        "{seen:?}"
    );
    assert_eq!(stats.heartbeats_sent as usize, hbs.len() + 1);
}
