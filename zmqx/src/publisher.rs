//! The one recipe for a publishing socket (a feed shard, a replay shard, the LVC's downstream and tap): which
//! kind, how subscriptions reach the application, the high-water mark, linger, send timeout, the bound on what a
//! subscriber may send, back-pressure and the role's socket profile, applied in one order; then bind (resolving a
//! wildcard port) or connect. Security is the caller's: it hands in the socket its gate made (a server socket for
//! a bind, a CURVE client for a connect), so this crate stays below `tickbox-auth`.
//!
//! Also the batch pool's size, one definition for every publisher that batches.

use std::time::Duration;

use crate::profile::SocketProfile;
use crate::BackPressure;

/// How subscriptions reach the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subscriptions {
    /// A plain PUB: the application never sees them.
    Hidden,
    /// An XPUB passing every subscription, duplicates included, but only a prefix's last unsubscription
    /// (`ZMQ_XPUB_VERBOSE`).
    Verbose,
    /// An XPUB passing every subscription and every unsubscription, those of a subscriber that disconnects
    /// included (`ZMQ_XPUB_VERBOSER`): what a publisher that counts its subscribers needs.
    Verboser,
}

/// How long closing the socket may wait for what it still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linger {
    /// `ZMQ_LINGER` in milliseconds.
    Ms(i32),
    /// A socket forwarding multipart messages to peers that may stall: see
    /// [`crate::prepare_multipart_sender`] (linger and `ZMQ_TCP_MAXRT` from the bound).
    StalledPeer(Duration),
}

/// One publishing socket's settings (see the module docs). Build it, then [`PublisherSocket::open`].
#[derive(Debug, Clone)]
pub struct PublisherSocket<'a> {
    /// What the application sees of subscriptions; anything but [`Subscriptions::Hidden`] makes an XPUB.
    pub subscriptions: Subscriptions,
    /// `ZMQ_SNDHWM`, messages per subscriber.
    pub send_hwm: i32,
    /// Linger at the close.
    pub linger: Linger,
    /// `ZMQ_SNDTIMEO`: how long one blocked send may wait (a back-pressured socket's bound, so a stop is seen).
    /// `None`: libzmq's default.
    pub send_timeout_ms: Option<i32>,
    /// `ZMQ_MAXMSGSIZE`: the most a subscriber may send in one message (see [`crate::limit_subscriptions`]).
    pub max_inbound_bytes: i64,
    /// `Block` sets `ZMQ_XPUB_NODROP` (a full pipe refuses the send instead of dropping it).
    pub back_pressure: BackPressure,
    /// The role's `[context.sockets.<role>]`, applied last so the operator's settings win.
    pub profile: &'a SocketProfile,
}

/// Why a publishing socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PublisherSocketError {
    /// libzmq refused an option.
    #[error("{option}: {source}")]
    Option {
        /// The option, as the log names it (`sndhwm`, `verbose`, ...).
        option: &'static str,
        /// libzmq's error.
        #[source]
        source: crate::ZmqxError,
    },
    /// The bind or the connect failed.
    #[error("cannot {verb} {endpoint}: {source}")]
    Attach {
        /// `bind` or `connect to`.
        verb: &'static str,
        /// The endpoint as given.
        endpoint: String,
        /// libzmq's error.
        #[source]
        source: crate::ZmqxError,
    },
}

impl PublisherSocket<'_> {
    /// The socket type this recipe makes.
    pub fn kind(&self) -> zmq::SocketType {
        match self.subscriptions {
            Subscriptions::Hidden => zmq::PUB,
            Subscriptions::Verbose | Subscriptions::Verboser => zmq::XPUB,
        }
    }

    /// Applies every option to `socket` (made of [`Self::kind`]), in the one order.
    pub fn configure(&self, socket: &mut zmq::Socket) -> Result<(), PublisherSocketError> {
        fn opt<T>(
            option: &'static str,
            r: Result<T, impl Into<crate::ZmqxError>>,
        ) -> Result<T, PublisherSocketError> {
            r.map_err(|e| PublisherSocketError::Option {
                option,
                source: e.into(),
            })
        }
        match self.linger {
            Linger::Ms(ms) => opt("linger", socket.set_linger(ms))?,
            Linger::StalledPeer(bound) => opt(
                "teardown options",
                crate::prepare_multipart_sender(socket, bound),
            )?,
        }
        opt("sndhwm", socket.set_sndhwm(self.send_hwm))?;
        if let Some(ms) = self.send_timeout_ms {
            opt("sndtimeo", socket.set_sndtimeo(ms))?;
        }
        // libzmq stores a subscription in the XPUB's trie before the application sees it; this bounds that
        // memory and disconnects a peer sending anything longer.
        opt("maxmsgsize", socket.set_maxmsgsize(self.max_inbound_bytes))?;
        match self.subscriptions {
            Subscriptions::Hidden => {}
            Subscriptions::Verbose => opt("verbose", socket.set_xpub_verbose(true))?,
            Subscriptions::Verboser => opt("verboser", crate::set_xpub_verboser(socket, true))?,
        }
        if self.back_pressure.blocks() {
            opt("nodrop", crate::set_xpub_nodrop(socket, true))?;
        }
        opt("profile", crate::profile::apply(socket, self.profile))
    }

    /// Configures `socket` and binds it to `endpoint` (returning the endpoint bound, a `tcp://…:*` resolved to
    /// its port) or, with `connect`, connects it. The caller made `socket` secure for its role first.
    pub fn open(
        &self,
        mut socket: zmq::Socket,
        endpoint: &str,
        connect: bool,
    ) -> Result<(zmq::Socket, String), PublisherSocketError> {
        self.configure(&mut socket)?;
        let attach = |verb, source| PublisherSocketError::Attach {
            verb,
            endpoint: endpoint.to_string(),
            source,
        };
        let resolved = if connect {
            socket
                .connect(endpoint)
                .map_err(|e| attach("connect to", e.into()))?;
            endpoint.to_string()
        } else {
            crate::bind_resolved(&socket, endpoint).map_err(|e| attach("bind", e))?
        };
        Ok((socket, resolved))
    }
}

/// Recycled buffers a batching publisher keeps per socket (at most this many batches queued in libzmq before a
/// batch waits for one or allocates its own).
pub const BATCH_BUFFERS: usize = 64;
/// Memory bound of one socket's batch buffers when frames are large: fewer buffers, never fewer than 4.
pub const BATCH_POOL_BYTES: usize = 4 << 20;

/// How many batch buffers of `max_bytes` each one socket recycles: [`BATCH_BUFFERS`], fewer when that would pass
/// [`BATCH_POOL_BYTES`], never fewer than 4.
pub fn batch_buffers(max_bytes: usize) -> usize {
    (BATCH_POOL_BYTES / max_bytes.max(1)).clamp(4, BATCH_BUFFERS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_pool_is_bounded_in_count_and_bytes() {
        assert_eq!(batch_buffers(8192), BATCH_BUFFERS);
        assert_eq!(batch_buffers(1 << 20), 4);
        assert_eq!(batch_buffers(256 << 10), 16);
        assert_eq!(batch_buffers(0), BATCH_BUFFERS);
    }

    #[test]
    fn a_bound_socket_resolves_its_port_and_a_refused_bind_names_the_endpoint() {
        let ctx = zmq::Context::new();
        let profile = SocketProfile::default();
        let recipe = PublisherSocket {
            subscriptions: Subscriptions::Verboser,
            send_hwm: 10,
            linger: Linger::Ms(0),
            send_timeout_ms: Some(5),
            max_inbound_bytes: 65,
            back_pressure: BackPressure::Block,
            profile: &profile,
        };
        assert_eq!(recipe.kind(), zmq::XPUB);
        let (socket, ep) = recipe
            .open(
                ctx.socket(recipe.kind()).unwrap(),
                "tcp://127.0.0.1:*",
                false,
            )
            .unwrap();
        assert!(
            ep.starts_with("tcp://127.0.0.1:") && !ep.ends_with(":*"),
            "{ep}"
        );
        assert_eq!(socket.get_sndhwm().unwrap(), 10);
        assert_eq!(socket.get_linger().unwrap(), 0);
        assert_eq!(socket.get_sndtimeo().unwrap(), 5);
        assert_eq!(socket.get_maxmsgsize().unwrap(), 65);
        // The same endpoint again is in use: the error says which endpoint and what was tried.
        let Err(err) = recipe.open(ctx.socket(recipe.kind()).unwrap(), &ep, false) else {
            panic!("bound {ep} twice");
        };
        assert!(
            matches!(&err, PublisherSocketError::Attach { verb: "bind", endpoint, .. } if *endpoint == ep),
            "{err}"
        );
    }
}
