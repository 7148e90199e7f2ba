//! `tickbox journal info|verify|dump` on real journal files.

use crate::common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Output};

use common::{TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions, HEADER_SIZE};
use tickbox_wire::{encode_to_vec, Header, Kind, Quote, Trade};

fn tickbox(args: &[&str]) -> Output {
    Command::new(TICKBOX).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A journal of `n` quotes/trades whose capture times are 1 ms apart, starting at 2026-01-02T14:30:00Z.
fn make_journal(path: &Path, n: u64) {
    let mut w = Writer::open(path, &WriterOptions::ring(1 << 20).description("cli test")).unwrap();
    for i in 1..=n {
        let t = 1_767_364_200_000_000_000 + i * 1_000_000;
        let frame = if i % 2 == 0 {
            encode_to_vec(
                "Q.XNAS.AAPL",
                &Header::live(Kind::Quote, 7, i, t),
                &Quote::default().into(),
            )
        } else {
            encode_to_vec(
                "T.XNAS.MSFT",
                &Header::live(Kind::Trade, 7, i, t),
                &Trade::default().into(),
            )
        }
        .unwrap();
        w.append(t, &frame).unwrap();
    }
}

#[test]
fn info_verify_and_dump_a_good_journal() {
    let dir = TempDir::new("cli-journal-good");
    let path = dir.0.join("j.tbj");
    make_journal(&path, 100);
    let p = path.to_str().unwrap();
    let o = tickbox(&["journal", "info", "--journal", p]);
    assert!(o.status.success(), "{o:?}");
    let s = stdout(&o);
    assert!(s.contains("records       100"), "{s}");
    assert!(s.contains("seq range     1 ..= 100"), "{s}");
    assert!(
        s.contains("2026-01-02T14:30:00.001000000Z .. 2026-01-02T14:30:00.100000000Z"),
        "{s}"
    );
    assert!(s.contains("description   cli test"), "{s}");
    assert!(s.contains("closed cleanly"), "{s}");
    let o = tickbox(&["journal", "verify", "--journal", p]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("verify        OK: 100 records"));
    let o = tickbox(&[
        "journal",
        "dump",
        "--journal",
        p,
        "--from-seq",
        "10",
        "--limit",
        "3",
    ]);
    assert!(o.status.success(), "{o:?}");
    let s = stdout(&o);
    let rows: Vec<&str> = s.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{s}");
    assert!(
        rows[0].trim_start().starts_with("10 ")
            && rows[0].contains("Q.XNAS.AAPL")
            && rows[0].contains("quote")
    );
    assert!(rows[1].contains("T.XNAS.MSFT") && rows[1].contains("trade"));
    // Seek by time, RFC 3339 and relative to the first record.
    let o = tickbox(&[
        "journal",
        "dump",
        "--journal",
        p,
        "--from",
        "2026-01-02T14:30:00.050Z",
        "--limit",
        "1",
    ]);
    assert!(
        stdout(&o)
            .lines()
            .nth(1)
            .unwrap()
            .trim_start()
            .starts_with("50 "),
        "{}",
        stdout(&o)
    );
    let o = tickbox(&[
        "journal",
        "dump",
        "--journal",
        p,
        "--from",
        "+20ms",
        "--limit",
        "1",
    ]);
    assert!(
        stdout(&o)
            .lines()
            .nth(1)
            .unwrap()
            .trim_start()
            .starts_with("21 "),
        "{}",
        stdout(&o)
    );
}

#[test]
fn dump_takes_the_one_time_grammar_json_and_the_old_bare_path() {
    let dir = TempDir::new("cli-journal-dump-json");
    let path = dir.0.join("j.tbj");
    make_journal(&path, 100);
    let p = path.to_str().unwrap();
    // A time of day, on the first record's day, in a zone: 09:30:00.020 in New York is record 20 (14:30:00.020Z).
    let o = tickbox(&[
        "journal",
        "dump",
        "--journal",
        p,
        "--from",
        "09:30:00.020",
        "--tz",
        "America/New_York",
        "--limit",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "one record and the summary");
    assert_eq!(lines[0]["schema_version"], 1);
    assert_eq!(lines[0]["journal_seq"], 20);
    assert_eq!(lines[0]["topic"], "Q.XNAS.AAPL");
    assert_eq!(lines[1]["summary"]["records"], 1);
    // The old spelling, a bare path: still read, and said to be deprecated.
    let o = tickbox(&["journal", "info", p]);
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("a bare journal path is deprecated: write --journal"),
        "{err}"
    );
}

#[test]
fn verify_reports_a_flipped_byte_with_its_offset() {
    let dir = TempDir::new("cli-journal-flip");
    let path = dir.0.join("j.tbj");
    make_journal(&path, 100);
    // Every frame here is the same size class per kind; find record 42 by walking the frame lengths.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut off = HEADER_SIZE;
    for _ in 1..42 {
        let mut len = [0u8; 4];
        f.read_exact_at(&mut len, off).unwrap();
        off += (u32::from_le_bytes(len) as u64).div_ceil(8) * 8;
    }
    tickbox_testkit::damage::invert_byte(&path, off + 30);
    let o = tickbox(&["journal", "verify", "--journal", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    let s = stdout(&o);
    assert!(s.contains(&format!("CORRUPT at offset {off}")), "{s}");
    assert!(s.contains("record seq 42"), "{s}");
    assert!(s.contains("records       41"), "{s}");
}

#[test]
fn bad_files_are_clear_errors() {
    let dir = TempDir::new("cli-journal-bad");
    let not_journal = dir.0.join("text.txt");
    std::fs::write(&not_journal, vec![b'x'; 10_000]).unwrap();
    let o = tickbox(&[
        "journal",
        "info",
        "--journal",
        not_journal.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a tickbox journal"),
        "{o:?}"
    );

    let path = dir.0.join("j.tbj");
    make_journal(&path, 10);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"\xff", 100).unwrap(); // inside the description: header checksum breaks
    let o = tickbox(&["journal", "verify", "--journal", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    assert!(stdout(&o).contains("corrupt journal header"), "{o:?}");
    // A damaged header is corruption (exit 5) for every command, not a generic error.
    let o = tickbox(&["journal", "info", "--journal", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("header checksum"),
        "{o:?}"
    );

    let short = dir.0.join("short.tbj");
    make_journal(&short, 10);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&short)
        .unwrap()
        .set_len(HEADER_SIZE + 100)
        .unwrap();
    let o = tickbox(&["journal", "verify", "--journal", short.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    assert!(stdout(&o).contains("truncated"), "{o:?}");

    let o = tickbox(&[
        "journal",
        "info",
        "--journal",
        dir.0.join("missing").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
}
