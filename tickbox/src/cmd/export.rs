//! `tickbox journal export`: arguments, the progress bar and the summary; the export itself is
//! `tickbox_export::export`.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use tickbox_export::{
    Days, Dest, ExportError, ExportOptions, ExportSummary, Filter, Format, Location,
    ParquetOptions, PriceType, RecordKind,
};
use tickbox_recorder::When;

use crate::cli::export::{ExportArgs, ExportFormat, PriceArg};
use crate::exit_code;

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
    let bar = progress_bar();
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
    print_summary(&summary, mirror.as_ref(), args.json, to_stdout)?;
    Ok(if summary.damaged.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit_code::CORRUPT)
    })
}

/// The progress bar on a terminal's stderr (records read of those the export will read, rows written).
fn progress_bar() -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} export [{bar:40}] {pos}/{len} records ({per_sec}, eta {eta}) {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
    })
}

/// The summary (and what was fetched from a store), on stdout, or on stderr when the data went to stdout.
fn print_summary(
    summary: &ExportSummary,
    mirror: Option<&tickbox_export::Mirror>,
    json: bool,
    to_stdout: bool,
) -> anyhow::Result<()> {
    if json {
        let mut v = serde_json::to_value(summary)?;
        if let Some(m) = mirror {
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
        let mut text = summary.text();
        if let Some(m) = mirror {
            text.push_str(&format!("source        {}\n", m.fetched()));
        }
        if to_stdout {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    }
    Ok(())
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
