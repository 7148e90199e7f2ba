//! Per-role socket profiles (`[context.sockets.<role>]`) applied to the sockets each role opens.
//!
//! Every role calls [`apply`] once per socket, right after creating it and setting its own section's options,
//! and before any bind or connect: `ZMQ_SNDBUF`/`ZMQ_RCVBUF`, TCP keepalive and `ZMQ_AFFINITY` only reach
//! connections made afterwards. The roles and their sockets:
//!
//! | role (`[context.sockets.*]`) | sockets |
//! |---|---|
//! | `feed` | each publisher shard's PUB/XPUB |
//! | `subscriber` | each shard's SUB |
//! | `lvc` | the upstream XSUB, the downstream XPUB and the tap XPUB |
//! | `recorder` | the recorder's SUB |
//! | `replay` | each replay shard's XPUB |
//!
//! Precedence, highest first:
//! 1. an explicit per-command flag for the same option (`tickbox feed --send-hwm`, `tickbox lvc --upstream-hwm`…):
//!    the command clears that option from the profile, so the flag's value is what the socket gets;
//! 2. the role's profile;
//! 3. the role section's own value (`[feed] send_hwm`, `[subscriber] receive_hwm`, `[recorder] receive_hwm`…), which has a
//!    default, and libzmq's default for every option no section names.
//!
//! One exception by design: a subscriber shard's `io_thread` (written by `tickbox tune plan`) sets that shard's
//! `ZMQ_AFFINITY` over the profile's `affinity`, because it names the I/O thread pinned near the shard's NIC.

use serde::{Deserialize, Serialize};

/// Socket options for one role's sockets; every field unset leaves libzmq's (or the role's own) setting.
///
/// A role applies its profile right after creating a socket, after its own section's settings and before any
/// bind or connect (kernel buffers, keepalive and affinity only reach connections made afterwards), so a value
/// here wins over, for example, `[subscriber] receive_hwm`. A command-line flag for the same option wins over both:
/// the command clears the profile's field (see [`crate::profile`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SocketProfile {
    /// `ZMQ_SNDHWM`, messages.
    #[serde(alias = "sndhwm", skip_serializing_if = "Option::is_none")]
    pub send_hwm: Option<i32>,
    /// `ZMQ_RCVHWM`, messages.
    #[serde(alias = "rcvhwm", skip_serializing_if = "Option::is_none")]
    pub receive_hwm: Option<i32>,
    /// `ZMQ_SNDBUF`: kernel send buffer, bytes (capped by `net.core.wmem_max`; `tickbox tune check` says so).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sndbuf: Option<i32>,
    /// `ZMQ_RCVBUF`: kernel receive buffer, bytes (capped by `net.core.rmem_max`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rcvbuf: Option<i32>,
    /// `ZMQ_TCP_KEEPALIVE`: turn TCP keepalive on (`true`) or off (`false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_keepalive: Option<bool>,
    /// `ZMQ_TCP_KEEPALIVE_IDLE`, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_keepalive_idle_s: Option<i32>,
    /// `ZMQ_TCP_KEEPALIVE_INTVL`, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_keepalive_intvl_s: Option<i32>,
    /// `ZMQ_TCP_KEEPALIVE_CNT`, probes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_keepalive_cnt: Option<i32>,
    /// `ZMQ_MAXMSGSIZE`: larger inbound messages drop the connection, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxmsgsize: Option<i64>,
    /// `ZMQ_AFFINITY`: bit `n` lets the socket's connections run on I/O thread `n` (`ZMQbg/IO/n`); 0 or unset
    /// lets libzmq pick the least loaded. A subscriber shard's `io_thread` wins over this for its own SUB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<u64>,
}

impl SocketProfile {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self == &SocketProfile::default()
    }

    /// Applies every set option to `socket` (see [`crate::profile::apply`], which this is).
    pub fn apply(&self, socket: &zmq::Socket) -> Result<(), zmq::Error> {
        crate::profile::apply(socket, self)
    }

    pub(crate) fn apply_options(&self, socket: &zmq::Socket) -> Result<(), zmq::Error> {
        if let Some(v) = self.send_hwm {
            socket.set_sndhwm(v)?;
        }
        if let Some(v) = self.receive_hwm {
            socket.set_rcvhwm(v)?;
        }
        if let Some(v) = self.sndbuf {
            socket.set_sndbuf(v)?;
        }
        if let Some(v) = self.rcvbuf {
            socket.set_rcvbuf(v)?;
        }
        if let Some(v) = self.tcp_keepalive {
            socket.set_tcp_keepalive(i32::from(v))?;
        }
        if let Some(v) = self.tcp_keepalive_idle_s {
            socket.set_tcp_keepalive_idle(v)?;
        }
        if let Some(v) = self.tcp_keepalive_intvl_s {
            socket.set_tcp_keepalive_intvl(v)?;
        }
        if let Some(v) = self.tcp_keepalive_cnt {
            socket.set_tcp_keepalive_cnt(v)?;
        }
        if let Some(v) = self.maxmsgsize {
            socket.set_maxmsgsize(v)?;
        }
        if let Some(v) = self.affinity {
            socket.set_affinity(v)?;
        }
        Ok(())
    }
}

/// Socket profiles per role (`[context.sockets.<role>]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SocketProfiles {
    /// Feed publisher shards (XPUB).
    #[serde(skip_serializing_if = "SocketProfile::is_empty")]
    pub feed: SocketProfile,
    /// LVC proxy sockets.
    #[serde(skip_serializing_if = "SocketProfile::is_empty")]
    pub lvc: SocketProfile,
    /// Subscriber SUB shards.
    #[serde(skip_serializing_if = "SocketProfile::is_empty")]
    pub subscriber: SocketProfile,
    /// Worker PULL sockets.
    #[serde(skip_serializing_if = "SocketProfile::is_empty")]
    pub workers: SocketProfile,
    /// Recorder SUB sockets.
    #[serde(skip_serializing_if = "SocketProfile::is_empty")]
    pub recorder: SocketProfile,
    /// Replayer publisher sockets.
    #[serde(skip_serializing_if = "SocketProfile::is_empty")]
    pub replay: SocketProfile,
}

impl SocketProfiles {
    fn all(&self) -> [&SocketProfile; 6] {
        [
            &self.feed,
            &self.lvc,
            &self.subscriber,
            &self.workers,
            &self.recorder,
            &self.replay,
        ]
    }

    /// The largest `rcvbuf` any role asks for (what `net.core.rmem_max` must allow).
    pub fn max_rcvbuf(&self) -> Option<u64> {
        self.all()
            .iter()
            .filter_map(|p| p.rcvbuf)
            .filter_map(|v| u64::try_from(v).ok())
            .max()
    }

    /// The largest `sndbuf` any role asks for (what `net.core.wmem_max` must allow).
    pub fn max_sndbuf(&self) -> Option<u64> {
        self.all()
            .iter()
            .filter_map(|p| p.sndbuf)
            .filter_map(|v| u64::try_from(v).ok())
            .max()
    }
}

/// Most I/O threads `ZMQ_AFFINITY` can address: it is a 64-bit mask, one bit per I/O thread.
pub const MAX_AFFINITY_IO_THREADS: usize = 64;

/// Applies every option `profile` sets to `socket` (HWMs, kernel buffers, TCP keepalive with idle, interval and
/// count, `ZMQ_MAXMSGSIZE`, `ZMQ_AFFINITY`); options it leaves unset keep whatever the socket has. Then hands
/// the socket to the inspector, if one is set (see [`set_inspector`]).
pub fn apply(socket: &zmq::Socket, profile: &SocketProfile) -> Result<(), zmq::Error> {
    profile.apply_options(socket)?;
    if !profile.is_empty() {
        tracing::debug!(?profile, "socket profile applied");
    }
    let inspector = INSPECTOR.read().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(inspect) = inspector {
        inspect(socket);
    }
    Ok(())
}

/// What [`set_inspector`] takes: called on the role's own thread with the socket just configured.
pub type Inspector = std::sync::Arc<dyn Fn(&zmq::Socket) + Send + Sync>;

static INSPECTOR: std::sync::RwLock<Option<Inspector>> = std::sync::RwLock::new(None);

/// Sets (or with `None` clears) a process-wide callback that [`apply`] calls with every socket it has just
/// configured, before the role binds or connects it. The roles open their sockets inside their own threads and
/// never hand them out, so this is how a test (or a diagnostic build) reads back, with the `zmq` getters, what a
/// role's socket really carries. Unset, [`apply`] costs one uncontended read lock per socket opened.
pub fn set_inspector(inspector: Option<Inspector>) {
    *INSPECTOR.write().unwrap_or_else(|e| e.into_inner()) = inspector;
}

/// The `ZMQ_AFFINITY` mask that puts a socket's connections on I/O thread `io_thread` (`ZMQbg/IO/<io_thread>`),
/// or `None` past the 64 threads the mask can name.
pub fn io_thread_affinity(io_thread: usize) -> Option<u64> {
    (io_thread < MAX_AFFINITY_IO_THREADS).then(|| 1u64 << io_thread)
}

/// `profile` with its `affinity` replaced by the bit of `io_thread` when one is given (a subscriber shard planned
/// near its NIC's I/O thread); unchanged otherwise, or when `io_thread` is past what the mask can name.
pub fn with_io_thread(profile: &SocketProfile, io_thread: Option<usize>) -> SocketProfile {
    let mut out = profile.clone();
    if let Some(mask) = io_thread.and_then(io_thread_affinity) {
        out.affinity = Some(mask);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_thread_bits() {
        assert_eq!(io_thread_affinity(0), Some(1));
        assert_eq!(io_thread_affinity(3), Some(8));
        assert_eq!(io_thread_affinity(63), Some(1 << 63));
        assert_eq!(io_thread_affinity(64), None);
        let base = SocketProfile {
            affinity: Some(0b100),
            receive_hwm: Some(7),
            ..SocketProfile::default()
        };
        assert_eq!(with_io_thread(&base, Some(1)).affinity, Some(0b10));
        assert_eq!(with_io_thread(&base, Some(1)).receive_hwm, Some(7));
        assert_eq!(with_io_thread(&base, None), base);
        assert_eq!(with_io_thread(&base, Some(64)), base);
    }

    #[test]
    fn unset_options_are_left_alone() {
        let ctx = zmq::Context::new();
        let socket = ctx.socket(zmq::SUB).unwrap();
        socket.set_linger(0).unwrap();
        socket.set_rcvhwm(123).unwrap();
        apply(
            &socket,
            &SocketProfile {
                send_hwm: Some(5),
                ..SocketProfile::default()
            },
        )
        .unwrap();
        assert_eq!(socket.get_rcvhwm().unwrap(), 123);
        assert_eq!(socket.get_sndhwm().unwrap(), 5);
        assert_eq!(socket.get_affinity().unwrap(), 0);
    }
}
