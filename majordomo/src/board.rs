//! `tickbox.<component>.status` for a long-running data-plane command (`--broker EP`): the command's control
//! loop publishes a snapshot now and then; the MDP worker thread answers every request with the latest one. So
//! the status worker never touches the component's threads or sockets, and a slow or absent broker cannot slow
//! the data plane.

use std::sync::{Arc, Mutex};

use crate::status::{spawn_status_worker, StatusWorker};
use crate::worker::MdpWorkerConfig;
use crate::MdpError;

/// The status service could not be registered.
#[derive(Debug, thiserror::Error)]
#[error("registering tickbox.{component}.status on {broker}")]
pub struct BoardError {
    /// The component.
    pub component: String,
    /// The broker.
    pub broker: String,
    /// Why.
    #[source]
    pub source: MdpError,
}

/// The latest status of a component, served over Majordomo when a broker was given.
pub struct StatusBoard {
    latest: Arc<Mutex<Vec<u8>>>,
    // Dropping the worker sends DISCONNECT to the broker.
    worker: Option<StatusWorker>,
}

impl std::fmt::Debug for StatusBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusBoard")
            .field("serving", &self.worker.is_some())
            .finish()
    }
}

impl StatusBoard {
    /// Registers `tickbox.<component>.status` on `broker` when one is given (otherwise publishing is a no-op),
    /// the status worker connecting under `security`: CURVE with the broker's key when `[security]` says so; the
    /// broker's grants decide who may read the status.
    pub fn start(
        ctx: &zmq::Context,
        broker: Option<&str>,
        component: &str,
        security: tickbox_auth::Security,
    ) -> Result<Self, BoardError> {
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
                .map_err(|source| BoardError {
                    component: component.to_owned(),
                    broker: broker.to_owned(),
                    source,
                })?;
                tracing::info!(
                    service = worker.service(),
                    broker,
                    "status service registered"
                );
                Some(worker)
            }
        };
        Ok(StatusBoard { latest, worker })
    }

    /// Whether a broker serves the status (publishing is a no-op otherwise).
    pub fn is_serving(&self) -> bool {
        self.worker.is_some()
    }

    /// Replaces the status served to callers (one JSON object). Called from control loops, never per message.
    pub fn publish(&self, status: impl serde::Serialize) {
        if !self.is_serving() {
            return;
        }
        let Ok(bytes) = serde_json::to_vec(&status) else {
            return;
        };
        if let Ok(mut latest) = self.latest.lock() {
            *latest = bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_broker_publishing_is_a_no_op() {
        let ctx = zmq::Context::new();
        let board = StatusBoard::start(&ctx, None, "test", Default::default()).unwrap();
        assert!(!board.is_serving());
        board.publish(serde_json::json!({"state": "running"}));
        assert_eq!(
            *board.latest.lock().unwrap(),
            b"{\"state\":\"starting\"}".to_vec()
        );
    }
}
