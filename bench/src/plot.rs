//! Percentile plots: latency against percentile on a "nines" axis (50 %, 90 %, 99 %, 99.9 % … equally spaced),
//! one line per configuration, as SVG.
//!
//! plotters is built without system-font support (machines may have no fonts), so the plot registers an
//! embedded DejaVu Sans Mono (Bitstream Vera licence, `assets/DejaVuSansMono-LICENSE.txt`) with its ab_glyph
//! backend before drawing.

use std::path::Path;
use std::sync::OnceLock;

use hdrhistogram::Histogram;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::BenchError;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
const FAMILY: &str = "tickbox-mono";

fn ensure_font() -> Result<(), BenchError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(BenchError::Report(
            "embedded plot font is not a valid TTF".into(),
        ))
    }
}

/// One line of a percentile plot.
pub struct Series<'a> {
    /// Legend text, e.g. a run's label.
    pub label: String,
    /// Latencies in ns.
    pub histogram: &'a Histogram<u64>,
}

/// Points (nines, latency µs) of a histogram: nines = log10(1 / (1 − percentile)), so 90 % is 1, 99 % is 2.
/// The curve stops at the last percentile the sample count can resolve (1 − 1/count) and ends on the max.
pub fn percentile_points(hist: &Histogram<u64>) -> Vec<(f64, f64)> {
    if hist.is_empty() {
        return Vec::new();
    }
    let max_nines = (hist.len() as f64).log10().max(1.0);
    let mut points = Vec::new();
    for v in hist.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        if q >= 1.0 {
            break;
        }
        let nines = -(1.0 - q).log10();
        if nines > max_nines {
            break;
        }
        points.push((nines, v.value_iterated_to() as f64 / 1_000.0));
    }
    points.push((max_nines, hist.max() as f64 / 1_000.0));
    points
}

fn nines_label(x: &f64) -> String {
    let pct = 100.0 * (1.0 - 10f64.powf(-*x));
    let digits = (x.round() as i64 - 2).clamp(0, 6) as usize;
    format!("{pct:.digits$}%")
}

/// Writes a percentile plot; the format follows the extension: `.svg`, or `.png` (rasterised with the embedded
/// font). The latency axis is logarithmic (µs) so a 20 µs median and a 5 ms tail both stay readable.
pub fn write_percentile_plot(
    path: &Path,
    title: &str,
    series: &[Series<'_>],
) -> Result<(), BenchError> {
    ensure_font()?;
    let lines: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|s| (s.label.clone(), percentile_points(s.histogram)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(BenchError::Report(
            "nothing to plot: every histogram is empty".into(),
        ));
    }
    let size = (1000, 640);
    let drawn = match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => draw(
            SVGBackend::new(path, size).into_drawing_area(),
            title,
            lines,
        ),
        Some("png") => draw(
            BitMapBackend::new(path, size).into_drawing_area(),
            title,
            lines,
        ),
        _ => {
            return Err(BenchError::InvalidArgument(format!(
                "plot file {} must end in .svg or .png",
                path.display()
            )));
        }
    };
    drawn.map_err(|e| BenchError::Report(format!("plotting {}: {e}", path.display())))
}

/// Kept for callers that want SVG whatever the name.
pub fn write_percentile_svg(
    path: &Path,
    title: &str,
    series: &[Series<'_>],
) -> Result<(), BenchError> {
    if path.extension().and_then(|e| e.to_str()) == Some("svg") {
        write_percentile_plot(path, title, series)
    } else {
        write_percentile_plot(&path.with_extension("svg"), title, series)
    }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    lines: Vec<(String, Vec<(f64, f64)>)>,
) -> Result<(), String> {
    let e = |err: &dyn std::fmt::Display| err.to_string();
    let max_x = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
        .fold(1.0f64, f64::max)
        .ceil();
    let (min_y, max_y) = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .fold((f64::MAX, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let min_y = (min_y / 1.5).max(0.01);
    let max_y = (max_y * 1.5).max(min_y * 10.0);
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 20))
        .margin(16)
        .margin_right(48)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..max_x, (min_y..max_y).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_labels(max_x as usize + 1)
        .x_label_formatter(&nines_label)
        .y_label_formatter(&|y| format!("{y}"))
        .x_desc("percentile")
        .y_desc("one-way latency (µs)")
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 15))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (label, points)) in lines.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FAMILY, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::new_histogram;

    #[test]
    fn writes_a_valid_svg_with_labels() {
        let mut a = new_histogram();
        let mut b = new_histogram();
        for v in 1..=100_000u64 {
            a.record(10_000 + v % 1_000).unwrap();
            b.record(20_000 + (v % 997) * 7).unwrap();
        }
        b.record(5_000_000).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        write_percentile_svg(
            &path,
            "test",
            &[
                Series {
                    label: "tickbox tcp".into(),
                    histogram: &a,
                },
                Series {
                    label: "raw tcp".into(),
                    histogram: &b,
                },
            ],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("tickbox tcp") && svg.contains("raw tcp"));
        assert!(svg.contains("99.9%"), "nines axis labels missing");
        assert!(svg.matches("<polyline").count() >= 2);

        let png = dir.path().join("p.png");
        write_percentile_plot(
            &png,
            "test",
            &[Series {
                label: "a".into(),
                histogram: &a,
            }],
        )
        .unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        assert!(write_percentile_plot(&dir.path().join("p.gif"), "t", &[]).is_err());
    }

    #[test]
    fn points_follow_the_nines_axis() {
        let mut h = new_histogram();
        for v in 1..=1_000u64 {
            h.record(v * 1_000).unwrap();
        }
        let pts = percentile_points(&h);
        assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(pts.last().unwrap().0, 3.0);
        assert!((pts.last().unwrap().1 - 1_000.0).abs() < 1.0);
        assert_eq!(nines_label(&2.0), "99%");
        assert_eq!(nines_label(&3.0), "99.9%");
        assert!(percentile_points(&new_histogram()).is_empty());
    }
}
