//! `tickbox journal export`: arguments, the progress bar and the summary; the export itself is
//! `tickbox_export::export`.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use tickbox_export::{
    Days, Dest, ExportError, ExportOptions, ExportSummary, Filter, Format, Location,
    ParquetOptions, PriceType,
};

use crate::cli::export::{ExportArgs, ExportFormat, PriceArg};
use crate::exit_code;
use crate::out::{errln, out};

pub(crate) fn run(mut args: ExportArgs) -> anyhow::Result<ExitCode> {
    args.path = args.journal.path();
    // A journal or history in an object store is read from a local copy (kept until the export is done) that
    // holds what the export reads: the ends of each compressed file first (a `+DURATION` counts from the first
    // record), then the frames of the window.
    let mut mirror = match tickbox_export::Mirror::of_path(&args.path)
        .and_then(|m| m.map(|mut m| m.fill_ends().map(|()| m)).transpose())
    {
        Ok(m) => m,
        Err(e @ ExportError::Store { .. }) => {
            errln!("error: {e}");
            return Ok(ExitCode::from(exit_code::STORE));
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(m) = &mirror {
        args.path = m.path().to_path_buf();
    }
    let kinds = tickbox_export::parse_kinds(&args.kind).map_err(anyhow::Error::msg)?;
    let (from_ns, to_ns) =
        tickbox_export::window_ns(&args.path, args.from.as_ref(), args.to.as_ref(), &args.tz)?;
    let filter = Filter {
        kinds,
        topics: args.topics.clone(),
        from_ns,
        to_ns,
    };
    if let Some(m) = mirror.as_mut() {
        // DBN reads an import's records whole: everything.
        let filled = match args.format {
            ExportFormat::Dbn => m.fill_all(),
            _ => m.fill_window(filter.from_ns, filter.to_ns),
        };
        if let Err(e) = filled {
            errln!("error: {e}");
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
            errln!("error: {e} (nothing was left at the destination)");
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
    let text = if json {
        format!(
            "{}\n",
            crate::out::versioned(&summary.report_json(mirror)?)?
        )
    } else {
        summary.report_text(mirror)
    };
    // The data has stdout: the report goes to stderr.
    if to_stdout {
        errln!("{}", text.trim_end_matches('\n'));
    } else {
        out!("{text}");
    }
    Ok(())
}
