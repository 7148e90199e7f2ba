//! A `tickbox.<component>.status` Majordomo worker for data-plane components: they hand over a closure that
//! renders their status and get a background thread that answers every request with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::worker::{MdpWorker, MdpWorkerConfig};
use crate::MdpError;

/// The running status worker; stops (and sends DISCONNECT) when dropped or on [`StatusWorker::stop`].
pub struct StatusWorker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), MdpError>>>,
    service: String,
}

impl StatusWorker {
    /// The service name it registered, `tickbox.<component>.status`.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Stop the worker and report how its thread ended.
    pub fn stop(mut self) -> Result<(), MdpError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), MdpError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or(Err(MdpError::Invalid("status worker thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for StatusWorker {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Register `tickbox.<component>.status` on the broker at `broker`; every request (whatever its body) is
/// answered with one frame produced by `status`.
pub fn spawn_status_worker<F>(
    ctx: &zmq::Context,
    broker: &str,
    component: &str,
    cfg: MdpWorkerConfig,
    status: F,
) -> Result<StatusWorker, MdpError>
where
    F: Fn() -> Vec<u8> + Send + 'static,
{
    if component.is_empty() || component.contains(char::is_whitespace) {
        return Err(MdpError::Invalid(
            "component name must be non-empty without whitespace",
        ));
    }
    let service = format!("tickbox.{component}.status");
    let stop = Arc::new(AtomicBool::new(false));
    let (ctx, broker, svc, flag) = (
        ctx.clone(),
        broker.to_string(),
        service.clone(),
        Arc::clone(&stop),
    );
    let thread = std::thread::Builder::new()
        .name(format!("status-{component}"))
        .spawn(move || {
            let mut worker = MdpWorker::connect(&ctx, &broker, &svc, cfg)?;
            worker.serve(&flag, |_| vec![status()])
        })
        .map_err(|_| MdpError::Invalid("cannot spawn status worker thread"))?;
    Ok(StatusWorker {
        stop,
        thread: Some(thread),
        service,
    })
}
