//! The few ZeroMQ pieces the `zmq` crate does not expose, and thread pinning, shared by every socket-owning crate.

use std::os::raw::c_int;

pub mod context;
pub mod endpoint;
pub mod naming;
pub mod profile;
pub mod publisher;
pub mod socket;
pub mod teardown;
pub mod zero_copy;

/// Errors from these helpers.
#[derive(Debug, thiserror::Error)]
pub enum ZmqxError {
    /// libzmq refused the call (bad option, closed socket, endpoint in use, ...).
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// [`pin_current_thread`] was asked for a core the OS does not report.
    #[error("core {core} does not exist (this machine has cores {available:?})")]
    NoSuchCore {
        /// The OS CPU id asked for.
        core: usize,
        /// The CPU ids the OS reports, for the error message.
        available: Vec<usize>,
    },
    /// The core exists but the OS refused the affinity change (cgroup or `taskset` limits).
    #[error("could not pin thread to core {0}")]
    PinFailed(usize),
    /// [`endpoint_via_nic`] cannot route this endpoint through a NIC; the text says why.
    #[error("{0}")]
    NicEndpoint(String),
    /// [`endpoint::check`] rejected an endpoint before any socket saw it.
    #[error("invalid endpoint `{endpoint}`: {reason}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// [`zero_copy::ZeroCopySender::send`] was given a new message while one a full pipe refused is still
    /// pending (it must go first, or order would change).
    #[error("a refused message is still pending; send it first")]
    SendPending,
}

/// Rewrites `tcp://host:port` to ZeroMQ's source-interface form `tcp://IFACE:0;host:port`, so the connection
/// leaves through `nic` (the bundled libzmq needs the Linux defines `.cargo/config.toml` restores for this to work).
pub fn endpoint_via_nic(endpoint: &str, nic: &str) -> Result<String, ZmqxError> {
    let bad = |reason: String| Err(ZmqxError::NicEndpoint(reason));
    let Some(rest) = endpoint.strip_prefix("tcp://") else {
        return bad(format!("--nic needs tcp:// endpoints, got {endpoint}"));
    };
    if rest.contains(';') {
        return bad(format!(
            "{endpoint} already names a source; do not combine it with a NIC"
        ));
    }
    if nic.is_empty() || nic.contains([':', ';', '/']) {
        return bad(format!("invalid interface name {nic:?}"));
    }
    Ok(format!("tcp://{nic}:0;{rest}"))
}

/// Longest subscription prefix a publisher socket accepts by default. Topics are short (`Q.XNAS.AAPL`); the bound
/// exists because libzmq's subscription tries recurse once per prefix byte, so a peer's 32 KiB prefix can overflow
/// a stack, and because every distinct prefix costs memory.
pub const DEFAULT_MAX_SUBSCRIPTION_BYTES: usize = 1024;

/// Bounds what subscribers can send a PUB/XPUB: its peers send only (un)subscriptions, one flag byte plus the
/// prefix, so `ZMQ_MAXMSGSIZE` of `max_prefix + 1` makes libzmq drop a peer that sends a longer one before the
/// prefix reaches any trie or buffer. The dropped peer may reconnect; it never gets the oversized subscription in.
pub fn limit_subscriptions(socket: &zmq::Socket, max_prefix: usize) -> Result<(), ZmqxError> {
    socket
        .set_maxmsgsize(subscription_limit(max_prefix))
        .map_err(ZmqxError::Zmq)
}

/// The `ZMQ_MAXMSGSIZE` [`limit_subscriptions`] sets for prefixes of at most `max_prefix` bytes.
pub fn subscription_limit(max_prefix: usize) -> i64 {
    i64::try_from(max_prefix.saturating_add(1)).unwrap_or(i64::MAX)
}

/// `ZMQ_XPUB_NODROP`: when a subscriber's pipe is full, `send` on an XPUB blocks (or returns `EAGAIN` with
/// `DONTWAIT`) instead of silently dropping. This turns a lossy PUB into a back-pressured one, which is what a
/// replay or a benchmark that must not lose messages wants.
pub fn set_xpub_nodrop(socket: &mut zmq::Socket, on: bool) -> Result<(), ZmqxError> {
    set_int_option(socket, zmq_sys::ZMQ_XPUB_NODROP as c_int, c_int::from(on))
}

/// Sets `ZMQ_XPUB_VERBOSER` on an XPUB: every subscribe *and* unsubscribe reaches the application, including the
/// unsubscriptions libzmq makes for a subscriber that disconnects, so a publisher can count who is still there
/// (plain verbose mode passes only the last unsubscription of a prefix).
pub fn set_xpub_verboser(socket: &mut zmq::Socket, on: bool) -> Result<(), ZmqxError> {
    set_int_option(socket, zmq_sys::ZMQ_XPUB_VERBOSER as c_int, c_int::from(on))
}

// `zmq` has no setter for these options; the call goes to libzmq directly.
#[allow(unsafe_code)]
fn set_int_option(socket: &mut zmq::Socket, option: c_int, value: c_int) -> Result<(), ZmqxError> {
    // SAFETY: the pointer is a live socket owned by `socket` (we hold `&mut`), and the value pointer and length
    // describe one `c_int` on our stack for the duration of the call.
    let rc = unsafe {
        zmq_sys::zmq_setsockopt(
            socket.as_mut_ptr(),
            option,
            (&value as *const c_int).cast(),
            std::mem::size_of::<c_int>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        // SAFETY: reading the thread-local errno set by the failed call.
        let errno = unsafe { zmq_sys::zmq_errno() };
        Err(ZmqxError::Zmq(zmq::Error::from_raw(errno)))
    }
}

/// Binds and returns the endpoint actually bound (resolves `tcp://127.0.0.1:*` to the chosen port).
pub fn bind_resolved(socket: &zmq::Socket, endpoint: &str) -> Result<String, ZmqxError> {
    socket.bind(endpoint)?;
    Ok(last_endpoint(socket)?)
}

pub use naming::BackPressure;
pub use socket::last_endpoint;
pub use teardown::{
    prepare_multipart_connector, prepare_multipart_sender, DEFAULT_STALLED_PEER_TIMEOUT,
};

/// Pins the calling thread to `core` (an OS CPU id). Threads created afterwards by this thread, including
/// libzmq's I/O threads when this thread creates the context, inherit the mask.
pub fn pin_current_thread(core: usize) -> Result<(), ZmqxError> {
    let available: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    if !available.contains(&core) {
        return Err(ZmqxError::NoSuchCore { core, available });
    }
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(ZmqxError::PinFailed(core))
    }
}

/// Makes `sleep` on the calling thread precise: a timer slack of 1 ns instead of Linux's default 50 µs, so a pacer
/// can sleep between messages at moderate rates (and keep a small machine's cores for the receivers) without
/// waking tens of microseconds late, which a latency measurement would charge to the whole path. Every pacer
/// (`tickbox feed`'s shards, the bench's publishers) calls it on its own thread.
#[allow(unsafe_code)] // prctl is a libc call
pub fn precise_sleep() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only affects the calling thread.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!("could not lower the timer slack; pacing sleeps may overshoot by ~50 µs");
    }
}

/// Pins when a core is given; logs and carries on when pinning fails, because an unpinned thread is slower, not
/// wrong, and a config written for a bigger box should still run on a laptop. Returns the core the thread now runs
/// on, `None` when unpinned (none asked, or pinning failed), for the placement a summary and metrics report.
pub fn pin_if_configured(core: Option<usize>, what: &str) -> Option<usize> {
    let core = core?;
    match pin_current_thread(core) {
        Ok(()) => {
            tracing::debug!(core, "{what} pinned");
            Some(core)
        }
        Err(err) => {
            tracing::warn!("{what}: {err}; running unpinned");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nic_endpoints() {
        assert_eq!(
            super::endpoint_via_nic("tcp://10.0.0.1:5556", "eth1").unwrap(),
            "tcp://eth1:0;10.0.0.1:5556"
        );
        assert!(super::endpoint_via_nic("ipc:///tmp/x", "eth1").is_err());
        assert!(super::endpoint_via_nic("tcp://a:0;10.0.0.1:1", "eth1").is_err());
        assert!(super::endpoint_via_nic("tcp://10.0.0.1:1", "").is_err());
    }

    use super::*;

    #[test]
    fn nodrop_xpub_blocks_instead_of_dropping() {
        let ctx = zmq::Context::new();
        let mut xpub = ctx.socket(zmq::XPUB).unwrap();
        xpub.set_linger(0).unwrap();
        xpub.set_sndhwm(10).unwrap();
        set_xpub_nodrop(&mut xpub, true).unwrap();
        let endpoint = bind_resolved(&xpub, "tcp://127.0.0.1:*").unwrap();
        assert!(endpoint.starts_with("tcp://127.0.0.1:"));
        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_linger(0).unwrap();
        sub.set_rcvhwm(10).unwrap();
        sub.connect(&endpoint).unwrap();
        sub.set_subscribe(b"").unwrap();
        // Wait for the subscription to arrive so the pipe exists.
        xpub.set_rcvtimeo(2000).unwrap();
        assert_eq!(xpub.recv_bytes(0).unwrap(), vec![1u8]);
        // Never read from `sub`: with NODROP the sender must eventually see EAGAIN rather than drop forever.
        let mut blocked = false;
        for _ in 0..1_000_000 {
            match xpub.send(&[0u8; 64][..], zmq::DONTWAIT) {
                Ok(()) => {}
                Err(zmq::Error::EAGAIN) => {
                    blocked = true;
                    break;
                }
                Err(err) => panic!("unexpected {err}"),
            }
        }
        assert!(blocked, "XPUB_NODROP never pushed back");
    }

    #[test]
    fn pinning_to_a_missing_core_is_an_error() {
        assert!(matches!(
            pin_current_thread(100_000),
            Err(ZmqxError::NoSuchCore { .. })
        ));
    }
}
