//! Process-wide Ctrl-C / SIGTERM flag. Installed once; every long-running command polls it at least once per poll
//! timeout so it can stop cleanly and still print its summary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// The shared stop flag; the first call installs the signal handler.
pub(crate) fn flag() -> Arc<AtomicBool> {
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let handler_flag = Arc::clone(&flag);
        if let Err(err) = ctrlc::set_handler(move || handler_flag.store(true, Ordering::SeqCst)) {
            tracing::warn!("cannot install Ctrl-C handler: {err}");
        }
        flag
    })
    .clone()
}
