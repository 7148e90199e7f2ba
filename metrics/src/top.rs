//! `tickbox top`: several processes' `/metrics`, one table per role, fitted to the terminal's width. Like
//! AeronStat, it shows what the processes count, nothing of its own: rates are the difference of two scrapes.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::text::{parse, Sample};

/// One process as scraped.
#[derive(Debug, Clone)]
pub struct Process {
    /// The address asked (`HOST:PORT`).
    pub addr: String,
    /// Its samples (empty when the scrape failed).
    pub samples: Vec<Sample>,
    /// Why the scrape failed.
    pub error: Option<String>,
    /// When it was scraped.
    pub at: Instant,
}

/// The most a scrape may return before it is refused (a process's metrics are a few hundred KiB at most).
pub const MAX_SCRAPE: usize = 16 << 20;

impl Process {
    /// Scrapes `addr` now, within `timeout`.
    pub fn scrape(addr: &str, timeout: Duration) -> Process {
        let at = Instant::now();
        let shown = addr.strip_prefix("http://").unwrap_or(addr);
        let shown = shown.strip_suffix("/metrics").unwrap_or(shown);
        match crate::fetch(addr, "/metrics", timeout, MAX_SCRAPE) {
            Ok((200, body)) => Process {
                addr: shown.to_owned(),
                samples: parse(&body),
                error: None,
                at,
            },
            Ok((code, _)) => Process::failed(shown, format!("HTTP {code}"), at),
            Err(err) => Process::failed(shown, err.to_string(), at),
        }
    }

    fn failed(addr: &str, error: String, at: Instant) -> Process {
        Process {
            addr: addr.to_owned(),
            samples: Vec::new(),
            error: Some(error),
            at,
        }
    }

    /// The `role` its samples carry (`None`: unreachable, or not a tickbox process).
    pub fn role(&self) -> Option<&str> {
        self.samples.iter().find_map(|s| s.label("role"))
    }

    /// Sum of every sample named `name` (`None` when there is none).
    pub fn sum(&self, name: &str) -> Option<f64> {
        let mut found = false;
        let total = self
            .samples
            .iter()
            .filter(|s| s.name == name)
            .inspect(|_| found = true)
            .map(|s| s.value)
            .sum();
        found.then_some(total)
    }

    /// Cumulative counts of histogram `name` (`name_bucket`), summed over its other labels, by upper bound.
    fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut by_le: Vec<(f64, f64)> = Vec::new();
        for s in self.samples.iter().filter(|s| s.name == bucket) {
            let Some(le) = s.label("le").and_then(|le| match le {
                "+Inf" => Some(f64::INFINITY),
                v => v.parse().ok(),
            }) else {
                continue;
            };
            match by_le.iter_mut().find(|(b, _)| *b == le) {
                Some((_, n)) => *n += s.value,
                None => by_le.push((le, s.value)),
            }
        }
        by_le.sort_by(|a, b| a.0.total_cmp(&b.0));
        by_le
    }
}

/// The `q` quantile of a histogram given as cumulative counts by upper bound, interpolated within its bucket as
/// Prometheus's `histogram_quantile` does; `None` without observations.
pub fn quantile(q: f64, cumulative: &[(f64, f64)]) -> Option<f64> {
    let total = cumulative.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, n) in cumulative {
        if n >= rank {
            if le.is_infinite() {
                // Past the highest bound: all that can be said is "more than it".
                return Some(lower.0);
            }
            let width = n - lower.1;
            let into = if width > 0.0 {
                (rank - lower.1) / width
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * into);
        }
        lower = (le, n);
    }
    None
}

/// Cumulative counts `now - before` (the observations between two scrapes); `before` may be empty.
fn difference(now: &[(f64, f64)], before: &[(f64, f64)]) -> Vec<(f64, f64)> {
    now.iter()
        .map(|&(le, n)| {
            let b = before
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0.0, |(_, b)| *b);
            (le, (n - b).max(0.0))
        })
        .collect()
}

/// A number as `950`, `12.3k`, `4.56M`, `7.89G`.
pub fn compact(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Seconds as `850us`, `12.3ms`, `1.20s`.
pub fn duration(seconds: f64) -> String {
    if seconds >= 1.0 {
        format!("{seconds:.2}s")
    } else if seconds >= 1e-3 {
        format!("{:.1}ms", seconds * 1e3)
    } else {
        format!("{:.0}us", seconds * 1e6)
    }
}

/// What one cell shows.
#[derive(Clone, Copy)]
enum Cell {
    /// Per second between the two scrapes, of the sum of a counter's samples.
    Rate(&'static str),
    /// The sum of a metric's samples now.
    Total(&'static str),
    /// `yes` when the gauge is 1, `no` when 0, `-` when absent.
    Flag(&'static str),
    /// Lateness p99 over the last interval.
    LatenessP99,
    /// The journal disk's free share.
    DiskFree,
}

struct Column {
    header: &'static str,
    /// Columns with the highest number go first when the terminal is narrow.
    drop_order: u8,
    cell: Cell,
}

impl Cell {
    fn show(&self, p: &Process, before: Option<&Process>, dt: f64) -> String {
        match *self {
            Cell::Rate(name) => match (p.sum(name), before.and_then(|b| b.sum(name))) {
                (Some(now), Some(then)) if dt > 0.0 => {
                    format!("{}/s", compact(((now - then) / dt).max(0.0)))
                }
                _ => "-".into(),
            },
            Cell::Total(name) => p.sum(name).map_or_else(|| "-".into(), compact),
            Cell::Flag(name) => match p.sum(name) {
                Some(v) if v >= 1.0 => "yes".into(),
                Some(_) => "no".into(),
                None => "-".into(),
            },
            Cell::LatenessP99 => {
                let now = p.buckets("tickbox_lateness_seconds");
                let window = match before {
                    Some(b) => difference(&now, &b.buckets("tickbox_lateness_seconds")),
                    None => now,
                };
                quantile(0.99, &window).map_or_else(|| "-".into(), duration)
            }
            Cell::DiskFree => match (
                p.sum("tickbox_disk_free_bytes"),
                p.sum("tickbox_disk_size_bytes"),
            ) {
                (Some(free), Some(size)) if size > 0.0 => format!("{:.0}%", 100.0 * free / size),
                _ => "-".into(),
            },
        }
    }
}

fn columns(role: &str) -> Vec<Column> {
    use Cell::*;
    let table: &[(&'static str, u8, Cell)] = match role {
        "feed" => &[
            ("sent/s", 0, Rate("tickbox_sent_total")),
            ("sent", 2, Total("tickbox_sent_total")),
            ("would block", 1, Total("tickbox_would_block_total")),
            ("heartbeats", 4, Total("tickbox_heartbeats_total")),
            ("batches", 5, Total("tickbox_batches_sent_total")),
        ],
        "subscribe" => &[
            ("recv/s", 0, Rate("tickbox_received_total")),
            ("received", 3, Total("tickbox_received_total")),
            ("gaps", 0, Total("tickbox_gaps_total")),
            ("missing", 1, Total("tickbox_missing_total")),
            ("late", 2, Total("tickbox_late_total")),
            ("p99 late", 0, LatenessP99),
            ("refused", 1, Total("tickbox_handshakes_refused_total")),
            ("malformed", 4, Total("tickbox_malformed_total")),
        ],
        "record" => &[
            ("rec/s", 0, Rate("tickbox_recorded_total")),
            ("recorded", 3, Total("tickbox_recorded_total")),
            ("missing", 1, Total("tickbox_missing_total")),
            ("gap events", 2, Total("tickbox_gap_events_total")),
            ("leading", 0, Flag("tickbox_recorder_leading")),
            ("disk free", 1, DiskFree),
            ("bytes", 4, Total("tickbox_bytes_total")),
        ],
        "replay" => &[
            ("sent/s", 0, Rate("tickbox_sent_total")),
            ("sent", 2, Total("tickbox_sent_total")),
            ("running", 1, Flag("tickbox_replay_running")),
            ("subscribers", 3, Total("tickbox_subscribers")),
        ],
        "lvc" => &[
            ("in/s", 0, Rate("tickbox_messages_in_total")),
            ("out/s", 0, Rate("tickbox_messages_out_total")),
            ("topics", 2, Total("tickbox_topics_cached")),
            ("malformed", 1, Total("tickbox_malformed_total")),
            ("refused", 1, Total("tickbox_subscriptions_refused_total")),
        ],
        "broker" => &[
            ("req/s", 0, Rate("tickbox_requests_total")),
            ("replies", 3, Total("tickbox_replies_total")),
            ("403", 0, Total("tickbox_requests_unauthorised_total")),
            ("refused", 1, Total("tickbox_requests_refused_total")),
            ("expired", 1, Total("tickbox_requests_expired_total")),
            ("workers", 4, Total("tickbox_workers_registered_total")),
        ],
        _ => &[("scrapes", 0, Total("tickbox_metrics_scrapes_total"))],
    };
    table
        .iter()
        .map(|(header, drop_order, cell)| Column {
            header,
            drop_order: *drop_order,
            cell: *cell,
        })
        .collect()
}

/// The tables of `now` (rates against `before`, matched by address), one per role in a fixed order, fitted to
/// `width` columns: the least important columns are left out first, then the address is cut.
pub fn render(now: &[Process], before: &[Process], width: usize) -> String {
    const ORDER: [&str; 6] = ["feed", "lvc", "subscribe", "record", "replay", "broker"];
    let mut roles: Vec<String> = ORDER.iter().map(|r| (*r).to_owned()).collect();
    for p in now {
        if let Some(r) = p.role() {
            if !roles.iter().any(|x| x == r) {
                roles.push(r.to_owned());
            }
        }
    }
    let mut out = String::new();
    for role in &roles {
        let procs: Vec<&Process> = now
            .iter()
            .filter(|p| p.role() == Some(role.as_str()))
            .collect();
        if procs.is_empty() {
            continue;
        }
        let rows: Vec<(String, Vec<String>)> = procs
            .iter()
            .map(|p| {
                let b = before
                    .iter()
                    .find(|b| b.addr == p.addr && b.error.is_none());
                let dt = b.map_or(0.0, |b| p.at.duration_since(b.at).as_secs_f64());
                (
                    p.addr.clone(),
                    columns(role)
                        .iter()
                        .map(|c| c.cell.show(p, b, dt))
                        .collect(),
                )
            })
            .collect();
        table(&mut out, role, &columns(role), &rows, width);
    }
    let down: Vec<&Process> = now.iter().filter(|p| p.error.is_some()).collect();
    if !down.is_empty() {
        let _ = writeln!(out, "unreachable");
        for p in down {
            let line = format!("  {}  {}", p.addr, p.error.as_deref().unwrap_or_default());
            let _ = writeln!(out, "{}", cut(&line, width));
        }
    }
    out
}

/// `s` cut to `width` characters, a `~` marking the cut.
pub fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
    t.push('~');
    t
}

fn table(
    out: &mut String,
    role: &str,
    columns: &[Column],
    rows: &[(String, Vec<String>)],
    width: usize,
) {
    let head = "process";
    let addr_w = rows
        .iter()
        .map(|(a, _)| a.chars().count())
        .max()
        .unwrap_or(0)
        .max(head.len());
    let col_w: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .map(|(_, cells)| cells[i].chars().count())
                .max()
                .unwrap_or(0)
                .max(c.header.len())
        })
        .collect();
    // Keep columns, most important first, while they fit beside at least 12 characters of address.
    let mut keep: Vec<usize> = (0..columns.len()).collect();
    keep.sort_by_key(|&i| (columns[i].drop_order, i));
    let fixed = |kept: &[usize]| kept.iter().map(|&i| col_w[i] + 2).sum::<usize>();
    while !keep.is_empty() && fixed(&keep) + addr_w.min(12) > width {
        keep.pop();
    }
    keep.sort_unstable();
    let addr_w = addr_w.min(width.saturating_sub(fixed(&keep))).max(1);
    let _ = writeln!(
        out,
        "{}",
        cut(
            &format!(
                "== {role} ({} process{})",
                rows.len(),
                if rows.len() == 1 { "" } else { "es" }
            ),
            width
        )
    );
    let mut line = format!("{:<addr_w$}", cut(head, addr_w));
    for &i in &keep {
        let _ = write!(line, "  {:>w$}", columns[i].header, w = col_w[i]);
    }
    let _ = writeln!(out, "{}", line.trim_end());
    for (addr, cells) in rows {
        let mut line = format!("{:<addr_w$}", cut(addr, addr_w));
        for &i in &keep {
            let _ = write!(line, "  {:>w$}", cells[i], w = col_w[i]);
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let _ = writeln!(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(addr: &str, text: &str, at: Instant) -> Process {
        Process {
            addr: addr.into(),
            samples: parse(text),
            error: None,
            at,
        }
    }

    #[test]
    fn quantiles_interpolate_within_a_bucket_like_histogram_quantile() {
        let h = [
            (0.001, 0.0),
            (0.01, 50.0),
            (0.1, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert!((quantile(0.5, &h).unwrap() - 0.01).abs() < 1e-12);
        assert!((quantile(0.99, &h).unwrap() - (0.01 + 0.09 * 0.98)).abs() < 1e-9);
        assert_eq!(quantile(0.5, &[(1.0, 0.0), (f64::INFINITY, 0.0)]), None);
        assert_eq!(
            quantile(0.99, &[(1.0, 0.0), (f64::INFINITY, 5.0)]),
            Some(1.0)
        );
    }

    #[test]
    fn a_table_per_role_with_rates_and_narrow_terminals_lose_columns_not_rows() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(2);
        let sub = |n: u64, late: u64| {
            format!(
                "tickbox_received_total{{role=\"subscribe\",shard=\"0\"}} {n}\n\
                 tickbox_gaps_total{{role=\"subscribe\",shard=\"0\"}} 1\n\
                 tickbox_lateness_seconds_bucket{{role=\"subscribe\",shard=\"0\",le=\"0.001\"}} {late}\n\
                 tickbox_lateness_seconds_bucket{{role=\"subscribe\",shard=\"0\",le=\"+Inf\"}} {late}\n"
            )
        };
        let before = vec![process("127.0.0.1:9102", &sub(1000, 1000), t0)];
        let now = vec![
            process("127.0.0.1:9102", &sub(5000, 5000), t1),
            process(
                "127.0.0.1:9101",
                "tickbox_sent_total{role=\"feed\",shard=\"0\"} 42\n",
                t1,
            ),
            Process::failed("127.0.0.1:9", "connection refused".into(), t1),
        ];
        let wide = render(&now, &before, 200);
        assert!(wide.contains("== feed (1 process)"), "{wide}");
        assert!(wide.contains("== subscribe (1 process)"), "{wide}");
        assert!(wide.contains("2000/s"), "{wide}"); // 4000 more in 2 s
        assert!(
            wide.contains("p99 late") && wide.contains("990us"),
            "{wide}"
        );
        assert!(
            wide.contains("unreachable") && wide.contains("127.0.0.1:9  connection refused"),
            "{wide}"
        );
        assert!(wide.find("== feed").unwrap() < wide.find("== subscribe").unwrap());
        let narrow = render(&now, &before, 40);
        assert!(narrow.lines().all(|l| l.chars().count() <= 40), "{narrow}");
        assert!(
            narrow.contains("recv/s") && narrow.contains("p99 late"),
            "{narrow}"
        );
        assert!(!narrow.contains("malformed"), "{narrow}");
        assert!(narrow.contains("127.0.0.1:9102"), "{narrow}");
    }
}
