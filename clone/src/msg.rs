//! CHP (12/CHP) messages: the five-frame `[key][seq][uuid][props][value]` layout and the two-frame ICANHAZ.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::fmt;

/// ICANHAZ command frame (note the `?`).
pub const ICANHAZ: &[u8] = b"ICANHAZ?";
/// Key of the message that ends a snapshot.
pub const KTHXBAI: &str = "KTHXBAI";
/// Key of the server heartbeat.
pub const HUGZ: &str = "HUGZ";
/// Key of a refusal notice: the server publishes `["NOPE"][seq][uuid][reason=CODE\n][CODE]` on its update
/// publisher when it refuses a KVSET, where `uuid` is the refused update's UUID, `seq` the server's *current*
/// sequence (not incremented, exactly like HUGZ) and `CODE` one of
/// [`DropReason::code`](crate::engine::server::DropReason::code). A Guide client either does not subscribe to it
/// (subtree clients) or ignores it because its sequence is not above what it already has, so the notice is
/// invisible to plain CHP clients; the tickbox client subscribes to it and fails the matching `set` with
/// [`CloneError::Refused`](crate::CloneError::Refused). The key is reserved: a KVSET of `NOPE` is refused.
pub const NOPE: &str = "NOPE";

/// A frame or field that could not be decoded. Every one of these is counted and logged by the caller.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum MsgError {
    /// A key-value message must have exactly five frames; the count seen.
    #[error("expected 5 frames, got {0}")]
    FrameCount(usize),
    /// The sequence frame is not 8 bytes; its length.
    #[error("sequence frame must be 8 bytes, got {0}")]
    SeqLength(usize),
    /// The UUID frame is neither empty nor 16 bytes; its length.
    #[error("uuid frame must be 16 bytes or empty, got {0}")]
    UuidLength(usize),
    /// The key frame is not valid UTF-8.
    #[error("key is not UTF-8")]
    KeyNotUtf8,
    /// Not `["ICANHAZ?"][subtree]` (wrong command or frame count).
    #[error("malformed ICANHAZ request")]
    BadIcanhaz,
    /// A subtree that is neither empty nor `/…/`.
    #[error("subtree {0:?} must be empty or start and end with '/'")]
    BadSubtree(String),
}

/// One CHP key-value message.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct KvMsg {
    /// Frame 0: the key (`/`-separated path by convention), or `HUGZ` / `KTHXBAI` for control messages.
    pub key: String,
    /// Frame 1, 8-byte big-endian. The reference code treats it as int64; we never produce values above i64::MAX.
    pub seq: u64,
    /// Frame 2: the update's UUID, set by the client so resends and failover copies are recognised; empty on the
    /// wire when `None`.
    pub uuid: Option<[u8; 16]>,
    /// Raw `name=value\n` lines.
    pub props: Vec<u8>,
    /// Empty means "delete".
    pub value: Vec<u8>,
}

impl fmt::Debug for KvMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvMsg")
            .field("key", &self.key)
            .field("seq", &self.seq)
            .field("uuid", &self.uuid.map(uuid::Uuid::from_bytes))
            .field("props", &String::from_utf8_lossy(&self.props))
            .field(
                "value",
                &String::from_utf8_lossy(&self.value[..self.value.len().min(64)]),
            )
            .finish()
    }
}

impl KvMsg {
    /// A message without UUID or properties.
    pub fn new(key: impl Into<String>, seq: u64, value: impl Into<Vec<u8>>) -> Self {
        KvMsg {
            key: key.into(),
            seq,
            uuid: None,
            props: Vec::new(),
            value: value.into(),
        }
    }

    /// Decodes the five frames (any identity frame must already be stripped).
    pub fn decode<F: AsRef<[u8]>>(frames: &[F]) -> Result<Self, MsgError> {
        if frames.len() != 5 {
            return Err(MsgError::FrameCount(frames.len()));
        }
        let key = std::str::from_utf8(frames[0].as_ref())
            .map_err(|_| MsgError::KeyNotUtf8)?
            .to_owned();
        let seq_frame = frames[1].as_ref();
        let seq: [u8; 8] = seq_frame
            .try_into()
            .map_err(|_| MsgError::SeqLength(seq_frame.len()))?;
        let uuid_frame = frames[2].as_ref();
        let uuid = match uuid_frame.len() {
            0 => None,
            16 => {
                let mut u = [0u8; 16];
                u.copy_from_slice(uuid_frame);
                Some(u)
            }
            n => return Err(MsgError::UuidLength(n)),
        };
        Ok(KvMsg {
            key,
            seq: u64::from_be_bytes(seq),
            uuid,
            props: frames[3].as_ref().to_vec(),
            value: frames[4].as_ref().to_vec(),
        })
    }

    /// The five frames as owned buffers (tests, raw sockets).
    pub fn to_frames(&self) -> Vec<Vec<u8>> {
        vec![
            self.key.as_bytes().to_vec(),
            self.seq.to_be_bytes().to_vec(),
            self.uuid.map(|u| u.to_vec()).unwrap_or_default(),
            self.props.clone(),
            self.value.clone(),
        ]
    }

    /// An empty value deletes the key.
    pub fn is_delete(&self) -> bool {
        self.value.is_empty()
    }

    /// Value of property `name`, if present and UTF-8.
    pub fn prop(&self, name: &str) -> Option<&str> {
        prop_lookup(&self.props, name)
    }

    /// Replaces (or adds) property `name`.
    pub fn set_prop(&mut self, name: &str, value: &str) {
        let mut out = Vec::with_capacity(self.props.len() + name.len() + value.len() + 2);
        for line in self.props.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let is_name = line.len() > name.len()
                && line.starts_with(name.as_bytes())
                && line[name.len()] == b'=';
            if !is_name {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
        out.push(b'\n');
        self.props = out;
    }

    /// The `ttl` property as a duration, when it is a positive number of seconds.
    pub fn ttl(&self) -> Option<std::time::Duration> {
        let secs: f64 = self.prop("ttl")?.trim().parse().ok()?;
        if secs.is_finite() && secs > 0.0 && secs < 1e9 {
            Some(std::time::Duration::from_secs_f64(secs))
        } else {
            None
        }
    }
}

fn prop_lookup<'a>(props: &'a [u8], name: &str) -> Option<&'a str> {
    props.split(|b| *b == b'\n').find_map(|line| {
        let rest = line.strip_prefix(name.as_bytes())?;
        let value = rest.strip_prefix(b"=")?;
        std::str::from_utf8(value).ok()
    })
}

/// Validates a subtree: empty, or `/…/`.
pub fn check_subtree(subtree: &str) -> Result<(), MsgError> {
    if subtree.is_empty()
        || (subtree.len() >= 2 && subtree.starts_with('/') && subtree.ends_with('/'))
    {
        Ok(())
    } else {
        Err(MsgError::BadSubtree(subtree.to_owned()))
    }
}

/// Parses `["ICANHAZ?"][subtree]` (identity already stripped). Returns the subtree.
pub fn decode_icanhaz<F: AsRef<[u8]>>(frames: &[F]) -> Result<String, MsgError> {
    match frames {
        [cmd, subtree] if cmd.as_ref() == ICANHAZ => {
            let subtree =
                std::str::from_utf8(subtree.as_ref()).map_err(|_| MsgError::BadIcanhaz)?;
            check_subtree(subtree)?;
            Ok(subtree.to_owned())
        }
        _ => Err(MsgError::BadIcanhaz),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_wire_layout() {
        let mut m = KvMsg::new("/a/b", 0x0102030405060708, b"v".to_vec());
        m.uuid = Some([7; 16]);
        m.set_prop("ttl", "26");
        let frames = m.to_frames();
        assert_eq!(frames[1], vec![1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(frames[3], b"ttl=26\n");
        assert_eq!(KvMsg::decode(&frames).unwrap(), m);
        assert_eq!(m.ttl(), Some(std::time::Duration::from_secs(26)));
    }

    #[test]
    fn malformed_frames_are_typed_errors() {
        let ok = KvMsg::new("k", 1, b"v".to_vec()).to_frames();
        assert_eq!(KvMsg::decode(&ok[..4]), Err(MsgError::FrameCount(4)));
        let mut bad = ok.clone();
        bad[1] = vec![0; 4];
        assert_eq!(KvMsg::decode(&bad), Err(MsgError::SeqLength(4)));
        let mut bad = ok.clone();
        bad[2] = vec![0; 3];
        assert_eq!(KvMsg::decode(&bad), Err(MsgError::UuidLength(3)));
        let mut bad = ok;
        bad[0] = vec![0xff, 0xfe];
        assert_eq!(KvMsg::decode(&bad), Err(MsgError::KeyNotUtf8));
    }

    #[test]
    fn props_replace_and_ignore_prefix_collisions() {
        let mut m = KvMsg::new("k", 0, b"v".to_vec());
        m.props = b"ttlx=1\nttl=5\n".to_vec();
        assert_eq!(m.prop("ttl"), Some("5"));
        m.set_prop("ttl", "9");
        assert_eq!(m.props, b"ttlx=1\nttl=9\n");
        m.props = b"ttl=-3\n".to_vec();
        assert_eq!(m.ttl(), None);
        m.props = b"ttl=abc\n".to_vec();
        assert_eq!(m.ttl(), None);
    }

    #[test]
    fn icanhaz_parsing() {
        assert_eq!(decode_icanhaz(&[&b"ICANHAZ?"[..], b""]).unwrap(), "");
        assert_eq!(decode_icanhaz(&[&b"ICANHAZ?"[..], b"/x/"]).unwrap(), "/x/");
        assert!(decode_icanhaz(&[&b"ICANHAZ"[..], b""]).is_err());
        assert!(decode_icanhaz(&[&b"ICANHAZ?"[..]]).is_err());
        assert!(decode_icanhaz(&[&b"ICANHAZ?"[..], b"x/"]).is_err());
    }
}
