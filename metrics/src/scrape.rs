//! One scrape: the families a component's [`Source`] reports, encoded by `prometheus-client`.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// Labels of one sample, beside the `role` every sample gets: `(name, value)` pairs from [`crate::label`].
pub type Labels<'a> = &'a [(&'static str, String)];

/// What reads a component's counters when Prometheus scrapes; called on the endpoint's handler thread, so it
/// must only read what the component already publishes (atomics, a snapshot it refreshes off its hot path).
pub trait Source: Send + Sync + 'static {
    /// Adds the component's metrics to `out`.
    fn collect(&self, out: &mut Scrape);
}

impl<F: Fn(&mut Scrape) + Send + Sync + 'static> Source for F {
    fn collect(&self, out: &mut Scrape) {
        self(out)
    }
}

/// A histogram as Prometheus wants it: per-bucket counts by upper bound (the last `+Inf`), sum and count.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound, count in this bucket)`, not cumulative; ascending, the last bound `f64::INFINITY`.
    pub buckets: Vec<(f64, u64)>,
    /// Sum of the observed values.
    pub sum: f64,
    /// Observations.
    pub count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Info,
    Histogram,
}

#[derive(Debug)]
enum Value {
    Counter(u64),
    Int(i64),
    Float(f64),
    Info,
    Histogram(HistogramSnapshot),
}

#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    kind: Kind,
    seconds: bool,
    samples: Vec<(Vec<(&'static str, String)>, Value)>,
}

/// The metrics of one scrape, grouped into families by name (a family is written once, whatever order the
/// sources added its samples in). Every sample carries `role`.
#[derive(Debug)]
pub struct Scrape {
    role: &'static str,
    families: Vec<Family>,
    by_name: HashMap<String, usize>,
}

impl Scrape {
    /// An empty scrape for the command `role`.
    pub fn new(role: &'static str) -> Scrape {
        Scrape {
            role,
            families: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    /// The role every sample is labelled with.
    pub fn role(&self) -> &'static str {
        self.role
    }

    fn add(
        &mut self,
        name: &str,
        help: &str,
        kind: Kind,
        seconds: bool,
        labels: Labels<'_>,
        value: Value,
    ) {
        debug_assert!(
            name.bytes().enumerate().all(|(i, b)| b == b'_'
                || b.is_ascii_alphabetic()
                || (i > 0 && b.is_ascii_digit())),
            "metric name {name:?}"
        );
        let index = match self.by_name.get(name) {
            Some(&i) => i,
            None => {
                self.families.push(Family {
                    name: name.to_owned(),
                    help: help.to_owned(),
                    kind,
                    seconds,
                    samples: Vec::new(),
                });
                self.by_name
                    .insert(name.to_owned(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let family = &mut self.families[index];
        // One name, one type: a second kind under a taken name would make the exposition invalid.
        if family.kind != kind {
            debug_assert!(false, "metric {name} added as two kinds");
            return;
        }
        let mut all = Vec::with_capacity(labels.len() + 1);
        all.push((crate::label::ROLE, self.role.to_owned()));
        all.extend(labels.iter().cloned());
        family.samples.push((all, value));
    }

    /// A count that only grows (exposed as `NAME_total`).
    pub fn counter(&mut self, name: &str, help: &str, labels: Labels<'_>, value: u64) {
        self.add(
            name,
            help,
            Kind::Counter,
            false,
            labels,
            Value::Counter(value),
        );
    }

    /// Several counters with the same labels: `(name, help, value)` each.
    pub fn counters(&mut self, labels: Labels<'_>, list: &[(&str, &str, u64)]) {
        for &(name, help, value) in list {
            self.counter(name, help, labels, value);
        }
    }

    /// A value that goes up and down (a queue depth, a sequence, a flag as 0/1).
    pub fn gauge(&mut self, name: &str, help: &str, labels: Labels<'_>, value: i64) {
        self.add(name, help, Kind::Gauge, false, labels, Value::Int(value));
    }

    /// A gauge with a fraction (bytes free as a ratio, a rate).
    pub fn gauge_f64(&mut self, name: &str, help: &str, labels: Labels<'_>, value: f64) {
        self.add(name, help, Kind::Gauge, false, labels, Value::Float(value));
    }

    /// A gauge in seconds (exposed as `NAME_seconds`).
    pub fn gauge_seconds(&mut self, name: &str, help: &str, labels: Labels<'_>, seconds: f64) {
        self.add(name, help, Kind::Gauge, true, labels, Value::Float(seconds));
    }

    /// A fact as labels with the value 1 (exposed as `NAME_info`): where a shard runs, what a build is.
    pub fn info(&mut self, name: &str, help: &str, labels: Labels<'_>) {
        self.add(name, help, Kind::Info, false, labels, Value::Info);
    }

    /// A histogram in seconds (exposed as `NAME_seconds_bucket`, `_sum`, `_count`).
    pub fn histogram_seconds(
        &mut self,
        name: &str,
        help: &str,
        labels: Labels<'_>,
        h: HistogramSnapshot,
    ) {
        self.add(
            name,
            help,
            Kind::Histogram,
            true,
            labels,
            Value::Histogram(h),
        );
    }

    /// Every unsigned integer field of the flat JSON object `value` (a component's serialised counters, as its
    /// `--json` or status prints them) as `tickbox_FIELD`: a gauge when its name is in `gauges`, a counter
    /// otherwise. `what` names the object in the help text. Nested objects, strings and booleans are left out.
    pub fn fields(
        &mut self,
        value: &serde_json::Value,
        gauges: &[&str],
        what: &str,
        labels: Labels<'_>,
    ) {
        let Some(object) = value.as_object() else {
            return;
        };
        for (key, v) in object {
            let Some(n) = v.as_u64() else { continue };
            let name = format!("tickbox_{key}");
            let help = format!("`{key}` of {what}.");
            if gauges.contains(&key.as_str()) {
                self.gauge(&name, &help, labels, i64::try_from(n).unwrap_or(i64::MAX));
            } else {
                self.counter(&name, &help, labels, n);
            }
        }
    }

    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for family in &self.families {
            let metric_type = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Info => MetricType::Info,
                Kind::Histogram => MetricType::Histogram,
            };
            let unit = family.seconds.then_some(Unit::Seconds);
            let mut descriptor = encoder.encode_descriptor(
                &family.name,
                &family.help,
                unit.as_ref(),
                metric_type,
            )?;
            for (labels, value) in &family.samples {
                let labels: Vec<(&str, &str)> =
                    labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                if let Value::Info = value {
                    descriptor.encode_info(&labels)?;
                    continue;
                }
                let mut metric = descriptor.encode_family(&labels)?;
                match value {
                    Value::Counter(v) => metric.encode_counter::<NoLabelSet, u64, u64>(v, None)?,
                    Value::Int(v) => metric.encode_gauge(v)?,
                    Value::Float(v) => metric.encode_gauge(v)?,
                    Value::Histogram(h) => {
                        metric.encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None)?
                    }
                    Value::Info => {}
                }
            }
        }
        Ok(())
    }
}

/// The registry's one collector: every source, read afresh at each scrape.
pub(crate) struct Sources {
    pub(crate) role: &'static str,
    pub(crate) sources: Vec<Arc<dyn Source>>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("role", &self.role)
            .field("sources", &self.sources.len())
            .finish()
    }
}

impl Collector for Sources {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut scrape = Scrape::new(self.role);
        for source in &self.sources {
            source.collect(&mut scrape);
        }
        scrape.encode(encoder)
    }
}

/// A registry whose one collector reads `sources` at each encoding.
pub(crate) fn registry(role: &'static str, sources: Vec<Arc<dyn Source>>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Sources { role, sources }));
    registry
}

/// The OpenMetrics text of `sources` now, as `/metrics` serves it (for tests and `--once` tools).
pub fn render(role: &'static str, sources: Vec<Arc<dyn Source>>) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; an encoder error (a name clash) leaves what was written before it.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry(role, sources));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse;

    fn sample(out: &mut Scrape) {
        for shard in 0..2u64 {
            let labels = [(crate::label::SHARD, shard.to_string())];
            out.counter("tickbox_received", "Records received.", &labels, 10 + shard);
            out.gauge("tickbox_queue_depth", "Queued.", &labels, -1);
        }
        out.info(
            "tickbox_shard_placement",
            "Where a shard runs.",
            &[
                (crate::label::SHARD, "0".into()),
                (crate::label::NIC, "eth\"1".into()),
            ],
        );
        let mut b = crate::Buckets::default();
        b.counts[0] = 2;
        b.counts[22] = 1;
        b.sum_ns = 11_000_000_000;
        out.histogram_seconds("tickbox_lateness", "Lateness.", &[], b.seconds());
    }

    #[test]
    fn the_integer_fields_of_a_json_object_become_counters_and_named_gauges() {
        let text = render(
            "lvc",
            vec![Arc::new(|out: &mut Scrape| {
                out.fields(
                    &serde_json::json!({"messages_in": 5, "topics_cached": 3, "mode": "x", "ratio": 0.5}),
                    &["topics_cached"],
                    "the LVC's counters",
                    &[],
                )
            })],
        );
        assert!(
            text.contains("tickbox_messages_in_total{role=\"lvc\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE tickbox_topics_cached gauge"),
            "{text}"
        );
        assert!(!text.contains("mode") && !text.contains("ratio"), "{text}");
    }

    #[test]
    fn families_are_written_once_with_role_on_every_sample() {
        let text = render("subscribe", vec![Arc::new(sample)]);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(text.matches("# TYPE tickbox_received counter").count(), 1);
        assert!(text.contains("tickbox_received_total{role=\"subscribe\",shard=\"1\"} 11"));
        assert!(text.contains("tickbox_queue_depth{role=\"subscribe\",shard=\"0\"} -1"));
        assert!(
            text.contains("# TYPE tickbox_lateness_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("tickbox_lateness_seconds_bucket{le=\"+Inf\",role=\"subscribe\"} 3")
                || text
                    .contains("tickbox_lateness_seconds_bucket{role=\"subscribe\",le=\"+Inf\"} 3"),
            "{text}"
        );
        let samples = parse(&text);
        let info = samples
            .iter()
            .find(|s| s.name == "tickbox_shard_placement_info")
            .expect("info sample");
        assert_eq!(info.label("nic"), Some("eth\"1"));
        assert_eq!(info.value, 1.0);
        let count = samples
            .iter()
            .find(|s| s.name == "tickbox_lateness_seconds_count")
            .unwrap();
        assert_eq!(count.value, 3.0);
    }
}
