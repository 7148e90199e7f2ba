//! The Titanic (9/TSP) core, sans-IO: the journal event codec, the in-memory index and every TSP rule (status
//! codes, idempotence) and the dispatch policy ([`TitanicState::plan`]). `crate::titanic` couples it to the
//! journal and to Majordomo sockets; its module docs state the delivery guarantee.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::{BTreeMap, HashMap};

use crate::proto::Frames;

/// TSP status: done.
pub const OK: &[u8] = b"200";
/// TSP status: not answered yet.
pub const PENDING: &[u8] = b"300";
/// TSP status: no such request.
pub const UNKNOWN: &[u8] = b"400";
/// TSP status: malformed or failed.
pub const ERROR: &[u8] = b"500";

// ---- events -------------------------------------------------------------------------------------------------

/// One journal record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A client's request was accepted (kind 1); it stays pending until a [`Event::Reply`].
    Request {
        /// The TSP UUID handed back to the client (32 uppercase hex digits).
        uuid: String,
        /// The Majordomo service the request is for.
        service: Vec<u8>,
        /// The request body, forwarded to the service unchanged.
        body: Frames,
    },
    /// The service answered (kind 2); a later reply for the same UUID is ignored.
    Reply {
        /// The request this answers.
        uuid: String,
        /// The service's reply body, handed to `titanic.reply` callers.
        body: Frames,
    },
    /// The client closed the request (kind 3); its request and reply are forgotten.
    Close {
        /// The request to forget.
        uuid: String,
    },
    /// Attempt `attempt` (1-based) is about to be sent to the service (kind 4). Journaled *before* the send,
    /// so a restart knows the service may have started executing it.
    Dispatch {
        /// The request sent.
        uuid: String,
        /// Which attempt this is (1 for the first send).
        attempt: u32,
        /// Wall-clock time of the send, nanoseconds since the Unix epoch (survives a restart, unlike `Instant`).
        at_ns: u64,
    },
    /// Titanic gave up on the request (kind 5): `titanic.reply` answers `[400][<reason>]` from then on (the
    /// outcome is final as far as Titanic knows; a reply that turns up after all still replaces it).
    Failed {
        /// The request given up.
        uuid: String,
        /// Why, in words (the second frame of the `400` answer).
        reason: String,
    },
    /// The broker reported that attempt `attempt` never reached a worker (kind 6: its `mmi.undelivered`
    /// notice, the request refused by a queue bound or expired in its queue). The attempt cannot have run, so
    /// the request is sent again under any [`Redispatch`] policy, and the attempt does not count towards
    /// `max_attempts`.
    Undelivered {
        /// The request.
        uuid: String,
        /// The attempt that was not delivered.
        attempt: u32,
    },
}

/// What the dispatcher does with a request that was sent and got no reply within `job_timeout`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Redispatch {
    /// Never send a request twice: at most once. A request whose attempt got no reply within `job_timeout`
    /// (service crashed, reply lost while Titanic was down, broker dropped it) is marked failed. The safe
    /// default for services that are not idempotent.
    #[default]
    Never,
    /// Send it again (same request id, next attempt number) after each `job_timeout` without a reply, up to
    /// `max_attempts` sends in all, then mark it failed. Exactly-once only if the service dedupes by
    /// request id (see `MdpWorker::dedupe`); otherwise at-least-once.
    AfterTimeout,
}

/// The dispatch rules [`TitanicState::plan`] applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchPolicy {
    /// Behaviour after an attempt timed out.
    pub redispatch: Redispatch,
    /// How long one attempt may take before it counts as lost, in nanoseconds.
    pub job_timeout_ns: u64,
    /// Sends per request in all, under [`Redispatch::AfterTimeout`] (at least 1 is used).
    pub max_attempts: u32,
}

/// One thing the dispatcher should do for a pending request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Journal [`Event::Dispatch`] for `attempt`, then send the request to `service`.
    Send {
        /// The request.
        uuid: String,
        /// Target service.
        service: Vec<u8>,
        /// Body to send.
        body: Frames,
        /// The attempt number to journal and to put in the request id.
        attempt: u32,
    },
    /// The request was sent by an earlier Titanic process and may still be executing: listen again under
    /// the same request id until `deadline_ns`, without sending anything.
    Resume {
        /// The request.
        uuid: String,
        /// Target service (to check the reply's header).
        service: Vec<u8>,
        /// The attempt that was sent.
        attempt: u32,
        /// When that attempt times out (wall clock, ns since the epoch).
        deadline_ns: u64,
    },
    /// Journal [`Event::Failed`] with `reason`.
    Fail {
        /// The request.
        uuid: String,
        /// Status text for `titanic.reply`.
        reason: String,
    },
}

fn put_frames(out: &mut Vec<u8>, frames: &[Vec<u8>]) {
    out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
    for f in frames {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
}

fn get_u32(b: &mut &[u8]) -> Option<u32> {
    let (head, rest) = b.split_first_chunk::<4>()?;
    *b = rest;
    Some(u32::from_le_bytes(*head))
}

fn get_frames(mut b: &[u8]) -> Option<Frames> {
    let n = get_u32(&mut b)? as usize;
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let len = get_u32(&mut b)? as usize;
        if b.len() < len {
            return None;
        }
        let (f, rest) = b.split_at(len);
        out.push(f.to_vec());
        b = rest;
    }
    b.is_empty().then_some(out)
}

impl Event {
    /// The journal record: `kind u8`, the 32-byte UUID, then the frames (see the module docs of
    /// `crate::titanic`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Event::Request {
                uuid,
                service,
                body,
            } => {
                out.push(1);
                out.extend_from_slice(uuid.as_bytes());
                let mut frames = Vec::with_capacity(body.len() + 1);
                frames.push(service.clone());
                frames.extend(body.iter().cloned());
                put_frames(&mut out, &frames);
            }
            Event::Reply { uuid, body } => {
                out.push(2);
                out.extend_from_slice(uuid.as_bytes());
                put_frames(&mut out, body);
            }
            Event::Close { uuid } => {
                out.push(3);
                out.extend_from_slice(uuid.as_bytes());
            }
            Event::Dispatch {
                uuid,
                attempt,
                at_ns,
            } => {
                out.push(4);
                out.extend_from_slice(uuid.as_bytes());
                out.extend_from_slice(&attempt.to_le_bytes());
                out.extend_from_slice(&at_ns.to_le_bytes());
            }
            Event::Failed { uuid, reason } => {
                out.push(5);
                out.extend_from_slice(uuid.as_bytes());
                out.extend_from_slice(reason.as_bytes());
            }
            Event::Undelivered { uuid, attempt } => {
                out.push(6);
                out.extend_from_slice(uuid.as_bytes());
                out.extend_from_slice(&attempt.to_le_bytes());
            }
        }
        out
    }

    /// Parses a journal record written by [`Event::encode`]; the error says what is wrong with it.
    pub fn decode(b: &[u8]) -> Result<Event, &'static str> {
        if b.len() < 33 {
            return Err("too short");
        }
        let uuid = std::str::from_utf8(&b[1..33]).map_err(|_| "uuid not ASCII")?;
        let uuid = normalize_uuid(uuid.as_bytes()).ok_or("bad uuid")?;
        let rest = &b[33..];
        match b[0] {
            1 => {
                let mut frames = get_frames(rest).ok_or("bad frames")?;
                if frames.len() < 2 {
                    return Err("request without service or body");
                }
                let body = frames.split_off(1);
                Ok(Event::Request {
                    uuid,
                    service: frames.pop().unwrap_or_default(),
                    body,
                })
            }
            2 => Ok(Event::Reply {
                uuid,
                body: get_frames(rest).ok_or("bad frames")?,
            }),
            3 if rest.is_empty() => Ok(Event::Close { uuid }),
            4 if rest.len() == 12 => Ok(Event::Dispatch {
                uuid,
                attempt: u32::from_le_bytes(rest[..4].try_into().map_err(|_| "bad attempt")?),
                at_ns: u64::from_le_bytes(rest[4..].try_into().map_err(|_| "bad time")?),
            }),
            5 => Ok(Event::Failed {
                uuid,
                reason: String::from_utf8(rest.to_vec()).map_err(|_| "reason not UTF-8")?,
            }),
            6 if rest.len() == 4 => Ok(Event::Undelivered {
                uuid,
                attempt: u32::from_le_bytes(rest.try_into().map_err(|_| "bad attempt")?),
            }),
            _ => Err("unknown event kind"),
        }
    }
}

/// Prefix of the client identity Titanic's dispatcher uses: `TSP:` + UUID + `:` + attempt (decimal).
pub const REQUEST_ID_PREFIX: &[u8] = b"TSP:";

/// The routing identity of the dispatcher socket for `attempt` of request `uuid`. Services see it as the
/// client address frame of the REQUEST; [`request_id_of`] recovers the UUID, the same on every attempt.
pub fn dispatch_identity(uuid: &str, attempt: u32) -> Vec<u8> {
    format!("TSP:{uuid}:{attempt}").into_bytes()
}

/// The Titanic request id (the 32-character UUID) carried in a client address frame made by
/// [`dispatch_identity`], or `None` for any other client.
pub fn request_id_of(client: &[u8]) -> Option<&[u8]> {
    let rest = client.strip_prefix(REQUEST_ID_PREFIX)?;
    let (uuid, attempt) = (rest.get(..32)?, rest.get(32..)?);
    let digits = attempt.strip_prefix(b":")?;
    (uuid.iter().all(u8::is_ascii_hexdigit)
        && !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit))
    .then_some(uuid)
}

/// A TSP UUID in canonical form (32 uppercase hex digits), or `None` if `raw` is not one (either case accepted).
pub fn normalize_uuid(raw: &[u8]) -> Option<String> {
    (raw.len() == 32 && raw.iter().all(u8::is_ascii_hexdigit))
        .then(|| String::from_utf8_lossy(raw).to_ascii_uppercase())
}

// ---- sans-IO state ------------------------------------------------------------------------------------------

struct Entry {
    service: Vec<u8>,
    body: Frames,
    reply: Option<Frames>,
    order: u64,
    /// Attempts journaled so far (0: never sent).
    attempts: u32,
    /// Wall-clock time of the last attempt.
    dispatched_at_ns: u64,
    /// Of `attempts`, those the broker reported undelivered ([`Event::Undelivered`]).
    undelivered: u32,
    /// The last attempt was reported undelivered: send the next one.
    last_undelivered: bool,
    failed: Option<String>,
}

/// The Titanic index and rules, without I/O.
#[derive(Default)]
pub struct TitanicState {
    entries: HashMap<String, Entry>,
    /// Requests without a reply, in arrival order.
    pending: BTreeMap<u64, String>,
    next_order: u64,
}

impl TitanicState {
    /// Apply a journal event (at start-up replay, and after each successful append).
    pub fn apply(&mut self, ev: Event) {
        match ev {
            Event::Request {
                uuid,
                service,
                body,
            } => {
                let order = self.next_order;
                self.next_order += 1;
                self.pending.insert(order, uuid.clone());
                self.entries.insert(
                    uuid,
                    Entry {
                        service,
                        body,
                        reply: None,
                        order,
                        attempts: 0,
                        dispatched_at_ns: 0,
                        undelivered: 0,
                        last_undelivered: false,
                        failed: None,
                    },
                );
            }
            Event::Reply { uuid, body } => {
                if let Some(e) = self.entries.get_mut(&uuid) {
                    // A late reply still wins over a failure: the client gets the real outcome.
                    if e.reply.is_none() {
                        self.pending.remove(&e.order);
                        e.reply = Some(body);
                        e.failed = None;
                    }
                }
            }
            Event::Dispatch {
                uuid,
                attempt,
                at_ns,
            } => {
                if let Some(e) = self.entries.get_mut(&uuid) {
                    e.attempts = e.attempts.max(attempt);
                    e.dispatched_at_ns = at_ns;
                    e.last_undelivered = false;
                }
            }
            Event::Undelivered { uuid, attempt } => {
                if let Some(e) = self.entries.get_mut(&uuid) {
                    // Only the latest attempt matters; a notice for an older one changes nothing.
                    if attempt == e.attempts && !e.last_undelivered {
                        e.last_undelivered = true;
                        e.undelivered += 1;
                    }
                }
            }
            Event::Failed { uuid, reason } => {
                if let Some(e) = self.entries.get_mut(&uuid) {
                    if e.reply.is_none() && e.failed.is_none() {
                        self.pending.remove(&e.order);
                        e.failed = Some(reason);
                    }
                }
            }
            Event::Close { uuid } => {
                if let Some(e) = self.entries.remove(&uuid) {
                    self.pending.remove(&e.order);
                }
            }
        }
    }

    /// `titanic.request` body → the event to journal under `id` (the bytes of a UUID), or the error status to
    /// answer. The caller makes the id (a fresh random UUID in the service), so the engine stays a function of its
    /// inputs.
    pub fn request_event(&self, mut body: Frames, id: [u8; 16]) -> Result<Event, &'static [u8]> {
        if body.len() < 2 {
            return Err(UNKNOWN);
        }
        let rest = body.split_off(1);
        let service = body.pop().unwrap_or_default();
        let uuid = uuid::Uuid::from_bytes(id)
            .simple()
            .to_string()
            .to_ascii_uppercase();
        Ok(Event::Request {
            uuid,
            service,
            body: rest,
        })
    }

    /// `titanic.reply` answer: `[200][reply…]`, `[300]` while pending, `[400]` for unknown or closed UUIDs, and
    /// `[400][reason]` for a request Titanic gave up on (outcome unknown: sent, no reply within `job_timeout`, not
    /// sent again). The status frame is always exactly the three digits, so a client comparing it byte for byte
    /// (the Guide's `ticlient`) stops polling instead of retrying a `500` for ever.
    pub fn reply_status(&self, body: &[Vec<u8>]) -> Frames {
        let entry = match body {
            [uuid] => normalize_uuid(uuid).and_then(|u| self.entries.get(&u)),
            _ => None,
        };
        match entry {
            Some(Entry { reply: Some(r), .. }) => {
                let mut out = Vec::with_capacity(r.len() + 1);
                out.push(OK.to_vec());
                out.extend(r.iter().cloned());
                out
            }
            Some(Entry {
                failed: Some(why), ..
            }) => vec![UNKNOWN.to_vec(), why.clone().into_bytes()],
            Some(_) => vec![PENDING.to_vec()],
            None => vec![UNKNOWN.to_vec()],
        }
    }

    /// `titanic.close`: the event to journal, if the UUID is known (the answer is 200 either way).
    pub fn close_event(&self, body: &[Vec<u8>]) -> Option<Event> {
        let [uuid] = body else { return None };
        let uuid = normalize_uuid(uuid)?;
        self.entries
            .contains_key(&uuid)
            .then_some(Event::Close { uuid })
    }

    /// Pending requests in arrival order: `(uuid, service, body)`.
    pub fn pending(&self) -> Vec<(String, Vec<u8>, Frames)> {
        self.pending
            .values()
            .filter_map(|u| {
                self.entries
                    .get(u)
                    .map(|e| (u.clone(), e.service.clone(), e.body.clone()))
            })
            .collect()
    }

    /// What the dispatcher should do now (`now_ns`: wall clock) for each pending request, in arrival order.
    /// `in_flight` says which requests this process is already waiting for; they get no step, so a slow
    /// service is never sent a second copy while its attempt may still be running.
    pub fn plan(
        &self,
        now_ns: u64,
        policy: &DispatchPolicy,
        in_flight: impl Fn(&str) -> bool,
    ) -> Vec<Step> {
        let max_attempts = policy.max_attempts.max(1);
        self.pending
            .values()
            .filter(|u| !in_flight(u))
            .filter_map(|u| {
                let e = self.entries.get(u)?;
                if e.attempts == 0 || e.last_undelivered {
                    // Never sent, or the broker said the last attempt reached no worker: safe under any policy.
                    return Some(Step::Send {
                        uuid: u.clone(),
                        service: e.service.clone(),
                        body: e.body.clone(),
                        attempt: e.attempts + 1,
                    });
                }
                let deadline_ns = e.dispatched_at_ns.saturating_add(policy.job_timeout_ns);
                // A wall clock stepped back by more than a job_timeout would otherwise stall the request for
                // as long; treat it as timed out instead.
                let clock_went_back =
                    now_ns.saturating_add(policy.job_timeout_ns) < e.dispatched_at_ns;
                if now_ns < deadline_ns && !clock_went_back {
                    return Some(Step::Resume {
                        uuid: u.clone(),
                        service: e.service.clone(),
                        attempt: e.attempts,
                        deadline_ns,
                    });
                }
                let delivered = e.attempts - e.undelivered;
                Some(match policy.redispatch {
                    Redispatch::AfterTimeout if delivered < max_attempts => Step::Send {
                        uuid: u.clone(),
                        service: e.service.clone(),
                        body: e.body.clone(),
                        attempt: e.attempts + 1,
                    },
                    Redispatch::AfterTimeout => Step::Fail {
                        uuid: u.clone(),
                        reason: format!(
                            "outcome unknown: no reply after {delivered} attempt(s) within job_timeout; \
                             not sent again"
                        ),
                    },
                    Redispatch::Never => Step::Fail {
                        uuid: u.clone(),
                        reason: "outcome unknown: sent once, no reply within job_timeout; not sent again \
                                 (redispatch = never, at most once)"
                            .to_string(),
                    },
                })
            })
            .collect()
    }

    /// Pending requests that were already sent at least once (after a restart: possibly executing).
    pub fn dispatched_len(&self) -> usize {
        self.pending
            .values()
            .filter(|u| self.entries.get(*u).is_some_and(|e| e.attempts > 0))
            .count()
    }

    /// Whether `uuid` was given up ([`Event::Failed`]) and has no reply.
    pub fn is_failed(&self, uuid: &str) -> bool {
        self.entries.get(uuid).is_some_and(|e| e.failed.is_some())
    }

    /// Requests still waiting for a reply (cheap; [`TitanicState::pending`] clones them).
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Whether `uuid` (canonical form) is known and still without a reply (a failed request still accepts a
    /// late reply).
    pub fn is_pending(&self, uuid: &str) -> bool {
        self.entries.get(uuid).is_some_and(|e| e.reply.is_none())
    }

    /// Requests known (pending or answered, not yet closed).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no request is known.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(parts: &[&[u8]]) -> Frames {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    #[test]
    fn event_codec_round_trips_and_rejects_garbage() {
        let u = "0123456789ABCDEF0123456789ABCDEF".to_string();
        for ev in [
            Event::Request {
                uuid: u.clone(),
                service: b"echo".to_vec(),
                body: f(&[b"a", b"", b"c"]),
            },
            Event::Reply {
                uuid: u.clone(),
                body: f(&[b"r"]),
            },
            Event::Close { uuid: u.clone() },
            Event::Dispatch {
                uuid: u.clone(),
                attempt: 3,
                at_ns: 1_700_000_000_123_456_789,
            },
            Event::Failed {
                uuid: u.clone(),
                reason: "failed: why".into(),
            },
            Event::Undelivered {
                uuid: u.clone(),
                attempt: 7,
            },
        ] {
            assert_eq!(Event::decode(&ev.encode()).unwrap(), ev);
        }
        let good = Event::Reply {
            uuid: u.clone(),
            body: f(&[b"r"]),
        }
        .encode();
        for cut in 0..good.len() {
            assert!(Event::decode(&good[..cut]).is_err(), "truncated at {cut}");
        }
        assert!(Event::decode(&[9; 40]).is_err());
        let mut bad = good.clone();
        bad[1] = b'Z';
        assert!(Event::decode(&bad).is_err());
    }

    #[test]
    fn tsp_rules() {
        let mut s = TitanicState::default();
        assert_eq!(
            s.request_event(f(&[b"echo"]), 1_u128.to_be_bytes()),
            Err(UNKNOWN),
            "needs service and body"
        );
        let ev = s
            .request_event(f(&[b"echo", b"hi", b"there"]), 2_u128.to_be_bytes())
            .unwrap();
        let Event::Request { uuid, .. } = &ev else {
            panic!()
        };
        let uuid = uuid.clone();
        assert_eq!(uuid.len(), 32);
        assert!(uuid
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)));
        s.apply(ev);
        let u = uuid.as_bytes().to_vec();
        assert_eq!(s.reply_status(std::slice::from_ref(&u)), f(&[b"300"]));
        assert_eq!(
            s.reply_status(&[u.to_ascii_lowercase()]),
            f(&[b"300"]),
            "either case"
        );
        assert_eq!(
            s.pending(),
            vec![(uuid.clone(), b"echo".to_vec(), f(&[b"hi", b"there"]))]
        );
        s.apply(Event::Reply {
            uuid: uuid.clone(),
            body: f(&[b"multi", b"part"]),
        });
        assert_eq!(
            s.reply_status(std::slice::from_ref(&u)),
            f(&[b"200", b"multi", b"part"])
        );
        assert_eq!(
            s.reply_status(std::slice::from_ref(&u)),
            f(&[b"200", b"multi", b"part"]),
            "idempotent"
        );
        assert!(s.pending().is_empty());
        // A second reply for the same request never replaces the first.
        s.apply(Event::Reply {
            uuid: uuid.clone(),
            body: f(&[b"other"]),
        });
        assert_eq!(
            s.reply_status(std::slice::from_ref(&u)),
            f(&[b"200", b"multi", b"part"])
        );
        assert_eq!(
            s.reply_status(&f(&[b"00000000000000000000000000000000"])),
            f(&[b"400"])
        );
        assert_eq!(s.reply_status(&f(&[b"not-a-uuid"])), f(&[b"400"]));
        assert_eq!(
            s.reply_status(&[u.clone(), b"extra".to_vec()]),
            f(&[b"400"])
        );
        let close = s.close_event(std::slice::from_ref(&u)).unwrap();
        s.apply(close);
        assert_eq!(
            s.reply_status(std::slice::from_ref(&u)),
            f(&[b"400"]),
            "after close"
        );
        assert!(
            s.close_event(&[u]).is_none(),
            "closing again needs no event (and answers 200)"
        );
    }

    #[test]
    fn plan_never_sends_twice_under_never_and_bounds_attempts_under_after_timeout() {
        const S: u64 = 1_000_000_000;
        let mut s = TitanicState::default();
        let ev = s
            .request_event(f(&[b"svc", b"job"]), 3_u128.to_be_bytes())
            .unwrap();
        let Event::Request { uuid, .. } = &ev else {
            panic!()
        };
        let uuid = uuid.clone();
        s.apply(ev);
        let never = DispatchPolicy {
            redispatch: Redispatch::Never,
            job_timeout_ns: 60 * S,
            max_attempts: 3,
        };
        let send1 = Step::Send {
            uuid: uuid.clone(),
            service: b"svc".to_vec(),
            body: f(&[b"job"]),
            attempt: 1,
        };
        assert_eq!(s.plan(100 * S, &never, |_| false), vec![send1.clone()]);
        s.apply(Event::Dispatch {
            uuid: uuid.clone(),
            attempt: 1,
            at_ns: 100 * S,
        });
        assert_eq!(s.dispatched_len(), 1);
        assert!(
            s.plan(105 * S, &never, |u| u == uuid).is_empty(),
            "in flight here: nothing to do however slow"
        );
        assert_eq!(
            s.plan(105 * S, &never, |_| false),
            vec![Step::Resume {
                uuid: uuid.clone(),
                service: b"svc".to_vec(),
                attempt: 1,
                deadline_ns: 160 * S
            }],
            "after a restart within job_timeout: listen again, send nothing"
        );
        let steps = s.plan(160 * S, &never, |_| false);
        assert!(matches!(&steps[..], [Step::Fail { .. }]), "{steps:?}");
        let again = DispatchPolicy {
            redispatch: Redispatch::AfterTimeout,
            max_attempts: 2,
            ..never
        };
        assert_eq!(
            s.plan(160 * S, &again, |_| false),
            vec![Step::Send {
                uuid: uuid.clone(),
                service: b"svc".to_vec(),
                body: f(&[b"job"]),
                attempt: 2,
            }]
        );
        s.apply(Event::Dispatch {
            uuid: uuid.clone(),
            attempt: 2,
            at_ns: 160 * S,
        });
        let steps = s.plan(220 * S, &again, |_| false);
        let [Step::Fail { reason, .. }] = &steps[..] else {
            panic!("{steps:?}")
        };
        s.apply(Event::Failed {
            uuid: uuid.clone(),
            reason: reason.clone(),
        });
        let u = uuid.as_bytes().to_vec();
        let status = s.reply_status(std::slice::from_ref(&u));
        assert_eq!(status.len(), 2);
        assert_eq!(
            status[0], b"400",
            "final: exactly the digits, so a client stops polling"
        );
        assert!(status[1].starts_with(b"outcome unknown: no reply after 2 attempt(s)"));
        assert!(s.plan(300 * S, &again, |_| false).is_empty());
        assert!(s.is_failed(&uuid));
        // A reply that turns up after all is the real outcome and replaces the failure.
        s.apply(Event::Reply {
            uuid: uuid.clone(),
            body: f(&[b"late"]),
        });
        assert_eq!(s.reply_status(&[u]), f(&[b"200", b"late"]));
    }

    #[test]
    fn undelivered_attempts_are_sent_again_under_never_and_do_not_count() {
        const S: u64 = 1_000_000_000;
        let mut s = TitanicState::default();
        let ev = s
            .request_event(f(&[b"svc", b"job"]), 4_u128.to_be_bytes())
            .unwrap();
        let Event::Request { uuid, .. } = &ev else {
            panic!()
        };
        let uuid = uuid.clone();
        s.apply(ev);
        let never = DispatchPolicy {
            redispatch: Redispatch::Never,
            job_timeout_ns: 60 * S,
            max_attempts: 1,
        };
        let send = |attempt| Step::Send {
            uuid: uuid.clone(),
            service: b"svc".to_vec(),
            body: f(&[b"job"]),
            attempt,
        };
        s.apply(Event::Dispatch {
            uuid: uuid.clone(),
            attempt: 1,
            at_ns: 100 * S,
        });
        // The broker refused or expired attempt 1: it reached no worker, so it goes again at once, at most once
        // notwithstanding, and under a fresh attempt number (a fresh routing identity).
        s.apply(Event::Undelivered {
            uuid: uuid.clone(),
            attempt: 1,
        });
        assert_eq!(s.plan(101 * S, &never, |_| false), vec![send(2)]);
        s.apply(Event::Dispatch {
            uuid: uuid.clone(),
            attempt: 2,
            at_ns: 101 * S,
        });
        // A stale notice for attempt 1 changes nothing about attempt 2, which may be running.
        s.apply(Event::Undelivered {
            uuid: uuid.clone(),
            attempt: 1,
        });
        assert!(matches!(
            &s.plan(102 * S, &never, |_| false)[..],
            [Step::Resume { attempt: 2, .. }]
        ));
        // Attempt 2 reached a worker and no reply came: outcome unknown, final, at most once.
        let steps = s.plan(161 * S, &never, |_| false);
        let [Step::Fail { reason, .. }] = &steps[..] else {
            panic!("{steps:?}")
        };
        s.apply(Event::Failed {
            uuid: uuid.clone(),
            reason: reason.clone(),
        });
        let status = s.reply_status(&[uuid.as_bytes().to_vec()]);
        assert_eq!(status[0], b"400");
        assert!(status[1].starts_with(b"outcome unknown"), "{status:?}");
        // Under after_timeout with max_attempts 1 the undelivered attempt did not use up the one allowed.
        let mut t = TitanicState::default();
        let ev = t
            .request_event(f(&[b"svc", b"job"]), 5_u128.to_be_bytes())
            .unwrap();
        let Event::Request { uuid: v, .. } = &ev else {
            panic!()
        };
        let v = v.clone();
        t.apply(ev);
        for (a, at) in [(1, 100), (2, 101)] {
            t.apply(Event::Dispatch {
                uuid: v.clone(),
                attempt: a,
                at_ns: at * S,
            });
            if a == 1 {
                t.apply(Event::Undelivered {
                    uuid: v.clone(),
                    attempt: 1,
                });
            }
        }
        let once = DispatchPolicy {
            redispatch: Redispatch::AfterTimeout,
            ..never
        };
        let steps = t.plan(162 * S, &once, |_| false);
        let [Step::Fail { reason, .. }] = &steps[..] else {
            panic!("{steps:?}")
        };
        assert!(reason.contains("after 1 attempt(s)"), "{reason}");
    }
}
