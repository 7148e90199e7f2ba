//! The snapshot channel: a late joiner asks the proxy for the cached values of its topic prefixes and gets them,
//! on a ROUTER socket beside the XPUB, sent to it alone (the Clone pattern's snapshot, for an LVC).
//!
//! **Protocol, version 2** (also in `docs/book/src/lvc-snapshot.md`). The client is a DEALER; every frame below is one
//! ZeroMQ frame (the ROUTER's routing frame is added and removed by libzmq and is not part of the protocol).
//!
//! ```text
//! request  (client -> proxy, one multipart message):
//!   frame 0  "TBSNAP" version 'G' request_id:u64le        16 bytes (version 0x02, or 0x01)
//!   frame 1.. one topic prefix per frame (1 to snapshot_max_prefixes, each at most max_subscription_bytes;
//!             "" is everything; ZeroMQ's raw prefix rule, as a SUB subscription)
//! reply    (proxy -> that client only, zero or more value messages, then the end marker):
//!   value    a tickbox frame marked CACHED, as one frame (exactly what the XPUB's cached burst sends), or a
//!            plain multipart value [topic][value...] as the publisher sent it (always 2 frames or more)
//!   end      "TBSNAP" 0x01 'E' request_id:u64le sent:u64le status:u8    one frame, 25 bytes (version 1)
//!            "TBSNAP" 0x02 'E' request_id:u64le sent:u64le status:u8 missed:u64le dropped:u64le
//!                                                                       one frame, 41 bytes (version 2)
//!            status 0 complete, 1 truncated (snapshot_max_values reached), 2 busy (refused: this client
//!            already has a reply in progress, or snapshot_max_clients are being served), 3 malformed request;
//!            missed: publisher messages the proxy never received (gaps, and what was sent before it first
//!            heard a publisher's session); dropped: values its cache let go (evicted, refused, too large)
//! ```
//!
//! **Versions.** Version 2 adds only what the cache knows it lacks (`missed`, `dropped`): a reply may be complete
//! (every cached value sent) while the cache itself is not the whole stream. A proxy answers each request in the
//! request's version, so a version 1 client keeps getting 25-byte markers (it cannot be told; the proxy counts
//! such replies in `snapshot_lacking` and logs them). A version 2 client asking a version 1 proxy gets `malformed`
//! with request id 0 (that proxy reads only version 1 heads) and asks again in version 1, once.
//!
//! The end marker is one frame that is never a valid tickbox frame (tickbox frames start with their own header,
//! which `TBSNAP` is not), and a cached multipart value always has two frames or more, so a client tells the
//! three apart without ambiguity. `sent` is how many value messages precede the marker in this reply: a client
//! that counted fewer lost some (it cannot on a DEALER/ROUTER connection unless the connection broke). A value is
//! the topic's value when it was sent; values of topics that change during the reply may be older than the
//! live stream, so apply them with [`crate::supersedes`] (cached values only fill in) and subscribe *before*
//! asking, so every update after the snapshot arrives live.
//!
//! Duplicate or overlapping prefixes in one request are served once (`Q.` covers `Q.XNAS`). A request the proxy
//! cannot parse is answered with status 3 (request id 0 when even the first frame was unreadable) and counted.
//!
//! The server side ([`SnapshotServer`]) and the client side ([`SnapshotClient`], [`SnapshotRequester`],
//! [`fetch`]) are here; the server's sockets live in the proxy loop.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cache::{CachedValue, LastValueCache};
pub use super::sequences::KnownLoss;

/// The first six bytes of every control frame of the protocol.
pub const MAGIC: &[u8; 6] = b"TBSNAP";
/// The protocol version this build speaks (it also answers version 1 requests, in version 1).
pub const VERSION: u8 = 2;
/// The first version: its end marker has no `missed` and `dropped`.
pub const VERSION_1: u8 = 1;
const CMD_GET: u8 = b'G';
const CMD_END: u8 = b'E';
/// Length of a request's first frame.
pub const REQUEST_HEAD_LEN: usize = 16;
/// Length of a version 1 end marker.
pub const END_LEN: usize = 25;
/// Length of a version 2 end marker.
pub const END_LEN_V2: usize = 41;

/// How a reply ended, as the end marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndStatus {
    /// Every matching cached value was sent.
    Complete = 0,
    /// `snapshot_max_values` was reached first: the client has only part of the cache.
    Truncated = 1,
    /// Refused without any value: the client already had a reply in progress, or the proxy was serving
    /// `snapshot_max_clients` others.
    Busy = 2,
    /// The request could not be parsed (or broke a bound): no value was sent.
    Malformed = 3,
}

impl EndStatus {
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            0 => EndStatus::Complete,
            1 => EndStatus::Truncated,
            2 => EndStatus::Busy,
            3 => EndStatus::Malformed,
            _ => return None,
        })
    }
}

/// The end marker of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct End {
    /// The request it answers (0 if the request was unreadable).
    pub request_id: u64,
    /// Value messages sent before this marker.
    pub sent: u64,
    /// Why the reply ended.
    pub status: EndStatus,
    /// What the cache knew it lacked when the reply ended: present in a version 2 marker, `None` in version 1
    /// (the proxy could not say).
    pub loss: Option<KnownLoss>,
}

/// An end marker's bytes (25 for version 1, 41 for version 2).
#[derive(Debug, Clone, Copy)]
pub struct EndFrame {
    bytes: [u8; END_LEN_V2],
    len: usize,
}

impl std::ops::Deref for EndFrame {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl End {
    /// The marker as its one frame: version 2 when it carries a [`KnownLoss`], version 1 otherwise.
    pub fn encode(&self) -> EndFrame {
        let mut bytes = [0u8; END_LEN_V2];
        bytes[..6].copy_from_slice(MAGIC);
        bytes[6] = if self.loss.is_some() {
            VERSION
        } else {
            VERSION_1
        };
        bytes[7] = CMD_END;
        bytes[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.sent.to_le_bytes());
        bytes[24] = self.status as u8;
        let len = match self.loss {
            Some(loss) => {
                bytes[25..33].copy_from_slice(&loss.missed.to_le_bytes());
                bytes[33..41].copy_from_slice(&loss.dropped.to_le_bytes());
                END_LEN_V2
            }
            None => END_LEN,
        };
        EndFrame { bytes, len }
    }

    /// Reads an end marker of either version; `None` if `frame` is not one.
    pub fn decode(frame: &[u8]) -> Option<End> {
        let expected = match frame.get(6) {
            Some(&VERSION_1) => END_LEN,
            Some(&VERSION) => END_LEN_V2,
            _ => return None,
        };
        if frame.len() != expected || &frame[..6] != MAGIC || frame[7] != CMD_END {
            return None;
        }
        let u64_at = |at: usize| {
            frame
                .get(at..at + 8)?
                .try_into()
                .ok()
                .map(u64::from_le_bytes)
        };
        let loss = if expected == END_LEN_V2 {
            Some(KnownLoss {
                missed: u64_at(25)?,
                dropped: u64_at(33)?,
            })
        } else {
            None
        };
        Some(End {
            request_id: u64_at(8)?,
            sent: u64_at(16)?,
            status: EndStatus::from_byte(frame[24])?,
            loss,
        })
    }
}

/// A request's frames in the current version: the head, then one frame per prefix.
pub fn encode_request<P: AsRef<[u8]>>(request_id: u64, prefixes: &[P]) -> Vec<Vec<u8>> {
    encode_request_in(VERSION, request_id, prefixes)
}

/// A request's frames in `version` (1 or 2).
pub fn encode_request_in<P: AsRef<[u8]>>(
    version: u8,
    request_id: u64,
    prefixes: &[P],
) -> Vec<Vec<u8>> {
    let mut head = Vec::with_capacity(REQUEST_HEAD_LEN);
    head.extend_from_slice(MAGIC);
    head.push(version);
    head.push(CMD_GET);
    head.extend_from_slice(&request_id.to_le_bytes());
    std::iter::once(head)
        .chain(prefixes.iter().map(|p| p.as_ref().to_vec()))
        .collect()
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The client's id for this request, echoed in the end marker.
    pub request_id: u64,
    /// The protocol version it was asked in: the reply's end marker is in the same version.
    pub version: u8,
    /// The prefixes asked for, duplicates and prefixes covered by another one removed.
    pub prefixes: Vec<Box<[u8]>>,
}

/// Why a request was refused as malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The first frame is not a `GET` head of version 1 or 2.
    #[error("not a snapshot request head (magic, version or command)")]
    BadHead,
    /// No prefix frame followed the head.
    #[error("no prefix")]
    NoPrefixes,
    /// More prefix frames than `snapshot_max_prefixes`.
    #[error("too many prefixes")]
    TooManyPrefixes,
    /// A prefix longer than `max_subscription_bytes`.
    #[error("prefix too long")]
    PrefixTooLong,
}

/// Parses a request part by part, as the proxy reads it off the ROUTER, keeping at most the bounded prefixes
/// whatever the part count (parts past a bound are dropped as they are read).
#[derive(Debug)]
pub struct RequestParser {
    max_prefixes: usize,
    max_prefix_bytes: usize,
    /// Parts of the current message seen so far (0: the next part is a head).
    parts: usize,
    request_id: u64,
    /// The version of the head read (1 until a head is read).
    version: u8,
    prefixes: Vec<Box<[u8]>>,
    error: Option<RequestError>,
}

impl RequestParser {
    /// A parser accepting at most `max_prefixes` prefixes of at most `max_prefix_bytes` each.
    pub fn new(max_prefixes: usize, max_prefix_bytes: usize) -> Self {
        Self {
            max_prefixes,
            max_prefix_bytes,
            parts: 0,
            request_id: 0,
            version: VERSION_1,
            prefixes: Vec::new(),
            error: None,
        }
    }

    /// One part of a request (after the routing frame); `more` is libzmq's "more parts follow". Returns the
    /// outcome once the message's last part is in.
    pub fn part(&mut self, part: &[u8], more: bool) -> Option<Result<Request, RequestError>> {
        if self.error.is_none() {
            if self.parts == 0 {
                self.request_id = 0;
                self.version = VERSION_1;
                match parse_head(part) {
                    Some((id, version)) => {
                        self.request_id = id;
                        self.version = version;
                    }
                    None => self.error = Some(RequestError::BadHead),
                }
            } else if part.len() > self.max_prefix_bytes {
                self.error = Some(RequestError::PrefixTooLong);
            } else if self.prefixes.len() >= self.max_prefixes {
                self.error = Some(RequestError::TooManyPrefixes);
            } else {
                self.prefixes.push(part.into());
            }
            if self.error.is_some() {
                self.prefixes.clear();
            }
        }
        self.parts += 1;
        if more {
            return None;
        }
        self.parts = 0;
        let prefixes = std::mem::take(&mut self.prefixes);
        Some(match self.error.take() {
            Some(err) => Err(err),
            None if prefixes.is_empty() => Err(RequestError::NoPrefixes),
            None => Ok(Request {
                request_id: self.request_id,
                version: self.version,
                prefixes: minimal_prefixes(prefixes),
            }),
        })
    }

    /// The request id of the message being parsed, if its head was readable (for the malformed reply).
    pub fn request_id(&self) -> u64 {
        self.request_id
    }

    /// The version of the message being parsed (1 when its head was unreadable: the malformed reply is then
    /// one every client reads).
    pub fn version(&self) -> u8 {
        self.version
    }

    /// Forgets a message in progress (its sender is gone).
    pub fn reset(&mut self) {
        self.parts = 0;
        self.request_id = 0;
        self.version = VERSION_1;
        self.prefixes.clear();
        self.error = None;
    }
}

fn parse_head(part: &[u8]) -> Option<(u64, u8)> {
    if part.len() != REQUEST_HEAD_LEN
        || &part[..6] != MAGIC
        || !matches!(part[6], VERSION_1 | VERSION)
        || part[7] != CMD_GET
    {
        return None;
    }
    Some((u64::from_le_bytes(part[8..16].try_into().ok()?), part[6]))
}

/// Removes duplicates and prefixes another one covers, keeping request order otherwise: each cached value is
/// then sent at most once per reply.
fn minimal_prefixes(prefixes: Vec<Box<[u8]>>) -> Vec<Box<[u8]>> {
    let covered: Vec<bool> = prefixes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            prefixes
                .iter()
                .enumerate()
                .any(|(j, q)| j != i && p.starts_with(q) && (q.len() < p.len() || j < i))
        })
        .collect();
    prefixes
        .into_iter()
        .zip(covered)
        .filter_map(|(p, covered)| (!covered).then_some(p))
        .collect()
}

/// Bounds of the server side, from `[lvc]`.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// Replies in progress at once (`snapshot_max_clients`); one per client.
    pub max_clients: usize,
    /// Values per reply before it ends `truncated` (`snapshot_max_values`).
    pub max_values: u64,
    /// A reply whose client has not taken anything for this long is abandoned (`snapshot_stall_timeout`).
    pub stall_timeout: Duration,
}

/// Counters of the snapshot channel (merged into [`crate::LvcStats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotCounters {
    /// Well-formed requests received.
    pub requests: u64,
    /// Value messages sent on the snapshot socket.
    pub values: u64,
    /// Replies that ended `complete`.
    pub completed: u64,
    /// Replies that ended `truncated`.
    pub truncated: u64,
    /// Requests refused as `busy`.
    pub refused: u64,
    /// Replies abandoned: the client stopped reading for `snapshot_stall_timeout`, or disconnected.
    pub abandoned: u64,
    /// Malformed requests (and parts that were not a request at all).
    pub malformed: u64,
    /// Replies in progress now.
    pub active: u64,
    /// Replies that ended (complete or truncated) while the cache knew it lacked values.
    pub lacking: u64,
}

/// What one send on the snapshot socket did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    /// Queued for the client.
    Sent,
    /// The client's queue is full (it is not reading): try again later.
    Full,
    /// The client is gone (ROUTER_MANDATORY: unknown peer).
    Gone,
}

/// One message of a reply, for the socket loop to send to `peer`.
#[derive(Debug, Clone, Copy)]
pub enum ReplyItem<'a> {
    /// A cached value (a tickbox frame is sent marked CACHED by the sender).
    Value(CachedValue<'a>),
    /// The end marker.
    End(End),
}

struct Session {
    peer: Box<[u8]>,
    request_id: u64,
    /// The request's protocol version, which its end marker keeps.
    version: u8,
    prefixes: Vec<Box<[u8]>>,
    /// Index of the prefix being served.
    prefix: usize,
    /// The last key sent under that prefix: the reply resumes after it.
    after: Option<Vec<u8>>,
    sent: u64,
    /// When the client's queue was first found full without a send since.
    stalled_since: Option<Instant>,
}

/// The replies in progress, served a slice at a time so no reply delays live forwarding by more than one slice.
/// Sans-IO: the proxy loop passes a send function.
pub struct SnapshotServer {
    limits: ServerLimits,
    sessions: VecDeque<Session>,
    counters: SnapshotCounters,
}

impl SnapshotServer {
    /// No reply in progress.
    pub fn new(limits: ServerLimits) -> Self {
        Self {
            limits,
            sessions: VecDeque::new(),
            counters: SnapshotCounters::default(),
        }
    }

    /// The counters, with `active` filled in.
    pub fn counters(&self) -> SnapshotCounters {
        SnapshotCounters {
            active: self.sessions.len() as u64,
            ..self.counters
        }
    }

    /// Whether some reply still has something to send.
    pub fn is_busy(&self) -> bool {
        !self.sessions.is_empty()
    }

    /// A malformed request was read (counted, logged at the 1st, 2nd, 4th... occurrence). Returns the end marker
    /// to answer it with.
    pub fn malformed(&mut self, request_id: u64, version: u8, err: RequestError) -> End {
        self.counters.malformed += 1;
        if self.counters.malformed.is_power_of_two() {
            tracing::warn!(
                total = self.counters.malformed,
                "malformed snapshot request: {err}"
            );
        }
        End {
            request_id,
            sent: 0,
            status: EndStatus::Malformed,
            loss: (version >= VERSION).then(KnownLoss::default),
        }
    }

    /// A parsed request from `peer`: starts a reply, or returns the `busy` end marker to send at once.
    pub fn admit(&mut self, peer: &[u8], request: Request) -> Option<End> {
        self.counters.requests += 1;
        let busy = self.sessions.len() >= self.limits.max_clients
            || self.sessions.iter().any(|s| &*s.peer == peer);
        if busy {
            self.counters.refused += 1;
            if self.counters.refused.is_power_of_two() {
                tracing::warn!(
                    total = self.counters.refused,
                    active = self.sessions.len(),
                    "snapshot request refused (busy): one reply per client, at most snapshot_max_clients at once"
                );
            }
            return Some(End {
                request_id: request.request_id,
                sent: 0,
                status: EndStatus::Busy,
                loss: (request.version >= VERSION).then(KnownLoss::default),
            });
        }
        self.sessions.push_back(Session {
            peer: peer.into(),
            request_id: request.request_id,
            version: request.version,
            prefixes: request.prefixes,
            prefix: 0,
            after: None,
            sent: 0,
            stalled_since: None,
        });
        None
    }

    /// Sends at most `budget` messages over the replies in progress, taking them in turn (the first reply
    /// served this time goes last next time). `send(peer, item)` sends one message without waiting. `loss` is
    /// what the cache knows it lacks now; a reply that ends carries it (version 2) or is counted (version 1).
    /// Returns how many messages went out.
    pub fn serve(
        &mut self,
        cache: &LastValueCache,
        loss: KnownLoss,
        now: Instant,
        budget: usize,
        mut send: impl FnMut(&[u8], ReplyItem<'_>) -> SendOutcome,
    ) -> usize {
        let mut spent = 0;
        let turns = self.sessions.len();
        for _ in 0..turns {
            let Some(mut session) = self.sessions.pop_front() else {
                break;
            };
            if spent >= budget {
                self.sessions.push_front(session);
                break;
            }
            match self.serve_one(&mut session, cache, loss, now, budget - spent, &mut send) {
                (n, Verdict::Continue) => {
                    spent += n;
                    self.sessions.push_back(session);
                }
                (n, Verdict::Done) => spent += n,
                (n, Verdict::Abandon(why)) => {
                    spent += n;
                    self.counters.abandoned += 1;
                    if self.counters.abandoned.is_power_of_two() {
                        tracing::warn!(
                            total = self.counters.abandoned,
                            request_id = session.request_id,
                            sent = session.sent,
                            "snapshot reply abandoned: {why}"
                        );
                    }
                }
            }
        }
        spent
    }

    fn serve_one(
        &mut self,
        s: &mut Session,
        cache: &LastValueCache,
        loss: KnownLoss,
        now: Instant,
        budget: usize,
        send: &mut impl FnMut(&[u8], ReplyItem<'_>) -> SendOutcome,
    ) -> (usize, Verdict) {
        let mut spent = 0;
        let stall = self.limits.stall_timeout;
        // A send that did not go out: the client is gone, or its queue is full (abandoned once it has been full
        // for `stall` without a send going through).
        let blocked = |s: &mut Session, outcome: SendOutcome, spent: usize| match outcome {
            SendOutcome::Gone => (spent, Verdict::Abandon("the client disconnected")),
            _ => {
                let since = *s.stalled_since.get_or_insert(now);
                if now.saturating_duration_since(since) >= stall {
                    (
                        spent,
                        Verdict::Abandon("the client stopped reading (snapshot_stall_timeout)"),
                    )
                } else {
                    (spent, Verdict::Continue)
                }
            }
        };
        while spent < budget {
            let Some(prefix) = s.prefixes.get(s.prefix) else {
                let end = End {
                    request_id: s.request_id,
                    sent: s.sent,
                    status: EndStatus::Complete,
                    loss: (s.version >= VERSION).then_some(loss),
                };
                return match send(&s.peer, ReplyItem::End(end)) {
                    SendOutcome::Sent => {
                        self.counters.completed += 1;
                        self.note_lacking(s, loss);
                        (spent + 1, Verdict::Done)
                    }
                    other => blocked(s, other, spent),
                };
            };
            let next = cache
                .keyed_values_matching(prefix, s.after.as_deref())
                .next();
            let Some((key, value)) = next else {
                s.prefix += 1;
                s.after = None;
                continue;
            };
            if s.sent >= self.limits.max_values {
                let end = End {
                    request_id: s.request_id,
                    sent: s.sent,
                    status: EndStatus::Truncated,
                    loss: (s.version >= VERSION).then_some(loss),
                };
                return match send(&s.peer, ReplyItem::End(end)) {
                    SendOutcome::Sent => {
                        self.counters.truncated += 1;
                        self.note_lacking(s, loss);
                        tracing::warn!(
                            sent = s.sent,
                            "snapshot reply truncated at snapshot_max_values"
                        );
                        (spent + 1, Verdict::Done)
                    }
                    other => blocked(s, other, spent),
                };
            }
            match send(&s.peer, ReplyItem::Value(value)) {
                SendOutcome::Sent => {
                    spent += 1;
                    s.sent += 1;
                    s.stalled_since = None;
                    self.counters.values += 1;
                    let after = s.after.get_or_insert_with(Vec::new);
                    after.clear();
                    after.extend_from_slice(key);
                }
                other => {
                    return blocked(s, other, spent);
                }
            }
        }
        (spent, Verdict::Continue)
    }
}

impl SnapshotServer {
    /// Counts a reply that ended while the cache knew it lacked values, and logs it (a version 1 client is not
    /// told) at the 1st, 2nd, 4th... such reply.
    fn note_lacking(&mut self, s: &Session, loss: KnownLoss) {
        if loss.is_none() {
            return;
        }
        self.counters.lacking += 1;
        if self.counters.lacking.is_power_of_two() {
            tracing::warn!(
                total = self.counters.lacking,
                missed = loss.missed,
                dropped = loss.dropped,
                version = s.version,
                "snapshot served while the cache lacks values (publisher messages it never received, values \
                 it let go); a version 1 client is not told"
            );
        }
    }
}

enum Verdict {
    Continue,
    Done,
    Abandon(&'static str),
}

// ---------------------------------------------------------------------------------------------------------------
// Client side.

/// How a client's snapshot ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FetchStatus {
    /// Every matching value arrived (the end marker said complete and its count matches what arrived), and the
    /// proxy knew of nothing its cache lacked (or, a version 1 proxy, could not say).
    Complete,
    /// Every cached value arrived, but the proxy said its cache lacks values (publisher messages it never
    /// received, values it let go; [`SnapshotOutcome::loss`]): some topics' last values may be missing or old.
    CacheIncomplete,
    /// The proxy cut the reply short (`snapshot_max_values`).
    Truncated,
    /// The proxy refused the request (busy).
    Busy,
    /// The proxy could not parse the request.
    Malformed,
    /// The end marker's count differs from the values received.
    CountMismatch,
    /// No end marker within the timeout.
    TimedOut,
    /// The request could not be sent (the endpoint was refused by libzmq).
    Failed,
}

/// The outcome of one snapshot request, client side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SnapshotOutcome {
    /// How it ended.
    pub status: FetchStatus,
    /// Value messages received.
    pub received: u64,
    /// Value messages the proxy says it sent (from the end marker; `None` without one).
    pub sent: Option<u64>,
    /// Time from the request to the end marker (or to the timeout).
    pub elapsed_ns: u64,
    /// What the proxy said its cache lacked (a version 2 end marker); `None` without a marker or from a version
    /// 1 proxy.
    pub loss: Option<KnownLoss>,
}

impl SnapshotOutcome {
    /// Whether the client has every value it asked for.
    pub fn is_complete(&self) -> bool {
        self.status == FetchStatus::Complete
    }
}

/// What one reply message was, to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientEvent {
    /// A value: hand its frames on.
    Value,
    /// The end marker of this request: the reply is over.
    End(End),
    /// An end marker of another request (an earlier, abandoned one): ignore the message.
    Stale,
    /// The proxy speaks only version 1 (it answered our version 2 head `malformed`, request id 0): send the
    /// request again, now in version 1 ([`SnapshotClient::request`] does).
    AskAgainInVersion1,
}

/// The client's side of the protocol, without sockets: builds the request and sorts the reply's messages.
#[derive(Debug, Clone)]
pub struct SnapshotClient {
    request_id: u64,
    received: u64,
    /// The version the request is (or is to be) sent in: [`VERSION`], until a version 1 proxy says otherwise.
    version: u8,
}

impl SnapshotClient {
    /// A client whose request carries `request_id` (any value; distinct per request on one connection).
    pub fn new(request_id: u64) -> Self {
        Self {
            request_id,
            received: 0,
            version: VERSION,
        }
    }

    /// The request's frames, in the version this client asks in now.
    pub fn request<P: AsRef<[u8]>>(&self, prefixes: &[P]) -> Vec<Vec<u8>> {
        encode_request_in(self.version, self.request_id, prefixes)
    }

    /// Sorts one reply message, given its first frame and whether it has more frames.
    pub fn on_message(&mut self, first: &[u8], multipart: bool) -> ClientEvent {
        if !multipart {
            if let Some(end) = End::decode(first) {
                // A version 1 proxy reads our version 2 head as malformed (request id 0, since it could not read
                // the id): ask again in its version, once.
                if end.status == EndStatus::Malformed
                    && end.request_id == 0
                    && end.loss.is_none()
                    && self.version != VERSION_1
                    && self.received == 0
                {
                    self.version = VERSION_1;
                    return ClientEvent::AskAgainInVersion1;
                }
                // Request id 0: the proxy could not read ours (malformed head); still the answer to us.
                return if end.request_id == self.request_id || end.request_id == 0 {
                    ClientEvent::End(end)
                } else {
                    ClientEvent::Stale
                };
            }
        }
        self.received += 1;
        ClientEvent::Value
    }

    /// Values received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The outcome for an end marker, or for no marker at all (`None`: timed out).
    pub fn outcome(&self, end: Option<End>, elapsed: Duration) -> SnapshotOutcome {
        let status = match end {
            None => FetchStatus::TimedOut,
            Some(end) => match end.status {
                EndStatus::Complete if end.sent != self.received => FetchStatus::CountMismatch,
                EndStatus::Complete if end.loss.is_some_and(|l| !l.is_none()) => {
                    FetchStatus::CacheIncomplete
                }
                EndStatus::Complete => FetchStatus::Complete,
                EndStatus::Truncated => FetchStatus::Truncated,
                EndStatus::Busy => FetchStatus::Busy,
                EndStatus::Malformed => FetchStatus::Malformed,
            },
        };
        SnapshotOutcome {
            status,
            received: self.received,
            sent: end.map(|e| e.sent),
            elapsed_ns: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            loss: end.and_then(|e| e.loss),
        }
    }
}

/// Why a snapshot could not be requested.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A libzmq call failed.
    #[error("snapshot {what}: {source}")]
    Zmq {
        /// The step that failed.
        what: &'static str,
        /// libzmq's error.
        #[source]
        source: zmq::Error,
    },
    /// `[security]` could not be applied to the request socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
}

fn zerr(what: &'static str) -> impl FnOnce(zmq::Error) -> SnapshotError {
    move |source| SnapshotError::Zmq { what, source }
}

/// A DEALER that has sent one snapshot request and reads its reply without blocking, for a loop that also
/// reads live traffic (the subscriber's shard). [`fetch`] is the blocking form.
pub struct SnapshotRequester {
    socket: zmq::Socket,
    client: SnapshotClient,
    /// The prefixes asked for, kept to ask again in version 1 of an old proxy.
    prefixes: Vec<Vec<u8>>,
    started: Instant,
    deadline: Instant,
    outcome: Option<SnapshotOutcome>,
}

impl SnapshotRequester {
    /// Connects to `endpoint` and sends the request for `prefixes` (empty: everything); the reply must end within
    /// `timeout`.
    pub fn start<P: AsRef<[u8]>>(
        ctx: &zmq::Context,
        security: &tickbox_auth::Security,
        endpoint: &str,
        prefixes: &[P],
        timeout: Duration,
    ) -> Result<Self, SnapshotError> {
        let socket = ctx
            .socket(zmq::DEALER)
            .map_err(zerr("creating the DEALER"))?;
        socket.set_linger(0).map_err(zerr("linger"))?;
        // The reply is as large as the cache asked for; a bounded queue would make the proxy abandon a reader
        // that is merely busy, so it is only as bounded as the proxy's own send queue for us.
        socket.set_rcvhwm(0).map_err(zerr("rcvhwm"))?;
        security.client(&socket, "lvc.snapshot")?;
        socket.connect(endpoint).map_err(zerr("connect"))?;
        let started = Instant::now();
        let request_id = request_id(started);
        let client = SnapshotClient::new(request_id);
        let prefixes: Vec<Vec<u8>> = if prefixes.is_empty() {
            vec![Vec::new()]
        } else {
            prefixes.iter().map(|p| p.as_ref().to_vec()).collect()
        };
        // A DEALER queues the request until the connection is up; never blocks here (fresh pipe, one message).
        socket
            .send_multipart(client.request(&prefixes), zmq::DONTWAIT)
            .map_err(zerr("sending the request"))?;
        Ok(Self {
            socket,
            client,
            prefixes,
            started,
            deadline: started + timeout,
            outcome: None,
        })
    }

    /// The socket, to poll for input.
    pub fn socket(&self) -> &zmq::Socket {
        &self.socket
    }

    /// The outcome, once the reply ended or timed out.
    pub fn outcome(&self) -> Option<SnapshotOutcome> {
        self.outcome
    }

    /// Reads at most `max` reply messages without waiting, handing each value's frames to `on_value`; returns
    /// the outcome once the reply is over (end marker, or past the timeout).
    pub fn poll_reply(
        &mut self,
        max: usize,
        mut on_value: impl FnMut(Vec<zmq::Message>),
    ) -> Option<SnapshotOutcome> {
        if self.outcome.is_some() {
            return self.outcome;
        }
        for _ in 0..max {
            let mut first = zmq::Message::new();
            match self.socket.recv(&mut first, zmq::DONTWAIT) {
                Ok(()) => {}
                Err(_) => break,
            }
            let mut parts = vec![first];
            while parts.last().is_some_and(|p| p.get_more()) {
                let mut part = zmq::Message::new();
                // The rest of a message is already here (libzmq delivers whole messages).
                if self.socket.recv(&mut part, 0).is_err() {
                    break;
                }
                parts.push(part);
            }
            match self.client.on_message(&parts[0], parts.len() > 1) {
                ClientEvent::Value => on_value(parts),
                ClientEvent::Stale => {}
                ClientEvent::AskAgainInVersion1 => {
                    tracing::debug!(
                        "the LVC speaks snapshot protocol version 1: asking again in it"
                    );
                    // One message on a pipe that just delivered: queued at once. A failure shows as a timeout.
                    let _ = self
                        .socket
                        .send_multipart(self.client.request(&self.prefixes), zmq::DONTWAIT);
                }
                ClientEvent::End(end) => {
                    let outcome = self.client.outcome(Some(end), self.started.elapsed());
                    self.outcome = Some(outcome);
                    return self.outcome;
                }
            }
        }
        if Instant::now() >= self.deadline {
            self.outcome = Some(self.client.outcome(None, self.started.elapsed()));
        }
        self.outcome
    }
}

/// A request id that differs between requests of one process and between processes (time and pid mixed).
fn request_id(now: Instant) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(now.elapsed().as_nanos());
    // 0 means "unreadable request" in an end marker.
    h.finish().max(1)
}

/// Requests the cached values of `prefixes` (empty: everything) from the snapshot endpoint and hands each value's
/// frames to `on_value`, until the end marker or `timeout`. A timeout is an outcome (`TimedOut`), not an error.
pub fn fetch<P: AsRef<[u8]>>(
    ctx: &zmq::Context,
    security: &tickbox_auth::Security,
    endpoint: &str,
    prefixes: &[P],
    timeout: Duration,
    mut on_value: impl FnMut(Vec<zmq::Message>),
) -> Result<SnapshotOutcome, SnapshotError> {
    let mut requester = SnapshotRequester::start(ctx, security, endpoint, prefixes, timeout)?;
    loop {
        if let Some(outcome) = requester.poll_reply(1024, &mut on_value) {
            return Ok(outcome);
        }
        let left = requester.deadline.saturating_duration_since(Instant::now());
        let wait = left.min(Duration::from_millis(100)).as_millis().max(1) as i64;
        match requester.socket.poll(zmq::POLLIN, wait) {
            Ok(_) | Err(zmq::Error::EINTR) => {}
            Err(err) => return Err(zerr("poll")(err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Overflow;

    fn frames_to_parser(
        p: &mut RequestParser,
        frames: &[Vec<u8>],
    ) -> Result<Request, RequestError> {
        let last = frames.len() - 1;
        for (i, f) in frames.iter().enumerate() {
            if let Some(r) = p.part(f, i < last) {
                assert_eq!(i, last);
                return r;
            }
        }
        unreachable!("the last part returns")
    }

    #[test]
    fn request_round_trip_and_prefix_reduction() {
        let mut p = RequestParser::new(8, 16);
        let frames = encode_request(42, &["Q.X", "Q.", "T.A", "Q.", "T.AB"]);
        let r = frames_to_parser(&mut p, &frames).unwrap();
        assert_eq!(r.request_id, 42);
        let got: Vec<&[u8]> = r.prefixes.iter().map(|p| &p[..]).collect();
        assert_eq!(got, vec![&b"Q."[..], b"T.A"]);
        // The parser is ready for the next message.
        let r = frames_to_parser(&mut p, &encode_request(7, &[""])).unwrap();
        assert_eq!((r.request_id, r.prefixes.len()), (7, 1));
    }

    #[test]
    fn malformed_requests_are_refused_and_the_parser_recovers() {
        let mut p = RequestParser::new(2, 4);
        assert_eq!(
            frames_to_parser(&mut p, &[b"hello".to_vec(), b"Q.".to_vec()]),
            Err(RequestError::BadHead)
        );
        assert_eq!(
            frames_to_parser(&mut p, &encode_request::<&str>(1, &[])),
            Err(RequestError::NoPrefixes)
        );
        assert_eq!(
            frames_to_parser(&mut p, &encode_request(1, &["a", "b", "c"])),
            Err(RequestError::TooManyPrefixes)
        );
        assert_eq!(
            frames_to_parser(&mut p, &encode_request(1, &["toolong"])),
            Err(RequestError::PrefixTooLong)
        );
        let mut head = encode_request(1, &["a"]);
        head[0][6] = 3; // a future version
        assert_eq!(frames_to_parser(&mut p, &head), Err(RequestError::BadHead));
        assert_eq!(
            p.version(),
            VERSION_1,
            "an unreadable head is answered in version 1"
        );
        let r = frames_to_parser(&mut p, &encode_request(9, &["a"])).unwrap();
        assert_eq!(r.version, VERSION);
        let r = frames_to_parser(&mut p, &encode_request_in(VERSION_1, 9, &["a"])).unwrap();
        assert_eq!(r.version, VERSION_1, "version 1 heads are still read");
    }

    #[test]
    fn end_marker_round_trips_and_is_never_a_value() {
        let end = End {
            request_id: 5,
            sent: 1234,
            status: EndStatus::Truncated,
            loss: None,
        };
        let frame = end.encode();
        assert_eq!(frame.len(), END_LEN);
        assert_eq!(End::decode(&frame), Some(end));
        assert!(tickbox_wire::MessageRef::decode(&frame).is_err());
        let mut bad = frame.to_vec();
        bad[24] = 9;
        assert_eq!(End::decode(&bad), None);
        let v2 = End {
            loss: Some(KnownLoss {
                missed: 7,
                dropped: 1,
            }),
            ..end
        };
        let frame2 = v2.encode();
        assert_eq!(frame2.len(), END_LEN_V2);
        assert_eq!(End::decode(&frame2), Some(v2));
        assert_eq!(
            End::decode(&frame2[..END_LEN]),
            None,
            "a cut version 2 marker"
        );
        assert!(tickbox_wire::MessageRef::decode(&frame2).is_err());
        let mut client = SnapshotClient::new(5);
        assert_eq!(client.on_message(b"Q.A", true), ClientEvent::Value);
        // The same bytes as the second frame of a multipart value are a value, not a marker.
        assert_eq!(client.on_message(&frame, true), ClientEvent::Value);
        assert_eq!(client.on_message(&frame, false), ClientEvent::End(end));
        let other = End {
            request_id: 6,
            ..end
        }
        .encode();
        assert_eq!(client.on_message(&other, false), ClientEvent::Stale);
        let outcome = client.outcome(
            Some(End {
                status: EndStatus::Complete,
                sent: 2,
                ..end
            }),
            Duration::ZERO,
        );
        assert_eq!(outcome.status, FetchStatus::Complete);
        let outcome = client.outcome(
            Some(End {
                status: EndStatus::Complete,
                sent: 3,
                ..end
            }),
            Duration::ZERO,
        );
        assert_eq!(outcome.status, FetchStatus::CountMismatch);
        assert_eq!(
            client.outcome(None, Duration::ZERO).status,
            FetchStatus::TimedOut
        );
        let lacking = client.outcome(
            Some(End {
                status: EndStatus::Complete,
                sent: 2,
                ..v2
            }),
            Duration::ZERO,
        );
        assert_eq!(lacking.status, FetchStatus::CacheIncomplete);
        assert!(!lacking.is_complete());
        assert_eq!(lacking.loss, v2.loss);
        let whole = client.outcome(
            Some(End {
                status: EndStatus::Complete,
                sent: 2,
                loss: Some(KnownLoss::default()),
                ..end
            }),
            Duration::ZERO,
        );
        assert_eq!(whole.status, FetchStatus::Complete);
    }

    #[test]
    fn a_version_2_client_asks_a_version_1_proxy_again_in_version_1() {
        let mut client = SnapshotClient::new(5);
        assert_eq!(client.request(&[""])[0][6], VERSION);
        // What a version 1 proxy answers to a head it cannot read.
        let old = End {
            request_id: 0,
            sent: 0,
            status: EndStatus::Malformed,
            loss: None,
        }
        .encode();
        assert_eq!(
            client.on_message(&old, false),
            ClientEvent::AskAgainInVersion1
        );
        assert_eq!(client.request(&[""])[0][6], VERSION_1);
        // Once only: the same answer to the version 1 request is the outcome.
        assert!(matches!(
            client.on_message(&old, false),
            ClientEvent::End(_)
        ));
    }

    fn cache_with(topics: &[&str]) -> LastValueCache {
        let mut cache = LastValueCache::new(1000, 1 << 20, 4096, Overflow::EvictLru);
        for t in topics {
            cache.store(t.as_bytes(), t.as_bytes());
        }
        cache
    }

    fn limits() -> ServerLimits {
        ServerLimits {
            max_clients: 2,
            max_values: 100,
            stall_timeout: Duration::from_millis(100),
        }
    }

    #[test]
    fn serves_in_slices_resuming_after_the_last_key_then_ends() {
        let mut cache = cache_with(&["Q.A", "Q.B", "Q.C", "T.A"]);
        let mut server = SnapshotServer::new(limits());
        let request = Request {
            request_id: 3,
            version: VERSION,
            prefixes: vec![b"Q."[..].into()],
        };
        assert_eq!(server.admit(b"peer", request.clone()), None);
        let mut got = Vec::new();
        let now = Instant::now();
        let mut take = |_: &[u8], item: ReplyItem<'_>| {
            got.push(match item {
                ReplyItem::Value(CachedValue::Frame(f)) => String::from_utf8_lossy(f).into_owned(),
                ReplyItem::Value(CachedValue::Multipart(_)) => "multipart".into(),
                ReplyItem::End(end) => format!("end {} {:?} {:?}", end.sent, end.status, end.loss),
            });
            SendOutcome::Sent
        };
        let loss = KnownLoss {
            missed: 2000,
            dropped: 0,
        };
        assert_eq!(server.serve(&cache, loss, now, 2, &mut take), 2);
        // A key inserted before the resume point is not sent; one after it is.
        cache.store(b"Q.0", b"Q.0");
        cache.store(b"Q.D", b"Q.D");
        assert_eq!(server.serve(&cache, loss, now, 10, &mut take), 3);
        assert_eq!(
            got,
            vec![
                "Q.A",
                "Q.B",
                "Q.C",
                "Q.D",
                "end 4 Complete Some(KnownLoss { missed: 2000, dropped: 0 })"
            ]
        );
        assert!(!server.is_busy());
        assert_eq!(server.counters().completed, 1);
        assert_eq!(server.counters().values, 4);
        assert_eq!(server.counters().lacking, 1);
        // A version 1 client gets a version 1 marker: it cannot be told, and the reply is still counted.
        let v1 = Request {
            version: VERSION_1,
            ..request
        };
        assert_eq!(server.admit(b"peer", v1), None);
        let mut end = None;
        server.serve(&cache, loss, now, 10, |_, item| {
            if let ReplyItem::End(e) = item {
                end = Some(e);
            }
            SendOutcome::Sent
        });
        assert_eq!(end.map(|e| (e.sent, e.loss)), Some((5, None)));
        assert_eq!(server.counters().lacking, 2);
    }

    #[test]
    fn busy_truncated_stalled_and_gone() {
        let cache = cache_with(&["Q.A", "Q.B", "Q.C"]);
        let mut server = SnapshotServer::new(ServerLimits {
            max_values: 2,
            ..limits()
        });
        let req = |id| Request {
            request_id: id,
            version: VERSION,
            prefixes: vec![b""[..].into()],
        };
        assert_eq!(server.admit(b"a", req(1)), None);
        // One reply per client.
        assert_eq!(
            server.admit(b"a", req(2)).map(|e| e.status),
            Some(EndStatus::Busy)
        );
        assert_eq!(server.admit(b"b", req(3)), None);
        // At most max_clients at once.
        assert_eq!(
            server.admit(b"c", req(4)).map(|e| e.status),
            Some(EndStatus::Busy)
        );
        let t0 = Instant::now();
        let ends = std::cell::RefCell::new(Vec::new());
        // a reads, b is full.
        let mut send = |peer: &[u8], item: ReplyItem<'_>| {
            if peer == b"b" {
                return SendOutcome::Full;
            }
            if let ReplyItem::End(end) = item {
                ends.borrow_mut().push(end);
            }
            SendOutcome::Sent
        };
        server.serve(&cache, KnownLoss::default(), t0, 100, &mut send);
        let ends = ends.borrow().clone();
        assert_eq!(ends.len(), 1);
        assert_eq!((ends[0].status, ends[0].sent), (EndStatus::Truncated, 2));
        assert!(server.is_busy(), "b's reply waits for room");
        server.serve(
            &cache,
            KnownLoss::default(),
            t0 + Duration::from_millis(200),
            100,
            &mut send,
        );
        assert!(!server.is_busy(), "b stalled past the timeout: abandoned");
        let c = server.counters();
        assert_eq!((c.refused, c.abandoned, c.truncated), (2, 1, 1));
        assert_eq!(server.admit(b"d", req(5)), None);
        server.serve(&cache, KnownLoss::default(), t0, 100, |_, _| {
            SendOutcome::Gone
        });
        assert_eq!(server.counters().abandoned, 2);
    }
}
