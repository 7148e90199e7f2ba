//! The live view of long-running commands: a stats line every `--stats-interval`, on stderr.
//!
//! On a terminal the line is redrawn in place (an indicatif progress bar for a replay, whose end is known, and a
//! status line for the others); anywhere else each report is one plain line (`replay: ...`) that a log file or a
//! pipe keeps as it is. Callers pass counters the libraries already publish (status snapshots, progress
//! callbacks, per-shard atomics), read from their control loop: the live view never touches a hot path.
//! [`LiveView::finish`] clears the bar before the summary is printed, so the two never share a line.
//!
//! On a terminal a line never runs past its width and nothing is cut: a report longer than the terminal is
//! wrapped at its `, ` separators onto more lines (the width is the terminal's own, asked of whichever of stderr,
//! stdout and stdin is a terminal, then `COLUMNS`; libraries that fall back to 80 columns when stderr's size is
//! unknown cut the lateness and the ETA off).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

use crate::out::errln;

/// Default period on a terminal, where a person watches it.
const TERMINAL_EVERY: Duration = Duration::from_secs(1);
/// Default period elsewhere (a log file or a pipe), so a day's log is not mostly stats.
const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// The `--stats-interval` flag, shared by the commands that have a live view.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LiveArgs {
    /// Print a stats line this often on stderr (`200ms`, `5s`; `0` = never). Default: every second on a
    /// terminal, where it is redrawn in place, and every 10 s otherwise, as plain lines.
    #[arg(long, value_name = "DURATION", value_parser = tickbox_units::parse_duration)]
    pub(crate) stats_interval: Option<Duration>,
}

/// How the reports are drawn.
enum Draw {
    /// Nothing (interval 0, or `-q` without an explicit interval).
    Off,
    /// One line per report on stderr.
    Plain,
    /// Redrawn in place on the terminal; `prefix` is how many columns the template takes before the message.
    Terminal { bar: ProgressBar, prefix: usize },
}

/// The terminal's width in columns: asked of stderr, stdout, then stdin (whichever is a terminal answers), then
/// `COLUMNS`; 80 when nothing says.
pub(crate) fn terminal_width() -> usize {
    [2, 1, 0]
        .into_iter()
        .find_map(tty_columns)
        .or_else(|| {
            std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.trim().parse().ok())
                .filter(|&c: &usize| c > 0)
        })
        .unwrap_or(80)
}

/// The columns of the terminal on `fd`, when it is one and knows its size.
#[allow(unsafe_code)] // one ioctl into a zeroed struct we own
fn tty_columns(fd: libc::c_int) -> Option<usize> {
    let mut size: libc::winsize = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the pointer given, which points at a live, properly aligned
    // `winsize` on our stack; on a descriptor that is not a terminal it fails with ENOTTY and writes nothing.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size as *mut libc::winsize) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// `line` split at its `, ` separators into rows of at most `width` columns, the first `first` columns shorter
/// (the label or bar before it); a single part longer than a row is cut only there.
pub(crate) fn wrap_to(line: &str, width: usize, first: usize) -> String {
    // The room of a row: the first after the label, the others after a two-space indent.
    let room = |row: usize| {
        width
            .saturating_sub(if row == 0 { first } else { 2 })
            .max(1)
    };
    let mut rows: Vec<String> = vec![String::new()];
    for part in line.split(", ") {
        let at = rows.len() - 1;
        let used = rows[at].chars().count();
        if used == 0 || used + 2 + part.chars().count() <= room(at) {
            if used > 0 {
                rows[at].push_str(", ");
            }
            rows[at].push_str(part);
        } else {
            rows[at].push(',');
            rows.push(part.to_owned());
        }
    }
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let cut: String = r.chars().take(room(i)).collect();
            if i == 0 {
                cut
            } else {
                format!("  {cut}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// stderr as indicatif's terminal, with [`terminal_width`] as its width (indicatif's own falls back to 80
/// columns, and would then take a wider line for two and clear a line it does not own).
#[derive(Debug)]
struct Stderr;

impl Stderr {
    fn put(&self, s: &str) -> std::io::Result<()> {
        std::io::stderr().lock().write_all(s.as_bytes())
    }

    fn cursor(&self, n: usize, code: char) -> std::io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.put(&format!("\x1b[{n}{code}"))
    }
}

impl TermLike for Stderr {
    fn width(&self) -> u16 {
        u16::try_from(terminal_width()).unwrap_or(u16::MAX)
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.cursor(n, 'A')
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.cursor(n, 'B')
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.cursor(n, 'C')
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.cursor(n, 'D')
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.put(&format!("{s}\n"))
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.put("\r\x1b[2K")
    }

    fn flush(&self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// A periodic stats reporter for one command; see the module documentation.
pub(crate) struct LiveView {
    label: &'static str,
    every: Duration,
    next: Instant,
    draw: Draw,
}

impl LiveView {
    /// A status line for `label` (`feed`, `subscribe`, ...); `total` makes it a progress bar on a terminal.
    pub(crate) fn new(label: &'static str, args: &LiveArgs, total: Option<u64>) -> LiveView {
        Self::with_interval(label, args.stats_interval, total)
    }

    /// As [`LiveView::new`], for a command whose interval comes from elsewhere (a config field).
    pub(crate) fn with_interval(
        label: &'static str,
        interval: Option<Duration>,
        total: Option<u64>,
    ) -> LiveView {
        let terminal = std::io::stderr().is_terminal();
        let every = match interval {
            Some(every) => every,
            // -q asks for warnings and errors only: no stats unless asked for by name.
            None if crate::quiet() => Duration::ZERO,
            None if terminal => TERMINAL_EVERY,
            None => PLAIN_EVERY,
        };
        let draw = if every.is_zero() {
            Draw::Off
        } else if terminal {
            let target = || ProgressDrawTarget::term_like_with_hz(Box::new(Stderr), 4);
            // The message is wrapped to the width by `show`, so the template takes it as it is (`{msg}`).
            let (bar, prefix) = match total {
                Some(total) => (
                    ProgressBar::with_draw_target(Some(total), target()).with_style(
                        ProgressStyle::with_template(&format!(
                            "{label}: [{{bar:20}}] {{percent:>3}}% {{msg}}"
                        ))
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                    ),
                    label.len() + 2 + 22 + 5,
                ),
                None => (
                    ProgressBar::with_draw_target(None, target()).with_style(
                        ProgressStyle::with_template(&format!("{{spinner}} {label}: {{msg}}"))
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    ),
                    label.len() + 4,
                ),
            };
            // The label is in the template, not set as a prefix: setting one would draw the bar at once, before
            // the command has printed its endpoints.
            Draw::Terminal { bar, prefix }
        } else {
            Draw::Plain
        };
        LiveView {
            label,
            every,
            next: Instant::now() + every,
            draw,
        }
    }

    /// The period, or `None` when the view is off (callers use it to ask their library for fresh counters at
    /// least this often).
    pub(crate) fn every(&self) -> Option<Duration> {
        (!matches!(self.draw, Draw::Off)).then_some(self.every)
    }

    /// True once per period: the caller then builds the line and calls [`LiveView::show`].
    pub(crate) fn due(&mut self) -> bool {
        if matches!(self.draw, Draw::Off) {
            return false;
        }
        let now = Instant::now();
        // A quarter period early counts: callers that sample on their own period (a progress callback every
        // `every`) would otherwise miss by a hair and report every other time.
        if now + self.every / 4 < self.next {
            return false;
        }
        // Catch up without a burst of reports after a stall.
        self.next = (self.next + self.every).max(now);
        true
    }

    /// Draws `line`; with a bar, `progress` (done, total) moves it.
    pub(crate) fn show(&mut self, line: &str, progress: Option<(u64, u64)>) {
        match &self.draw {
            Draw::Off => {}
            Draw::Plain => {
                let done = progress
                    .map(|(done, total)| format!("{}, ", progress_text(done, total)))
                    .unwrap_or_default();
                errln!("{}: {done}{line}", self.label);
            }
            Draw::Terminal { bar, prefix } => {
                if let Some((done, total)) = progress {
                    bar.set_length(total);
                    bar.set_position(done);
                }
                bar.set_message(wrap_to(line, terminal_width(), *prefix));
                bar.tick();
            }
        }
    }

    /// Clears the bar or status line, so what follows (the summary) starts on a clean line.
    pub(crate) fn finish(&mut self) {
        if let Draw::Terminal { bar, .. } = &self.draw {
            bar.finish_and_clear();
        }
        self.draw = Draw::Off;
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `done/total (pct%)`.
pub(crate) fn progress_text(done: u64, total: u64) -> String {
    format!(
        "{done}/{total} ({:.1}%)",
        100.0 * done as f64 / total.max(1) as f64
    )
}

pub(crate) use tickbox_units::RateMeter as Rate;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reads_plainly() {
        assert_eq!(progress_text(25, 200), "25/200 (12.5%)");
        assert_eq!(progress_text(0, 0), "0/0 (0.0%)");
    }

    #[test]
    fn a_long_line_wraps_at_its_separators_and_loses_nothing() {
        let line = "received 123456 (50.0k/s), to workers 123456, gaps 0, late 0 (past 1s), lateness p50 85us p99 1.2ms max 3.4ms";
        assert_eq!(wrap_to(line, 200, 14), line, "fits: one row");
        let wrapped = wrap_to(line, 60, 14);
        for (i, row) in wrapped.lines().enumerate() {
            let room = if i == 0 { 60 - 14 } else { 60 };
            assert!(row.chars().count() <= room, "{row:?} in {wrapped}");
        }
        assert!(wrapped.lines().count() > 1);
        assert_eq!(
            wrapped.replace(",\n  ", ", "),
            line,
            "every part kept, in order"
        );
    }

    #[test]
    fn a_zero_interval_is_off_and_never_due() {
        let mut v = LiveView::with_interval("t", Some(Duration::ZERO), None);
        assert_eq!(v.every(), None);
        assert!(!v.due());
        let mut v = LiveView::with_interval("t", Some(Duration::from_secs(1)), None);
        assert_eq!(v.every(), Some(Duration::from_secs(1)));
        assert!(!v.due(), "not before the first period");
        v.next = Instant::now() - Duration::from_millis(1);
        assert!(v.due());
        assert!(!v.due(), "once per period");
    }
}
