//! `tickbox.<component>.status` over Majordomo for the long-running data-plane commands (`--broker EP`).
//!
//! The command's own control loop publishes a status snapshot now and then; the MDP worker thread answers every
//! request with the latest one. So the status worker never touches the component's threads or sockets, and a
//! slow or absent broker cannot slow the data plane.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use tickbox_majordomo::status::{spawn_status_worker, StatusWorker};
use tickbox_majordomo::worker::MdpWorkerConfig;

pub(crate) struct StatusBoard {
    latest: Arc<Mutex<Vec<u8>>>,
    // Dropping the worker sends DISCONNECT to the broker.
    _worker: Option<StatusWorker>,
}

impl StatusBoard {
    /// Registers `tickbox.<component>.status` on `broker` when one is given (otherwise publishing is a no-op), the
    /// status worker connecting under `security` (`config.auth`): CURVE with the
    /// broker's key when `[security]` says so; the broker's grants decide who may read the status.
    pub(crate) fn start(
        ctx: &zmq::Context,
        broker: Option<&str>,
        component: &str,
        security: tickbox_auth::Security,
    ) -> anyhow::Result<Self> {
        let latest = Arc::new(Mutex::new(b"{\"state\":\"starting\"}".to_vec()));
        let worker = match broker {
            None => None,
            Some(broker) => {
                let source = Arc::clone(&latest);
                let worker = spawn_status_worker(
                    ctx,
                    broker,
                    component,
                    MdpWorkerConfig {
                        security,
                        ..MdpWorkerConfig::default()
                    },
                    move || source.lock().map(|s| s.clone()).unwrap_or_default(),
                )
                .with_context(|| format!("registering tickbox.{component}.status on {broker}"))?;
                tracing::info!(
                    service = worker.service(),
                    broker,
                    "status service registered"
                );
                Some(worker)
            }
        };
        Ok(StatusBoard {
            latest,
            _worker: worker,
        })
    }

    /// Replaces the status served to callers (a JSON object). Called from control loops, never per message.
    pub(crate) fn publish(&self, status: serde_json::Value) {
        if self._worker.is_none() {
            return;
        }
        if let Ok(mut latest) = self.latest.lock() {
            *latest = status.to_string().into_bytes();
        }
    }
}
