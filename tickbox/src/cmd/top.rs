//! `tickbox top ADDR…`: the fleet in one terminal, like AeronStat: every process's `/metrics` (`--metrics ADDR`),
//! one table per role, redrawn in place every `--interval`; `--once` prints one snapshot for scripts. The tables
//! are built by `tickbox_metrics::top`; this module scrapes, sizes and draws.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tickbox_metrics::top::{render, Process};

use crate::cli::top::Args;
use crate::config::TickboxConfig;
use crate::out::out;

/// Scrapes every address at once (one thread each), so one slow process delays the view by its timeout only.
fn scrape_all(addrs: &[String], timeout: Duration) -> Vec<Process> {
    std::thread::scope(|s| {
        let handles: Vec<_> = addrs
            .iter()
            .map(|a| s.spawn(move || Process::scrape(a, timeout)))
            .collect();
        handles
            .into_iter()
            .zip(addrs)
            .map(|(h, a)| {
                h.join()
                    .unwrap_or_else(|_| Process::scrape(a, Duration::from_millis(1)))
            })
            .collect()
    })
}

/// The terminal's width (stdout), else `$COLUMNS`, else 80.
fn terminal_width() -> usize {
    terminal_columns()
        .or_else(|| std::env::var("COLUMNS").ok()?.parse().ok())
        .filter(|&w| w > 0)
        .unwrap_or(80)
}

#[allow(unsafe_code)]
fn terminal_columns() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which points at a live, writable `winsize`;
    // fd 1 is our stdout, which we only query.
    let rc = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut size as *mut libc::winsize) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

pub(crate) fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let every = args.interval.0.max(Duration::from_millis(100));
    // A scrape waits at least a second: a live process on a busy host can take longer than a short refresh
    // interval to answer, and calling it unreachable would be wrong. At most 2 s, so one hung process delays the
    // view by that much only.
    let timeout = every.clamp(Duration::from_secs(1), Duration::from_secs(2));
    let width = || args.width.unwrap_or_else(terminal_width);
    if args.once {
        let before = scrape_all(&args.addrs, timeout);
        std::thread::sleep(every);
        let now = scrape_all(&args.addrs, timeout);
        out!("{}", render(&now, &before, width()));
        let all_up = now.iter().all(|p| p.error.is_none());
        return Ok(ExitCode::from(if all_up {
            crate::exit_code::OK
        } else {
            crate::exit_code::ERROR
        }));
    }
    let stop = crate::shutdown::flag();
    let terminal = std::io::stdout().is_terminal();
    let mut before: Vec<Process> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let now = scrape_all(&args.addrs, timeout);
        let mut screen = String::new();
        if terminal {
            // Home and clear, then the whole view: redrawn in place, as AeronStat does.
            screen.push_str("\x1b[H\x1b[2J");
        }
        let width = width();
        let title = format!(
            "tickbox top: {} process(es), every {} (Ctrl-C quits)",
            args.addrs.len(),
            tickbox_units::format_duration(every)
        );
        screen.push_str(&tickbox_metrics::top::cut(&title, width));
        screen.push_str("\n\n");
        screen.push_str(&render(&now, &before, width));
        let mut out = std::io::stdout().lock();
        out.write_all(screen.as_bytes())?;
        out.flush()?;
        drop(out);
        before = now;
        while started.elapsed() < every && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(ExitCode::from(crate::exit_code::OK))
}
