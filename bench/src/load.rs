//! A controlled background load (`bench latency --background-load N --background-duty P`): `N` threads that each
//! keep a CPU busy for `P` % of every 10 ms, spinning on arithmetic (no system call, no memory traffic to speak
//! of) and sleeping the rest, for the whole sweep, so both systems run under the same load and a loaded figure
//! reproduces: the other work a shared box runs (a build, another bench) is what turns a hand-off that needs a free
//! core into milliseconds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::BenchError;

/// One period of a duty cycle: busy for the duty's share of it, asleep for the rest.
const PERIOD: Duration = Duration::from_millis(10);

/// How much background load to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct LoadSpec {
    /// Busy threads; 0 is no load.
    pub threads: u32,
    /// Share of each period a thread is busy, 1..=100 %.
    pub duty_percent: u32,
}

impl LoadSpec {
    /// `N busy thread(s) at P %`, or `none`.
    pub fn describe(&self) -> String {
        if self.threads == 0 {
            "none".to_owned()
        } else {
            format!(
                "{} busy thread(s) at {} % duty",
                self.threads, self.duty_percent
            )
        }
    }
}

/// The running load; dropping it stops and joins its threads.
pub struct BackgroundLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl BackgroundLoad {
    /// Starts `spec.threads` threads (none for `threads == 0`).
    pub fn start(spec: LoadSpec) -> Result<BackgroundLoad, BenchError> {
        if spec.threads > 0 && !(1..=100).contains(&spec.duty_percent) {
            return Err(BenchError::InvalidArgument(format!(
                "background duty must be 1..=100 %, not {}",
                spec.duty_percent
            )));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let busy = PERIOD * spec.duty_percent / 100;
        let threads = (0..spec.threads)
            .map(|i| {
                let stop = Arc::clone(&stop);
                std::thread::Builder::new()
                    .name(format!("bench-load-{i}"))
                    .spawn(move || spin(&stop, busy))
                    .map_err(|e| BenchError::Setup(format!("background load thread: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BackgroundLoad { stop, threads })
    }
}

impl Drop for BackgroundLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Busy for `busy` of every [`PERIOD`] until `stop`.
fn spin(stop: &AtomicBool, busy: Duration) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        while start.elapsed() < busy {
            for _ in 0..1_000 {
                // xorshift: work the optimiser cannot remove (`black_box`), in registers.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            std::hint::black_box(x);
        }
        if let Some(rest) = PERIOD.checked_sub(busy).filter(|d| !d.is_zero()) {
            std::thread::sleep(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_starts_its_threads_and_stops_them_when_dropped() {
        let load = BackgroundLoad::start(LoadSpec {
            threads: 2,
            duty_percent: 50,
        })
        .unwrap();
        assert_eq!(load.threads.len(), 2);
        drop(load);
        assert!(BackgroundLoad::start(LoadSpec {
            threads: 1,
            duty_percent: 0
        })
        .is_err());
        assert_eq!(LoadSpec::default().describe(), "none");
    }
}
