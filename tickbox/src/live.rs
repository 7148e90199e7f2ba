//! The live view of long-running commands: a stats line every `--stats-interval`, on stderr.
//!
//! On a terminal the line is redrawn in place (an indicatif progress bar for a replay, whose end is known, and a
//! status line for the others); anywhere else each report is one plain line (`replay: ...`) that a log file or a
//! pipe keeps as it is. Callers pass counters the libraries already publish (status snapshots, progress
//! callbacks, per-shard atomics), read from their control loop: the live view never touches a hot path.
//! [`LiveView::finish`] clears the bar before the summary is printed, so the two never share a line.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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
    /// Redrawn in place on the terminal.
    Terminal(ProgressBar),
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
            let bar = match total {
                Some(total) => ProgressBar::with_draw_target(
                    Some(total),
                    ProgressDrawTarget::stderr_with_hz(4),
                )
                .with_style(
                    ProgressStyle::with_template(&format!(
                        "{label}: [{{bar:20}}] {{percent:>3}}% {{wide_msg}}"
                    ))
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                ),
                None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4))
                    .with_style(
                        ProgressStyle::with_template(&format!("{{spinner}} {label}: {{wide_msg}}"))
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    ),
            };
            // The label is in the template, not set as a prefix: setting one would draw the bar at once, before
            // the command has printed its endpoints.
            Draw::Terminal(bar)
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
                eprintln!("{}: {done}{line}", self.label);
            }
            Draw::Terminal(bar) => {
                if let Some((done, total)) = progress {
                    bar.set_length(total);
                    bar.set_position(done);
                }
                bar.set_message(line.to_owned());
                bar.tick();
            }
        }
    }

    /// Clears the bar or status line, so what follows (the summary) starts on a clean line.
    pub(crate) fn finish(&mut self) {
        if let Draw::Terminal(bar) = &self.draw {
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

/// A per-second rate from a counter sampled at each report.
#[derive(Debug)]
pub(crate) struct Rate {
    last: (Instant, u64),
}

impl Default for Rate {
    /// Counting from zero now, so the first report is the rate since the start.
    fn default() -> Self {
        Rate {
            last: (Instant::now(), 0),
        }
    }
}

impl Rate {
    /// Counts per second since the previous call (since creation for the first).
    pub(crate) fn per_sec(&mut self, count: u64) -> f64 {
        let now = Instant::now();
        let (t, c) = self.last;
        self.last = (now, count);
        count.saturating_sub(c) as f64 / now.duration_since(t).as_secs_f64().max(1e-9)
    }
}

/// A rate as `12.3k/s`.
pub(crate) fn fmt_rate(per_sec: f64) -> String {
    if per_sec >= 1e6 {
        format!("{:.2}M/s", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1}k/s", per_sec / 1e3)
    } else {
        format!("{per_sec:.0}/s")
    }
}

/// A duration in ns as `850us`, `12.3ms`, `1.20s`.
pub(crate) fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2}s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else {
        format!("{}us", ns / 1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_progress_read_plainly() {
        assert_eq!(fmt_rate(0.0), "0/s");
        assert_eq!(fmt_rate(12_345.0), "12.3k/s");
        assert_eq!(fmt_rate(2_500_000.0), "2.50M/s");
        assert_eq!(progress_text(25, 200), "25/200 (12.5%)");
        assert_eq!(progress_text(0, 0), "0/0 (0.0%)");
        assert_eq!(fmt_ns(850_000), "850us");
        assert_eq!(fmt_ns(12_345_678), "12.3ms");
        assert_eq!(fmt_ns(1_200_000_000), "1.20s");
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
