//! `tickbox journal export`: arguments, the progress bar and the summary; the export itself is
//! `tickbox_export::export`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tickbox_export::{
    Days, Dest, ExportError, ExportOptions, ExportSummary, Filter, Format, Location,
    ParquetOptions, PriceType, RecordKind,
};
use tickbox_recorder::{TimeZone, When};

use crate::exit_code;

#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// The journal: a ring file or archive directory, plain or compressed, or a history directory; or one in an
    /// object store (`--journal s3://bucket/prefix`, as `record --archive-to` leaves it), fetched to a temporary
    /// directory first.
    #[command(flatten)]
    journal: crate::cli::journal::JournalArg,
    /// What `journal` names, once read (a local copy's for a store).
    #[arg(skip)]
    path: PathBuf,
    /// Output format: `parquet` (a dataset partitioned by date and kind), `csv` (one file per kind), `json`
    /// (one object per line), `dbn` (an import given back, or a recording's trades or quotes).
    #[arg(long, value_enum)]
    format: ExportFormat,
    /// Where to write: a path, file:///path or s3://bucket/prefix (credentials and endpoint from the AWS_*
    /// environment). Parquet and a CSV of several kinds write a directory (prefix); json, dbn and a CSV file
    /// ending in .csv write one file. Default: stdout (json, dbn, csv of one --kind). Never overwrites.
    #[arg(long, value_name = "PATH|URL")]
    out: Option<String>,
    /// Only these kinds (comma-separated: quote, trade, heartbeat, book_level, gap, vendor).
    #[arg(long, value_delimiter = ',', value_name = "KIND[,KIND…]")]
    kind: Vec<String>,
    /// Only records whose topic starts with one of these prefixes (comma-separated: `Q.XNAS.,T.XNAS.AAPL`).
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    topics: Vec<String>,
    /// Only records captured at or after this: RFC 3339, a local date-time or time of day in --tz, ns since the
    /// epoch, or +DURATION after the first record (the replay's forms).
    #[arg(long, value_parser = parse_when, value_name = "TIME")]
    from: Option<When>,
    /// Only records captured before this (same forms as --from).
    #[arg(long, value_parser = parse_when, value_name = "TIME")]
    to: Option<When>,
    /// Time zone of local --from/--to times and of Parquet's date partitions: an IANA name.
    #[arg(long, default_value = "UTC", value_parser = parse_tz, value_name = "ZONE")]
    tz: TimeZone,
    /// Prices as exact integers of 1e-9 in `<name>_e9` columns (`fixed`), or as floats in `<name>` (`float`).
    #[arg(long, value_enum, default_value = "fixed")]
    price: PriceArg,
    /// Parquet: a partition's file is closed and the next begun at this size.
    #[arg(long, value_parser = tickbox_units::parse_size, default_value = "512MiB", value_name = "SIZE")]
    max_file_size: u64,
    /// DBN of an import: which imported file (0-based, as `tickbox import` listed them); needed when there are
    /// several.
    #[arg(long, value_name = "N")]
    source: Option<u32>,
    /// Print the summary as one JSON object (on stdout; on stderr when the data goes to stdout).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    Parquet,
    Csv,
    Json,
    Dbn,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum PriceArg {
    Fixed,
    Float,
}

fn parse_when(s: &str) -> Result<When, String> {
    When::parse(s).map_err(|e| e.to_string())
}

fn parse_tz(s: &str) -> Result<TimeZone, String> {
    tickbox_recorder::parse_zone(s).map_err(|e| e.to_string())
}

pub(crate) fn run(mut args: ExportArgs) -> anyhow::Result<ExitCode> {
    args.path = args.journal.path();
    // A journal or history in an object store is read from a local copy (kept until the export is done) that
    // holds what the export reads: the ends of each compressed file first (a `+DURATION` counts from the first
    // record), then the frames of the window.
    let mut mirror = match open_store(&args.path)
        .and_then(|m| m.map(|mut m| m.fill_ends().map(|()| m)).transpose())
    {
        Ok(m) => m,
        Err(e @ ExportError::Store { .. }) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(exit_code::STORE));
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(m) = &mirror {
        args.path = m.path().to_path_buf();
    }
    let kinds = args
        .kind
        .iter()
        .map(|k| {
            RecordKind::parse(k).ok_or_else(|| {
                anyhow::anyhow!(
                    "--kind {k}: not one of {}",
                    RecordKind::ALL.map(RecordKind::name).join(", ")
                )
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let first = || crate::outcome::first_capture_ns(&args.path).ok();
    let resolve = |w: &Option<When>| -> anyhow::Result<Option<u64>> {
        w.as_ref()
            .map(|w| {
                let first = if w.needs_first() { first() } else { None };
                w.resolve(&args.tz, first).map_err(anyhow::Error::from)
            })
            .transpose()
    };
    let filter = Filter {
        kinds,
        topics: args.topics.clone(),
        from_ns: resolve(&args.from)?,
        to_ns: resolve(&args.to)?,
    };
    if let Some(m) = mirror.as_mut() {
        // DBN reads an import's records whole: everything.
        let filled = match args.format {
            ExportFormat::Dbn => m.fill_all(),
            _ => m.fill_window(filter.from_ns, filter.to_ns),
        };
        if let Err(e) = filled {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(exit_code::STORE));
        }
    }
    let format = match args.format {
        ExportFormat::Parquet => Format::Parquet,
        ExportFormat::Csv => Format::Csv,
        ExportFormat::Json => Format::Json,
        ExportFormat::Dbn => Format::Dbn,
    };
    let price = match args.price {
        PriceArg::Fixed => PriceType::Fixed,
        PriceArg::Float => PriceType::Float,
    };
    let dest = match &args.out {
        None => Dest::Stdout,
        Some(s) => Dest::At(Location::parse(s).map_err(anyhow::Error::msg)?),
    };
    let to_stdout = matches!(dest, Dest::Stdout);
    let opts = ExportOptions {
        format,
        filter,
        price,
        days: Days::new(args.tz.clone()),
        parquet: ParquetOptions {
            price,
            max_file_bytes: args.max_file_size,
            ..ParquetOptions::default()
        },
        dbn_source: args.source,
        dbn_zstd: args.out.as_deref().is_some_and(|o| o.ends_with(".zst")),
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} export [{bar:40}] {pos}/{len} records ({per_sec}, eta {eta}) {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
    });
    let result = tickbox_export::export(&args.path, &dest, &opts, &mut |p| {
        if let Some(bar) = &bar {
            bar.set_length(p.total.max(p.read));
            bar.set_position(p.read);
            bar.set_message(format!("{} rows", p.rows));
        }
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let summary = match result {
        Ok(s) => s,
        Err(e) if e.is_broken_pipe() => return Ok(ExitCode::SUCCESS),
        Err(e @ ExportError::Store { .. }) => {
            eprintln!("error: {e} (nothing was left at the destination)");
            return Ok(ExitCode::from(exit_code::STORE));
        }
        Err(e) => return Err(e).with_context(|| format!("exporting {}", args.path.display())),
    };
    if args.json {
        let mut v = serde_json::to_value(&summary)?;
        if let Some(m) = &mirror {
            // How much of the store's objects the export read (by range): the window's frames, not whole files.
            v["fetched"] = m.fetched_json();
        }
        let v = v.to_string();
        if to_stdout {
            eprintln!("{v}");
        } else {
            println!("{v}");
        }
    } else {
        let mut text = summary_text(&summary);
        if let Some(m) = &mirror {
            text.push_str(&format!("source        {}\n", m.fetched()));
        }
        if to_stdout {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    }
    Ok(if summary.damaged.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit_code::CORRUPT)
    })
}

/// The local copy of `path` when it names an object store location (`s3://…`), holding its small files and its
/// compressed files' headers and indexes (see `tickbox_export::Mirror`).
fn open_store(path: &std::path::Path) -> Result<Option<tickbox_export::Mirror>, ExportError> {
    let s = path.to_string_lossy();
    if !s.contains("://") {
        return Ok(None);
    }
    match Location::parse(&s)? {
        Location::Store(url) => tickbox_export::Mirror::open(&url).map(Some),
        Location::Local(_) => Ok(None),
    }
}

/// The local copy `journal ls` reads: the cards the store holds, and the first and last frames of the journals it
/// holds none of (everything, to `--verify`).
pub(crate) fn fetch_for_ls(
    path: &std::path::Path,
    verify: bool,
) -> Result<Option<tickbox_export::Mirror>, ExportError> {
    open_store(path)?
        .map(|mut m| {
            if verify {
                m.fill_all()
            } else {
                m.fill_for_cards()
            }
            .map(|()| m)
        })
        .transpose()
}

fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The summary as lines.
fn summary_text(s: &ExportSummary) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let kinds: Vec<String> = s
        .rows_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {}", count(*n)))
        .collect();
    let _ = writeln!(
        t,
        "exported      {} rows{} into {} file(s), {}",
        count(s.rows),
        if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        },
        s.files.len(),
        tickbox_units::format_size_approx(s.bytes_written)
    );
    let _ = writeln!(
        t,
        "read          {} records ({}); {} filtered out, {} undecodable",
        count(s.records_read),
        tickbox_units::format_size_approx(s.bytes_read),
        count(s.filtered_out),
        count(s.undecodable)
    );
    if s.bytes_written > 0 {
        let _ = writeln!(
            t,
            "ratio         {:.2}x (bytes of the records exported per byte written)",
            s.compression_ratio
        );
    }
    let _ = writeln!(
        t,
        "speed         {:.2} s, {} rows/s, {:.1} MB/s",
        s.seconds,
        count(s.rows_per_second as u64),
        s.mb_per_second
    );
    for d in &s.damaged {
        let _ = writeln!(
            t,
            "damaged       {} at offset {}: {} bytes, {} records passed over{}",
            d.path,
            d.offset,
            d.bytes,
            d.records,
            d.resumed_at
                .map_or(", nothing verifies after it".to_owned(), |r| format!(
                    ", resumed at sequence {r}"
                ))
        );
    }
    if !s.damaged.is_empty() {
        let _ = writeln!(
            t,
            "export        every intact record was exported; the damaged ranges above were passed over (exit 5)"
        );
    }
    for f in &s.files {
        let _ = writeln!(
            t,
            "file          {}  {} rows  {}",
            f.path,
            count(f.rows),
            f.bytes
        );
    }
    t
}
