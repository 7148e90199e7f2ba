//! The Titanic (9/TSP) core, sans-IO: the journal event codec, the in-memory index and every TSP rule (status
//! codes, idempotence). `crate::titanic` couples it to the journal and to Majordomo sockets.

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
            _ => Err("unknown event kind"),
        }
    }
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
                    },
                );
            }
            Event::Reply { uuid, body } => {
                if let Some(e) = self.entries.get_mut(&uuid) {
                    if e.reply.is_none() {
                        self.pending.remove(&e.order);
                        e.reply = Some(body);
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

    /// `titanic.request` body → the event to journal (with a fresh UUID), or the error status to answer.
    pub fn request_event(&self, mut body: Frames) -> Result<Event, &'static [u8]> {
        if body.len() < 2 {
            return Err(UNKNOWN);
        }
        let rest = body.split_off(1);
        let service = body.pop().unwrap_or_default();
        let uuid = uuid::Uuid::new_v4()
            .simple()
            .to_string()
            .to_ascii_uppercase();
        Ok(Event::Request {
            uuid,
            service,
            body: rest,
        })
    }

    /// `titanic.reply` answer: `[200][reply…]`, `[300]` while pending, `[400]` for unknown or closed UUIDs.
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

    /// Requests still waiting for a reply (cheap; [`TitanicState::pending`] clones them).
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Whether `uuid` (canonical form) is known and still waiting for its reply.
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
            s.request_event(f(&[b"echo"])),
            Err(UNKNOWN),
            "needs service and body"
        );
        let ev = s.request_event(f(&[b"echo", b"hi", b"there"])).unwrap();
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
}
