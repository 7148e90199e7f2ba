//! A callback messenger: `send(destination, message, on_reply)` and `listen(endpoint, handler)`.
//!
//! One I/O thread owns every socket; callers only enqueue commands (a channel plus a one-byte wake-up on an
//! `inproc` PUSH). Every message carries a message id, the receiver-side callback id and the sender-side callback
//! id. A message is retried until the receiver acknowledges it with an explicit ACK message (never "it was
//! sent"); receivers drop duplicates with [`SeenSet`] (a fixed-size bitmap window below the highest id seen, per
//! sender, for a bounded number of senders), whose memory does not depend on the ids received. Replies are messages too, retried and deduplicated
//! the same way, so under loss and duplication every handler and every reply callback runs exactly once.
//!
//! Wire (our own, `"TBM1"` header; ids are u64 big-endian):
//! * MSG `["TBM1"][0x01][sender-uuid 16][msg-id][to-callback][from-callback][body…]`
//! * ACK `["TBM1"][0x02][msg-id]`
//!
//! `to-callback` 0 addresses the handler of the listener the message arrives on; `from-callback` 0 means "no
//! reply wanted". Senders connect a DEALER whose identity is `'M' + sender-uuid`, so the receiver's ROUTER (with
//! `ROUTER_HANDOVER`) can keep routing replies to it across reconnects.
//!
//! Crate layout: [`engine`] is the sans-IO core (never touches a socket; `tests/sans_io.rs` enforces it),
//! [`io`] the I/O thread behind [`Messenger`]. May depend on `tickbox-reliable`, `tickbox-zmqx` and `zmq`; never
//! on the data plane.

pub mod engine;
pub mod io;

pub use engine::{
    Frames, MessengerConfig, MessengerEngine, MessengerStats, MsgAction, Route, Seen, SeenSet,
};
pub use io::Messenger;

/// Errors of the threaded messenger.
#[derive(Debug, thiserror::Error)]
pub enum MessengerError {
    /// A socket call failed.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// The I/O thread has exited (or could not start), so the command cannot run.
    #[error("the messenger I/O thread is gone")]
    Gone,
    /// Opening or binding a listener socket failed.
    #[error("listen on {endpoint}: {source}")]
    Listen {
        /// The endpoint as given to [`Messenger::listen`].
        endpoint: String,
        /// Why the bind failed.
        source: zmq::Error,
    },
}
