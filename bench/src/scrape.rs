//! What metrics cost the measured path (`bench latency|throughput --metrics-scrape D`): while the switch is on,
//! every tickbox subscriber a bench run starts serves its metrics (`tickbox_metrics`) and a thread scrapes them
//! every `D`, as Prometheus would, for the whole run. Runs with the switch off and on, in one command, give the
//! cost as the change in the tickbox/raw ratios.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tickbox_subscriber::{Subscriber, SubscriberShardConfig};
use tickbox_workers::Worker;

/// The scrape period in µs; 0 is off. A bench-wide switch the CLI sets between sweeps (the run configs are shared
/// with every other bench and keep their shape).
static SCRAPE_EVERY_US: AtomicU64 = AtomicU64::new(0);

/// Serves and scrapes the metrics of every subscriber the bench runs from now on, every `every` (`None`: off).
pub fn set_metrics_scrape(every: Option<Duration>) {
    let us = every.map_or(0, |d| {
        u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
    });
    SCRAPE_EVERY_US.store(us, Ordering::SeqCst);
}

/// A subscriber's metrics endpoint and the thread scraping it; both stop when dropped.
pub struct Scraping {
    _endpoint: tickbox_metrics::Endpoint,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Scraping {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// When the switch is on: `subscriber`'s metrics served on a loopback port and scraped until dropped.
pub fn scrape_subscriber<W: Worker>(
    subscriber: &Subscriber<W>,
    shards: &[SubscriberShardConfig],
) -> Option<Scraping> {
    let us = SCRAPE_EVERY_US.load(Ordering::SeqCst);
    if us == 0 {
        return None;
    }
    let every = Duration::from_micros(us);
    let endpoint = match tickbox_metrics::Endpoint::start(
        "127.0.0.1:0",
        "subscribe",
        vec![Arc::new(subscriber.metrics(shards))],
    ) {
        Ok(e) => e,
        Err(err) => {
            tracing::warn!("bench: metrics endpoint not started: {err}");
            return None;
        }
    };
    let addr = endpoint.local_addr().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("bench-scrape".into())
        .spawn(move || {
            while !thread_stop.load(Ordering::SeqCst) {
                let _ = tickbox_metrics::fetch(&addr, "/metrics", Duration::from_secs(2), 16 << 20);
                let mut slept = Duration::ZERO;
                while slept < every && !thread_stop.load(Ordering::SeqCst) {
                    let step = (every - slept).min(Duration::from_millis(10));
                    std::thread::sleep(step);
                    slept += step;
                }
            }
        })
        .ok()?;
    Some(Scraping {
        _endpoint: endpoint,
        stop,
        thread: Some(thread),
    })
}
