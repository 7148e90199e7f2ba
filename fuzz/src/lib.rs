//! Shared helpers of the fuzz targets: how one fuzz input becomes a multipart message, and the deployment config
//! mirrored from the `tickbox` binary (whose own type is private to the binary crate).
//!
//! Multipart inputs are a sequence of frames, each a little-endian `u16` length followed by that many bytes; a
//! length running past the input takes what is left. The encoding is trivial so seed files are easy to write by
//! hand and mutations of a length byte reshape the message.

use serde::{Deserialize, Serialize};

/// Splits a fuzz input into frames (at most 64, so a pathological input cannot make a target slow).
pub fn split_frames(mut data: &[u8]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    while data.len() >= 2 && frames.len() < 64 {
        let len = u16::from_le_bytes([data[0], data[1]]) as usize;
        let rest = &data[2..];
        let take = len.min(rest.len());
        frames.push(rest[..take].to_vec());
        data = &rest[take..];
    }
    frames
}

/// The inverse of [`split_frames`], for writing seed inputs.
pub fn join_frames<F: AsRef<[u8]>>(frames: &[F]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        let f = f.as_ref();
        out.extend_from_slice(&(f.len() as u16).to_le_bytes());
        out.extend_from_slice(f);
    }
    out
}

/// Same sections, types and serde attributes as the `tickbox` binary's `TickboxConfig` (which is `pub(crate)` in a
/// binary crate, so not reachable from here): parsing into it exercises every component's config type.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TickboxConfig {
    /// `[feed]`.
    pub feed: tickbox_feed::FeedConfig,
    /// `[lvc]`.
    pub lvc: tickbox_lvc::LvcConfig,
    /// `[subscriber]`.
    pub subscriber: tickbox_subscriber::SubscriberConfig,
    /// `[workers]`.
    pub workers: tickbox_workers::WorkerPoolConfig,
    /// `[clone]`.
    pub clone: tickbox_clone::CloneConfig,
    /// `[broker]`.
    pub broker: tickbox_majordomo::BrokerConfig,
    /// `[titanic]`.
    pub titanic: tickbox_majordomo::titanic::TitanicConfig,
    /// `[recorder]`.
    pub recorder: tickbox_recorder::RecorderConfig,
    /// `[context]`.
    pub context: tickbox_zmqx::context::ContextConfig,
}

/// Seed inputs: a few valid examples per target, written by `TICKBOX_FUZZ_WRITE_SEEDS=1 cargo test --lib` (from
/// this directory) into `corpus/<target>/`. Without the variable the test only checks that each seed is
/// accepted by the decoder it seeds, so the committed corpus stays meaningful as the formats evolve.
#[cfg(test)]
mod seeds {
    use std::path::PathBuf;

    use super::*;

    fn corpus(target: &str, seeds: Vec<(&str, Vec<u8>)>) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .join(target);
        if std::env::var_os("TICKBOX_FUZZ_WRITE_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            for (name, bytes) in &seeds {
                std::fs::write(dir.join(name), bytes).unwrap();
            }
        }
    }

    fn wire_messages() -> Vec<(&'static str, Vec<u8>)> {
        use tickbox_wire::*;
        let h = |kind, seq| Header::live(kind, 7, seq, 1_700_000_000_000_000_000);
        vec![
            (
                "quote",
                encode_to_vec(
                    "Q.XNAS.AAPL",
                    &h(Kind::Quote, 1),
                    &Payload::Quote(Quote::default()),
                )
                .unwrap(),
            ),
            (
                "trade",
                encode_to_vec(
                    "T.XNAS.MSFT",
                    &h(Kind::Trade, 2),
                    &Payload::Trade(Trade::default()),
                )
                .unwrap(),
            ),
            (
                "heartbeat",
                encode_to_vec(
                    "H.feed",
                    &h(Kind::Heartbeat, 3),
                    &Payload::Heartbeat(Heartbeat::default()),
                )
                .unwrap(),
            ),
            (
                "book",
                encode_to_vec(
                    "B.XNAS.AAPL",
                    &h(Kind::BookLevel, 4),
                    &Payload::BookLevel(BookLevel::default()),
                )
                .unwrap(),
            ),
            (
                "gap",
                encode_to_vec(
                    "G.journal",
                    &h(Kind::Gap, 5),
                    &Payload::Gap(GapNotice::default()),
                )
                .unwrap(),
            ),
        ]
    }

    #[test]
    fn wire_and_tap() {
        let msgs = wire_messages();
        for (name, m) in &msgs {
            let decoded = tickbox_wire::MessageRef::decode(m).unwrap();
            decoded.payload().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let mut tap = msgs.clone();
        let mut sub = Vec::new();
        tickbox_wire::tap::encode_event(&mut sub, b"\x01Q.XNAS");
        let mut unsub = Vec::new();
        tickbox_wire::tap::encode_event(&mut unsub, b"\x00Q.XNAS");
        tap.push(("subscribe", sub));
        tap.push(("unsubscribe", unsub));
        for (_, f) in &tap {
            tickbox_wire::tap::TapFrame::classify(f).unwrap();
        }
        corpus("wire_decode", msgs);
        corpus("tap_frame", tap);
    }

    #[test]
    fn journal() {
        use tickbox_journal::{Writer, WriterOptions, MIN_CAPACITY};
        let dir = tempfile::tempdir().unwrap();
        let ring = dir.path().join("r.tbj");
        let mut w = Writer::open(&ring, &WriterOptions::ring(MIN_CAPACITY)).unwrap();
        for i in 0..20u64 {
            w.append(1_000 + i, &vec![i as u8; (i * 13 % 90) as usize])
                .unwrap();
        }
        w.set_app_meta(b"ledger").unwrap();
        drop(w);
        let empty = dir.path().join("e.tbj");
        drop(Writer::open(&empty, &WriterOptions::ring(MIN_CAPACITY)).unwrap());
        // Trailing zeros of the data region are left off: the target pads short inputs back to a whole journal.
        let trim = |mut b: Vec<u8>| {
            while b.len() > tickbox_journal::HEADER_SIZE as usize && b.last() == Some(&0) {
                b.pop();
            }
            b
        };
        let seeds = vec![
            ("ring_20_records", trim(std::fs::read(&ring).unwrap())),
            ("ring_empty", trim(std::fs::read(&empty).unwrap())),
        ];
        assert_eq!(tickbox_journal::summarize(&ring, true).unwrap().records, 20);
        corpus("journal_reader", seeds);
        journal_packed(dir.path());
    }

    /// Compressed journals (`tickbox journal compress`): a ring of 3,000 records in three frames, with its
    /// metadata, and an empty one.
    fn journal_packed(dir: &std::path::Path) {
        use tickbox_journal::{compress, CompressOptions, Writer, WriterOptions};
        let ring = dir.join("p.tbj");
        let mut w = Writer::open(&ring, &WriterOptions::ring(1 << 20)).unwrap();
        for i in 0..3_000u64 {
            w.append(1_000 + i, format!("Q.XNAS.S{}|{}", i % 7, i * 31).as_bytes())
                .unwrap();
        }
        w.set_app_meta(b"ledger").unwrap();
        drop(w);
        let empty = dir.join("pe.tbj");
        drop(Writer::open(&empty, &WriterOptions::ring(1 << 16)).unwrap());
        let options = CompressOptions {
            level: 1,
            frame_bytes: 64 << 10,
        };
        for path in [&ring, &empty] {
            compress(path, &options).unwrap();
        }
        assert_eq!(tickbox_journal::summarize(&ring, true).unwrap().records, 3_000);
        let seeds = vec![
            ("ring_3000_records", std::fs::read(&ring).unwrap()),
            ("ring_empty", std::fs::read(&empty).unwrap()),
        ];
        corpus("journal_packed", seeds);
    }

    #[test]
    fn clone_messages() {
        let mut m = tickbox_clone::KvMsg::new("prices/AAPL", 42, b"189.5".to_vec());
        m.set_prop("ttl", "30");
        let del = tickbox_clone::KvMsg::new("prices/MSFT", 43, Vec::new());
        let seeds = vec![
            ("kvmsg", join_frames(&m.to_frames())),
            ("kvmsg_delete", join_frames(&del.to_frames())),
            ("icanhaz", join_frames(&[&b"ICANHAZ?"[..], b"/prices/"])),
        ];
        for (_, s) in &seeds[..2] {
            tickbox_clone::KvMsg::decode(&split_frames(s)).unwrap();
        }
        tickbox_clone::msg::decode_icanhaz(&split_frames(&seeds[2].1)).unwrap();
        corpus("chp_kvmsg", seeds);
    }

    #[test]
    fn majordomo_messages() {
        let seeds = vec![
            (
                "v01_client",
                join_frames(&[&b""[..], b"MDPC01", b"echo", b"hello"]),
            ),
            (
                "v01_ready",
                join_frames(&[&b""[..], b"MDPW01", b"\x01", b"echo"]),
            ),
            (
                "v01_heartbeat",
                join_frames(&[&b""[..], b"MDPW01", b"\x04"]),
            ),
            (
                "v01_reply",
                join_frames(&[&b""[..], b"MDPW01", b"\x03", b"client", b"", b"world"]),
            ),
            (
                "v02_client",
                join_frames(&[&b"MDPC02"[..], b"\x01", b"echo", b"hi"]),
            ),
        ];
        let ok = seeds
            .iter()
            .filter(|(_, s)| tickbox_majordomo::proto::classify(split_frames(s)).is_ok())
            .count();
        assert!(ok >= 3, "only {ok} MDP seeds classify");
        corpus("mdp_frames", seeds);
    }

    #[test]
    fn titanic_messages() {
        use tickbox_majordomo::engine::titanic::{Event, TitanicState};
        let state = TitanicState::default();
        let Ok(Event::Request {
            uuid,
            service,
            body,
        }) = state.request_event(vec![b"echo".to_vec(), b"hello".to_vec()], [7; 16])
        else {
            panic!("request refused")
        };
        let req = Event::Request {
            uuid: uuid.clone(),
            service,
            body,
        };
        let close = Event::Close { uuid: uuid.clone() };
        for ev in [&req, &close] {
            assert_eq!(Event::decode(&ev.encode()).as_ref(), Ok(ev));
        }
        let seeds = vec![
            ("request_event", req.encode()),
            ("close_event", close.encode()),
            ("reply_body", join_frames(&[uuid.as_bytes()])),
            ("request_body", join_frames(&[&b"echo"[..], b"hello"])),
        ];
        corpus("titanic_frames", seeds);
    }

    #[test]
    fn ppp_messages() {
        use tickbox_pirates::{PPP_HEARTBEAT, PPP_READY};
        let mut seq = Vec::new();
        // Side 1: a worker says READY, then side 0: a client request, then side 1: the worker's reply.
        seq.push(1u8);
        seq.extend(join_frames(&[&b"w1"[..], &[PPP_READY]]));
        seq.push(0xFE);
        seq.push(0);
        seq.extend(join_frames(&[&b"c1"[..], b"", b"job"]));
        seq.push(0xFE);
        seq.push(1);
        seq.extend(join_frames(&[&b"w1"[..], b"c1", b"", b"done"]));
        let mut hb = vec![0x12u8];
        hb.extend(join_frames(&[&b"w1"[..], &[PPP_HEARTBEAT]]));
        let mut w = vec![2u8];
        w.extend(join_frames(&[[PPP_HEARTBEAT]]));
        corpus(
            "ppp_frames",
            vec![
                ("ready_request_reply", seq),
                ("heartbeat", hb),
                ("worker_heartbeat", w),
            ],
        );
    }

    #[test]
    fn config_text() {
        let seeds = vec![
            ("empty", Vec::new()),
            (
                "defaults",
                toml::to_string_pretty(&TickboxConfig::default())
                    .unwrap()
                    .into_bytes(),
            ),
            (
                "sections",
                b"[recorder]\n\n[broker]\n\n[feed]\n\n[context]\n".to_vec(),
            ),
        ];
        for (_, s) in &seeds {
            toml::from_str::<TickboxConfig>(std::str::from_utf8(s).unwrap()).unwrap();
        }
        corpus("config_toml", seeds);
    }
}
