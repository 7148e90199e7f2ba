//! The teardown rule for sockets that send multipart messages to peers over TCP or IPC, as code.
//!
//! **The trap.** libzmq 4.3.4 aborts the process (`Resource temporarily unavailable (session_base.cpp:260)`)
//! when a session whose engine is part-way through a multipart message (the peer stalled with its TCP window
//! full, so the engine stopped between two frames of one message) has terminated its pipe without delay and the
//! connection then fails before the socket acknowledged: `clean_pipes` tries to read the rest of the message
//! back and asserts. The session terminates the pipe without delay at a close with linger 0, when a positive
//! linger's timer expires, and on `unbind()`. Measured (`zmqx/tests/zmqx/clean_pipes.rs`): linger 0 with a
//! disconnect aborts every round; a close with linger 200 ms aborts 9 of 100 rounds when the peer hangs up
//! within 0.2 ms of the linger's end. `docs/book/src/libzmq-traps.md` has the full account.
//!
//! **The rule.** [`prepare_multipart_sender`] sets both halves:
//!
//! - **`ZMQ_TCP_MAXRT` = `stalled_peer_timeout`** (Linux's `TCP_USER_TIMEOUT`): the kernel gives up a
//!   connection whose sent data stays unacknowledged (a shut window included) for that long, so a stalled
//!   peer's engine fails by itself within about the bound. Measured: 0.51-0.76 s after the close for a 300 ms
//!   bound.
//! - **A linger longer than any such wait**: [`termination_bound`] (twice the bound plus one second). The
//!   session keeps a pipe that still holds part of a message readable until the engine has written it all or
//!   failed, so a stalled peer's engine fails (the kernel gives it up, or the peer hangs up) while the pipe is
//!   still readable and `clean_pipes` finds the rest of the message. The linger's end, the only moment the race
//!   can be lost, comes after every stalled connection is gone. Measured (`zmqx/tests/zmqx/clean_pipes.rs`,
//!   `prepared_multipart_sender_never_aborts_and_terminates_within_the_bound`): 0 aborts in 1,400 closes with
//!   the peer hanging up from 0 to 1.7 s after the close; the same trap with linger 200 ms aborts 9 of 100.
//!
//! Why not an infinite linger: it has the same effect on a stalled peer, but measured in the Clone teardown
//! stress test (`clone/tests/clone/clone_teardown.rs`) it left the context's termination hanging for more than 30 s
//! in 3 of about 70 rounds, after MAXRT had long expired: a session can wait for ever with nothing left that
//! retransmits. The finite linger bounds that too.
//!
//! **What it costs and what remains.**
//!
//! - A peer that stops acknowledging TCP data for `stalled_peer_timeout`, at any time in the connection's life
//!   and not only at teardown, is disconnected (it reconnects like any dropped peer). Choose the bound well
//!   above the longest pause a healthy peer takes; [`DEFAULT_STALLED_PEER_TIMEOUT`] is a few seconds.
//! - Closing such a socket and then terminating its context waits for every peer to take what is queued for
//!   it, at most [`termination_bound`]: a stalled peer until the kernel gives it up, a slow peer that keeps
//!   reading until it has read everything or the linger ends.
//! - The residue: a peer that is still reading (so TCP never gave it up) and is part-way through a multipart
//!   message when the linger ends, and that hangs up within about a millisecond of that moment. That needs a
//!   peer slow enough not to take its queue in [`termination_bound`] and a hang-up at the wrong millisecond.
//! - `ZMQ_TCP_MAXRT` applies to TCP only. Over IPC a stalled peer holds the pipe until the linger ends, where
//!   the race of a plain positive linger remains; tickbox's defaults are TCP.
//! - A socket that may have messages queued for a peer that is not connected (a `connect()` to a server that is
//!   down, or between reconnections) waits the whole linger at termination.
//!   [`prepare_multipart_connector`] adds `ZMQ_IMMEDIATE` so that no such message exists; where a protocol
//!   needs to queue a request before the connection is up (a Lazy Pirate or Majordomo client), the socket keeps
//!   its short linger and the residual race documented in `docs/book/src/libzmq-traps.md`.
//!
//! `disconnect()` and `unbind()` must still never be called on these sockets: `unbind()` terminates the
//! accepted sessions' pipes whatever the linger, and aborts every time a stalled peer then hangs up.

use std::os::raw::c_int;
use std::time::Duration;

use crate::{set_int_option, ZmqxError};

/// The stalled-peer bound tickbox uses where a component has no setting of its own: long enough that a healthy
/// peer under load (a GC pause, a busy consumer) is not dropped, short enough that a stop is still prompt.
pub const DEFAULT_STALLED_PEER_TIMEOUT: Duration = Duration::from_secs(3);

/// Prepares a socket that sends multipart messages to TCP/IPC peers so that its teardown cannot hit libzmq's
/// `clean_pipes` abort: `ZMQ_TCP_MAXRT` = `stalled_peer_timeout` and a linger of
/// [`termination_bound`]`(stalled_peer_timeout)` (see the module docs for why both and what each costs). Call it before `bind`/`connect`: `ZMQ_TCP_MAXRT` applies to connections made
/// afterwards. A zero timeout would mean "the system default" to libzmq (no bound at all), so it is raised to
/// 1 ms; a timeout above `i32::MAX` ms saturates. The error is libzmq's (every socket-owning crate already
/// converts `zmq::Error`).
///
/// For a socket that *connects*, see [`prepare_multipart_connector`]: this alone is only for sockets whose
/// peers connect to them (a bound ROUTER or PUB), which never hold messages for a peer that is not there.
pub fn prepare_multipart_sender(
    socket: &mut zmq::Socket,
    stalled_peer_timeout: Duration,
) -> zmq::Result<()> {
    let linger =
        c_int::try_from(termination_bound(stalled_peer_timeout).as_millis()).unwrap_or(c_int::MAX);
    socket.set_linger(linger)?;
    set_int_option(
        socket,
        zmq_sys::ZMQ_TCP_MAXRT as c_int,
        maxrt_ms(stalled_peer_timeout),
    )
    .map_err(|err| match err {
        ZmqxError::Zmq(z) => z,
        // set_int_option only reports libzmq's refusals.
        _ => zmq::Error::EINVAL,
    })
}

/// [`prepare_multipart_sender`] for a socket that connects, plus `ZMQ_IMMEDIATE`: without it libzmq queues
/// messages on a connecting pipe before (and between) connections, and an infinite linger then waits for a peer
/// that may never come, which no TCP timer bounds. With it a pipe exists only while a connection does, so every
/// queued message has a live connection under it that either drains or is given up at the bound. The cost is
/// libzmq's: a send while no peer is connected finds no pipe (a PUB drops it, as it drops messages to a peer that
/// has not subscribed yet; a DEALER or PUSH send blocks or returns `EAGAIN`).
pub fn prepare_multipart_connector(
    socket: &mut zmq::Socket,
    stalled_peer_timeout: Duration,
) -> zmq::Result<()> {
    socket.set_immediate(true)?;
    prepare_multipart_sender(socket, stalled_peer_timeout)
}

/// The `ZMQ_TCP_MAXRT` value for a bound: whole milliseconds, at least 1, saturating.
pub fn maxrt_ms(stalled_peer_timeout: Duration) -> c_int {
    c_int::try_from(stalled_peer_timeout.as_millis())
        .unwrap_or(c_int::MAX)
        .max(1)
}

/// The linger of a prepared socket, so the longest context termination waits for it after the close: twice the
/// bound (the kernel notices the timeout at its next zero-window probe, which older kernels do not clamp to the
/// bound) plus one second for the probe schedule's granularity, so every stalled connection is given up first.
pub fn termination_bound(stalled_peer_timeout: Duration) -> Duration {
    stalled_peer_timeout
        .max(Duration::from_millis(1))
        .saturating_mul(2)
        .saturating_add(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_reads_back_linger_minus_one_and_the_bound() {
        let ctx = zmq::Context::new();
        let mut s = ctx.socket(zmq::ROUTER).unwrap();
        prepare_multipart_sender(&mut s, Duration::from_millis(1500)).unwrap();
        assert_eq!(s.get_linger().unwrap(), 4000);
        let mut value: c_int = 0;
        let mut len = std::mem::size_of::<c_int>();
        #[allow(unsafe_code)]
        // SAFETY: the socket is live (owned by `s`); the value pointer and length describe one `c_int` on our
        // stack that outlives the call.
        let rc = unsafe {
            zmq_sys::zmq_getsockopt(
                s.as_mut_ptr(),
                zmq_sys::ZMQ_TCP_MAXRT as c_int,
                (&mut value as *mut c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(value, 1500);
        // Nothing queued, no peer: the close and the context's termination do not wait.
        s.set_linger(-1).unwrap();
        drop(s);
        let t = std::time::Instant::now();
        drop(ctx);
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn bounds_never_mean_unbounded() {
        assert_eq!(maxrt_ms(Duration::ZERO), 1);
        assert_eq!(maxrt_ms(Duration::from_micros(1500)), 1);
        assert_eq!(maxrt_ms(Duration::MAX), c_int::MAX);
        assert_eq!(
            termination_bound(Duration::from_secs(3)),
            Duration::from_secs(7)
        );
        assert!(termination_bound(Duration::MAX) >= Duration::from_secs(1));
    }
}
