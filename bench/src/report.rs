//! Report files: HdrHistogram interval logs (`.hlog`), percentile distributions (`.hgrm`), JSON-lines results
//! and the comparison of two result files.
//!
//! `.hlog` and `.hgrm` follow the Java HdrHistogram formats so the usual tools (HistogramLogProcessor, the online
//! `.hgrm` plotter) read them. Values in `.hgrm` files are microseconds; `.hlog` histograms hold nanoseconds.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tickbox_zmqx::BackPressure;

use crate::measure::{IntervalSample, Percentiles};
use crate::BenchError;

/// Tag of the uncorrected histograms in an `.hlog`; the corrected ones are untagged so tools show them by default.
pub const UNCORRECTED_TAG: &str = "uncorrected";

/// `.hgrm` values are in microseconds.
const HGRM_SCALE: f64 = 1_000.0;

// ------------------------------------------------------------------------------------------------------------
// .hlog

/// Writes an interval log: per interval one untagged corrected histogram and one tagged `uncorrected`.
pub fn write_hlog(
    path: &Path,
    intervals: &[IntervalSample],
    comment: &str,
) -> Result<(), BenchError> {
    let base_ns = intervals.first().map(|i| i.start_ns).unwrap_or(0);
    let mut buf = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    {
        let base = UNIX_EPOCH + Duration::from_nanos(base_ns);
        let mut writer = IntervalLogWriterBuilder::new()
            .add_comment(comment)
            .add_comment("values in nanoseconds; untagged = corrected for coordinated omission")
            .with_start_time(base)
            .with_base_time(base)
            .with_max_value_divisor(1_000_000.0)
            .begin_log_with(&mut buf, &mut serializer)
            .map_err(|e| BenchError::io(path, e))?;
        let tag = Tag::new(UNCORRECTED_TAG);
        for interval in intervals {
            let start = Duration::from_nanos(interval.start_ns - base_ns);
            let length = Duration::from_nanos(interval.end_ns.saturating_sub(interval.start_ns));
            writer
                .write_histogram(&interval.corrected, start, length, None)
                .map_err(|e| BenchError::Report(format!("writing {}: {e:?}", path.display())))?;
            writer
                .write_histogram(&interval.uncorrected, start, length, tag)
                .map_err(|e| BenchError::Report(format!("writing {}: {e:?}", path.display())))?;
        }
    }
    std::fs::write(path, buf).map_err(|e| BenchError::io(path, e))
}

/// One histogram read back from an `.hlog`.
#[derive(Debug, Clone)]
pub struct HlogEntry {
    /// The interval's tag (we write `corrected` / `uncorrected`); `None` if untagged.
    pub tag: Option<String>,
    /// Offset from the log's base time.
    pub start: Duration,
    /// Length of the interval.
    pub duration: Duration,
    /// The interval's latencies, ns.
    pub histogram: Histogram<u64>,
}

/// Reads every interval histogram of an `.hlog` (written by us or by Java HdrHistogram).
pub fn read_hlog(path: &Path) -> Result<Vec<HlogEntry>, BenchError> {
    let bytes = std::fs::read(path).map_err(|e| BenchError::io(path, e))?;
    let mut deserializer = Deserializer::new();
    let mut out = Vec::new();
    for entry in IntervalLogIterator::new(&bytes) {
        let entry =
            entry.map_err(|e| BenchError::Report(format!("parsing {}: {e:?}", path.display())))?;
        let LogEntry::Interval(interval) = entry else {
            continue;
        };
        let raw = base64::engine::general_purpose::STANDARD
            .decode(interval.encoded_histogram())
            .map_err(|e| BenchError::Report(format!("{}: bad base64: {e}", path.display())))?;
        let histogram: Histogram<u64> = deserializer
            .deserialize(&mut std::io::Cursor::new(raw))
            .map_err(|e| BenchError::Report(format!("{}: bad histogram: {e:?}", path.display())))?;
        out.push(HlogEntry {
            tag: interval.tag().map(|t| t.as_str().to_string()),
            start: interval.start_timestamp(),
            duration: interval.duration(),
            histogram,
        });
    }
    Ok(out)
}

// ------------------------------------------------------------------------------------------------------------
// .hgrm

/// Java HdrHistogram's sub-bucket count for a significant-digit setting (shown in the `.hgrm` footer).
fn sub_bucket_count(sigfig: u8) -> u64 {
    let largest = 2 * 10u64.pow(u32::from(sigfig));
    largest.next_power_of_two()
}

/// The standard percentile distribution text (`outputPercentileDistribution` with 5 ticks per half distance),
/// values in microseconds.
pub fn hgrm_text(hist: &Histogram<u64>) -> String {
    let mut out = String::new();
    // The Java format has no unit anywhere; a reader of a bare file could take these for ms or ns. Comment lines
    // (`#` not followed by `[`) are skipped by HdrHistogram's plotter and by `parse_hgrm`.
    let _ = writeln!(
        out,
        "# tickbox bench percentile distribution; Value column in microseconds (µs), 1/(1-Percentile) is the \
         \"nines\" axis"
    );
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    for v in hist.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let value = v.value_iterated_to() as f64 / HGRM_SCALE;
        let q = v.quantile_iterated_to();
        if q < 1.0 {
            let _ = writeln!(
                out,
                "{value:12.3} {q:2.12} {total:10} {:14.2}",
                1.0 / (1.0 - q)
            );
        } else {
            let _ = writeln!(out, "{value:12.3} {q:2.12} {total:10}");
        }
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        hist.mean() / HGRM_SCALE,
        hist.stdev() / HGRM_SCALE
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        hist.max() as f64 / HGRM_SCALE,
        hist.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        hist.buckets(),
        sub_bucket_count(hist.sigfig())
    );
    out
}

/// Writes [`hgrm_text`] of `hist` to `path`, replacing the file.
pub fn write_hgrm(path: &Path, hist: &Histogram<u64>) -> Result<(), BenchError> {
    std::fs::write(path, hgrm_text(hist)).map_err(|e| BenchError::io(path, e))
}

/// A parsed `.hgrm`: rows of (value µs, percentile, total count) and the footer's totals.
#[derive(Debug, Clone, PartialEq)]
pub struct Hgrm {
    /// `(value µs, percentile 0..=1, cumulative count)` per line, in file order.
    pub rows: Vec<(f64, f64, u64)>,
    /// The footer's mean, µs.
    pub mean_us: f64,
    /// The footer's max, µs.
    pub max_us: f64,
    /// The footer's total count.
    pub total_count: u64,
}

/// Parses `.hgrm` text and checks it is self-consistent (percentiles and counts non-decreasing, last row at
/// 100 % equal to the footer's count).
pub fn parse_hgrm(text: &str) -> Result<Hgrm, BenchError> {
    let bad = |msg: String| BenchError::Report(format!("bad .hgrm: {msg}"));
    let mut rows: Vec<(f64, f64, u64)> = Vec::new();
    let mut footer: BTreeMap<String, f64> = BTreeMap::new();
    let mut saw_header = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(inner) = line.strip_prefix("#[").and_then(|l| l.strip_suffix(']')) {
            for part in inner.split(',') {
                let (k, v) = part
                    .split_once('=')
                    .ok_or_else(|| bad(format!("footer field {part:?}")))?;
                let v: f64 = v
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("footer value {v:?}")))?;
                footer.insert(k.trim().to_string(), v);
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        if line.starts_with("Value") {
            saw_header = true;
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 3 || cols.len() > 4 {
            return Err(bad(format!("row {line:?}")));
        }
        let value: f64 = cols[0]
            .parse()
            .map_err(|_| bad(format!("value in {line:?}")))?;
        let pct: f64 = cols[1]
            .parse()
            .map_err(|_| bad(format!("percentile in {line:?}")))?;
        let count: u64 = cols[2]
            .parse()
            .map_err(|_| bad(format!("count in {line:?}")))?;
        if let Some(&(pv, pp, pc)) = rows.last() {
            if value < pv || pct < pp || count < pc {
                return Err(bad(format!("row {line:?} goes backwards")));
            }
        }
        if !(0.0..=1.0).contains(&pct) {
            return Err(bad(format!("percentile {pct} out of range")));
        }
        rows.push((value, pct, count));
    }
    if !saw_header {
        return Err(bad("no header line".into()));
    }
    let get = |k: &str| {
        footer
            .get(k)
            .copied()
            .ok_or_else(|| bad(format!("footer lacks {k}")))
    };
    let total_count = get("Total count")? as u64;
    let hgrm = Hgrm {
        mean_us: get("Mean")?,
        max_us: get("Max")?,
        total_count,
        rows,
    };
    if let Some(&(_, pct, count)) = hgrm.rows.last() {
        if pct != 1.0 || count != total_count {
            return Err(bad(format!(
                "last row at {pct} with {count}, footer says {total_count}"
            )));
        }
    }
    Ok(hgrm)
}

// ------------------------------------------------------------------------------------------------------------
// JSON-lines results

/// One latency configuration's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyResult {
    /// `tickbox` or a raw-libzmq baseline (`raw-pubsub`).
    pub system: String,
    /// Threads of the bench process, or separate processes (absent in files from before shapes: in-process).
    #[serde(default)]
    pub shape: Shape,
    /// `tcp`, `ipc` or `inproc`.
    pub transport: String,
    /// The tickbox run went through the LVC proxy (always false for baselines).
    pub via_lvc: bool,
    /// The tickbox subscriber's hand-off (`ring`, `zmq`, `inline`); none for baselines and older files.
    #[serde(default)]
    pub handoff: Option<tickbox_subscriber::Handoff>,
    /// How long the tickbox worker looked for its next parcel before sleeping (`--idle-spin`; a ring only); none
    /// for other hand-offs, baselines and older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_spin: Option<tickbox_units::HumanDuration>,
    /// Whether the tickbox shard ran the end of a burst on its sleeping worker (`--shard-runs-asleep`; a ring
    /// only); none for other hand-offs, baselines and older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_runs_asleep: Option<bool>,
    /// Offered rate, msg/s.
    pub rate: u64,
    /// Bytes per message on the wire (ZeroMQ frame body).
    pub size: usize,
    /// Length of the measured window, seconds.
    pub duration_s: f64,
    /// Length of the unrecorded warm-up, seconds.
    pub warmup_s: f64,
    /// Messages the measured window scheduled.
    pub scheduled: u64,
    /// Messages of the measured window that arrived.
    pub received: u64,
    /// `scheduled - received`: dropped (PUB at HWM) or still in flight at the drain deadline.
    pub lost: u64,
    /// Measured messages received per second of the measured window.
    pub achieved_rate: f64,
    /// Latency from the intended send time (coordinated omission corrected), ns.
    pub corrected: Percentiles,
    /// Latency from the publisher's actual send stamp, ns.
    pub uncorrected: Percentiles,
    /// Send high-water mark, messages.
    pub send_hwm: i32,
    /// Receive high-water mark, messages (`recv_hwm` in results files).
    #[serde(rename = "recv_hwm")]
    pub receive_hwm: i32,
    /// Base name of this configuration's `.hlog` / `.hgrm` files in the output directory.
    pub files: String,
    /// Which repeat of the configuration this is (1-based; 0 in files from before repeats).
    #[serde(default)]
    pub repeat: u32,
    /// The background load the whole sweep ran beside (`--background-load`; none in older files).
    #[serde(default)]
    pub background: crate::load::LoadSpec,
}

/// One throughput configuration's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThroughputResult {
    /// `tickbox`, `raw-pushpull` or `raw-pubsub`.
    pub system: String,
    /// `tcp`, `ipc` or `inproc`.
    pub transport: String,
    /// Bytes per message.
    pub size: usize,
    /// Parallel sender → receiver pairs or feed shards.
    pub shards: usize,
    /// Length of the counted window, seconds.
    pub duration_s: f64,
    /// Messages received in the counted window, all receivers together.
    pub messages: u64,
    /// `messages / duration_s`.
    pub msgs_per_s: f64,
    /// Payload throughput, 10^6 bytes per second.
    pub mb_per_s: f64,
    /// Send high-water mark, messages.
    pub send_hwm: i32,
    /// Receive high-water mark, messages (`recv_hwm` in results files).
    #[serde(rename = "recv_hwm")]
    pub receive_hwm: i32,
    /// Whether senders block at the HWM or a PUB drops (`no_drop`, true or false, in results files).
    #[serde(rename = "no_drop", with = "tickbox_zmqx::naming::as_no_drop")]
    pub back_pressure: BackPressure,
    /// Which repeat of the configuration this is (1-based; 0 in files from before repeats).
    #[serde(default)]
    pub repeat: u32,
}

/// One repeat of `bench replay`: a journal replayed flat out into a subscriber, by tickbox or the raw baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayResult {
    /// `tickbox` (Replayer → Black Box) or `raw-pubsub` (XPUB_NODROP → SUB, one frame per message).
    pub system: String,
    /// `tcp` (loopback).
    pub transport: String,
    /// Records in the journal, all of them sent.
    pub records: u64,
    /// Frame bytes of those records.
    pub bytes: u64,
    /// Data records that reached the receiving end (tickbox: touched by a worker; raw: received by the SUB).
    pub delivered: u64,
    /// Records lost: `records − delivered`, or the subscriber's sequence accounting if it counted more missing.
    pub lost: u64,
    /// Sequences the Black Box's gap accounting found missing (tickbox only; raw frames are not accounted).
    pub gap_missing: Option<u64>,
    /// Most records per frame the replayer was allowed to batch (1 = unbatched; the raw baseline always sends one
    /// per message).
    pub batch: u64,
    /// ZeroMQ messages that carried the records (tickbox: single frames plus batch frames; raw: one per record).
    pub frames: Option<u64>,
    /// From the first send to the last record's arrival at the receiving end, seconds.
    pub elapsed_s: f64,
    /// `delivered / elapsed_s`.
    pub records_per_s: f64,
    /// Frame bytes per second delivered, 10^6 bytes.
    pub mb_per_s: f64,
    /// Tickbox only: lateness on receipt at the subscriber's shard (receive − replay send stamp), ns.
    pub lateness_receive: Option<Percentiles>,
    /// Tickbox only: lateness when a worker dequeued the record, ns.
    pub lateness_dequeue: Option<Percentiles>,
    /// Workers touching the records (tickbox; 0 for raw).
    pub workers: usize,
    /// Send high-water mark, messages.
    pub send_hwm: i32,
    /// Receive high-water mark, messages (`recv_hwm` in results files).
    #[serde(rename = "recv_hwm")]
    pub receive_hwm: i32,
    /// Which repeat this is (1-based).
    pub repeat: u32,
}

/// One repeat of one system of `bench record`: a batched, lossless feed read flat out by a recorder, a Black Box or
/// the raw baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordResult {
    /// `tickbox-record` (the recorder into an archive journal), `tickbox-subscribe` (a Black Box with one worker)
    /// or `raw-mmap` (a SUB appending each received message to an mmap'd file with `memcpy`).
    pub system: String,
    /// `tcp` (loopback).
    pub transport: String,
    /// Feed shards (publisher sockets), each read by the system.
    pub shards: usize,
    /// Data records the feed was told to send (all shards).
    pub records: u64,
    /// Data records that reached the system (recorder: appended as data; Black Box: touched by the worker; raw:
    /// carried by the messages it wrote).
    pub delivered: u64,
    /// `records − delivered`, or what the system's own accounting found missing if that is more.
    pub lost: u64,
    /// Sequences the system's own accounting found missing: the recorder's ledger (what its gap records name),
    /// the Black Box's gap accounting; none for raw, which does not look inside.
    pub accounted_missing: Option<u64>,
    /// Batch frames (`#B`) among the ZeroMQ messages received.
    pub batch_frames: u64,
    /// Bytes written to the file (recorder: record payloads, gap records included; raw: messages and their length
    /// prefixes); none for the Black Box, which writes nothing.
    pub bytes_written: Option<u64>,
    /// From the feed's first send to the last data record's arrival (recorder: its capture time; raw: receipt;
    /// Black Box: the worker's dequeue), seconds.
    pub elapsed_s: f64,
    /// `delivered / elapsed_s`.
    pub records_per_s: f64,
    /// The feed's own figure: data sent per second of its run (what the lossless reader let it send).
    pub feed_rate: f64,
    /// Workers of the Black Box (0 for the others).
    pub workers: usize,
    /// Receive high-water mark of the system's SUB socket(s), messages (`recv_hwm` in results files).
    #[serde(rename = "recv_hwm")]
    pub receive_hwm: i32,
    /// Which repeat this is (1-based).
    pub repeat: u32,
    /// The recorder: times its recording thread reserved disk itself because its journal's preparer had not (none
    /// for the others, and in results files written before it was measured).
    #[serde(default)]
    pub reserve_stalls: Option<u64>,
    /// Bytes the preparer faulted in, in results files written while archive records were stored through the
    /// mapping: read so that those files still load, never written.
    #[serde(default, rename = "prefaulted_bytes", skip_serializing)]
    pub prefaulted_bytes_before_staging: Option<serde::de::IgnoredAny>,
}

/// One line of a results file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BenchRecord {
    /// A latency configuration (`"kind": "latency"`).
    Latency(LatencyResult),
    /// A throughput configuration (`"kind": "throughput"`).
    Throughput(ThroughputResult),
    /// A replay repeat (`"kind": "replay"`).
    Replay(ReplayResult),
    /// A record repeat of one system (`"kind": "record"`).
    Record(RecordResult),
}

impl BenchRecord {
    /// What identifies "the same configuration" across two runs.
    pub fn key(&self) -> String {
        match self {
            BenchRecord::Latency(r) => format!(
                "latency {} {}{}{} rate={} size={}",
                r.system,
                r.transport,
                if r.via_lvc { "+lvc" } else { "" },
                if r.shape == Shape::Processes {
                    " processes"
                } else {
                    ""
                },
                r.rate,
                r.size
            ),
            BenchRecord::Throughput(r) => format!(
                "throughput {} {} size={} shards={}",
                r.system, r.transport, r.size, r.shards
            ),
            BenchRecord::Replay(r) => {
                format!("replay {} {} records={}", r.system, r.transport, r.records)
            }
            BenchRecord::Record(r) => format!(
                "record {} {} records={} shards={}",
                r.system, r.transport, r.records, r.shards
            ),
        }
    }
}

/// A whole bench's result file: where it ran, every repeat's figures, their summary and the warnings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDocument {
    /// `latency`, `throughput` or `replay`.
    pub bench: String,
    /// The machine and build.
    pub environment: crate::env::Environment,
    /// Repeats per configuration.
    pub repeats: usize,
    /// Run order within each configuration, e.g. `T R R T T R` (T = tickbox, R = the raw baseline(s)).
    pub order: String,
    /// Every repeat's figures, in run order.
    pub records: Vec<BenchRecord>,
    /// Median, min–max and tickbox/raw ratio of each figure.
    pub summary: Vec<crate::stats::FigureSummary>,
    /// Reasons to doubt the figures (also printed to stderr).
    pub warnings: Vec<crate::env::Warning>,
}

impl RunDocument {
    /// Writes the document as pretty JSON to `path`, replacing it.
    pub fn write(&self, path: &Path) -> Result<(), BenchError> {
        let text =
            serde_json::to_string_pretty(self).map_err(|e| BenchError::Report(e.to_string()))?;
        std::fs::write(path, text + "\n").map_err(|e| BenchError::io(path, e))
    }

    /// Reads a document written by [`RunDocument::write`].
    pub fn read(path: &Path) -> Result<RunDocument, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))?;
        serde_json::from_str(&text)
            .map_err(|e| BenchError::Report(format!("{}: {e}", path.display())))
    }
}

/// The records of a result file: a [`RunDocument`] (what benches write now) or JSON lines (older files).
pub fn read_results(path: &Path) -> Result<Vec<BenchRecord>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))?;
    if let Ok(doc) = serde_json::from_str::<RunDocument>(&text) {
        return Ok(doc.records);
    }
    read_jsonl(path)
}

fn median(values: &[f64]) -> f64 {
    crate::stats::Spread::of(values).map_or(0.0, |s| s.median)
}

/// One record per configuration: the first repeat's record with its headline figures replaced by the median over
/// all repeats of that configuration (a single run stays as it is).
pub fn median_records(records: &[BenchRecord]) -> BTreeMap<String, BenchRecord> {
    let mut groups: BTreeMap<String, Vec<&BenchRecord>> = BTreeMap::new();
    for r in records {
        groups.entry(r.key()).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|(key, group)| {
            let mut out = group[0].clone();
            let pick = |f: &dyn Fn(&BenchRecord) -> Option<f64>| {
                median(&group.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            match &mut out {
                BenchRecord::Latency(o) => {
                    let lat = |r: &BenchRecord| match r {
                        BenchRecord::Latency(l) => Some(l.clone()),
                        _ => None,
                    };
                    o.corrected.p50 = pick(&|r| lat(r).map(|l| l.corrected.p50 as f64)) as u64;
                    o.corrected.p99 = pick(&|r| lat(r).map(|l| l.corrected.p99 as f64)) as u64;
                    o.corrected.p999 = pick(&|r| lat(r).map(|l| l.corrected.p999 as f64)) as u64;
                    o.achieved_rate = pick(&|r| lat(r).map(|l| l.achieved_rate));
                }
                BenchRecord::Throughput(o) => {
                    let thr = |r: &BenchRecord| match r {
                        BenchRecord::Throughput(t) => Some((t.msgs_per_s, t.mb_per_s)),
                        _ => None,
                    };
                    o.msgs_per_s = pick(&|r| thr(r).map(|t| t.0));
                    o.mb_per_s = pick(&|r| thr(r).map(|t| t.1));
                }
                BenchRecord::Replay(o) => {
                    o.records_per_s = pick(&|r| match r {
                        BenchRecord::Replay(p) => Some(p.records_per_s),
                        _ => None,
                    });
                }
                BenchRecord::Record(o) => {
                    o.records_per_s = pick(&|r| match r {
                        BenchRecord::Record(p) => Some(p.records_per_s),
                        _ => None,
                    });
                }
            }
            (key, out)
        })
        .collect()
}

/// Appends records to a JSON-lines file (one object per line).
pub fn append_jsonl(path: &Path, records: &[BenchRecord]) -> Result<(), BenchError> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| BenchError::io(path, e))?;
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).map_err(|e| BenchError::Report(e.to_string()))?);
        text.push('\n');
    }
    file.write_all(text.as_bytes())
        .map_err(|e| BenchError::io(path, e))
}

/// Reads a JSON-lines results file; a bad line is an error naming its line number.
pub fn read_jsonl(path: &Path) -> Result<Vec<BenchRecord>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(line)
            .map_err(|e| BenchError::Report(format!("{}:{}: {e}", path.display(), n + 1)))?;
        out.push(record);
    }
    Ok(out)
}

fn pct_change(old: f64, new: f64) -> String {
    if old == 0.0 {
        return "n/a".into();
    }
    format!("{:+.1}%", (new - old) / old * 100.0)
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

/// The `compare` table: for every configuration present in both files, the figures of each and the change.
/// Configurations present in only one file are listed at the end. When a key repeats (the repeats of one bench,
/// or several runs appended to one file) the median of its repeats is compared.
pub fn compare(before: &[BenchRecord], after: &[BenchRecord]) -> String {
    let a = median_records(before);
    let b = median_records(after);
    let mut out = String::new();
    let mut only = Vec::new();
    let mut lat_header = false;
    let mut thr_header = false;
    let mut rep_header = false;
    let mut rec_header = false;
    for (key, old) in &a {
        let Some(new) = b.get(key) else {
            only.push(format!("only in first:  {key}"));
            continue;
        };
        match (old, new) {
            (BenchRecord::Latency(o), BenchRecord::Latency(n)) => {
                if !lat_header {
                    let _ = writeln!(
                        out,
                        "{:<52} {:>22} {:>22} {:>22} {:>24}",
                        "latency (corrected, µs)", "p50", "p99", "p99.9", "achieved msg/s"
                    );
                    lat_header = true;
                }
                let cell = |o: u64, n: u64| {
                    format!(
                        "{:.1}→{:.1} {}",
                        us(o),
                        us(n),
                        pct_change(o as f64, n as f64)
                    )
                };
                let _ = writeln!(
                    out,
                    "{:<52} {:>22} {:>22} {:>22} {:>24}",
                    key,
                    cell(o.corrected.p50, n.corrected.p50),
                    cell(o.corrected.p99, n.corrected.p99),
                    cell(o.corrected.p999, n.corrected.p999),
                    format!(
                        "{:.0}→{:.0} {}",
                        o.achieved_rate,
                        n.achieved_rate,
                        pct_change(o.achieved_rate, n.achieved_rate)
                    ),
                );
            }
            (BenchRecord::Throughput(o), BenchRecord::Throughput(n)) => {
                if !thr_header {
                    let _ = writeln!(out, "{:<52} {:>30} {:>24}", "throughput", "msg/s", "MB/s");
                    thr_header = true;
                }
                let _ = writeln!(
                    out,
                    "{:<52} {:>30} {:>24}",
                    key,
                    format!(
                        "{:.0}→{:.0} {}",
                        o.msgs_per_s,
                        n.msgs_per_s,
                        pct_change(o.msgs_per_s, n.msgs_per_s)
                    ),
                    format!(
                        "{:.1}→{:.1} {}",
                        o.mb_per_s,
                        n.mb_per_s,
                        pct_change(o.mb_per_s, n.mb_per_s)
                    ),
                );
            }
            (BenchRecord::Replay(o), BenchRecord::Replay(n)) => {
                if !rep_header {
                    let _ = writeln!(out, "{:<52} {:>30}", "replay", "records/s");
                    rep_header = true;
                }
                let _ = writeln!(
                    out,
                    "{:<52} {:>30}",
                    key,
                    format!(
                        "{:.0}→{:.0} {}",
                        o.records_per_s,
                        n.records_per_s,
                        pct_change(o.records_per_s, n.records_per_s)
                    ),
                );
            }
            (BenchRecord::Record(o), BenchRecord::Record(n)) => {
                if !rec_header {
                    let _ = writeln!(out, "{:<52} {:>30}", "record", "records/s");
                    rec_header = true;
                }
                let _ = writeln!(
                    out,
                    "{:<52} {:>30}",
                    key,
                    format!(
                        "{:.0}→{:.0} {}",
                        o.records_per_s,
                        n.records_per_s,
                        pct_change(o.records_per_s, n.records_per_s)
                    ),
                );
            }
            _ => unreachable!("keys start with the record kind"),
        }
    }
    for key in b.keys().filter(|k| !a.contains_key(*k)) {
        only.push(format!("only in second: {key}"));
    }
    if a.keys().all(|k| !b.contains_key(k)) {
        let _ = writeln!(out, "no configuration appears in both files");
    }
    for line in only {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// What `bench compare --fail-above RATIO` judges: how many configurations both files measured, and every figure
/// of them that got worse by more than `ratio` (latency percentiles p50 and p99 higher than `ratio` times the
/// first file's; a rate lower than the first file's divided by `ratio`), medians of the repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareVerdict {
    /// Configurations present in both files.
    pub comparable: usize,
    /// One line per regressed figure: configuration, figure, before → after.
    pub regressions: Vec<String>,
}

impl CompareVerdict {
    /// The stderr lines of a `--fail-above RATIO` check that failed (each regression, then the error); `None`
    /// when it passed. Files with no configuration in common fail: nothing was checked.
    pub fn failure(&self, ratio: f64) -> Option<Vec<String>> {
        if self.comparable == 0 {
            return Some(vec![format!(
                "error: --fail-above {ratio}: the two files have no configuration in common: nothing was checked"
            )]);
        }
        if self.regressions.is_empty() {
            return None;
        }
        let mut lines: Vec<String> = (self.regressions.iter())
            .map(|line| format!("regression: {line}"))
            .collect();
        lines.push(format!(
            "error: --fail-above {ratio}: {} figure(s) of {} configuration(s) got worse by more than the ratio",
            self.regressions.len(),
            self.comparable
        ));
        Some(lines)
    }
}

/// Judges `after` against `before` at `ratio` (> 1: 1.1 allows 10 % worse).
pub fn compare_verdict(
    before: &[BenchRecord],
    after: &[BenchRecord],
    ratio: f64,
) -> CompareVerdict {
    let (a, b) = (median_records(before), median_records(after));
    let mut verdict = CompareVerdict {
        comparable: 0,
        regressions: Vec::new(),
    };
    let mut worse_if_higher = |key: &str, figure: &str, o: f64, n: f64| {
        if o > 0.0 && n > o * ratio {
            verdict
                .regressions
                .push(format!("{key} {figure}: {o:.1} → {n:.1} (×{:.2})", n / o));
        }
    };
    let mut lower = Vec::new();
    let mut comparable = 0;
    for (key, old) in &a {
        let Some(new) = b.get(key) else { continue };
        comparable += 1;
        match (old, new) {
            (BenchRecord::Latency(o), BenchRecord::Latency(n)) => {
                worse_if_higher(key, "p50 µs", us(o.corrected.p50), us(n.corrected.p50));
                worse_if_higher(key, "p99 µs", us(o.corrected.p99), us(n.corrected.p99));
            }
            (BenchRecord::Throughput(o), BenchRecord::Throughput(n)) => {
                lower.push((key.clone(), "msg/s", o.msgs_per_s, n.msgs_per_s));
            }
            (BenchRecord::Replay(o), BenchRecord::Replay(n)) => {
                lower.push((key.clone(), "records/s", o.records_per_s, n.records_per_s));
            }
            (BenchRecord::Record(o), BenchRecord::Record(n)) => {
                lower.push((key.clone(), "records/s", o.records_per_s, n.records_per_s));
            }
            _ => {}
        }
    }
    for (key, figure, o, n) in lower {
        if n > 0.0 && o > n * ratio {
            verdict
                .regressions
                .push(format!("{key} {figure}: {o:.0} → {n:.0} (×{:.2})", n / o));
        } else if n <= 0.0 && o > 0.0 {
            verdict
                .regressions
                .push(format!("{key} {figure}: {o:.0} → 0"));
        }
    }
    verdict.comparable = comparable;
    verdict
}

/// A timestamp for result file names.
pub fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::new_histogram;

    #[test]
    fn a_failed_check_says_each_regression_then_why() {
        let nothing = CompareVerdict {
            comparable: 0,
            regressions: Vec::new(),
        };
        let lines = nothing.failure(1.1).expect("nothing in common fails");
        assert!(
            lines[0].ends_with("no configuration in common: nothing was checked"),
            "{lines:?}"
        );
        let fine = CompareVerdict {
            comparable: 2,
            regressions: Vec::new(),
        };
        assert_eq!(fine.failure(1.1), None);
        let worse = CompareVerdict {
            comparable: 2,
            regressions: vec!["tcp 100k p99: 10.0 → 20.0 (×2.00)".into()],
        };
        let lines = worse.failure(1.1).unwrap();
        assert_eq!(lines[0], "regression: tcp 100k p99: 10.0 → 20.0 (×2.00)");
        assert_eq!(
            lines[1],
            "error: --fail-above 1.1: 1 figure(s) of 2 configuration(s) got worse by more than the ratio"
        );
    }

    fn sample_hist() -> Histogram<u64> {
        let mut h = new_histogram();
        for v in 1..=10_000u64 {
            h.record(v * 100).unwrap();
        }
        h
    }

    #[test]
    fn hgrm_round_trips_and_matches_histogram() {
        let h = sample_hist();
        let text = hgrm_text(&h);
        let parsed = parse_hgrm(&text).unwrap();
        assert_eq!(parsed.total_count, 10_000);
        assert!((parsed.max_us - h.max() as f64 / 1_000.0).abs() < 0.01);
        let median = parsed
            .rows
            .iter()
            .find(|(_, p, _)| *p >= 0.5)
            .map(|(v, _, _)| *v)
            .unwrap();
        assert!((median - 500.0).abs() < 2.0, "median {median}");
        assert!(parse_hgrm("garbage").is_err());
        let truncated: String = text.lines().take(5).collect::<Vec<_>>().join("\n");
        assert!(parse_hgrm(&truncated).is_err());
    }

    #[test]
    fn hlog_round_trips_through_the_interval_log_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.hlog");
        let h = sample_hist();
        let intervals = vec![
            IntervalSample {
                start_ns: 1_700_000_000_000_000_000,
                end_ns: 1_700_000_001_000_000_000,
                corrected: h.clone(),
                uncorrected: new_histogram(),
            },
            IntervalSample {
                start_ns: 1_700_000_001_000_000_000,
                end_ns: 1_700_000_002_000_000_000,
                corrected: h.clone(),
                uncorrected: h.clone(),
            },
        ];
        write_hlog(&path, &intervals, "test").unwrap();
        let entries = read_hlog(&path).unwrap();
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[0].tag, None);
        assert_eq!(entries[1].tag.as_deref(), Some(UNCORRECTED_TAG));
        assert_eq!(entries[0].histogram, h);
        assert_eq!(entries[1].histogram.len(), 0);
        assert_eq!(entries[2].start, Duration::from_secs(1));
        assert_eq!(entries[3].duration, Duration::from_secs(1));
    }

    #[test]
    fn jsonl_round_trip_and_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let rec = BenchRecord::Throughput(ThroughputResult {
            system: "raw-pushpull".into(),
            transport: "tcp".into(),
            size: 64,
            shards: 1,
            duration_s: 1.0,
            messages: 10,
            msgs_per_s: 10.0,
            mb_per_s: 0.00064,
            send_hwm: 1000,
            receive_hwm: 1000,
            back_pressure: BackPressure::Block,
            repeat: 1,
        });
        append_jsonl(&path, std::slice::from_ref(&rec)).unwrap();
        append_jsonl(&path, std::slice::from_ref(&rec)).unwrap();
        assert_eq!(read_jsonl(&path).unwrap(), vec![rec.clone(), rec]);
        std::fs::write(&path, "{\"kind\":\"throughput\"}\n").unwrap();
        let err = read_jsonl(&path).unwrap_err().to_string();
        assert!(err.contains(":1:"), "{err}");
    }

    fn throughput(system: &str, msgs_per_s: f64, repeat: u32) -> BenchRecord {
        BenchRecord::Throughput(ThroughputResult {
            system: system.into(),
            transport: "tcp".into(),
            size: 100,
            shards: 1,
            duration_s: 1.0,
            messages: msgs_per_s as u64,
            msgs_per_s,
            mb_per_s: msgs_per_s * 100.0 / 1e6,
            send_hwm: 1000,
            receive_hwm: 1000,
            back_pressure: BackPressure::Block,
            repeat,
        })
    }

    #[test]
    fn compare_uses_the_median_of_the_repeats() {
        // The outlier repeat (10 M) would win if the last record won; the median is 2 M.
        let before = vec![throughput("tickbox", 1e6, 1), throughput("tickbox", 1e6, 2)];
        let after = vec![
            throughput("tickbox", 2e6, 1),
            throughput("tickbox", 1.9e6, 2),
            throughput("tickbox", 10e6, 3),
        ];
        let text = compare(&before, &after);
        assert!(text.contains("1000000→2000000 +100.0%"), "{text}");
    }

    #[test]
    fn fail_above_flags_a_regression_and_knows_when_nothing_compares() {
        let before = vec![throughput("tickbox", 1e6, 1)];
        let same = compare_verdict(&before, &[throughput("tickbox", 0.95e6, 1)], 1.1);
        assert_eq!(
            (same.comparable, same.regressions.len()),
            (1, 0),
            "within 10 %"
        );
        let worse = compare_verdict(&before, &[throughput("tickbox", 0.8e6, 1)], 1.1);
        assert_eq!(worse.regressions.len(), 1, "{worse:?}");
        assert!(worse.regressions[0].contains("msg/s"), "{worse:?}");
        let apart = compare_verdict(&before, &[throughput("raw", 1e6, 1)], 1.1);
        assert_eq!(apart.comparable, 0);
    }

    #[test]
    fn result_documents_and_json_lines_both_read() {
        let dir = tempfile::tempdir().unwrap();
        let doc = RunDocument {
            bench: "throughput".into(),
            environment: crate::env::Environment::capture(),
            repeats: 1,
            order: crate::stats::order_label(1),
            records: vec![throughput("tickbox", 5.0, 1)],
            summary: Vec::new(),
            warnings: Vec::new(),
        };
        let path = dir.path().join("doc.json");
        doc.write(&path).unwrap();
        assert_eq!(RunDocument::read(&path).unwrap(), doc);
        assert_eq!(read_results(&path).unwrap(), doc.records);
        let lines = dir.path().join("lines.json");
        append_jsonl(&lines, &doc.records).unwrap();
        assert_eq!(read_results(&lines).unwrap(), doc.records);
    }

    /// A record bench's line from before archive records were staged, with the preparer's pre-faulted bytes in it,
    /// still reads (as what the fields it shares say); a field no version wrote is still refused.
    #[test]
    fn a_record_result_with_the_retired_prefaulted_bytes_still_reads() {
        let line = concat!(
            r#"{"kind":"record","system":"tickbox-record","transport":"tcp","shards":1,"records":1000000,"#,
            r#""delivered":1000000,"lost":0,"accounted_missing":0,"batch_frames":15625,"bytes_written":94995567,"#,
            r#""elapsed_s":0.218231099,"records_per_s":4582298.3,"feed_rate":4735652.0,"workers":0,"#,
            r#""recv_hwm":1000000,"repeat":1,"prefaulted_bytes":135819264,"reserve_stalls":2}"#
        );
        let BenchRecord::Record(r) = serde_json::from_str::<BenchRecord>(line).unwrap() else {
            panic!("not a record result");
        };
        assert_eq!((r.records, r.reserve_stalls), (1_000_000, Some(2)));
        let written = serde_json::to_string(&BenchRecord::Record(r)).unwrap();
        assert!(!written.contains("prefaulted"), "{written}");
        let unknown = line.replace("prefaulted_bytes", "unheard_of");
        assert!(serde_json::from_str::<BenchRecord>(&unknown).is_err());
    }

    #[test]
    fn hgrm_states_its_unit() {
        let text = hgrm_text(&sample_hist());
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with('#') && first.contains("microseconds"),
            "{first}"
        );
        assert!(parse_hgrm(&text).is_ok());
    }
}

/// Where the measured systems run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Publisher and receivers are threads of the bench process (any transport).
    #[default]
    InProcess,
    /// Separate processes over tcp: a real `tickbox feed` and `tickbox subscribe`, and a raw PUB and SUB child
    /// ([`crate::process`]).
    Processes,
}

impl Shape {
    /// `in-process` or `processes`, as the flag spells it.
    pub fn name(self) -> &'static str {
        match self {
            Shape::InProcess => "in-process",
            Shape::Processes => "processes",
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
