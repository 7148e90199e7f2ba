//! `bench compress`: what compressing a closed journal (`tickbox journal compress`) gains on disk and costs a
//! reader, on the synthetic feed's records and on any journal given (the DBN fixtures imported with `tickbox
//! import`, a recording).
//!
//! For each journal, in a temporary directory: a plain copy and a compressed copy ([`tickbox_journal::compress`],
//! timed). Reported: records; the bytes the records take as a plain journal stores them (frames with their 24-byte
//! headers, 8-aligned) against what the plain copy and the compressed copy take on disk (`du`), and their ratio;
//! the compression rate; and, over `repeat` rounds that alternate which copy is read first, the read rate
//! (records a second, through [`tickbox_journal::Reader`] with checksums checked, the way every command reads a
//! journal) of each copy and their ratio per round; and the time a [`Reader::seek_time`] to the last tenth of
//! the journal's capture times takes, then reading the first record there.
//!
//! [`Reader::seek_time`]: tickbox_journal::Reader::seek_time

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use tickbox_journal::{compress, summarize, CompressOptions, Reader};

use crate::replay::generate_journal;
use crate::stats::{run_order, Ratio, Spread};
use crate::BenchError;

/// What to measure.
#[derive(Debug, Clone)]
pub struct CompressBenchConfig {
    /// Records of the synthetic feed to generate (0: none).
    pub records: u64,
    /// The synthetic feed's seed.
    pub seed: u64,
    /// Other journals to measure, with the name to report them by.
    pub journals: Vec<(String, PathBuf)>,
    /// Rounds of reading.
    pub repeat: usize,
    /// How to compress.
    pub options: CompressOptions,
}

impl Default for CompressBenchConfig {
    fn default() -> Self {
        CompressBenchConfig {
            records: 1_000_000,
            seed: 7,
            journals: Vec::new(),
            repeat: 3,
            options: CompressOptions::default(),
        }
    }
}

/// The figures of one journal.
#[derive(Debug, Clone, Serialize)]
pub struct CompressBenchResult {
    /// Its name.
    pub journal: String,
    /// Records it holds.
    pub records: u64,
    /// Bytes of its records as a plain journal stores them.
    pub record_bytes: u64,
    /// Bytes the plain copy takes on disk.
    pub plain_disk_bytes: u64,
    /// Bytes the compressed copy takes on disk.
    pub compressed_disk_bytes: u64,
    /// Bytes of the compressed copy's files (`ls`; below `du` for files smaller than a block or two).
    pub compressed_file_bytes: u64,
    /// `record_bytes` over `compressed_disk_bytes`.
    pub ratio: f64,
    /// `record_bytes` over `compressed_file_bytes`: what zstd made of the records, whatever the block size.
    pub ratio_of_bytes: f64,
    /// Plain record bytes compressed a second.
    pub compress_bytes_per_sec: f64,
    /// Records a second read from the plain copy, one per round.
    pub plain_read: Vec<f64>,
    /// Records a second read from the compressed copy, one per round.
    pub compressed_read: Vec<f64>,
    /// Microseconds to seek to the last tenth of the capture times and read the record there: plain, one per round.
    pub plain_seek_us: Vec<f64>,
    /// The same for the compressed copy.
    pub compressed_seek_us: Vec<f64>,
}

impl CompressBenchResult {
    /// Compressed over plain read rate: ratio of medians and per-round range.
    pub fn read_ratio(&self) -> Option<Ratio> {
        Ratio::of(&self.compressed_read, &self.plain_read)
    }
}

fn copy_journal(from: &Path, to: &Path) -> Result<(), BenchError> {
    let io = |p: &Path, e| BenchError::io(p, e);
    if from.is_dir() {
        std::fs::create_dir_all(to).map_err(|e| io(to, e))?;
        for entry in std::fs::read_dir(from).map_err(|e| io(from, e))? {
            let entry = entry.map_err(|e| io(from, e))?;
            if entry.path().is_file() {
                std::fs::copy(entry.path(), to.join(entry.file_name()))
                    .map_err(|e| io(&entry.path(), e))?;
            }
        }
    } else {
        std::fs::copy(from, to).map_err(|e| io(from, e))?;
    }
    Ok(())
}

/// Reads every record of `path`; returns how many and the records a second.
fn read_rate(path: &Path) -> Result<(u64, f64), BenchError> {
    let err =
        |e: tickbox_journal::JournalError| BenchError::Setup(format!("{}: {e}", path.display()));
    let started = Instant::now();
    let mut r = Reader::open(path).map_err(err)?;
    let (mut n, mut sum) = (0u64, 0u64);
    while let Some(rec) = r.next().map_err(err)? {
        n += 1;
        // Touch the payload, as a consumer would.
        sum = sum.wrapping_add(rec.payload.first().copied().unwrap_or(0) as u64);
    }
    std::hint::black_box(sum);
    Ok((n, n as f64 / started.elapsed().as_secs_f64()))
}

/// Microseconds to seek to capture time `t` and read the record there.
fn seek_us(path: &Path, t: u64) -> Result<f64, BenchError> {
    let err =
        |e: tickbox_journal::JournalError| BenchError::Setup(format!("{}: {e}", path.display()));
    let mut r = Reader::open(path).map_err(err)?;
    let started = Instant::now();
    r.seek_time(t).map_err(err)?;
    std::hint::black_box(r.next().map_err(err)?.map(|rec| rec.seq));
    Ok(started.elapsed().as_secs_f64() * 1e6)
}

/// Measures one journal (`source`, copied into `work`).
fn measure(
    name: &str,
    source: &Path,
    work: &Path,
    cfg: &CompressBenchConfig,
) -> Result<CompressBenchResult, BenchError> {
    let err = |e: tickbox_journal::JournalError| BenchError::Setup(format!("{name}: {e}"));
    let plain = work.join(format!("{name}.plain"));
    let packed = work.join(format!("{name}.compressed"));
    copy_journal(source, &plain)?;
    copy_journal(source, &packed)?;
    let started = Instant::now();
    let report = compress(&packed, &cfg.options).map_err(err)?;
    let compress_secs = started.elapsed().as_secs_f64();
    let before = summarize(&plain, false).map_err(err)?;
    let after = summarize(&packed, false).map_err(err)?;
    let (first, last) = (
        before.first_time_ns.unwrap_or(0),
        before.last_time_ns.unwrap_or(0),
    );
    let tenth = last - (last - first) / 10;
    let mut result = CompressBenchResult {
        journal: name.to_string(),
        records: before.records,
        record_bytes: before.disk.record_bytes,
        plain_disk_bytes: before.disk.allocated_bytes,
        compressed_disk_bytes: after.disk.allocated_bytes,
        compressed_file_bytes: after.disk.file_bytes,
        ratio: before.disk.record_bytes as f64 / after.disk.allocated_bytes.max(1) as f64,
        ratio_of_bytes: before.disk.record_bytes as f64 / after.disk.file_bytes.max(1) as f64,
        compress_bytes_per_sec: report.record_bytes as f64 / compress_secs,
        plain_read: Vec::new(),
        compressed_read: Vec::new(),
        plain_seek_us: Vec::new(),
        compressed_seek_us: Vec::new(),
    };
    // Rounds alternate which copy is read first, so a neighbour's load falls on both alike.
    for round in 0..cfg.repeat {
        for compressed in run_order(round, &[false, true]) {
            let path = if compressed { &packed } else { &plain };
            let (n, rate) = read_rate(path)?;
            if n != result.records {
                return Err(BenchError::Setup(format!(
                    "{name}: round {round} read {n} records of {}",
                    result.records
                )));
            }
            let us = seek_us(path, tenth)?;
            if compressed {
                result.compressed_read.push(rate);
                result.compressed_seek_us.push(us);
            } else {
                result.plain_read.push(rate);
                result.plain_seek_us.push(us);
            }
        }
    }
    Ok(result)
}

/// Runs the bench: the synthetic feed's records first (when `records` > 0), then each journal given.
pub fn run_compress_bench(
    cfg: &CompressBenchConfig,
) -> Result<Vec<CompressBenchResult>, BenchError> {
    if cfg.repeat == 0 {
        return Err(BenchError::InvalidArgument(
            "--repeat must be at least 1".into(),
        ));
    }
    let work = tempfile::Builder::new()
        .prefix("tickbox-bench-compress-")
        .tempdir()
        .map_err(|e| BenchError::io(&std::env::temp_dir(), e))?;
    let mut results = Vec::new();
    if cfg.records > 0 {
        tracing::info!("compress: writing {} generated records", cfg.records);
        let generated = generate_journal(cfg.records, cfg.seed)?;
        results.push(measure("synthetic", generated.path(), work.path(), cfg)?);
    }
    for (name, path) in &cfg.journals {
        results.push(measure(name, path, work.path(), cfg)?);
    }
    Ok(results)
}

/// The results as a table, one row per journal.
pub fn compress_table(results: &[CompressBenchResult]) -> String {
    let mut out = String::from(
        "| journal | records | record bytes | plain du | compressed du (bytes) | ratio du (bytes) | compress MB/s | read plain rec/s | read compressed rec/s | compressed ÷ plain | seek plain µs | seek compressed µs |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let spread = |v: &[f64], f: &dyn Fn(f64) -> String| {
        Spread::of(v).map_or_else(|| "-".into(), |s| s.show(f))
    };
    let mega = |v: f64| format!("{:.2} M", v / 1e6);
    let micros = |v: f64| format!("{v:.0}");
    for r in results {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} ({}) | {:.2}x ({:.2}x) | {:.0} | {} | {} | {} | {} | {} |\n",
            r.journal,
            r.records,
            r.record_bytes,
            r.plain_disk_bytes,
            r.compressed_disk_bytes,
            r.compressed_file_bytes,
            r.ratio,
            r.ratio_of_bytes,
            r.compress_bytes_per_sec / 1e6,
            spread(&r.plain_read, &mega),
            spread(&r.compressed_read, &mega),
            r.read_ratio().map_or_else(|| "-".into(), |x| x.show()),
            spread(&r.plain_seek_us, &micros),
            spread(&r.compressed_seek_us, &micros),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_measures_both_copies_of_every_journal() {
        let cfg = CompressBenchConfig {
            records: 20_000,
            repeat: 2,
            ..CompressBenchConfig::default()
        };
        let results = run_compress_bench(&cfg).unwrap();
        assert_eq!(results.len(), 1);
        let r = &results[0];
        assert_eq!(r.records, 20_000);
        assert!(r.ratio > 1.5, "{r:?}");
        assert!(r.compressed_disk_bytes < r.plain_disk_bytes);
        assert_eq!((r.plain_read.len(), r.compressed_read.len()), (2, 2));
        assert!(r.read_ratio().is_some());
        let table = compress_table(&results);
        assert!(table.contains("| synthetic | 20000 |"), "{table}");
    }
}
