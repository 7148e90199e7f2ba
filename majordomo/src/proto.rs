//! MDP wire constants and message classification. Everything here is pure: bytes in, typed view out.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

/// One multipart message, one `Vec<u8>` per frame.
pub use tickbox_reliable::Frames;

/// Protocol frame of a 7/MDP 0.1 client message (after the empty delimiter).
pub const MDPC01: &[u8] = b"MDPC01";
/// Protocol frame of a 7/MDP 0.1 worker message (after the empty delimiter).
pub const MDPW01: &[u8] = b"MDPW01";
/// Protocol frame of an 18/MDP 0.2 client message (first frame, no delimiter).
pub const MDPC02: &[u8] = b"MDPC02";
/// Protocol frame of an 18/MDP 0.2 worker message (first frame, no delimiter).
pub const MDPW02: &[u8] = b"MDPW02";

/// 7/MDP 0.1 worker command bytes.
pub mod w01 {
    /// Worker → broker: `[service]`, the first message on a connection.
    pub const READY: u8 = 0x01;
    /// Broker → worker: `[client][""][body…]`.
    pub const REQUEST: u8 = 0x02;
    /// Worker → broker: `[client][""][body…]`, the one and only reply.
    pub const REPLY: u8 = 0x03;
    /// Either way, no frames: proof of life while idle.
    pub const HEARTBEAT: u8 = 0x04;
    /// Either way, no frames: the sender is leaving (or tells the worker to reconnect).
    pub const DISCONNECT: u8 = 0x05;
}

/// 18/MDP 0.2 worker command bytes (shifted against 0.1).
pub mod w02 {
    /// Worker → broker: `[service]`, the first message on a connection.
    pub const READY: u8 = 0x01;
    /// Broker → worker: `[client][""][body…]`.
    pub const REQUEST: u8 = 0x02;
    /// Worker → broker: `[client][""][body…]`, more replies to the same request follow.
    pub const PARTIAL: u8 = 0x03;
    /// Worker → broker: `[client][""][body…]`, the last reply to the request.
    pub const FINAL: u8 = 0x04;
    /// Either way, no frames: proof of life while idle.
    pub const HEARTBEAT: u8 = 0x05;
    /// Either way, no frames: the sender is leaving (or tells the worker to reconnect).
    pub const DISCONNECT: u8 = 0x06;
}

/// 18/MDP 0.2 client command bytes.
pub mod c02 {
    /// Client → broker: `[service][body…]`.
    pub const REQUEST: u8 = 0x01;
    /// Broker → client: `[service][body…]`, more replies to the same request follow.
    pub const PARTIAL: u8 = 0x02;
    /// Broker → client: `[service][body…]`, the last reply to the request.
    pub const FINAL: u8 = 0x03;
}

/// Management services are reserved for the broker (8/MMI).
pub const MMI_PREFIX: &[u8] = b"mmi.";

/// Which Majordomo revision a peer speaks. Told apart on the broker ROUTER by the frame after the identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// 7/MDP 0.1 (stable): leading empty frame.
    V01,
    /// 18/MDP 0.2 (draft): no empty frame, command byte on client messages too.
    V02,
}

/// A worker-side command independent of the revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerCmd {
    /// The worker announces its service; the first message on every connection.
    Ready,
    /// A client request handed to the worker.
    Request,
    /// 0.1 REPLY and 0.2 FINAL.
    Final,
    /// 0.2 only.
    Partial,
    /// Proof of life while idle, sent both ways.
    Heartbeat,
    /// The sender is leaving; from the broker it tells the worker to reconnect.
    Disconnect,
}

impl WorkerCmd {
    /// The command byte on the wire in revision `v` (0.1 has no partials: `Partial` maps to REPLY there).
    pub fn byte(self, v: Version) -> u8 {
        match (v, self) {
            (_, WorkerCmd::Ready) => 0x01,
            (_, WorkerCmd::Request) => 0x02,
            (Version::V01, WorkerCmd::Final) => w01::REPLY,
            (Version::V01, WorkerCmd::Partial) => w01::REPLY, // never sent: 0.1 has no partials
            (Version::V01, WorkerCmd::Heartbeat) => w01::HEARTBEAT,
            (Version::V01, WorkerCmd::Disconnect) => w01::DISCONNECT,
            (Version::V02, WorkerCmd::Partial) => w02::PARTIAL,
            (Version::V02, WorkerCmd::Final) => w02::FINAL,
            (Version::V02, WorkerCmd::Heartbeat) => w02::HEARTBEAT,
            (Version::V02, WorkerCmd::Disconnect) => w02::DISCONNECT,
        }
    }

    /// Parses a command byte of revision `v`; `None` for a byte that revision does not define.
    pub fn from_byte(v: Version, b: u8) -> Option<WorkerCmd> {
        Some(match (v, b) {
            (_, 0x01) => WorkerCmd::Ready,
            (_, 0x02) => WorkerCmd::Request,
            (Version::V01, w01::REPLY) => WorkerCmd::Final,
            (Version::V01, w01::HEARTBEAT) => WorkerCmd::Heartbeat,
            (Version::V01, w01::DISCONNECT) => WorkerCmd::Disconnect,
            (Version::V02, w02::PARTIAL) => WorkerCmd::Partial,
            (Version::V02, w02::FINAL) => WorkerCmd::Final,
            (Version::V02, w02::HEARTBEAT) => WorkerCmd::Heartbeat,
            (Version::V02, w02::DISCONNECT) => WorkerCmd::Disconnect,
            _ => return None,
        })
    }
}

/// Why a message was dropped. Counted by the broker, never fatal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// The message ends before its header, command or service frame.
    #[error("too few frames")]
    TooShort,
    /// The protocol frame is none of `MDPC01`/`MDPW01` (after an empty frame) or `MDPC02`/`MDPW02`.
    #[error("unknown protocol header")]
    UnknownHeader,
    /// The command frame is not a single byte the revision defines.
    #[error("command frame is not one known byte")]
    BadCommand,
    /// READY without exactly one service frame, or HEARTBEAT/DISCONNECT with frames.
    #[error("wrong frame count for the command")]
    FrameCount,
    /// A worker REQUEST/REPLY whose client address is not followed by an empty frame.
    #[error("missing empty delimiter after the client address")]
    NoDelimiter,
    /// A request or reply with no body frame (MDP requires at least one).
    #[error("request or reply without a body frame")]
    NoBody,
}

/// A message as the broker sees it, with the identity frame removed.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    /// A client asks `service` for something.
    ClientRequest {
        /// The revision the client speaks; the reply uses the same.
        version: Version,
        /// Service name; `mmi.*` is answered by the broker itself.
        service: Vec<u8>,
        /// Request body, at least one frame.
        body: Frames,
    },
    /// A worker command whose frame count has been checked.
    Worker {
        /// The revision the worker speaks.
        version: Version,
        /// What the worker says.
        cmd: WorkerCmd,
        /// The frames after the command: `[service]` for READY, `[client][""][body…]` for replies, none for
        /// HEARTBEAT and DISCONNECT.
        rest: Frames,
    },
}

/// Classify `frames` (identity already removed) by the frame after the identity: `""` means 0.1, a `MDPx02`
/// header means 0.2. Frame-count rules of each command are checked here so the broker only sees valid commands.
pub fn classify(mut frames: Frames) -> Result<Inbound, Malformed> {
    if frames.is_empty() {
        return Err(Malformed::TooShort);
    }
    let version = if frames[0].is_empty() {
        frames.remove(0);
        Version::V01
    } else {
        Version::V02
    };
    if frames.is_empty() {
        return Err(Malformed::TooShort);
    }
    let header = &frames[0];
    let is_client = match (version, header.as_slice()) {
        (Version::V01, MDPC01) | (Version::V02, MDPC02) => true,
        (Version::V01, MDPW01) | (Version::V02, MDPW02) => false,
        _ => return Err(Malformed::UnknownHeader),
    };
    if is_client {
        let mut it = frames.into_iter().skip(1);
        if version == Version::V02 {
            match it.next() {
                Some(c) if c.as_slice() == [c02::REQUEST] => {}
                Some(_) => return Err(Malformed::BadCommand),
                None => return Err(Malformed::TooShort),
            }
        }
        let service = it.next().ok_or(Malformed::TooShort)?;
        let body: Frames = it.collect();
        if body.is_empty() {
            return Err(Malformed::NoBody);
        }
        return Ok(Inbound::ClientRequest {
            version,
            service,
            body,
        });
    }
    if frames.len() < 2 || frames[1].len() != 1 {
        return Err(Malformed::BadCommand);
    }
    let cmd = WorkerCmd::from_byte(version, frames[1][0]).ok_or(Malformed::BadCommand)?;
    let rest: Frames = frames.into_iter().skip(2).collect();
    match cmd {
        WorkerCmd::Ready if rest.len() != 1 => return Err(Malformed::FrameCount),
        WorkerCmd::Heartbeat | WorkerCmd::Disconnect if !rest.is_empty() => {
            return Err(Malformed::FrameCount)
        }
        WorkerCmd::Final | WorkerCmd::Partial | WorkerCmd::Request => {
            if rest.len() < 2 {
                return Err(Malformed::FrameCount);
            }
            if !rest[1].is_empty() {
                return Err(Malformed::NoDelimiter);
            }
            if rest.len() < 3 {
                return Err(Malformed::NoBody);
            }
        }
        _ => {}
    }
    Ok(Inbound::Worker { version, cmd, rest })
}

/// Frames of a worker command (without the identity) in `version`'s layout.
pub fn worker_msg(version: Version, cmd: WorkerCmd, rest: Frames) -> Frames {
    let mut out = Vec::with_capacity(rest.len() + 3);
    if version == Version::V01 {
        out.push(Vec::new());
        out.push(MDPW01.to_vec());
    } else {
        out.push(MDPW02.to_vec());
    }
    out.push(vec![cmd.byte(version)]);
    out.extend(rest);
    out
}

/// Frames of a broker → client reply (without the identity). `partial` is only meaningful for 0.2.
pub fn client_reply(version: Version, partial: bool, service: Vec<u8>, body: Frames) -> Frames {
    let mut out = Vec::with_capacity(body.len() + 3);
    match version {
        Version::V01 => {
            out.push(Vec::new());
            out.push(MDPC01.to_vec());
        }
        Version::V02 => {
            out.push(MDPC02.to_vec());
            out.push(vec![if partial { c02::PARTIAL } else { c02::FINAL }]);
        }
    }
    out.push(service);
    out.extend(body);
    out
}

/// The reply "service" of the broker's undelivered notice: `[""]["MDPC01"]["mmi.undelivered"][service][reason]`
/// (0.2: `["MDPC02"][FINAL]["mmi.undelivered"][service][reason]`), where `reason` is `refused` (a queue bound)
/// or `expired` (no worker within `request_expiry`). It tells the client that the request was dropped without
/// ever reaching a worker, so sending it again cannot execute it twice. MDP/0.1 has no error reply, so it goes
/// only to clients that opt in by their routing identity starting with [`NOTICE_PREFIX`](crate::engine::broker::NOTICE_PREFIX) (Titanic's
/// dispatcher); every other client is left to its own timeout as the RFC says. `mmi.*` names are the broker's
/// own (no worker may serve one), so a notice can never be mistaken for a service's reply.
pub const UNDELIVERED: &[u8] = b"mmi.undelivered";

#[cfg(test)]
mod tests {
    use super::*;

    fn f(parts: &[&[u8]]) -> Frames {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    #[test]
    fn classifies_both_versions() {
        assert_eq!(
            classify(f(&[b"", b"MDPC01", b"echo", b"hi"])).unwrap(),
            Inbound::ClientRequest {
                version: Version::V01,
                service: b"echo".to_vec(),
                body: f(&[b"hi"])
            }
        );
        assert_eq!(
            classify(f(&[b"MDPC02", &[1], b"echo", b"hi"])).unwrap(),
            Inbound::ClientRequest {
                version: Version::V02,
                service: b"echo".to_vec(),
                body: f(&[b"hi"])
            }
        );
        assert_eq!(
            classify(f(&[b"MDPW02", &[5]])).unwrap(),
            Inbound::Worker {
                version: Version::V02,
                cmd: WorkerCmd::Heartbeat,
                rest: vec![]
            }
        );
        assert_eq!(
            classify(f(&[b"", b"MDPW01", &[5]])).unwrap(),
            Inbound::Worker {
                version: Version::V01,
                cmd: WorkerCmd::Disconnect,
                rest: vec![]
            }
        );
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(classify(vec![]), Err(Malformed::TooShort));
        assert_eq!(classify(f(&[b""])), Err(Malformed::TooShort));
        assert_eq!(
            classify(f(&[b"", b"MDPC02"])),
            Err(Malformed::UnknownHeader)
        );
        assert_eq!(
            classify(f(&[b"MDPW01", &[1], b"echo"])),
            Err(Malformed::UnknownHeader)
        );
        assert_eq!(
            classify(f(&[b"", b"MDPC01", b"echo"])),
            Err(Malformed::NoBody)
        );
        assert_eq!(
            classify(f(&[b"", b"MDPW01", &[9]])),
            Err(Malformed::BadCommand)
        );
        assert_eq!(
            classify(f(&[b"", b"MDPW01", &[1, 1]])),
            Err(Malformed::BadCommand)
        );
        assert_eq!(
            classify(f(&[b"", b"MDPW01", &[1]])),
            Err(Malformed::FrameCount)
        );
        assert_eq!(
            classify(f(&[b"", b"MDPW01", &[4], b"x"])),
            Err(Malformed::FrameCount)
        );
        assert_eq!(
            classify(f(&[b"", b"MDPW01", &[3], b"c", b"x", b"b"])),
            Err(Malformed::NoDelimiter)
        );
        assert_eq!(
            classify(f(&[b"", b"MDPW01", &[3], b"c", b""])),
            Err(Malformed::NoBody)
        );
        assert_eq!(
            classify(f(&[b"MDPC02", &[2], b"echo", b"x"])),
            Err(Malformed::BadCommand)
        );
    }

    #[test]
    fn builds_exact_layouts() {
        assert_eq!(
            worker_msg(Version::V01, WorkerCmd::Heartbeat, vec![]),
            f(&[b"", b"MDPW01", &[4]])
        );
        assert_eq!(
            worker_msg(Version::V02, WorkerCmd::Disconnect, vec![]),
            f(&[b"MDPW02", &[6]])
        );
        assert_eq!(
            client_reply(Version::V01, false, b"echo".to_vec(), f(&[b"a"])),
            f(&[b"", b"MDPC01", b"echo", b"a"])
        );
        assert_eq!(
            client_reply(Version::V02, true, b"echo".to_vec(), f(&[b"a"])),
            f(&[b"MDPC02", &[2], b"echo", b"a"])
        );
    }
}
