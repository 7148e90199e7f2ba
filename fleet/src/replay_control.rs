//! The replay's remote control over Majordomo: `tickbox.replay.start` (`speed=`, `from=`, `to=`; 200/400/409) and
//! `tickbox.replay.stop`, served from their own thread and driving the sans-IO [`ReplayController`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tickbox_majordomo::worker::{MdpWorker, MdpWorkerConfig};
use tickbox_recorder::{parse_start, ReplayController, RunSpec};

/// State shared by the replay loop and the control thread (it lives beside the replay session, in the recorder).
pub use tickbox_recorder::ReplayShared;

/// The journal's first capture time, for `+DURATION` positions (an `Err` explains, e.g. an empty journal).
pub type FirstCapture = Box<dyn Fn() -> Result<u64, String> + Send>;

/// The [`FirstCapture`] of a replay of `journals`: the earliest first capture time among them. A journal that
/// cannot be read, or is empty, is the error (with its causes, as one line).
pub fn first_capture_of(journals: Vec<std::path::PathBuf>) -> FirstCapture {
    Box::new(move || {
        let firsts = journals
            .iter()
            .map(|j| match tickbox_recorder::first_capture_ns(j) {
                Ok(Some(first)) => Ok(first),
                Ok(None) => Err(format!(
                    "{} is empty: a +DURATION time needs a first record",
                    j.display()
                )),
                Err(e) => {
                    let mut why = e.to_string();
                    let mut cause = std::error::Error::source(&e);
                    while let Some(c) = cause {
                        why = format!("{why}: {c}");
                        cause = c.source();
                    }
                    Err(why)
                }
            });
        Ok(firsts
            .collect::<Result<Vec<u64>, String>>()?
            .into_iter()
            .min()
            .unwrap_or(0))
    })
}

/// The MDP workers for `tickbox.replay.start` and `tickbox.replay.stop`; stops (sending DISCONNECT) when dropped.
pub struct ReplayControlService {
    quit: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for ReplayControlService {
    fn drop(&mut self) {
        self.quit.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl ReplayControlService {
    /// Registers both services with `broker` from a thread of their own. `defaults` fill a start request's unset
    /// fields; `shutdown` (Ctrl-C) raises the run's stop flag too.
    pub fn spawn(
        ctx: &zmq::Context,
        broker: &str,
        shared: Arc<ReplayShared>,
        runs: mpsc::Sender<RunSpec>,
        defaults: RunSpec,
        first: FirstCapture,
        shutdown: Arc<AtomicBool>,
    ) -> std::io::Result<Self> {
        Self::spawn_secured(
            ctx,
            broker,
            shared,
            runs,
            defaults,
            first,
            shutdown,
            tickbox_auth::Security::default(),
        )
    }

    /// [`ReplayControlService::spawn`] with both workers connecting under `security` (role `broker`: CURVE with
    /// the broker's key when `[security]` says so); the broker's grants decide who may call them.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn_secured(
        ctx: &zmq::Context,
        broker: &str,
        shared: Arc<ReplayShared>,
        runs: mpsc::Sender<RunSpec>,
        defaults: RunSpec,
        first: FirstCapture,
        shutdown: Arc<AtomicBool>,
        security: tickbox_auth::Security,
    ) -> std::io::Result<Self> {
        let quit = Arc::new(AtomicBool::new(false));
        let (ctx, broker, flag) = (ctx.clone(), broker.to_string(), Arc::clone(&quit));
        let thread = std::thread::Builder::new()
            .name("replay-control".into())
            .spawn(move || {
                let serve = Serve {
                    shared: &shared,
                    runs: &runs,
                    defaults,
                    first: &first,
                    shutdown: &shutdown,
                    quit: &flag,
                    security,
                };
                if let Err(e) = serve.run(&ctx, &broker) {
                    tracing::error!("replay control services failed: {e}");
                }
            })?;
        Ok(ReplayControlService {
            quit,
            thread: Some(thread),
        })
    }
}

struct Serve<'a> {
    shared: &'a ReplayShared,
    runs: &'a mpsc::Sender<RunSpec>,
    defaults: RunSpec,
    first: &'a FirstCapture,
    shutdown: &'a AtomicBool,
    quit: &'a AtomicBool,
    security: tickbox_auth::Security,
}

impl Serve<'_> {
    fn run(&self, ctx: &zmq::Context, broker: &str) -> Result<(), tickbox_majordomo::MdpError> {
        let cfg = MdpWorkerConfig {
            security: self.security.clone(),
            ..MdpWorkerConfig::default()
        };
        let mut start = MdpWorker::connect(ctx, broker, "tickbox.replay.start", cfg.clone())?;
        let mut stop = MdpWorker::connect(ctx, broker, "tickbox.replay.stop", cfg)?;
        tracing::info!(
            broker,
            "registered tickbox.replay.start and tickbox.replay.stop"
        );
        while !self.quit.load(Ordering::Relaxed) {
            if self.shutdown.load(Ordering::Relaxed) {
                self.shared.run_stop.store(true, Ordering::Relaxed);
            }
            // Two workers on one thread: short alternating waits keep both answering within ~25 ms.
            if let Some(req) = start.recv(Duration::from_millis(25))? {
                let request = parse_start(&req.body, self.defaults, self.first);
                let reply = self.shared.command(self.runs, |c| c.on_start(request));
                tracing::info!(%reply, "tickbox.replay.start");
                start.reply(req, vec![reply.into_bytes()])?;
            }
            if let Some(req) = stop.recv(Duration::from_millis(25))? {
                let reply = self.shared.command(self.runs, ReplayController::on_stop);
                tracing::info!(%reply, "tickbox.replay.stop");
                stop.reply(req, vec![reply.into_bytes()])?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_recorder::{RunState, Speed};

    fn defaults() -> RunSpec {
        RunSpec {
            speed: Speed::Times(1.0),
            from: None,
            to: None,
        }
    }

    #[test]
    fn the_first_capture_is_the_earliest_and_an_empty_journal_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let journal = |name: &str, first: Option<u64>| {
            let path = dir.path().join(name);
            let opts = tickbox_journal::WriterOptions::ring(1 << 20);
            let mut w = tickbox_journal::Writer::open(&path, &opts).unwrap();
            if let Some(t) = first {
                let h = tickbox_wire::Header::live(tickbox_wire::Kind::Quote, 7, 1, t);
                let q = tickbox_wire::Payload::Quote(tickbox_wire::Quote::default());
                w.append(t, &tickbox_wire::encode_to_vec("Q.X", &h, &q).unwrap())
                    .unwrap();
            }
            w.close().unwrap();
            path
        };
        let (late, early) = (journal("a", Some(9_000)), journal("b", Some(4_000)));
        assert_eq!(first_capture_of(vec![late.clone(), early])(), Ok(4_000));
        assert_eq!(first_capture_of(Vec::new())(), Ok(0));
        let empty = journal("c", None);
        let err = first_capture_of(vec![late, empty.clone()])().unwrap_err();
        assert_eq!(
            err,
            format!(
                "{} is empty: a +DURATION time needs a first record",
                empty.display()
            )
        );
        let missing = first_capture_of(vec![dir.path().join("none")])().unwrap_err();
        assert!(!missing.is_empty());
    }

    #[test]
    fn shared_commands_drive_the_stop_flag_and_the_run_channel() {
        let shared = ReplayShared::new();
        shared.run_stop.store(true, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let reply = shared.command(&tx, |c| c.on_start(Ok(defaults())));
        assert!(reply.starts_with("200"), "{reply}");
        assert!(
            !shared.run_stop.load(Ordering::Relaxed),
            "a new run starts unstopped"
        );
        assert_eq!(rx.try_recv(), Ok(defaults()));
        assert_eq!(
            shared.command(&tx, ReplayController::on_stop),
            "200 stopped"
        );
        assert!(shared.run_stop.load(Ordering::Relaxed));
        shared.lock().on_finished();
        drop(rx);
        // The loop is gone: a start must not claim to be running.
        let reply = shared.command(&tx, |c| c.on_start(Ok(defaults())));
        assert!(reply.starts_with("503"), "{reply}");
        assert_eq!(shared.lock().state(), RunState::Done);
    }
}
