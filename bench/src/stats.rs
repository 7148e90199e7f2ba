//! Repeats: every figure is measured several times, tickbox and raw alternating, and reported as the median with
//! the min–max of the repeats; the tickbox/raw ratio as the ratio of the medians with the spread of the
//! per-repeat ratios (repeat `i`'s tickbox figure over repeat `i`'s raw figure, measured back to back).
//!
//! Why alternate: on a noisy machine a slow spell hits whichever system runs in it. Running all tickbox repeats
//! and then all raw ones would charge one system a whole spell; alternating (and swapping which goes first every
//! repeat: T R, R T, T R, …) spreads it over both, so the ratio of adjacent runs is the stable figure.

use serde::{Deserialize, Serialize};

/// Whether tickbox runs before the raw baseline in repeat `repeat` (0-based): first in even repeats, second in odd
/// ones, so neither always warms the machine up for the other.
pub fn tickbox_first(repeat: usize) -> bool {
    repeat.is_multiple_of(2)
}

/// `systems` in the order repeat `repeat` (0-based) runs them: as given in even repeats, reversed in odd ones
/// (the same swap as [`tickbox_first`], for any number of systems).
pub fn run_order<T: Copy>(repeat: usize, systems: &[T]) -> Vec<T> {
    let mut order = systems.to_vec();
    if !tickbox_first(repeat) {
        order.reverse();
    }
    order
}

/// The order of one configuration's runs over `repeats` repeats, each system named by its letter in
/// `letters` (in [`run_order`]'s order), e.g. `T R R T T R` for 3 repeats of `["T", "R"]`.
pub fn order_label_of(repeats: usize, letters: &[&str]) -> String {
    (0..repeats)
        .flat_map(|r| run_order(r, letters))
        .collect::<Vec<_>>()
        .join(" ")
}

/// [`order_label_of`] tickbox (`T`) and raw (`R`): `T R R T T R` for 3.
pub fn order_label(repeats: usize) -> String {
    order_label_of(repeats, &["T", "R"])
}

/// The median and range of one figure over the repeats.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Repeats the figure was measured in.
    pub n: usize,
    /// The median (mean of the middle two for an even count).
    pub median: f64,
    /// The smallest repeat.
    pub min: f64,
    /// The largest repeat.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none (or any is NaN).
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut v = values.to_vec();
        let (median, min, max) = tickbox_tuning::median_min_max(&mut v)?;
        Some(Spread {
            n: v.len(),
            median,
            min,
            max,
        })
    }

    /// `median (min–max)` with `fmt` applied to each number; just the median for one repeat.
    pub fn show(&self, fmt: impl Fn(f64) -> String) -> String {
        if self.n <= 1 || self.min == self.max {
            fmt(self.median)
        } else {
            format!("{} ({}–{})", fmt(self.median), fmt(self.min), fmt(self.max))
        }
    }
}

/// Tickbox over raw for one figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// Median of tickbox's repeats over median of raw's.
    pub of_medians: f64,
    /// Spread of `tickbox[i] / raw[i]` over the repeats `i` where both were measured and raw is non-zero.
    pub per_repeat: Spread,
}

impl Ratio {
    /// The ratio of two series measured in the same repeats (index `i` of each is repeat `i`).
    pub fn of(tickbox: &[f64], raw: &[f64]) -> Option<Ratio> {
        let t = Spread::of(tickbox)?;
        let r = Spread::of(raw)?;
        if r.median == 0.0 {
            return None;
        }
        let per: Vec<f64> = tickbox
            .iter()
            .zip(raw)
            .filter(|(_, r)| **r != 0.0)
            .map(|(t, r)| t / r)
            .collect();
        Some(Ratio {
            of_medians: t.median / r.median,
            per_repeat: Spread::of(&per)?,
        })
    }

    /// `2.77 (2.40–3.10)`: ratio of medians, then the per-repeat range.
    pub fn show(&self) -> String {
        if self.per_repeat.n <= 1 {
            format!("{:.2}", self.of_medians)
        } else {
            format!(
                "{:.2} ({:.2}–{:.2})",
                self.of_medians, self.per_repeat.min, self.per_repeat.max
            )
        }
    }
}

/// One figure of one configuration, summarised over its repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FigureSummary {
    /// The configuration, e.g. `tcp 100k msg/s 100 B`.
    pub configuration: String,
    /// The figure and its unit, e.g. `p50 µs` or `msg/s`.
    pub figure: String,
    /// Tickbox's repeats.
    pub tickbox: Option<Spread>,
    /// The raw baseline compared with, e.g. `raw-pubsub`.
    pub baseline: String,
    /// The baseline's repeats.
    pub raw: Option<Spread>,
    /// Tickbox over raw (absent for counts such as `lost`, or without a baseline).
    pub ratio: Option<Ratio>,
}

impl FigureSummary {
    /// Summarises `tickbox` and `raw` values (index = repeat); `with_ratio` false for counts where a ratio means
    /// nothing (messages lost).
    pub fn new(
        configuration: &str,
        figure: &str,
        tickbox: &[f64],
        baseline: &str,
        raw: &[f64],
        with_ratio: bool,
    ) -> FigureSummary {
        FigureSummary {
            configuration: configuration.to_string(),
            figure: figure.to_string(),
            tickbox: Spread::of(tickbox),
            baseline: baseline.to_string(),
            raw: Spread::of(raw),
            ratio: if with_ratio {
                Ratio::of(tickbox, raw)
            } else {
                None
            },
        }
    }
}

/// Three significant digits with k/M suffixes for large numbers: `1.23M`, `456k`, `78.9`, `0.512`.
pub fn fmt_sig(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = scaled.abs();
    let whole = s.fract() == 0.0 && suffix.is_empty();
    let digits = if s == 0.0 || whole || s >= 100.0 {
        0
    } else if s >= 10.0 {
        1
    } else if s >= 1.0 {
        2
    } else {
        3
    };
    format!("{scaled:.digits$}{suffix}")
}

/// The table of a bench's summaries: per configuration a block of figures, each `median (min–max)` for tickbox
/// and raw, then the ratio of the medians with the per-repeat ratio range.
pub fn summary_table(summaries: &[FigureSummary], fmt: impl Fn(&str, f64) -> String) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut current: Option<&str> = None;
    let none = || "-".to_string();
    // As wide as the longest figure name, so the columns line up whatever the figures are called.
    let w = summaries
        .iter()
        .map(|s| s.figure.chars().count())
        .max()
        .unwrap_or(0)
        .max(22);
    for s in summaries {
        if current != Some(s.configuration.as_str()) {
            current = Some(s.configuration.as_str());
            let _ = writeln!(out, "{}", s.configuration);
            let _ = writeln!(
                out,
                "  {:<w$} {:>30} {:>30} {:>24}",
                "figure",
                "tickbox median (min–max)",
                "raw median (min–max)",
                "×raw medians (per rep)"
            );
        }
        let t = s
            .tickbox
            .map_or_else(none, |v| v.show(|x| fmt(&s.figure, x)));
        let r = s.raw.map_or_else(none, |v| v.show(|x| fmt(&s.figure, x)));
        let ratio = s.ratio.map_or_else(none, |r| r.show());
        let _ = writeln!(out, "  {:<w$} {:>30} {:>30} {:>24}", s.figure, t, r, ratio);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_ratio() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert!(Spread::of(&[]).is_none());
        assert_eq!(s.show(|v| format!("{v:.0}")), "2 (1–3)");
        assert_eq!(Spread::of(&[5.0]).unwrap().show(|v| format!("{v}")), "5");
        // Ratio of medians 4/2 = 2; per repeat 1/1, 4/2, 9/3 = 1, 2, 3.
        let r = Ratio::of(&[1.0, 4.0, 9.0], &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(r.of_medians, 2.0);
        assert_eq!((r.per_repeat.min, r.per_repeat.max), (1.0, 3.0));
        assert_eq!(r.show(), "2.00 (1.00–3.00)");
        assert!(Ratio::of(&[1.0], &[0.0]).is_none());
    }

    #[test]
    fn order_alternates_which_goes_first() {
        assert_eq!(order_label(3), "T R R T T R");
        assert!(tickbox_first(0) && !tickbox_first(1) && tickbox_first(2));
    }

    #[test]
    fn numbers_keep_three_digits() {
        assert_eq!(fmt_sig(1_234_567.0), "1.23M");
        assert_eq!(fmt_sig(456_000.0), "456k");
        assert_eq!(fmt_sig(78.91), "78.9");
        assert_eq!(fmt_sig(0.5123), "0.512");
        assert_eq!(fmt_sig(0.0), "0");
        assert_eq!(fmt_sig(12.0), "12");
    }

    #[test]
    fn table_shows_every_figure_with_its_ratio() {
        let rows = vec![
            FigureSummary::new(
                "tcp 100k",
                "p50 µs",
                &[50.0, 60.0, 55.0],
                "raw-pubsub",
                &[20.0, 25.0, 22.0],
                true,
            ),
            FigureSummary::new(
                "tcp 100k",
                "lost",
                &[0.0; 3],
                "raw-pubsub",
                &[0.0; 3],
                false,
            ),
        ];
        let t = summary_table(&rows, |_, v| format!("{v:.1}"));
        assert_eq!(t.matches("tcp 100k").count(), 1, "{t}");
        assert!(t.contains("55.0 (50.0–60.0)"), "{t}");
        assert!(t.contains("22.0 (20.0–25.0)"), "{t}");
        assert!(t.contains("2.50 (2.40–2.50)"), "{t}");
        let lost = t
            .lines()
            .find(|l| l.trim_start().starts_with("lost"))
            .unwrap();
        assert!(lost.trim_end().ends_with('-'), "{lost}");
    }
}
