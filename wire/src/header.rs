use crate::error::DecodeError;
use crate::kind::Kind;

/// The wire version this build writes. Version 1 frames (no session field) are still read, with session 0.
pub const WIRE_VERSION: u8 = 2;

/// Encoded size of [`Header`] as this build writes it (version 2).
pub const HEADER_LEN: usize = 40;

/// Encoded size of a version 1 header: the version 2 layout without the trailing `session`.
pub const HEADER_LEN_V1: usize = 32;

/// Header flags. Unknown bits are preserved, not rejected, so a newer publisher's flags pass through proxies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    /// No flag set: a live message.
    pub const NONE: Flags = Flags(0);
    /// Sent by the LVC proxy from its cache to a late joiner: old by design. Lateness and gap checks skip it,
    /// and a last-value book never lets it overwrite a newer value.
    pub const CACHED: Flags = Flags(1 << 0);
    /// Re-published from a journal: `send_time_ns` is the replay's, `origin_time_ns` the original's.
    pub const REPLAY: Flags = Flags(1 << 1);

    /// True when every bit of `other` is set here.
    #[inline]
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    /// These flags plus those of `other`.
    #[inline]
    pub fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
    /// These flags minus those of `other`.
    #[inline]
    pub fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
}

/// The fixed header every message carries, right after the topic.
///
/// Layout (little-endian): `version u8 | kind u8 | flags u16 | publisher_id u32 | sequence u64 |
/// send_time_ns u64 | origin_time_ns u64 | session u64`. This is exactly bincode's fixed-int little-endian encoding
/// of the fields in order (a test proves it); it is read and written by hand so the hot path needs no codec.
/// Version 1 headers are the same without `session`: the new field was appended so every older offset holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// What the payload is; decides the payload's fixed length.
    pub kind: Kind,
    /// Provenance marks ([`Flags::CACHED`], [`Flags::REPLAY`]); unknown bits are carried through.
    pub flags: Flags,
    /// Who sent it; sequences are per publisher.
    pub publisher_id: u32,
    /// Gap-free per publisher for data messages. A heartbeat repeats the last data sequence sent, so a
    /// subscriber can notice a lost trailing message while the feed is quiet.
    pub sequence: u64,
    /// When this copy was sent (ns since the Unix epoch): the publisher's clock, or the replayer's on replay.
    pub send_time_ns: u64,
    /// When the event was first published (ns since the Unix epoch). Equal to `send_time_ns` on a live feed;
    /// kept unchanged by the replayer and the LVC.
    pub origin_time_ns: u64,
    /// Which run of the publisher this is (its start time in ns since the Unix epoch; 0 when unknown, as in
    /// version 1 frames). Sequences are gap-free within one session, so a change of session is a restart, never a
    /// gap, whatever the new first sequence.
    pub session: u64,
}

impl Header {
    /// A live message's header: origin time equals send time.
    pub fn live(kind: Kind, publisher_id: u32, sequence: u64, send_time_ns: u64) -> Self {
        Header {
            kind,
            flags: Flags::NONE,
            publisher_id,
            sequence,
            send_time_ns,
            origin_time_ns: send_time_ns,
            session: 0,
        }
    }

    /// The same header in publisher session `session`.
    #[inline]
    pub fn with_session(mut self, session: u64) -> Self {
        self.session = session;
        self
    }

    #[inline]
    pub(crate) fn write(&self, out: &mut [u8; HEADER_LEN]) {
        out[0] = WIRE_VERSION;
        out[1] = self.kind as u8;
        out[2..4].copy_from_slice(&self.flags.0.to_le_bytes());
        out[4..8].copy_from_slice(&self.publisher_id.to_le_bytes());
        out[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        out[16..24].copy_from_slice(&self.send_time_ns.to_le_bytes());
        out[24..32].copy_from_slice(&self.origin_time_ns.to_le_bytes());
        out[32..40].copy_from_slice(&self.session.to_le_bytes());
    }

    /// Encoded length of a header that starts with version byte `version`.
    #[inline]
    pub(crate) fn len_for_version(version: u8) -> Result<usize, DecodeError> {
        match version {
            WIRE_VERSION => Ok(HEADER_LEN),
            1 => Ok(HEADER_LEN_V1),
            other => Err(DecodeError::UnknownVersion(other)),
        }
    }

    /// Reads a header of either version; `bytes` must hold at least [`Header::len_for_version`] bytes.
    #[inline]
    pub(crate) fn read(bytes: &[u8]) -> Result<Self, DecodeError> {
        let len = Self::len_for_version(*bytes.first().ok_or(DecodeError::TruncatedHeader {
            needed: HEADER_LEN,
            got: 0,
        })?)?;
        if bytes.len() < len {
            return Err(DecodeError::TruncatedHeader {
                needed: len,
                got: bytes.len(),
            });
        }
        let kind = Kind::try_from(bytes[1])?;
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        Ok(Header {
            kind,
            flags: Flags(u16::from_le_bytes([bytes[2], bytes[3]])),
            publisher_id: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            sequence: u64_at(8),
            send_time_ns: u64_at(16),
            origin_time_ns: u64_at(24),
            session: if len == HEADER_LEN { u64_at(32) } else { 0 },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_bincode_fixed_int_little_endian() {
        let header = Header {
            kind: Kind::Trade,
            flags: Flags::CACHED.with(Flags::REPLAY),
            publisher_id: 0xDEAD_BEEF,
            sequence: 0x0102_0304_0506_0708,
            send_time_ns: 1_700_000_000_123_456_789,
            origin_time_ns: 1_600_000_000_000_000_001,
            session: 1_650_000_000_000_000_002,
        };
        let mut ours = [0u8; HEADER_LEN];
        header.write(&mut ours);
        let fields = (
            WIRE_VERSION,
            header.kind as u8,
            header.flags.0,
            header.publisher_id,
            header.sequence,
            header.send_time_ns,
            header.origin_time_ns,
            header.session,
        );
        let config = bincode::config::standard()
            .with_little_endian()
            .with_fixed_int_encoding();
        let theirs = bincode::encode_to_vec(fields, config).unwrap();
        assert_eq!(ours.as_slice(), theirs.as_slice());
        assert_eq!(Header::read(&ours).unwrap(), header);
    }

    #[test]
    fn version_1_headers_read_with_session_zero() {
        let header = Header::live(Kind::Quote, 3, 9, 77).with_session(5);
        let mut bytes = [0u8; HEADER_LEN];
        header.write(&mut bytes);
        bytes[0] = 1;
        let old = Header::read(&bytes[..HEADER_LEN_V1]).unwrap();
        assert_eq!(old, header.with_session(0));
    }

    #[test]
    fn unknown_version_and_kind_are_errors() {
        let mut bytes = [0u8; HEADER_LEN];
        Header::live(Kind::Quote, 1, 1, 1).write(&mut bytes);
        bytes[0] = 99;
        assert_eq!(Header::read(&bytes), Err(DecodeError::UnknownVersion(99)));
        bytes[0] = WIRE_VERSION;
        bytes[1] = 200;
        assert_eq!(Header::read(&bytes), Err(DecodeError::UnknownKind(200)));
    }
}
