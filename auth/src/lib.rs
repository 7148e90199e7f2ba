//! Security for every tickbox socket: CurveZMQ certificates in the ecosystem's `zcert` format, the `[security]`
//! config section, a ZAP handler (a sans-IO policy engine in [`policy`] beside a thin socket loop in [`zap`]) and
//! per-key authorisation of control services, Clone config writes and publisher ids ([`grants`]).
//!
//! A process loads its section once ([`Security::from_config`]) and opens its context's [`Gate`]
//! ([`Security::gate`]): the ZAP handler started in that context. Server sockets come only from the gate
//! ([`Gate::socket`]), so a socket bound under `[security]` without its ZAP handler cannot be written; connecting
//! sockets call [`Security::client`], naming the socket's role. With no section every call is a no-op.

pub mod cap;
pub mod cert;
pub mod config;
pub mod grants;
pub mod handshake;
pub mod metrics;
pub mod policy;
pub mod report;
mod security;
pub mod stats;
pub mod z85;
pub mod zap;

use std::path::PathBuf;

pub use cap::{ConnectionCaps, RoleConnectionCounts};
pub use cert::Certificate;
pub use config::{Allow, MechanismName, RoleOverride, SecurityConfig, ServiceGrant, ROLES};
pub use grants::{Access, Grants};
pub use security::{fresh_pair, Gate, Revocations, Security};
pub use stats::{AuthStats, AuthSummary};
pub use zap::ZapHandler;

/// The message property libzmq attaches to every message from an authenticated peer: the ZAP user id.
pub const USER_ID_PROPERTY: &str = "User-Id";

/// What can go wrong loading or applying security.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// A certificate or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A certificate's text is damaged.
    #[error("certificate {}: {source}", path.display())]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: cert::CertError,
    },
    /// A file far too large to be a certificate.
    #[error("{}: too large to be a certificate", .0.display())]
    TooLarge(PathBuf),
    /// A secret certificate readable by others.
    #[error("{}: a secret certificate must not be readable by others (mode {mode:o}); run chmod 600", path.display())]
    LoosePermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A certificate without the secret key this process needs.
    #[error("{}: not a secret certificate (no secret-key, and no readable _secret file beside it)", .0.display())]
    NotSecret(PathBuf),
    /// `keygen` would overwrite a file.
    #[error("{}: exists; refusing to overwrite a certificate", .0.display())]
    Exists(PathBuf),
    /// A `[security]` setting that cannot work.
    #[error("[security] {0}")]
    Config(String),
    /// libzmq refused a security option.
    #[error("{role}: setting security options: {source}")]
    Socket {
        /// The socket's role.
        role: String,
        /// libzmq's error.
        source: zmq::Error,
    },
    /// The ZAP handler could not start.
    #[error("ZAP handler: {0}")]
    Zap(String),
}

/// The `User-Id` of a received message: the sender's Z85 public key under CURVE; `None` without authentication.
pub fn user_id(msg: &mut zmq::Message) -> Option<&str> {
    msg.gets(USER_ID_PROPERTY).filter(|u| !u.is_empty())
}

/// Receives one multipart message with the `User-Id` libzmq attached to it (the sender's public key under
/// CURVE), so a loop can authorise it without touching the socket again.
pub fn recv_with_user(
    socket: &zmq::Socket,
    flags: i32,
) -> Result<(Vec<Vec<u8>>, Option<String>), zmq::Error> {
    let mut frames = Vec::new();
    let mut user = None;
    let mut msg = zmq::Message::new();
    loop {
        socket.recv(&mut msg, if frames.is_empty() { flags } else { 0 })?;
        if user.is_none() {
            user = user_id(&mut msg).map(str::to_owned);
        }
        frames.push(msg.to_vec());
        if !msg.get_more() {
            return Ok((frames, user));
        }
    }
}
