//! Disk use follows the data: an archive segment grows in allocation steps reserved ahead of the writer and is cut
//! to its records when closed; what a killed writer left is cut or removed on reopen; a full disk is a typed error
//! from `append`, after which the journal closes cleanly and verifies with every record appended before it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tickbox_journal::{
    list_segments, summarize, JournalError, Reader, Writer, WriterOptions, HEADER_SIZE,
    RECORD_HEADER_SIZE,
};

fn payload_for(seq: u64) -> Vec<u8> {
    let len = 40 + (seq * 37 % 160) as usize;
    (0..len).map(|i| (seq as usize + i) as u8).collect()
}

/// Bytes a record of `seq` takes in a plain journal.
fn frame_bytes(seq: u64) -> u64 {
    (RECORD_HEADER_SIZE + payload_for(seq).len() as u64).next_multiple_of(8)
}

/// (length, allocated bytes) of a file.
fn du(path: &Path) -> (u64, u64) {
    let m = std::fs::metadata(path).unwrap();
    (m.len(), m.blocks() * 512)
}

/// Records the data of every segment file of the archive at `dir` holds (its frames), by segment.
fn segment_records(dir: &Path) -> Vec<(PathBuf, u64)> {
    list_segments(dir)
        .unwrap()
        .into_iter()
        .map(|(_, p)| {
            let bytes = summarize(&p, true).unwrap().disk.record_bytes;
            (p, bytes)
        })
        .collect()
}

/// What a closed segment of 1 MiB or more keeps: its header, its records, and the rest of the page holding a
/// record header after the last record (a full 1 MiB segment keeps its whole capacity).
fn trimmed(records: u64) -> u64 {
    (HEADER_SIZE + records + RECORD_HEADER_SIZE).next_multiple_of(4096)
}

/// [`trimmed`] in a segment of `capacity` data bytes.
fn trimmed_in(records: u64, capacity: u64) -> u64 {
    trimmed(records).min(HEADER_SIZE + capacity)
}

fn read_all(path: &Path) -> u64 {
    let mut r = Reader::open(path).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next().unwrap() {
        n += 1;
        assert_eq!(rec.seq, n);
        assert_eq!(rec.payload, &payload_for(n)[..], "seq {n}");
    }
    n
}

/// A recording at a recorder's pace (about 3 MB/s here, with 1 MiB allocation steps) into 1 GiB segments: while
/// it runs, its file holds its records and one to two steps reserved ahead; once closed, its records and less
/// than a page. The summary says the same.
#[test]
fn a_recording_takes_on_disk_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("day");
    let step = 1 << 20;
    let opts = WriterOptions::archive(1 << 30).allocation_step(step);
    assert_eq!(opts.disk_reservation().at_open, HEADER_SIZE + step);
    let mut w = Writer::open(&path, &opts).unwrap();
    let segment = tickbox_journal::segment_path(&path, 0);
    let (len, allocated) = du(&segment);
    assert!(
        len <= HEADER_SIZE + 2 * step && allocated <= HEADER_SIZE + 2 * step,
        "a new segment is not allocated whole: {len} bytes, {allocated} allocated"
    );
    let (mut data, mut next) = (0, 1);
    // 32 KiB every 10 ms (3.2 MB/s; a preparer that looks over 20 ms sees at most three batches, 4.9 MB/s): a
    // recorder's pace, whose reserve window is one step (a window is 20 ms at the writer's pace, 0.1 MB here).
    for _ in 0..150 {
        let mut batch = w.batch();
        let mut chunk = 0;
        while chunk < 32 << 10 {
            assert_eq!(batch.append(0, &payload_for(next)).unwrap(), next);
            chunk += frame_bytes(next);
            data += frame_bytes(next);
            next += 1;
        }
        batch.commit().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(w.header().segment_index, 0);
    // The preparer reserves ahead of the published head; let it catch up before looking.
    let settled =
        tickbox_testkit::poll_until(Duration::from_secs(5), Duration::from_millis(5), || {
            w.reserved_ahead() >= step
        });
    assert!(settled, "the preparer never reserved a step ahead");
    let (len, allocated) = du(&segment);
    eprintln!("live: {data} bytes of records, file {len}, allocated {allocated}");
    assert!(allocated >= data, "{allocated} < {data}");
    assert!(
        allocated <= HEADER_SIZE + data + 2 * step,
        "live: {allocated} allocated for {data} bytes of records (step {step})"
    );
    assert_eq!(w.reserved_ahead(), len - HEADER_SIZE - data);
    let live = summarize(&path, false).unwrap();
    assert!(live.writer_active);
    assert_eq!(live.disk.record_bytes, data);
    assert!(live.disk.reserved_bytes >= step - 4096 && live.disk.reserved_bytes <= 2 * step);
    w.close().unwrap();
    let (len, allocated) = du(&segment);
    eprintln!("closed: file {len}, allocated {allocated}");
    assert_eq!(len, trimmed(data));
    // Within a step of the records, and in fact within a few pages: the file system's own bookkeeping of a file
    // in several extents (an extent-tree block on ext4) counts in its blocks too.
    assert!(allocated <= data + step, "{allocated} for {data}");
    assert!(
        allocated <= len + (16 << 10),
        "{allocated} allocated for a {len}-byte file"
    );
    let s = summarize(&path, true).unwrap();
    assert_eq!(s.corruption, None);
    assert_eq!(s.disk.record_bytes, data);
    assert_eq!(s.disk.file_bytes, len);
    assert!(s.disk.reserved_bytes <= 4096, "{:?}", s.disk);
    assert_eq!(read_all(&path), s.records);
}

/// A ring is allocated whole when it is made (it is bounded by design), and the summary says what it reserves.
#[test]
fn a_ring_reserves_its_capacity_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.tbj");
    let opts = WriterOptions::ring(1 << 20);
    let r = opts.disk_reservation();
    assert_eq!(
        (r.at_open, r.ahead_max, r.bounded),
        (HEADER_SIZE + (1 << 20), HEADER_SIZE + (1 << 20), true)
    );
    let mut w = Writer::open(&path, &opts).unwrap();
    let mut data = 0;
    for seq in 1..=100 {
        w.append(0, &payload_for(seq)).unwrap();
        data += frame_bytes(seq);
    }
    assert_eq!(w.reserved_ahead(), HEADER_SIZE + (1 << 20) - data);
    drop(w);
    let (len, allocated) = du(&path);
    assert_eq!(len, HEADER_SIZE + (1 << 20));
    assert!(allocated >= len);
    let s = summarize(&path, true).unwrap();
    assert_eq!(s.disk.record_bytes, data);
    assert_eq!(s.disk.reserved_bytes, len - data - HEADER_SIZE);
}

#[test]
fn killed_child_writer() {
    // Child half of `a_killed_writers_leftovers_are_removed_and_its_segments_cut_on_reopen`: fills an archive of
    // 1 MiB segments fast (so the window reaches into the next segment, made under its temporary name), says
    // how far it got once that segment is ready, and waits to be killed.
    let Ok(dir) = std::env::var("TICKBOX_JOURNAL_KILLED_CHILD") else {
        return;
    };
    let dir = Path::new(&dir);
    let opts = WriterOptions::archive(1 << 20).allocation_step(64 << 10);
    let mut w = Writer::open(dir.join("arch"), &opts).unwrap();
    let mut seq = 1;
    while w.header().segment_index < 2 {
        w.append(0, &payload_for(seq)).unwrap();
        seq += 1;
    }
    // On into segment 2 until the preparer has made the next one's window. How far that takes depends on the
    // pace (a slow writer on a loaded machine gets a window of one step), so write until it is ready, but stop
    // within half a step of the end, where the window reaches into segment 3 at any pace, so that no roll comes.
    let segment_end = 1 << 20;
    let mut head = HEADER_SIZE;
    let ready = tickbox_testkit::poll_until(Duration::from_secs(10), Duration::ZERO, || {
        if w.next_segment_ready() {
            return true;
        }
        if head + frame_bytes(seq) < segment_end - (32 << 10) {
            w.append(0, &payload_for(seq)).unwrap();
            head += frame_bytes(seq);
            seq += 1;
        } else {
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    });
    assert!(ready && w.header().segment_index == 2);
    std::fs::write(dir.join("ready"), format!("{}", seq - 1)).unwrap();
    loop {
        std::thread::park();
    }
}

/// A writer killed while its window reached into the next segment leaves that segment's half-made file and a
/// last segment holding its reserve past its records. Reopening removes the one and cuts the other to its records
/// (then reserves one step for the writer that goes on); closing cuts it again. Every record is kept.
#[test]
fn a_killed_writers_leftovers_are_removed_and_its_segments_cut_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tickbox_testkit::ChildGuard(
        tickbox_testkit::self_test_command(module_path!(), "killed_child_writer")
            .arg("--nocapture")
            .env("TICKBOX_JOURNAL_KILLED_CHILD", dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let marker = dir.path().join("ready");
    assert!(
        tickbox_testkit::poll_until(Duration::from_secs(15), Duration::from_millis(5), || {
            std::fs::read_to_string(&marker).is_ok_and(|s| !s.is_empty())
        }),
        "child never got ready"
    );
    let last: u64 = std::fs::read_to_string(&marker).unwrap().parse().unwrap();
    let _ = child.0.kill();
    child.0.wait().unwrap();
    let arch = dir.path().join("arch");
    let temporary = arch.join("0000000003.creating");
    assert!(temporary.exists(), "the next segment was being made");
    let segments = segment_records(&arch);
    assert_eq!(segments.len(), 3);
    let (last_segment, last_records) = &segments[2];
    assert!(
        du(last_segment).0 > trimmed(*last_records),
        "the killed writer's segment holds its reserve"
    );
    let step = 64 << 10;
    let mut w = Writer::open(
        &arch,
        &WriterOptions::archive(1 << 20).allocation_step(step),
    )
    .unwrap();
    let rec = w.recovery().clone();
    assert!(!rec.clean_shutdown);
    assert_eq!(
        (rec.temporaries_removed, rec.segments_trimmed),
        (1, 1),
        "{rec:?}"
    );
    assert!(rec.bytes_released > 0, "{rec:?}");
    assert_eq!(rec.next_seq, last + 1);
    assert!(!temporary.exists());
    // Cut to its records, then one step reserved for the writer that goes on.
    let (len, allocated) = du(last_segment);
    assert!(len <= trimmed(*last_records) + step, "{len}");
    assert!(
        allocated <= trimmed(*last_records) + step + (16 << 10),
        "{allocated}"
    );
    w.append(0, &payload_for(last + 1)).unwrap();
    drop(w);
    for (path, records) in segment_records(&arch) {
        let (len, allocated) = du(&path);
        assert_eq!(len, trimmed_in(records, 1 << 20), "{}", path.display());
        assert!(allocated <= len + (16 << 10), "{}", path.display());
    }
    assert_eq!(summarize(&arch, true).unwrap().corruption, None);
    assert_eq!(read_all(&arch), last + 1);
}

/// Leftover temporaries beside a ring and in an archive are removed by the writer that opens the journal.
#[test]
fn leftover_temporaries_are_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("ring.tbj");
    drop(Writer::open(&ring, &WriterOptions::ring(1 << 16)).unwrap());
    let ring_tmps = [
        dir.path().join("ring.creating"),
        dir.path().join("ring.compressing"),
    ];
    for t in &ring_tmps {
        std::fs::write(t, vec![0u8; 1 << 16]).unwrap();
    }
    let w = Writer::open(&ring, &WriterOptions::ring(1 << 16)).unwrap();
    assert_eq!(w.recovery().temporaries_removed, 2);
    assert!(ring_tmps.iter().all(|t| !t.exists()));
    drop(w);
    let arch = dir.path().join("arch");
    drop(Writer::open(&arch, &WriterOptions::archive(1 << 20)).unwrap());
    for name in ["0000000001.creating", "0000000000.compressing"] {
        std::fs::write(arch.join(name), b"half-made").unwrap();
    }
    let w = Writer::open(&arch, &WriterOptions::archive(1 << 20)).unwrap();
    assert_eq!(w.recovery().temporaries_removed, 2);
    assert_only_segments(&arch);
}

/// The archive at `dir` holds its segments and its lock file, nothing half-made.
pub(crate) fn assert_only_segments(dir: &Path) {
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n == "writer.lock" || n.ends_with(".tbj")),
        "{names:?}"
    );
}

/// Child half of the disk-full tests: records into `TICKBOX_JOURNAL_FULL_CHILD` (an archive of 8 MiB segments
/// that grow 64 KiB at a time) until the journal says there is no room, closes it, and prints what it recorded.
/// With `TICKBOX_JOURNAL_FULL_FSIZE` set it first limits its files to that many bytes (RLIMIT_FSIZE; SIGXFSZ
/// ignored, so the limit is an EFBIG error); with `TICKBOX_JOURNAL_FULL_TMPFS` it first mounts a tmpfs of that
/// size over the journal's directory (it runs in a mount namespace of its own, so the mount ends with it) and
/// checks the journal there before it exits, since nothing outside the namespace sees it.
#[test]
#[allow(unsafe_code)] // setrlimit and signal: std has neither
fn full_child_writer() {
    let Ok(dir) = std::env::var("TICKBOX_JOURNAL_FULL_CHILD") else {
        return;
    };
    let dir = PathBuf::from(dir);
    if let Ok(size) = std::env::var("TICKBOX_JOURNAL_FULL_TMPFS") {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount failed: {status:?}");
    }
    if let Ok(limit) = std::env::var("TICKBOX_JOURNAL_FULL_FSIZE") {
        let limit: u64 = limit.parse().unwrap();
        // SAFETY: ignoring SIGXFSZ, so exceeding the limit is an EFBIG error instead of killing this process.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        let rl = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: setrlimit reads one `rlimit` through the pointer, a live local.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &rl) }, 0);
    }
    let path = dir.join("arch");
    let opts = WriterOptions::archive(8 << 20).allocation_step(64 << 10);
    let mut w = Writer::open(&path, &opts).unwrap();
    let mut last = 0;
    let mut err = None;
    for _ in 0..1_000_000u64 {
        let seq = w.next_seq();
        let n = seq % 7 + 1;
        let payloads: Vec<Vec<u8>> = (seq..seq + n).map(payload_for).collect();
        match w.append_batch(payloads.iter().map(|p| (0, &p[..]))) {
            Ok(Some(r)) => last = *r.end(),
            Ok(None) => unreachable!(),
            Err(e) => {
                // The records of the batch before the one that found no room are published.
                last = w.next_seq() - 1;
                err = Some(e);
                break;
            }
        }
    }
    let err = err.expect("the disk never filled");
    println!("FULL {} {err}", err.is_disk_full());
    // A second try finds no more room either, and changes nothing.
    let again = w.append(0, &payload_for(last + 1));
    println!(
        "AGAIN {}",
        again.as_ref().err().is_some_and(JournalError::is_disk_full)
    );
    w.close().unwrap();
    println!("LAST {last}");
    if std::env::var_os("TICKBOX_JOURNAL_FULL_TMPFS").is_some() {
        let s = summarize(&path, true).unwrap();
        println!(
            "VERIFIED {} {} {}",
            s.corruption.is_none(),
            s.records,
            read_all(&path)
        );
    }
}

fn field<'a>(out: &'a str, key: &str) -> &'a str {
    // libtest prints the test's name on the line the child's first line continues.
    out.lines()
        .find_map(|l| l.split_once(key).map(|(_, v)| v))
        .unwrap_or_else(|| panic!("child printed no {key}: {out}"))
}

/// A disk that fills mid-run, made with a file size limit (RLIMIT_FSIZE, which any user can set on a child; the
/// limit falls inside the first segment, which cannot grow past it): `append` returns DiskFull (EFBIG), not a
/// SIGBUS; the writer closes cleanly; the journal verifies and holds every record appended before the error; and
/// with room again a writer continues it.
#[test]
fn a_disk_that_fills_mid_segment_is_a_typed_error_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let child = tickbox_testkit::ChildGuard(
        tickbox_testkit::self_test_command(module_path!(), "full_child_writer")
            .arg("--nocapture")
            .env("TICKBOX_JOURNAL_FULL_CHILD", dir.path())
            .env("TICKBOX_JOURNAL_FULL_FSIZE", (3u64 << 20).to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let output = child.wait_output(Duration::from_secs(20));
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "child failed: {:?}\n{out}",
        output.status
    );
    let full = field(&out, "FULL ");
    assert!(
        full.starts_with("true")
            && full.contains("File too large")
            && full.contains("0000000000.tbj"),
        "{full}"
    );
    assert_eq!(field(&out, "AGAIN "), "true");
    let last: u64 = field(&out, "LAST ").parse().unwrap();
    let path = dir.path().join("arch");
    // Within one step of the limit: the writer took what room there was.
    let data: u64 = (1..=last).map(frame_bytes).sum();
    assert!(
        HEADER_SIZE + data > (3 << 20) - (64 << 10) - 4096,
        "stopped early: {data} bytes of records"
    );
    let s = summarize(&path, true).unwrap();
    assert_eq!(s.corruption, None, "{s:?}");
    assert!(!s.writer_active, "closed cleanly");
    assert_eq!((s.records, s.last_seq), (last, Some(last)));
    assert_eq!(read_all(&path), last);
    // Room again: the journal continues where it stopped.
    let mut w = Writer::open(&path, &WriterOptions::archive(8 << 20)).unwrap();
    assert!(w.recovery().clean_shutdown);
    assert_eq!(w.append(0, &payload_for(last + 1)).unwrap(), last + 1);
    drop(w);
    assert_eq!(read_all(&path), last + 1);
}

/// The same on a real full file system (ENOSPC): a 3 MiB tmpfs mounted in a mount namespace of the child's own
/// (`unshare -m`, which takes root, as the CI has). Skipped, saying why, where that is not possible.
#[test]
fn a_full_tmpfs_is_a_typed_error_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let probe = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .stderr(std::process::Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!(
            "skipped: cannot make a mount namespace here (unshare -m needs root and util-linux)"
        );
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let child = tickbox_testkit::ChildGuard(
        std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private"])
            .arg(exe)
            .args([
                "--exact",
                &tickbox_testkit::self_test_name(module_path!(), "full_child_writer"),
                "--test-threads=1",
                "--nocapture",
            ])
            .env("TICKBOX_JOURNAL_FULL_CHILD", dir.path())
            .env("TICKBOX_JOURNAL_FULL_TMPFS", "3m")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let output = child.wait_output(Duration::from_secs(20));
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "child failed: {:?}\n{out}",
        output.status
    );
    let full = field(&out, "FULL ");
    assert!(
        full.starts_with("true") && full.contains("No space left"),
        "{full}"
    );
    assert_eq!(field(&out, "AGAIN "), "true");
    let last: u64 = field(&out, "LAST ").parse().unwrap();
    assert!(last > 1000, "{out}");
    assert_eq!(field(&out, "VERIFIED "), format!("true {last} {last}"));
    // Nothing was written outside the namespace's tmpfs.
    assert!(!dir.path().join("arch").exists());
}
