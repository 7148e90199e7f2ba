//! The ZAP policy engine (ZeroMQ RFC 27), sans-IO: a request's frames in, a verdict and its reply frames out. The
//! socket loop in `zap` owns the socket, the clock and the allow directories; this module decides.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::z85;

/// The ZAP protocol version this handler speaks.
pub const ZAP_VERSION: &[u8] = b"1.0";

/// A parsed ZAP request. Borrowed from the received frames.
#[derive(Debug, PartialEq, Eq)]
pub struct ZapRequest<'a> {
    /// Echoed back in the reply.
    pub request_id: &'a [u8],
    /// The ZAP domain: tickbox sets the socket's role here (`lvc.upstream`, `broker`, ...).
    pub domain: String,
    /// The peer's IP address as text; empty for transports without one (ipc, inproc).
    pub address: String,
    /// `NULL`, `PLAIN`, `CURVE` or `GSSAPI`.
    pub mechanism: &'a [u8],
    /// Mechanism-specific: for CURVE, the client's 32-byte public key.
    pub credentials: &'a [Vec<u8>],
}

/// Why a ZAP request could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ZapError {
    /// Fewer than the six frames RFC 27 requires.
    #[error("a ZAP request has at least 6 frames, got {0}")]
    TooFewFrames(usize),
    /// A version other than 1.0.
    #[error("unsupported ZAP version")]
    Version,
}

/// Reads RFC 27's request frames: version, request id, domain, address, identity, mechanism, credentials...
pub fn parse_request(frames: &[Vec<u8>]) -> Result<ZapRequest<'_>, ZapError> {
    if frames.len() < 6 {
        return Err(ZapError::TooFewFrames(frames.len()));
    }
    if frames[0] != ZAP_VERSION {
        return Err(ZapError::Version);
    }
    Ok(ZapRequest {
        request_id: &frames[1],
        domain: String::from_utf8_lossy(&frames[2]).into_owned(),
        address: String::from_utf8_lossy(&frames[3]).into_owned(),
        mechanism: &frames[5],
        credentials: &frames[6..],
    })
}

/// Public keys that may connect, with the name each is known by (its certificate's file name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    keys: BTreeMap<[u8; 32], String>,
}

impl KeySet {
    /// Adds `key`, known as `name`.
    pub fn insert(&mut self, key: [u8; 32], name: impl Into<String>) {
        self.keys.insert(key, name.into());
    }

    /// The name `key` is listed under, if it is.
    pub fn name_of(&self, key: &[u8; 32]) -> Option<&str> {
        self.keys.get(key).map(String::as_str)
    }

    /// Every listed key with its name.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8; 32], &str)> {
        self.keys.iter().map(|(k, n)| (k, n.as_str()))
    }

    /// How many keys are listed.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no key is listed (then nobody gets in).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// An IP address or CIDR block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpBlock {
    network: IpAddr,
    prefix: u8,
}

impl IpBlock {
    /// Parses `10.0.0.0/8`, `192.168.1.7`, `::1` or `fd00::/8`.
    pub fn parse(text: &str) -> Option<IpBlock> {
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (
                addr.parse::<IpAddr>().ok()?,
                Some(prefix.parse::<u8>().ok()?),
            ),
            None => (text.trim().parse::<IpAddr>().ok()?, None),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(IpBlock {
            network: addr,
            prefix,
        })
    }

    /// True when `addr` lies inside the block (an IPv4-mapped IPv6 peer matches IPv4 blocks).
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        match (self.network, addr) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Why a handshake was refused; shown in logs and summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The peer's address is in `deny_ips`.
    IpDenied,
    /// `allow_ips` is set and the peer's address is not in it.
    IpNotAllowed,
    /// A CURVE client whose public key is not in the allow directory.
    UnknownKey,
    /// A mechanism tickbox does not accept (PLAIN, GSSAPI), or one other than the socket was set up for.
    Mechanism,
    /// Frames that are not a ZAP request.
    Malformed,
    /// The handshake failed before ZAP was asked: a client without CURVE, one that expects another server key,
    /// or damaged traffic (seen through the socket's monitor; the peer's address is not known there).
    Handshake,
    /// The socket already has as many connections as its cap (`max_connections`) allows.
    ConnectionCap,
    /// A client without CURVE (NULL) at a CURVE server: the mechanisms did not match (libzmq's protocol error
    /// 0x11000002, which is all such a client is told).
    NoCurve,
    /// A CURVE client that expects another server key, or damaged handshake traffic (the server cannot decrypt
    /// its HELLO: protocol error 0x11000001).
    WrongServerKey,
}

/// libzmq's `ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC` (zmq.h), the value of a failed handshake's monitor event.
const PROTOCOL_ERROR_CRYPTOGRAPHIC: u32 = 0x1100_0001;
/// libzmq's `ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH`.
const PROTOCOL_ERROR_MECHANISM_MISMATCH: u32 = 0x1100_0002;

/// What a client whose handshake failed is told, from its own socket's monitor: `zap_status` is the status code of
/// a `HANDSHAKE_FAILED_AUTH` event (the server's ZAP handler answered), `protocol_error` the value of a
/// `HANDSHAKE_FAILED_PROTOCOL` event. Refusals say they are refusals and what to check, not a bare error code.
pub fn client_refusal(zap_status: Option<u32>, protocol_error: Option<u32>) -> String {
    match (zap_status, protocol_error) {
        (Some(400), _) => "refused by the server's ZAP handler (400: this key is not in its allow directory, \
                           its address is fenced, or its connection cap is full; the server's log names the reason \
                           and this key)"
            .into(),
        (Some(300), _) => "refused for now by the server's ZAP handler (300, temporary)".into(),
        (Some(status), _) => format!("refused: the server's ZAP handler failed (status {status})"),
        (None, Some(PROTOCOL_ERROR_MECHANISM_MISMATCH)) => {
            "refused: the security mechanisms differ (one side runs CURVE, the other NULL); check [security] \
             mechanism on both"
                .into()
        }
        (None, Some(PROTOCOL_ERROR_CRYPTOGRAPHIC)) => {
            "refused: the CURVE keys do not match (this client expects another server key than the server \
             holds); check server_key"
                .into()
        }
        (None, Some(code)) => format!("failed: protocol error {code:#x}"),
        (None, None) => "closed by the server before it completed: most likely a refusal (security that does not \
                         match: NULL against CURVE, a key it does not list, or the wrong server key)"
            .into(),
    }
}

/// Why a handshake failed before ZAP was asked: `protocol_error` is the value of the server socket's
/// `HANDSHAKE_FAILED_PROTOCOL` monitor event, `None` for a failure without detail.
pub fn handshake_failure(protocol_error: Option<u32>) -> Refusal {
    match protocol_error {
        Some(PROTOCOL_ERROR_MECHANISM_MISMATCH) => Refusal::NoCurve,
        Some(PROTOCOL_ERROR_CRYPTOGRAPHIC) => Refusal::WrongServerKey,
        _ => Refusal::Handshake,
    }
}

impl Refusal {
    /// The text sent back in the ZAP reply's status text, and logged.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::IpDenied => "address denied",
            Refusal::IpNotAllowed => "address not allowed",
            Refusal::UnknownKey => "key not allowed",
            Refusal::Mechanism => "mechanism not accepted",
            Refusal::Malformed => "malformed request",
            Refusal::Handshake => "handshake failed (no CURVE, wrong server key, or damaged)",
            Refusal::ConnectionCap => "too many connections (max_connections)",
            Refusal::NoCurve => "no CURVE (a NULL client at a CURVE server)",
            Refusal::WrongServerKey => {
                "wrong server key (the client expects another key, or damaged)"
            }
        }
    }

    /// The reason's name in summaries, `--json` and metrics (`refused_by_reason`).
    pub fn key(self) -> &'static str {
        match self {
            Refusal::IpDenied => "ip_denied",
            Refusal::IpNotAllowed => "ip_not_allowed",
            Refusal::UnknownKey => "unknown_key",
            Refusal::Mechanism => "mechanism",
            Refusal::Malformed => "malformed",
            Refusal::Handshake => "handshake",
            Refusal::ConnectionCap => "connection_cap",
            Refusal::NoCurve => "no_curve",
            Refusal::WrongServerKey => "wrong_server_key",
        }
    }
}

/// The engine's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Let the peer in; `user_id` travels with each of its messages as the `User-Id` property (the client's Z85
    /// public key for CURVE, empty for NULL).
    Accept {
        /// The identity authorisation checks.
        user_id: String,
    },
    /// Refuse the handshake.
    Refuse(Refusal),
}

/// The ZAP policy: IP fences for every mechanism and, for CURVE, the key allow-list the caller passes in (the loop
/// owns and reloads the directories; the engine stays free of I/O).
#[derive(Debug, Clone, Default)]
pub struct Gatekeeper {
    allow_ips: Vec<IpBlock>,
    deny_ips: Vec<IpBlock>,
}

impl Gatekeeper {
    /// A gatekeeper with these IP lists (already parsed).
    pub fn new(allow_ips: Vec<IpBlock>, deny_ips: Vec<IpBlock>) -> Self {
        Gatekeeper {
            allow_ips,
            deny_ips,
        }
    }

    /// Decides `request`. `allowed` is the key allow-list of the request's domain; `None` admits any CURVE key.
    pub fn decide(&self, request: &ZapRequest<'_>, allowed: Option<&KeySet>) -> Verdict {
        if let Some(refusal) = self.fence(&request.address) {
            return Verdict::Refuse(refusal);
        }
        match request.mechanism {
            b"NULL" => Verdict::Accept {
                user_id: String::new(),
            },
            b"CURVE" => {
                let Some(key) = request
                    .credentials
                    .first()
                    .and_then(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
                else {
                    return Verdict::Refuse(Refusal::Malformed);
                };
                match allowed {
                    Some(set) if set.name_of(&key).is_none() => {
                        Verdict::Refuse(Refusal::UnknownKey)
                    }
                    _ => Verdict::Accept {
                        user_id: z85::encode(&key).expect("32 bytes is a multiple of 4"),
                    },
                }
            }
            _ => Verdict::Refuse(Refusal::Mechanism),
        }
    }

    fn fence(&self, address: &str) -> Option<Refusal> {
        if address.is_empty() {
            return None;
        }
        let Ok(ip) = address.parse::<IpAddr>() else {
            return (!self.allow_ips.is_empty()).then_some(Refusal::IpNotAllowed);
        };
        if self.deny_ips.iter().any(|b| b.contains(ip)) {
            return Some(Refusal::IpDenied);
        }
        if !self.allow_ips.is_empty() && !self.allow_ips.iter().any(|b| b.contains(ip)) {
            return Some(Refusal::IpNotAllowed);
        }
        None
    }
}

/// RFC 27's reply frames for `verdict`: version, request id, status code, status text, user id, metadata.
pub fn reply_frames(request_id: &[u8], verdict: &Verdict) -> [Vec<u8>; 6] {
    let (code, text, user) = match verdict {
        Verdict::Accept { user_id } => ("200", "OK", user_id.as_str()),
        Verdict::Refuse(r) => ("400", r.as_str(), ""),
    };
    [
        ZAP_VERSION.to_vec(),
        request_id.to_vec(),
        code.as_bytes().to_vec(),
        text.as_bytes().to_vec(),
        user.as_bytes().to_vec(),
        Vec::new(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(mechanism: &str, address: &str, credentials: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut frames = vec![
            b"1.0".to_vec(),
            b"7".to_vec(),
            b"lvc.upstream".to_vec(),
            address.as_bytes().to_vec(),
            Vec::new(),
            mechanism.as_bytes().to_vec(),
        ];
        frames.extend(credentials);
        frames
    }

    #[test]
    fn curve_keys_are_checked_against_the_allow_list() {
        let mut allowed = KeySet::default();
        allowed.insert([1; 32], "feed");
        let gate = Gatekeeper::default();
        let listed = request("CURVE", "127.0.0.1", vec![vec![1; 32]]);
        let stranger = request("CURVE", "127.0.0.1", vec![vec![2; 32]]);
        let verdict = gate.decide(&parse_request(&listed).unwrap(), Some(&allowed));
        assert_eq!(
            verdict,
            Verdict::Accept {
                user_id: z85::encode(&[1; 32]).unwrap()
            }
        );
        let refused = gate.decide(&parse_request(&stranger).unwrap(), Some(&allowed));
        assert_eq!(refused, Verdict::Refuse(Refusal::UnknownKey));
        assert!(matches!(
            gate.decide(&parse_request(&stranger).unwrap(), None),
            Verdict::Accept { .. }
        ));
        let reply = reply_frames(b"7", &refused);
        assert_eq!(reply[2], b"400");
        assert_eq!(reply[1], b"7");
    }

    #[test]
    fn ip_fences_apply_to_every_mechanism_and_deny_wins() {
        let gate = Gatekeeper::new(
            vec![
                IpBlock::parse("127.0.0.0/8").unwrap(),
                IpBlock::parse("fd00::/8").unwrap(),
            ],
            vec![IpBlock::parse("127.0.0.9").unwrap()],
        );
        let decide = |addr: &str| {
            gate.decide(
                &parse_request(&request("NULL", addr, vec![])).unwrap(),
                None,
            )
        };
        assert!(matches!(decide("127.0.0.1"), Verdict::Accept { .. }));
        assert!(matches!(decide("::ffff:127.0.0.1"), Verdict::Accept { .. }));
        assert!(matches!(decide("fd00::1"), Verdict::Accept { .. }));
        assert_eq!(decide("127.0.0.9"), Verdict::Refuse(Refusal::IpDenied));
        assert_eq!(decide("10.0.0.1"), Verdict::Refuse(Refusal::IpNotAllowed));
        assert!(
            matches!(decide(""), Verdict::Accept { .. }),
            "ipc peers carry no address"
        );
    }

    #[test]
    fn failed_handshakes_are_told_apart_by_their_protocol_error() {
        assert_eq!(handshake_failure(Some(0x1100_0002)), Refusal::NoCurve);
        assert_eq!(
            handshake_failure(Some(0x1100_0001)),
            Refusal::WrongServerKey
        );
        assert_eq!(handshake_failure(Some(0x1000_0001)), Refusal::Handshake);
        assert_eq!(handshake_failure(None), Refusal::Handshake);
    }

    #[test]
    fn a_client_is_told_its_refusal_is_one_and_what_to_check() {
        assert!(client_refusal(Some(400), None).contains("not in its allow directory"));
        assert!(client_refusal(None, Some(0x1100_0002)).contains("mechanisms differ"));
        assert!(client_refusal(None, Some(0x1100_0001)).contains("check server_key"));
        assert!(client_refusal(None, Some(0x1000_0003)).contains("0x10000003"));
    }

    #[test]
    fn malformed_requests_and_other_mechanisms_are_refused() {
        assert_eq!(
            parse_request(&[b"1.0".to_vec()]),
            Err(ZapError::TooFewFrames(1))
        );
        let mut frames = request("NULL", "", vec![]);
        frames[0] = b"2.0".to_vec();
        assert_eq!(parse_request(&frames), Err(ZapError::Version));
        let gate = Gatekeeper::default();
        let plain = request("PLAIN", "", vec![b"u".to_vec(), b"p".to_vec()]);
        assert_eq!(
            gate.decide(&parse_request(&plain).unwrap(), None),
            Verdict::Refuse(Refusal::Mechanism)
        );
        let short_key = request("CURVE", "", vec![vec![1; 31]]);
        assert_eq!(
            gate.decide(&parse_request(&short_key).unwrap(), None),
            Verdict::Refuse(Refusal::Malformed)
        );
        assert!(IpBlock::parse("10.0.0.0/33").is_none());
        assert!(IpBlock::parse("nonsense").is_none());
    }
}
