//! A damaged journal does not end a replay. One corrupt record and one archive segment whose header is zeroed:
//! the replay skips to the next record that verifies each time, never sends a damaged record, counts exactly what
//! it skipped, sends gap notices for the publisher sequences the damage took (so a subscriber sees recorded gaps,
//! not transport loss), and exits 5. `--stop-on-corruption` keeps the old behaviour: exit 1 at the first damage.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{output_within, TempDir, TICKBOX};
use tickbox_journal::{list_segments, Reader, Writer, WriterOptions, HEADER_SIZE, MIN_CAPACITY};
use tickbox_wire::{encode_to_vec, Header, Kind, MessageRef, Payload, Quote};

const T0: u64 = 1_767_364_200_000_000_000;
const N: u64 = 4_000;

/// Journal record `seq` is publisher `1 + seq % 2`'s sequence `(seq + 1) / 2` (each publisher gap-free).
fn publisher_of(seq: u64) -> (u32, u64) {
    (1 + (seq % 2) as u32, seq.div_ceil(2))
}

/// The journal, with the recorder's ledger of what it holds (each publisher from its sequence 1).
fn journal(root: &Path) {
    let mut w = Writer::open(root, &WriterOptions::archive(MIN_CAPACITY)).unwrap();
    let mut ledger = tickbox_recorder::Ledger::new();
    for seq in 1..=N {
        let (publisher, pub_seq) = publisher_of(seq);
        ledger.on_recorded(publisher, T0, pub_seq, true);
        let sent = T0 + seq * 1_000;
        let header = Header::live(Kind::Quote, publisher, pub_seq, sent).with_session(T0);
        let frame = encode_to_vec(
            &format!("Q.XNAS.S{}", seq % 7),
            &header,
            &Quote::default().into(),
        )
        .unwrap();
        assert_eq!(w.append(sent + 1_000, &frame).unwrap(), seq);
    }
    w.set_app_meta(&ledger.encode(4096)).unwrap();
    w.close().unwrap();
}

/// Flips a payload byte of journal record `seq` (in whichever segment holds it); returns its segment file.
fn corrupt_record(root: &Path, seq: u64) -> std::path::PathBuf {
    for (_, file) in list_segments(root).unwrap() {
        let mut r = Reader::open(&file).unwrap();
        let mut off = HEADER_SIZE;
        while let Some(rec) = r.next().unwrap() {
            if rec.seq == seq {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&file)
                    .unwrap();
                let mut b = [0u8; 1];
                f.read_exact_at(&mut b, off + 30).unwrap();
                f.write_all_at(&[!b[0]], off + 30).unwrap();
                return file;
            }
            off += (24 + rec.payload.len() as u64).div_ceil(8) * 8;
        }
    }
    panic!("record {seq} not found");
}

/// Records a segment file holds (read before it is damaged).
fn seqs_of(file: &Path) -> Vec<u64> {
    let mut r = Reader::open(file).unwrap();
    let mut v = Vec::new();
    while let Some(rec) = r.next().unwrap() {
        v.push(rec.seq);
    }
    v
}

fn replay(root: &Path, endpoint: &str, extra: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "-q",
        "replay",
        "--journal",
        root.to_str().unwrap(),
        "--bind",
        endpoint,
    ])
    .args([
        "--speed",
        "max",
        "--batch",
        "1",
        "--drain-timeout",
        "10s",
        "--json",
    ])
    .args(extra);
    output_within(cmd, Duration::from_secs(20))
}

/// Quotes as (publisher, sequence) and gap notices as (publisher, first, last), as a subscriber received them.
type Received = (Vec<(u32, u64)>, Vec<(u32, u64, u64)>);

/// Everything a SUB on `endpoint` receives until the stream has been quiet for a second (bounded): quotes as
/// (publisher, sequence), gap notices as (publisher, first, last).
fn collect(endpoint: String) -> std::thread::JoinHandle<Received> {
    std::thread::spawn(move || {
        let ctx = zmq::Context::new();
        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_linger(0).unwrap();
        sub.set_subscribe(b"").unwrap();
        sub.connect(&endpoint).unwrap();
        let (mut quotes, mut gaps) = (Vec::new(), Vec::new());
        let deadline = Instant::now() + Duration::from_secs(18);
        let mut quiet_since = None::<Instant>;
        while Instant::now() < deadline {
            if sub.poll(zmq::POLLIN, 100).unwrap() == 0 {
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if !quotes.is_empty() && since.elapsed() > Duration::from_secs(1) {
                    break;
                }
                continue;
            }
            quiet_since = None;
            let frame = sub.recv_bytes(0).unwrap();
            let msg = MessageRef::decode(&frame).expect("a tickbox frame");
            let h = msg.header();
            match msg.kind() {
                Kind::Quote => quotes.push((h.publisher_id, h.sequence)),
                Kind::Gap => match msg.payload().unwrap() {
                    Payload::Gap(g) => gaps.push((h.publisher_id, g.first_missing, g.last_missing)),
                    other => panic!("gap kind with {other:?}"),
                },
                _ => {}
            }
        }
        (quotes, gaps)
    })
}

#[test]
fn a_replay_goes_on_past_a_corrupt_record_and_a_damaged_segment_sends_gap_notices_and_exits_5() {
    let dir = TempDir::new("replay-damage");
    let root = dir.path().join("arch");
    journal(&root);
    let segments = list_segments(&root).unwrap();
    assert!(segments.len() >= 4, "{segments:?}");
    // Record 100 corrupt, the third segment's header zeroed (the campaign's two kinds of damage).
    corrupt_record(&root, 100);
    let zeroed = &segments[2].1;
    let lost_segment = seqs_of(zeroed);
    std::fs::OpenOptions::new()
        .write(true)
        .open(zeroed)
        .unwrap()
        .write_all_at(&[0u8; 64], 0)
        .unwrap();
    let mut lost: BTreeSet<u64> = lost_segment.iter().copied().collect();
    lost.insert(100);

    let endpoint = format!("ipc://{}/replay.sock", dir.path().display());
    let sub = collect(endpoint.clone());
    let out = replay(&root, &endpoint, &[]);
    let (quotes, gaps) = sub.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("the journal is damaged"), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    assert_eq!(summary["damaged_ranges"], 2, "{summary}");
    assert_eq!(summary["corrupt_records"], lost.len() as u64, "{summary}");
    assert!(
        summary["corrupt_bytes"].as_u64().unwrap() > HEADER_SIZE,
        "{summary}"
    );

    // No damaged record is ever delivered; every other one is, once, in order per publisher.
    let want: Vec<(u32, u64)> = (1..=N)
        .filter(|s| !lost.contains(s))
        .map(publisher_of)
        .collect();
    let mut got = quotes.clone();
    got.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(got, want_sorted, "quotes delivered");
    // Every publisher sequence the damage took is covered by a gap notice, exactly.
    let mut covered: Vec<(u32, u64)> = gaps
        .iter()
        .flat_map(|&(p, a, b)| (a..=b).map(move |s| (p, s)))
        .collect();
    covered.sort();
    let mut taken: Vec<(u32, u64)> = lost.iter().map(|&s| publisher_of(s)).collect();
    taken.sort();
    assert_eq!(covered, taken, "gap notices {gaps:?}");
    assert_eq!(
        summary["damage_gap_notices"],
        gaps.len() as u64,
        "{summary}"
    );

    // Verify goes on past both: it names each range (the segment by its file and offset 0) and exits 5.
    let mut cmd = Command::new(TICKBOX);
    cmd.args(["journal", "verify", "--journal", root.to_str().unwrap()]);
    let v = output_within(cmd, Duration::from_secs(15));
    let text = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(5), "{text}");
    assert!(
        text.contains(&format!(
            "at offset 0 of {}: damaged segment header",
            zeroed.display()
        )),
        "{text}"
    );
    // The two damaged ranges verify lists (the accounting above them also says how many records it passed).
    let ranges = text
        .lines()
        .filter(|l| l.starts_with("damaged ") && l.contains(" bytes at offset "))
        .count();
    assert_eq!(ranges, 2, "{text}");
}

#[test]
fn stop_on_corruption_ends_the_replay_at_the_first_damage() {
    let dir = TempDir::new("replay-damage-stop");
    let root = dir.path().join("arch");
    journal(&root);
    corrupt_record(&root, 100);
    let endpoint = format!("ipc://{}/replay.sock", dir.path().display());
    let sub = collect(endpoint.clone());
    let out = replay(&root, &endpoint, &["--stop-on-corruption"]);
    let (quotes, _) = sub.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("corrupt record at file offset"), "{stderr}");
    assert_eq!(quotes.len(), 99, "only the records before the damage");
}

#[test]
fn a_zeroed_first_segment_header_is_damage_at_offset_0_and_the_rest_is_replayed() {
    let dir = TempDir::new("replay-damage-first");
    let root = dir.path().join("arch");
    journal(&root);
    let segments = list_segments(&root).unwrap();
    let zeroed = &segments[0].1;
    let lost: BTreeSet<u64> = seqs_of(zeroed).into_iter().collect();
    assert!(!lost.is_empty());
    std::fs::OpenOptions::new()
        .write(true)
        .open(zeroed)
        .unwrap()
        .write_all_at(&[0u8; 64], 0)
        .unwrap();

    let endpoint = format!("ipc://{}/replay.sock", dir.path().display());
    let sub = collect(endpoint.clone());
    let out = replay(&root, &endpoint, &[]);
    let (quotes, gaps) = sub.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The damage is before either publisher's first intact record: each still gets its gap notice, from the
    // first sequence the ledger says was recorded (it was silence: the subscriber could not see the hole).
    let mut want_gaps: Vec<(u32, u64, u64)> = [1, 2]
        .into_iter()
        .map(|p| {
            let lost_last = lost
                .iter()
                .map(|&s| publisher_of(s))
                .filter(|&(q, _)| q == p)
                .map(|(_, n)| n)
                .max()
                .unwrap();
            (p, 1, lost_last)
        })
        .collect();
    want_gaps.sort();
    let mut got_gaps = gaps;
    got_gaps.sort();
    assert_eq!(
        got_gaps, want_gaps,
        "a gap notice per publisher for the damaged first segment"
    );
    // It was exit 1 'not a tickbox journal', and nothing replayed.
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    assert_eq!(summary["damaged_ranges"], 1, "{summary}");
    assert_eq!(summary["corrupt_records"], lost.len() as u64, "{summary}");
    let mut got = quotes;
    got.sort();
    let mut want: Vec<(u32, u64)> = (1..=N)
        .filter(|s| !lost.contains(s))
        .map(publisher_of)
        .collect();
    want.sort();
    assert_eq!(got, want, "every record after the damaged segment");

    let mut cmd = Command::new(TICKBOX);
    cmd.args(["journal", "verify", "--journal", root.to_str().unwrap()]);
    let v = output_within(cmd, Duration::from_secs(15));
    let text = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(5), "{text}");
    assert!(
        text.contains(&format!(
            "at offset 0 of {}: damaged segment header",
            zeroed.display()
        )),
        "{text}"
    );
}

#[test]
fn a_damaged_ring_header_is_exit_5_with_the_file_and_offset() {
    let dir = TempDir::new("ring-header");
    let ring = dir.path().join("day.tbj");
    let mut w = Writer::open(&ring, &WriterOptions::ring(MIN_CAPACITY)).unwrap();
    for seq in 1..=50u64 {
        let header = Header::live(Kind::Quote, 1, seq, T0 + seq);
        let frame = encode_to_vec("Q.XNAS.S", &header, &Quote::default().into()).unwrap();
        w.append(T0 + seq, &frame).unwrap();
    }
    w.close().unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&ring).unwrap();
    f.write_all_at(&[0u8; 64], 0).unwrap();
    let endpoint = format!("ipc://{}/replay.sock", dir.path().display());
    let runs: [Vec<&str>; 3] = [
        vec!["journal", "info", "--journal", ring.to_str().unwrap()],
        vec!["journal", "verify", "--journal", ring.to_str().unwrap()],
        vec![
            "replay",
            "--journal",
            ring.to_str().unwrap(),
            "--bind",
            &endpoint,
            "--drain-timeout",
            "1s",
        ],
    ];
    for args in runs {
        let mut cmd = Command::new(TICKBOX);
        cmd.args(&args);
        let o = output_within(cmd, Duration::from_secs(15));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.status.code(), Some(5), "{args:?}: {text}");
        assert!(
            text.contains(&format!(
                "{}: corrupt journal header at offset 0",
                ring.display()
            )),
            "{args:?}: {text}"
        );
    }
}
