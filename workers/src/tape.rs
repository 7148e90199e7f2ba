//! The tape: one NDJSON line per record a worker handled, so a run can be checked record by record and two runs
//! diffed (`tickbox subscribe --tape PATH`).
//!
//! Each line is one JSON object with its keys always in this order:
//!
//! ```text
//! {"topic":"T.XNAS.AAPL","kind":"trade","publisher":1,"sequence":42,"origin":"2026-01-02T14:30:00.000000100Z","origin_ns":1767364200000000100,"cached":false,"worker":0}
//! ```
//!
//! `origin` is the header's origin time (when the event was first published; kept by replays and the LVC) in RFC
//! 3339 UTC with nanoseconds, `origin_ns` the same instant as an integer; `cached` is the LVC's `CACHED` mark;
//! `worker` the index of the worker thread that handled the record.
//!
//! **Order.** A worker appends its lines in the order it handled its records, so with `dispatch = "by_topic"` each
//! symbol's lines are in the order the subscriber received them. Workers write whole chunks of lines, so the
//! workers' lines interleave in the file by chunk, never inside a line. The topic is the first key, so a stable
//! sort on it (`LC_ALL=C sort -s -t'"' -k4,4 tape.ndjson`) puts a tape in a run-independent order, each symbol's
//! lines in delivery order; two runs sorted that way diff line by line.
//!
//! **Cost.** Nothing when there is no tape (the standard worker holds `Option<Tape>`, `None`). With one, a line
//! is formatted into the worker's own buffer (no allocation once the buffer is sized; the date part of `origin`
//! is reformatted only when the second changes) and the buffer is written to the file in chunks of
//! [`TAPE_CHUNK`] bytes under a lock the workers share, then at the end ([`Tape::finish`], or when the worker is
//! dropped). A write error is not retried: the lines of that chunk and of every later one are counted as lost
//! ([`TapeSink::lost`]) and the first error is kept, never silently skipped.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tickbox_wire::{DecodeError, Flags, MessageRef};

use crate::{Delivery, Record, Worker};

/// A worker's buffer is written to the file once it holds this many bytes (about 300 lines).
pub const TAPE_CHUNK: usize = 64 << 10;

/// The file every worker's [`Tape`] writes to, and what became of their lines.
#[derive(Debug)]
pub struct TapeSink {
    path: PathBuf,
    file: Mutex<Option<File>>,
    written: AtomicU64,
    lost: AtomicU64,
    error: Mutex<Option<String>>,
}

impl TapeSink {
    /// Creates (or truncates) the tape file.
    pub fn create(path: &Path) -> std::io::Result<Arc<Self>> {
        let file = File::create(path)?;
        Ok(Arc::new(Self {
            path: path.to_owned(),
            file: Mutex::new(Some(file)),
            written: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            error: Mutex::new(None),
        }))
    }

    /// Where the tape is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lines written to the file so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Lines that could not be written (after a write error).
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// The first write error, if any.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Appends whole lines; after the first failure the file is closed and every later chunk is counted lost.
    fn write_chunk(&self, chunk: &[u8], lines: u64) {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let result = match file.as_mut() {
            Some(f) => f.write_all(chunk),
            None => {
                self.lost.fetch_add(lines, Ordering::Relaxed);
                return;
            }
        };
        match result {
            Ok(()) => {
                self.written.fetch_add(lines, Ordering::Relaxed);
            }
            Err(err) => {
                // A partly written chunk may have left a cut line; stop writing rather than append after it.
                *file = None;
                self.lost.fetch_add(lines, Ordering::Relaxed);
                tracing::error!(path = %self.path.display(), "tape write failed: {err}");
                let mut first = self.error.lock().unwrap_or_else(|e| e.into_inner());
                first.get_or_insert_with(|| err.to_string());
            }
        }
    }
}

/// One worker's writer of the tape (see the module docs for the line format and its order).
#[derive(Debug)]
pub struct Tape {
    sink: Arc<TapeSink>,
    buf: Vec<u8>,
    lines: u64,
    /// The second of the last formatted origin time and its `YYYY-MM-DDTHH:MM:SS` text.
    second: Option<(u64, [u8; 19])>,
}

impl Tape {
    /// A writer for one worker, appending to `sink`.
    pub fn new(sink: Arc<TapeSink>) -> Self {
        Self {
            sink,
            buf: Vec::with_capacity(TAPE_CHUNK + 512),
            lines: 0,
            second: None,
        }
    }

    /// Writes what is buffered. Called at the end of a run (and by `Drop`); a no-op when nothing is buffered.
    pub fn finish(&mut self) {
        if self.lines > 0 {
            self.sink.write_chunk(&self.buf, self.lines);
        }
        self.buf.clear();
        self.lines = 0;
    }

    fn line(&mut self, topic: &str, header: &tickbox_wire::Header, worker: usize) {
        let origin = header.origin_time_ns;
        let secs = origin / 1_000_000_000;
        let date = match self.second {
            Some((s, text)) if s == secs => text,
            _ => {
                let full = tickbox_units::format_rfc3339(secs * 1_000_000_000);
                let mut text = [0u8; 19];
                text.copy_from_slice(&full.as_bytes()[..19]);
                self.second = Some((secs, text));
                text
            }
        };
        // Integers by hand rather than `write!`: the formatting machinery is most of a line's cost otherwise.
        let buf = &mut self.buf;
        buf.extend_from_slice(b"{\"topic\":\"");
        push_json_str(buf, topic);
        buf.extend_from_slice(b"\",\"kind\":\"");
        buf.extend_from_slice(header.kind.name().as_bytes());
        buf.extend_from_slice(b"\",\"publisher\":");
        push_u64(buf, u64::from(header.publisher_id));
        buf.extend_from_slice(b",\"sequence\":");
        push_u64(buf, header.sequence);
        buf.extend_from_slice(b",\"origin\":\"");
        buf.extend_from_slice(&date);
        buf.push(b'.');
        let frac = origin % 1_000_000_000;
        let start = buf.len();
        push_u64(buf, frac);
        // Zero-pad the fraction to nine digits.
        let digits = buf.len() - start;
        buf.splice(start..start, std::iter::repeat_n(b'0', 9 - digits));
        buf.extend_from_slice(b"Z\",\"origin_ns\":");
        push_u64(buf, origin);
        buf.extend_from_slice(if header.flags.contains(Flags::CACHED) {
            b",\"cached\":true,\"worker\":"
        } else {
            b",\"cached\":false,\"worker\":"
        });
        push_u64(buf, worker as u64);
        buf.extend_from_slice(b"}\n");
        self.lines += 1;
        if self.buf.len() >= TAPE_CHUNK {
            self.finish();
        }
    }
}

impl Drop for Tape {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Worker for Tape {
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) {
        self.line(msg.topic(), msg.header(), delivery.worker);
    }

    #[inline]
    fn on_record(&mut self, rec: &Record<'_>, delivery: &Delivery) -> Result<(), DecodeError> {
        self.line(rec.topic()?, rec.header(), delivery.worker);
        Ok(())
    }
}

/// Appends `n` in decimal.
fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[at..]);
}

/// Appends `s` escaped as the inside of a JSON string.
fn push_json_str(buf: &mut Vec<u8>, s: &str) {
    for &b in s.as_bytes() {
        match b {
            b'"' => buf.extend_from_slice(b"\\\""),
            b'\\' => buf.extend_from_slice(b"\\\\"),
            0..=0x1f => {
                let _ = write!(buf, "\\u{b:04x}");
            }
            _ => buf.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Header, Kind, Payload, Quote};

    #[test]
    fn lines_are_json_with_fixed_keys_and_reach_the_file() {
        let dir = std::env::temp_dir().join(format!("tickbox-tape-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tape.ndjson");
        let sink = TapeSink::create(&path).unwrap();
        let mut tape = Tape::new(Arc::clone(&sink));
        let mut h = Header::live(Kind::Quote, 7, 42, 5);
        h.origin_time_ns = 1_767_364_200_000_000_100;
        h.flags = Flags::CACHED;
        let frame = encode_to_vec("Q.X\"A", &h, &Payload::Quote(Quote::default())).unwrap();
        let rec = Record::decode(&frame).unwrap();
        let d = Delivery {
            worker: 3,
            dequeued_ns: 0,
        };
        tape.on_record(&rec, &d).unwrap();
        h.origin_time_ns += 1_000_000_000;
        h.flags = Flags::NONE;
        let frame = encode_to_vec("T.\u{1}", &h, &Payload::Quote(Quote::default())).unwrap();
        tape.on_record(&Record::decode(&frame).unwrap(), &d)
            .unwrap();
        assert_eq!(
            sink.written(),
            0,
            "buffered until a chunk is full or the end"
        );
        drop(tape);
        assert_eq!((sink.written(), sink.lost()), (2, 0));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            r#"{"topic":"Q.X\"A","kind":"quote","publisher":7,"sequence":42,"origin":"2026-01-02T14:30:00.000000100Z","origin_ns":1767364200000000100,"cached":true,"worker":3}"#
        );
        assert!(
            lines[1].starts_with(r#"{"topic":"T.\u0001","kind":"quote""#)
                && lines[1].contains(r#""origin":"2026-01-02T14:30:01.000000100Z""#)
                && lines[1].contains(r#""cached":false"#),
            "{}",
            lines[1]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_full_chunk_is_written_at_once_and_write_errors_are_counted() {
        // /dev/full accepts the open and fails every write with ENOSPC.
        let Ok(sink) = TapeSink::create(Path::new("/dev/full")) else {
            return;
        };
        let mut tape = Tape::new(Arc::clone(&sink));
        let frame = encode_to_vec(
            "Q.X.A",
            &Header::live(Kind::Quote, 1, 1, 1),
            &Payload::Quote(Quote::default()),
        )
        .unwrap();
        let rec = Record::decode(&frame).unwrap();
        let d = Delivery {
            worker: 0,
            dequeued_ns: 0,
        };
        let mut n = 0u64;
        while sink.lost() == 0 {
            tape.on_record(&rec, &d).unwrap();
            n += 1;
            assert!(n < 10_000, "a 64 KiB chunk is a few hundred lines");
        }
        tape.on_record(&rec, &d).unwrap();
        drop(tape);
        assert_eq!(sink.written(), 0);
        assert_eq!(sink.lost(), n + 1, "every line counted");
        assert!(sink.error().is_some());
    }

    /// What a tape costs a worker: 1 M records through `Stats` alone, `(Stats, None::<Tape>)`, and `(Stats,
    /// Some(Tape))` writing to `/dev/null` (formatting) and to a real file in the temp dir, three runs alternating. Ignored; run with
    /// `cargo test --release -p tickbox-workers --lib tape_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement: run explicitly in release"]
    fn tape_cost() {
        use crate::Stats;
        use std::time::Instant;
        const N: usize = 1_000_000;
        let frames: Vec<Vec<u8>> = (0..64)
            .map(|i| {
                let mut h = Header::live(Kind::Quote, 1, i + 1, 5);
                h.origin_time_ns = 1_767_364_200_000_000_000 + i * 1_000;
                let topic = format!("Q.XNAS.SYM{i}");
                encode_to_vec(&topic, &h, &Payload::Quote(Quote::default())).unwrap()
            })
            .collect();
        let d = Delivery {
            worker: 0,
            dequeued_ns: 0,
        };
        fn run<W: Worker>(w: &mut W, frames: &[Vec<u8>], d: &Delivery) -> f64 {
            let start = Instant::now();
            for i in 0..N {
                let rec = Record::decode(&frames[i % frames.len()]).unwrap();
                w.on_record(&rec, d).unwrap();
            }
            w.flush();
            start.elapsed().as_nanos() as f64 / N as f64
        }
        let dir = std::env::temp_dir().join(format!("tickbox-tape-cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (mut alone, mut none, mut some) = (Vec::new(), Vec::new(), Vec::new());
        let mut null = Vec::new();
        for round in 0..3 {
            // Which of the two goes first alternates, so warm-up favours neither.
            if round % 2 == 0 {
                alone.push(run(&mut Stats::new(), &frames, &d));
                none.push(run(&mut (Stats::new(), None::<Tape>), &frames, &d));
            } else {
                none.push(run(&mut (Stats::new(), None::<Tape>), &frames, &d));
                alone.push(run(&mut Stats::new(), &frames, &d));
            }
            // Formatting and chunking alone, the file's own cost left out.
            let sink = TapeSink::create(Path::new("/dev/null")).unwrap();
            let mut w = (Stats::new(), Some(Tape::new(Arc::clone(&sink))));
            let start = Instant::now();
            run(&mut w, &frames, &d);
            drop(w);
            null.push(start.elapsed().as_nanos() as f64 / N as f64);
            let sink = TapeSink::create(&dir.join(format!("tape{round}.ndjson"))).unwrap();
            let mut w = (Stats::new(), Some(Tape::new(Arc::clone(&sink))));
            let start = Instant::now();
            run(&mut w, &frames, &d);
            drop(w);
            some.push(start.elapsed().as_nanos() as f64 / N as f64);
            assert_eq!(sink.written(), N as u64);
        }
        let show = |name: &str, mut v: Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "{name:<28} median {:.1} ns/record, range {:.1}-{:.1}",
                v[1], v[0], v[2]
            );
            v[1]
        };
        let a = show("Stats alone", alone);
        let b = show("Stats + no tape (None)", none);
        let n = show("Stats + tape to /dev/null", null);
        let c = show("Stats + tape to a file", some);
        println!(
            "no tape / alone {:.2}x, tape to /dev/null / alone {:.2}x, tape to a file / alone {:.2}x",
            b / a,
            n / a,
            c / a
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
