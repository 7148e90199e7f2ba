//! The plots a bench writes, rendered for real and read back: they decode as PNGs of the plot size, and what the
//! readability rules promise (lost messages marked, medians and ratios drawn) changes the pixels.

use std::path::Path;

use hdrhistogram::Histogram;
use tickbox_bench::measure::new_histogram;
use tickbox_bench::plot::{
    write_percentile_plot, write_repeat_plot, RepeatColumn, RepeatGroup, Series, PLOT_SIZE,
};

/// Decodes a PNG fully (every row) and returns its size and pixels.
fn decode(path: &Path) -> (u32, u32, Vec<u8>) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        file.metadata().unwrap().len() > 0,
        "{} is empty",
        path.display()
    );
    let mut reader = png::Decoder::new(file).read_info().expect("a PNG header");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).expect("PNG image data");
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels)
}

fn histogram(base_ns: u64, spread: u64) -> Histogram<u64> {
    let mut h = new_histogram();
    for v in 0..20_000u64 {
        h.record(base_ns + (v * 7919) % spread).unwrap();
    }
    h.record(base_ns * 40).unwrap();
    h
}

fn latency_series(lost: u64) -> Vec<Series> {
    let mut out = Vec::new();
    for (group, (base, spread)) in [(20_000, 30_000), (50_000, 90_000)].into_iter().enumerate() {
        for (system, baseline) in [("tickbox", false), ("raw-pubsub", true)] {
            let h = histogram(base * if baseline { 1 } else { 2 }, spread);
            out.push(Series {
                label: format!("{system}-tcp-{}k", 100 * (group + 1)),
                scheduled: h.len() + lost,
                histogram: h,
                group,
                baseline,
                lost: if baseline { 0 } else { lost },
            });
        }
    }
    out
}

#[test]
fn percentile_plot_is_a_png_of_the_plot_size_and_shows_losses() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.png");
    let lossy = dir.path().join("lossy.png");
    write_percentile_plot(&clean, "latency", &latency_series(0)).unwrap();
    write_percentile_plot(&lossy, "latency", &latency_series(250)).unwrap();
    let (w, h, clean_pixels) = decode(&clean);
    assert_eq!((w, h), PLOT_SIZE);
    let (w, h, lossy_pixels) = decode(&lossy);
    assert_eq!((w, h), PLOT_SIZE);
    // Same curves, same title: only the "lost N (x %)" annotations can make the pixels differ.
    assert_ne!(
        clean_pixels, lossy_pixels,
        "the lost annotation was not drawn"
    );
    // The SVG of the lossy plot names the loss on the curve and in the legend.
    let svg = dir.path().join("lossy.svg");
    write_percentile_plot(&svg, "latency", &latency_series(250)).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(
        text.matches("lost 250 (1.23 %)").count(),
        4,
        "two series × (curve + legend)"
    );
}

fn groups(lost: u64) -> Vec<RepeatGroup> {
    [100usize, 1024]
        .into_iter()
        .map(|size| RepeatGroup {
            label: format!("{size} B ×1"),
            columns: [
                ("tickbox", false, 1.0),
                ("push/pull", true, 1.2),
                ("pub/sub", true, 1.1),
            ]
            .into_iter()
            .map(|(label, baseline, scale)| RepeatColumn {
                label: label.into(),
                baseline,
                raw: baseline,
                values: vec![1.0e6 * scale, 1.1e6 * scale, 0.95e6 * scale],
                lost: if baseline { 0 } else { lost },
                sent: 3_000_000,
            })
            .collect(),
        })
        .collect()
}

#[test]
fn repeat_plot_is_a_png_of_the_plot_size_with_ratios_and_losses() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.png");
    let lossy = dir.path().join("lossy.png");
    write_repeat_plot(&clean, "throughput", "throughput (msg/s)", &groups(0)).unwrap();
    write_repeat_plot(&lossy, "throughput", "throughput (msg/s)", &groups(30)).unwrap();
    let (w, h, clean_pixels) = decode(&clean);
    assert_eq!((w, h), PLOT_SIZE);
    let (_, _, lossy_pixels) = decode(&lossy);
    assert_ne!(
        clean_pixels, lossy_pixels,
        "the lost annotation was not drawn"
    );
    let svg = dir.path().join("plot.svg");
    write_repeat_plot(&svg, "throughput", "throughput (msg/s)", &groups(30)).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    // Tickbox median 1.0 M over push/pull 1.2 M and pub/sub 1.1 M, in both groups.
    assert_eq!(text.matches("×0.83").count(), 2, "push/pull ratios");
    assert_eq!(text.matches("×0.91").count(), 2, "pub/sub ratios");
    assert!(text.contains("lost 30 (0.00 %)"), "lost annotation");
    assert!(text.contains("100 B ×1") && text.contains("1024 B ×1"));
    assert!(text.contains("msg/s"), "y axis unit");
    // Every repeat is a marker, each column its own shape: the first column's are circles (2 groups × 3
    // repeats), plus its one legend marker; the raw columns' are hollow triangles and squares.
    assert_eq!(text.matches("<circle").count(), 2 * 3 + 1);
    assert!(
        text.contains("push/pull (raw libzmq)"),
        "the legend names each column"
    );
    assert!(write_repeat_plot(&dir.path().join("x.gif"), "t", "y", &groups(0)).is_err());
}

#[test]
fn a_long_title_wraps_instead_of_running_off_the_plot() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("long.svg");
    let title = "record of feed --batch auto --rate max --back-pressure block, tcp loopback, 500000 records on \
                 1 shard(s) (64.0 records per batch frame at the recorder), 3 repeat(s), order T R S, S R T, T R S";
    write_repeat_plot(&svg, title, "records/s", &groups(0)).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(!text.contains(title), "the whole title on one line");
    assert!(text.contains("record of feed"), "its first line");
    assert!(
        text.contains("order T R S, S R T, T R S"),
        "its last words, on a line of their own"
    );
}
