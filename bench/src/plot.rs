//! Plots, PNG or SVG:
//!
//! * percentile plots: latency against percentile on a "nines" axis (50 %, 90 %, 99 %, 99.9 % … equally
//!   spaced), one line per (configuration, system);
//! * repeat plots: a figure (throughput, records/s) per repeat for tickbox and its raw baselines, with medians.
//!
//! Readability rules every plot follows: both axes labelled with their unit and at least four tick labels; a
//! configuration's tickbox and raw series share a colour (tickbox solid or filled, raw dashed or hollow); lost
//! messages are written next to the series and in the legend; the legend has its own panel right of the plot,
//! so it never hides a curve.
//!
//! plotters is built without system-font support (machines may have no fonts), so the plot registers an
//! embedded DejaVu Sans (Bitstream Vera licence, `assets/DejaVu-LICENSE.txt`) with its ab_glyph backend before
//! drawing. A proportional font: the monospaced one left a wide gap after every `.` (`7. 00M`) in PNGs.
//!
//! Titles longer than the plot wrap onto a second line instead of running off it; in a repeat plot each column
//! has its own marker shape (circle, triangle, square, diamond…), filled for tickbox, hollow for raw libzmq, and
//! the legend names each column with its marker.

use std::path::Path;
use std::sync::OnceLock;

use hdrhistogram::Histogram;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

use crate::BenchError;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
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

/// Pixel size of every plot (PNG and SVG).
pub const PLOT_SIZE: (u32, u32) = (1200, 680);
/// Width of the legend panel on the right, outside the plot area, so it never covers a curve.
const LEGEND_WIDTH: u32 = 300;

/// One line of a percentile plot.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text, e.g. a run's label.
    pub label: String,
    /// Latencies in ns.
    pub histogram: Histogram<u64>,
    /// Configuration index: series with the same group share a colour (a configuration's tickbox and raw runs).
    pub group: usize,
    /// A raw-libzmq baseline: drawn dashed beside its tickbox series' solid line.
    pub baseline: bool,
    /// Messages of the measured window that never arrived (marked on the curve and in the legend when non-zero).
    pub lost: u64,
    /// Messages the measured window scheduled (the denominator of the lost percentage).
    pub scheduled: u64,
}

impl Series {
    /// `lost 12 (0.40 %)`, or `None` when nothing was lost.
    pub fn lost_note(&self) -> Option<String> {
        lost_note(self.lost, self.scheduled)
    }
}

fn lost_note(lost: u64, total: u64) -> Option<String> {
    (lost > 0).then(|| {
        format!(
            "lost {lost} ({:.2} %)",
            100.0 * lost as f64 / total.max(1) as f64
        )
    })
}

/// The colour of configuration `group`; a few strong, distinguishable colours before the palette repeats.
fn group_colour(group: usize) -> RGBColor {
    const COLOURS: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(23, 190, 207),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
    ];
    COLOURS[group % COLOURS.len()]
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

/// A µs value for an axis label: three significant digits, no exponent.
fn us_label(us: f64) -> String {
    if us >= 100.0 {
        format!("{us:.0}")
    } else if us >= 10.0 {
        format!("{us:.1}")
    } else if us >= 1.0 {
        format!("{us:.2}")
    } else {
        format!("{us:.3}")
    }
}

fn backend_error(path: &Path) -> impl Fn(String) -> BenchError + '_ {
    move |e| BenchError::Report(format!("plotting {}: {e}", path.display()))
}

/// Pixel height of one title line.
const TITLE_LINE: u32 = 24;

/// Draws `title` across the top of `root`, wrapped at spaces onto as many lines as it needs to fit the width, and
/// returns the area below it.
fn draw_title<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
) -> Result<DrawingArea<DB, plotters::coord::Shift>, String> {
    let font = (FAMILY, 17).into_font().color(&BLACK);
    let width = root.dim_in_pixel().0.saturating_sub(32);
    let fits = |text: &str| {
        root.estimate_text_size(text, &font)
            .map_or(text.chars().count() as u32 * 9 <= width, |(w, _)| {
                w <= width
            })
    };
    let mut lines: Vec<String> = vec![String::new()];
    for word in title.split(' ') {
        let last = lines.last_mut().expect("one line");
        let candidate = if last.is_empty() {
            word.to_owned()
        } else {
            format!("{last} {word}")
        };
        if last.is_empty() || fits(&candidate) {
            *last = candidate;
        } else {
            lines.push(word.to_owned());
        }
    }
    let height = TITLE_LINE * lines.len() as u32 + 12;
    let (top, rest) = root.split_vertically(height);
    for (i, line) in lines.iter().enumerate() {
        let style = font.clone().pos(Pos::new(HPos::Center, VPos::Top));
        top.draw(&Text::new(
            line.clone(),
            (
                (root.dim_in_pixel().0 / 2) as i32,
                10 + (TITLE_LINE as usize * i) as i32,
            ),
            style,
        ))
        .map_err(|x| x.to_string())?;
    }
    Ok(rest)
}

/// Runs `draw` on an SVG or PNG backend of [`PLOT_SIZE`] as `path`'s extension says.
fn render(
    path: &Path,
    draw: impl Fn(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Result<(), String>,
    draw_png: impl Fn(&DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>) -> Result<(), String>,
) -> Result<(), BenchError> {
    ensure_font()?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => draw(&SVGBackend::new(path, PLOT_SIZE).into_drawing_area()),
        Some("png") => draw_png(&BitMapBackend::new(path, PLOT_SIZE).into_drawing_area()),
        _ => {
            return Err(BenchError::InvalidArgument(format!(
                "plot file {} must end in .svg or .png",
                path.display()
            )));
        }
    }
    .map_err(backend_error(path))
}

/// Writes a percentile plot; the format follows the extension: `.svg`, or `.png` (rasterised with the embedded
/// font). The latency axis is logarithmic (µs) so a 20 µs median and a 5 ms tail both stay readable; a
/// configuration's tickbox and raw series share a colour (tickbox solid, raw dashed); lost messages are written on
/// the curve and in the legend, which sits outside the plot area.
pub fn write_percentile_plot(
    path: &Path,
    title: &str,
    series: &[Series],
) -> Result<(), BenchError> {
    let lines: Vec<(&Series, Vec<(f64, f64)>)> = series
        .iter()
        .map(|s| (s, percentile_points(&s.histogram)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(BenchError::Report(
            "nothing to plot: every histogram is empty".into(),
        ));
    }
    render(
        path,
        |root| draw_percentiles(root, title, &lines),
        |root| draw_percentiles(root, title, &lines),
    )
}

/// Kept for callers that want SVG whatever the name.
pub fn write_percentile_svg(path: &Path, title: &str, series: &[Series]) -> Result<(), BenchError> {
    if path.extension().and_then(|e| e.to_str()) == Some("svg") {
        write_percentile_plot(path, title, series)
    } else {
        write_percentile_plot(&path.with_extension("svg"), title, series)
    }
}

/// One legend entry: a line sample (solid or dashed, optionally with a marker) and its text.
struct LegendEntry {
    text: String,
    colour: RGBColor,
    dashed: bool,
    /// `Some((shape, filled))`: draw that marker instead of a line.
    marker: Option<(Shape, bool)>,
    /// Draw the line or marker sample; false for a continuation line (e.g. a series' loss under its name).
    sample: bool,
}

/// Draws the legend in its own panel (right of the plot), one entry per line; long labels are cut to fit.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[LegendEntry],
) -> Result<(), String> {
    let e = |err: &dyn std::fmt::Display| err.to_string();
    let font = (FAMILY, 13).into_font().color(&BLACK);
    let top = 60;
    let step = 20;
    area.draw(&Text::new(
        "legend",
        (10, top - 24),
        (FAMILY, 14).into_font(),
    ))
    .map_err(|x| e(&x))?;
    for (i, entry) in entries.iter().enumerate() {
        let y = top + step * i as i32;
        let style = entry.colour.stroke_width(2);
        match entry.marker {
            _ if !entry.sample => {}
            Some((shape, filled)) => {
                draw_pixel_marker(area, (22, y), shape, entry.colour, filled).map_err(|x| e(&x))?;
            }
            None if entry.dashed => {
                for x in [6, 18, 30] {
                    area.draw(&PathElement::new(vec![(x, y), (x + 7, y)], style))
                        .map_err(|x| e(&x))?;
                }
            }
            None => {
                area.draw(&PathElement::new(vec![(6, y), (37, y)], style))
                    .map_err(|x| e(&x))?;
            }
        }
        let max_chars = (LEGEND_WIDTH as usize - 56) / 8;
        let text: String = if entry.text.chars().count() > max_chars {
            entry
                .text
                .chars()
                .take(max_chars - 1)
                .chain(['…'])
                .collect()
        } else {
            entry.text.clone()
        };
        let font = if entry.sample {
            font.clone()
        } else {
            (FAMILY, 13).into_font().color(&entry.colour)
        };
        area.draw(&Text::new(text, (46, y - 7), font))
            .map_err(|x| e(&x))?;
    }
    Ok(())
}

fn draw_percentiles<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    lines: &[(&Series, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let e = |err: &dyn std::fmt::Display| err.to_string();
    // At least two nines, so the percentile axis always has ≥ 4 labels (every half nine is labelled).
    let max_x = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
        .fold(2.0f64, f64::max)
        .ceil();
    let (min_y, max_y) = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .fold((f64::MAX, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    // The latency axis is log10(µs) on a linear scale: plotters' own log axis labels only powers of ten, which
    // leaves two or three labels on a typical 20 µs–2 ms plot; a linear axis of exponents gets nice steps.
    let lo = (min_y.max(0.001) / 1.5).log10();
    let hi = (max_y.max(0.001) * 1.5).log10().max(lo + 1.0);
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let body = draw_title(root, title)?;
    let (plot_area, legend_area) = body.split_horizontally(PLOT_SIZE.0 - LEGEND_WIDTH);
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(16)
        .margin_right(24)
        .x_label_area_size(52)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..max_x, lo..hi)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        // Every half nine while that keeps at least 4 labels; past three nines the half steps crowd together.
        .x_labels(if max_x <= 3.0 {
            2 * max_x as usize + 1
        } else {
            max_x as usize + 1
        })
        .y_labels(10)
        .x_label_formatter(&nines_label)
        .y_label_formatter(&|y| us_label(10f64.powf(*y)))
        .x_desc("percentile (log scale of 1/(1 − p): 90 %, 99 %, 99.9 % equally spaced)")
        .y_desc("one-way latency (µs, log scale)")
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .draw()
        .map_err(|x| e(&x))?;
    let mut legend = Vec::new();
    for (series, points) in lines {
        let colour = group_colour(series.group);
        let style = colour.stroke_width(2);
        let logged: Vec<(f64, f64)> = points
            .iter()
            .map(|&(x, y)| (x, y.max(0.001).log10()))
            .collect();
        if series.baseline {
            chart
                .draw_series(DashedLineSeries::new(logged.clone(), 9, 6, style))
                .map_err(|x| e(&x))?;
        } else {
            chart
                .draw_series(LineSeries::new(logged.clone(), style))
                .map_err(|x| e(&x))?;
        }
        let mut note_entry = None;
        if let Some(note) = series.lost_note() {
            // On the curve, at its end (the max), where a reader looking at the tail will see it.
            let &(x, y) = logged.last().expect("non-empty points");
            let label_style = TextStyle::from((FAMILY, 13).into_font())
                .color(&colour)
                .pos(Pos::new(HPos::Right, VPos::Bottom));
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{note} ▸"),
                    (x, y),
                    label_style,
                )))
                .map_err(|x| e(&x))?;
            // Its own legend line under the series' name: the panel is too narrow for both on one line.
            note_entry = Some(LegendEntry {
                text: format!("  {note}"),
                colour,
                dashed: false,
                marker: None,
                sample: false,
            });
        }
        legend.push(LegendEntry {
            text: series.label.clone(),
            colour,
            dashed: series.baseline,
            marker: None,
            sample: true,
        });
        legend.extend(note_entry);
    }
    legend.push(LegendEntry {
        text: "solid = tickbox".into(),
        colour: RGBColor(90, 90, 90),
        dashed: false,
        marker: None,
        sample: true,
    });
    legend.push(LegendEntry {
        text: "dashed = raw libzmq".into(),
        colour: RGBColor(90, 90, 90),
        dashed: true,
        marker: None,
        sample: true,
    });
    draw_legend(&legend_area, &legend)?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// One column of a repeat plot: one system's figure in each repeat of one configuration.
#[derive(Debug, Clone)]
pub struct RepeatColumn {
    /// Label under the column, e.g. `tickbox` or `push/pull`.
    pub label: String,
    /// A baseline: its median is drawn dashed, with the ratio of the tickbox column before it over it.
    pub baseline: bool,
    /// Raw libzmq (hollow markers); a tickbox baseline (another tickbox configuration) keeps filled ones.
    pub raw: bool,
    /// The figure in each repeat (index = repeat).
    pub values: Vec<f64>,
    /// Messages lost over all repeats (marked above the column and in the legend when non-zero).
    pub lost: u64,
    /// Messages sent over all repeats (the denominator of the lost percentage).
    pub sent: u64,
}

/// A configuration of a repeat plot: its columns share a colour.
#[derive(Debug, Clone)]
pub struct RepeatGroup {
    /// Label under the group, e.g. `100 B ×1`.
    pub label: String,
    /// Tickbox first, then its baselines.
    pub columns: Vec<RepeatColumn>,
}

/// The marker shape of a repeat plot's column `index` (its position in the group): distinct for every column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Circle,
    Triangle,
    Square,
    Diamond,
    TriangleDown,
    Pentagon,
}

fn column_shape(index: usize) -> Shape {
    [
        Shape::Circle,
        Shape::Triangle,
        Shape::Square,
        Shape::Diamond,
        Shape::TriangleDown,
        Shape::Pentagon,
    ][index % 6]
}

/// Writes a repeat plot (`.png` or `.svg`): per configuration a column per system with a marker for every repeat
/// (each column its own shape; tickbox filled, raw hollow) and the median as a bar (solid, or dashed for a
/// baseline), in the configuration's colour; above each baseline, the ratio of the tickbox column before it over
/// it; lost messages marked.
pub fn write_repeat_plot(
    path: &Path,
    title: &str,
    y_desc: &str,
    groups: &[RepeatGroup],
) -> Result<(), BenchError> {
    if groups
        .iter()
        .all(|g| g.columns.iter().all(|c| c.values.is_empty()))
    {
        return Err(BenchError::Report(
            "nothing to plot: no repeat has a value".into(),
        ));
    }
    render(
        path,
        |root| draw_repeats(root, title, y_desc, groups),
        |root| draw_repeats(root, title, y_desc, groups),
    )
}

/// The vertices of a triangle, square or diamond around the origin, in pixels.
fn outline(shape: Shape) -> Vec<(i32, i32)> {
    match shape {
        Shape::Circle => Vec::new(),
        Shape::Triangle => vec![(0, -6), (5, 4), (-5, 4)],
        Shape::Square => vec![(-4, -4), (4, -4), (4, 4), (-4, 4)],
        Shape::Diamond => vec![(0, -6), (5, 0), (0, 6), (-5, 0)],
        Shape::TriangleDown => vec![(0, 6), (5, -4), (-5, -4)],
        Shape::Pentagon => vec![(0, -6), (6, -1), (4, 5), (-4, 5), (-6, -1)],
    }
}

/// Draws one marker at pixel `at` of `area` (the legend).
fn draw_pixel_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    at: (i32, i32),
    shape: Shape,
    colour: RGBColor,
    filled: bool,
) -> Result<(), plotters::drawing::DrawingAreaErrorKind<DB::ErrorType>> {
    let style = if filled {
        colour.filled()
    } else {
        colour.stroke_width(2)
    };
    if shape == Shape::Circle {
        return area.draw(&Circle::new(at, 4, style));
    }
    let points: Vec<(i32, i32)> = outline(shape)
        .into_iter()
        .map(|(x, y)| (at.0 + x, at.1 + y))
        .collect();
    if filled {
        area.draw(&Polygon::new(points, style))
    } else {
        let mut closed = points.clone();
        closed.push(points[0]);
        area.draw(&PathElement::new(closed, style))
    }
}

/// Draws the markers of one column at data points `points`.
fn draw_markers<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    points: &[(f64, f64)],
    shape: Shape,
    colour: RGBColor,
    filled: bool,
) -> Result<(), plotters::drawing::DrawingAreaErrorKind<DB::ErrorType>> {
    let style = if filled {
        colour.filled()
    } else {
        colour.stroke_width(2)
    };
    match shape {
        Shape::Circle => {
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, style)))?;
        }
        _ if filled => {
            chart.draw_series(
                points
                    .iter()
                    .map(|&p| EmptyElement::at(p) + Polygon::new(outline(shape), style)),
            )?;
        }
        _ => {
            chart.draw_series(points.iter().map(|&p| {
                let mut closed = outline(shape);
                closed.push(closed[0]);
                EmptyElement::at(p) + PathElement::new(closed, style)
            }))?;
        }
    }
    Ok(())
}

fn median_of(values: &[f64]) -> Option<f64> {
    crate::stats::Spread::of(values).map(|s| s.median)
}

fn draw_repeats<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    groups: &[RepeatGroup],
) -> Result<(), String> {
    let e = |err: &dyn std::fmt::Display| err.to_string();
    // Column centres: one unit per column, half a unit between groups.
    let mut centres: Vec<(usize, usize, f64)> = Vec::new();
    let mut x = 0.0;
    for (g, group) in groups.iter().enumerate() {
        for c in 0..group.columns.len() {
            x += 1.0;
            centres.push((g, c, x));
        }
        x += 0.5;
    }
    let max_x = x + 0.5;
    let max_y = groups
        .iter()
        .flat_map(|g| g.columns.iter().flat_map(|c| c.values.iter().copied()))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.2;
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let body = draw_title(root, title)?;
    let (plot_area, legend_area) = body.split_horizontally(PLOT_SIZE.0 - LEGEND_WIDTH);
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(16)
        .margin_right(24)
        .x_label_area_size(84)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..max_x, 0f64..max_y)
        .map_err(|x| e(&x))?;
    // Throughput starts at zero: a bar chart that does not would exaggerate a 5 % difference.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(10)
        .y_label_formatter(&|y| crate::stats::fmt_sig(*y))
        .x_desc("configuration and system (one marker per repeat; bar = median)")
        .y_desc(y_desc)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .draw()
        .map_err(|x| e(&x))?;
    let mut legend: Vec<LegendEntry> = Vec::new();
    for (g, c, centre) in &centres {
        let group = &groups[*g];
        let column = &group.columns[*c];
        let colour = group_colour(*g);
        let n = column.values.len();
        let points: Vec<(f64, f64)> = column
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| (centre + (i as f64 - (n as f64 - 1.0) / 2.0) * 0.1, *v))
            .collect();
        let shape = column_shape(*c);
        let filled = !column.raw;
        draw_markers(&mut chart, &points, shape, colour, filled).map_err(|x| e(&x))?;
        if let Some(m) = median_of(&column.values) {
            let bar = vec![(centre - 0.35, m), (centre + 0.35, m)];
            if column.baseline {
                chart
                    .draw_series(DashedLineSeries::new(bar, 6, 4, colour.stroke_width(3)))
                    .map_err(|x| e(&x))?;
            } else {
                chart
                    .draw_series(LineSeries::new(bar, colour.stroke_width(3)))
                    .map_err(|x| e(&x))?;
            }
            // Above a baseline: the median of the tickbox column before it over this one's.
            let tickbox = group.columns[..*c].iter().rev().find(|c| !c.baseline);
            if let (true, Some(t)) = (column.baseline, tickbox.and_then(|t| median_of(&t.values))) {
                if m > 0.0 {
                    let style = TextStyle::from((FAMILY, 12).into_font())
                        .color(&colour)
                        .pos(Pos::new(HPos::Center, VPos::Bottom));
                    chart
                        .draw_series(std::iter::once(Text::new(
                            format!("×{:.2}", t / m),
                            (*centre, m + max_y * 0.03),
                            style,
                        )))
                        .map_err(|x| e(&x))?;
                }
            }
        }
        if let Some(note) = lost_note(column.lost, column.sent) {
            let top = column.values.iter().copied().fold(0.0f64, f64::max);
            let style = TextStyle::from((FAMILY, 12).into_font())
                .color(&colour)
                .pos(Pos::new(HPos::Center, VPos::Bottom));
            chart
                .draw_series(std::iter::once(Text::new(
                    note.clone(),
                    (*centre, top + max_y * 0.07),
                    style,
                )))
                .map_err(|x| e(&x))?;
            legend.push(LegendEntry {
                text: format!("{} {}:", group.label, column.label),
                colour,
                dashed: column.baseline,
                marker: None,
                sample: true,
            });
            legend.push(LegendEntry {
                text: format!("  {note}"),
                colour,
                dashed: false,
                marker: None,
                sample: false,
            });
        }
        // Column and group names under the axis, drawn on the root in pixels (the plot area clips).
        let (px, py) = chart.backend_coord(&(*centre, 0.0));
        let centred =
            |font: FontDesc<'static>| TextStyle::from(font).pos(Pos::new(HPos::Center, VPos::Top));
        // Long labels take two lines under a narrow column (`push/pull` / `batched`).
        for (i, line) in column.label.split(' ').enumerate() {
            root.draw(&Text::new(
                line.to_owned(),
                (px, py + 6 + 14 * i as i32),
                centred((FAMILY, 12).into_font()).color(&BLACK),
            ))
            .map_err(|x| e(&x))?;
        }
        if *c == 0 {
            let last = centre + group.columns.len() as f64 - 1.0;
            let (lx, _) = chart.backend_coord(&((centre + last) / 2.0, 0.0));
            root.draw(&Text::new(
                group.label.clone(),
                (lx, py + 36),
                centred((FAMILY, 13).into_font()).color(&colour),
            ))
            .map_err(|x| e(&x))?;
        }
    }
    let mut entries: Vec<LegendEntry> = groups
        .iter()
        .enumerate()
        .map(|(g, group)| LegendEntry {
            text: group.label.clone(),
            colour: group_colour(g),
            dashed: false,
            marker: None,
            sample: true,
        })
        .collect();
    let grey = RGBColor(90, 90, 90);
    // One entry per column of the first group (every group has the same columns): its marker and its name.
    if let Some(first) = groups.first() {
        for (i, column) in first.columns.iter().enumerate() {
            entries.push(LegendEntry {
                text: format!(
                    "{}{}",
                    column.label,
                    if column.raw { " (raw libzmq)" } else { "" }
                ),
                colour: grey,
                dashed: false,
                marker: Some((column_shape(i), !column.raw)),
                sample: true,
            });
        }
    }
    entries.extend([
        LegendEntry {
            text: "one marker per repeat".into(),
            colour: grey,
            dashed: false,
            marker: None,
            sample: false,
        },
        LegendEntry {
            text: "median".into(),
            colour: grey,
            dashed: false,
            marker: None,
            sample: true,
        },
        LegendEntry {
            text: "baseline median (× ratio)".into(),
            colour: grey,
            dashed: true,
            marker: None,
            sample: true,
        },
    ]);
    entries.extend(legend);
    draw_legend(&legend_area, &entries)?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::new_histogram;

    fn series(label: &str, hist: &Histogram<u64>, group: usize, baseline: bool) -> Series {
        Series {
            label: label.into(),
            histogram: hist.clone(),
            group,
            baseline,
            lost: 0,
            scheduled: hist.len(),
        }
    }

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
        let mut raw = series("raw tcp", &b, 0, true);
        raw.lost = 30;
        raw.scheduled = 100_030;
        write_percentile_svg(&path, "test", &[series("tickbox tcp", &a, 0, false), raw]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("tickbox tcp") && svg.contains("raw tcp"));
        assert!(svg.contains("99.9%"), "nines axis labels missing");
        assert!(
            svg.contains("µs") && svg.contains("percentile"),
            "axis units missing"
        );
        // The loss is on the curve and in the legend.
        assert_eq!(
            svg.matches("lost 30 (0.03 %)").count(),
            2,
            "lost annotation"
        );
        // The raw series is dashed: many short segments instead of one polyline.
        assert!(svg.matches("<polyline").count() >= 3);
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
        assert_eq!(us_label(1234.6), "1235");
        assert_eq!(us_label(31.62), "31.6");
    }
}
