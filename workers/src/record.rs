//! A frame decoded once, at the shard, and carried to the worker with its bytes: [`Record`] is a view of one
//! tickbox frame whose topic length, header and payload offset are already known ([`Meta`]), so a worker never
//! parses the frame again and the payload is decoded only when asked for.
//!
//! The topic is *not* checked for UTF-8 here. Dispatch and sequence accounting only hash and compare bytes, so
//! the check is paid only where a string is produced for a person or a map key ([`Record::topic`],
//! [`Record::message`]); a frame whose topic is not UTF-8 is refused there, and counted, as the wire spec
//! requires of a reader.

use tickbox_wire::{
    find_nul, DecodeError, Flags, Header, Kind, MessageRef, Payload, HEADER_LEN, HEADER_LEN_V1,
};

/// Where a frame's parts are, and its decoded header: what the shard learnt, handed on so nobody decodes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    topic_len: u32,
    payload_at: u32,
    header: Header,
}

impl Meta {
    /// The decoded header.
    #[inline]
    pub fn header(&self) -> &Header {
        &self.header
    }
}

/// One tickbox frame, decoded up to its header (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    frame: &'a [u8],
    meta: Meta,
}

#[inline]
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

impl<'a> Record<'a> {
    /// Checks the frame's structure exactly as [`MessageRef::decode`] does (topic terminator, version, header,
    /// kind, payload length, same errors in the same order) except the topic's UTF-8, which is left to
    /// [`Record::topic`]. Never allocates.
    // Always inlined: left to itself the compiler called it from the shard's loops, whose callers then read the
    // record back from memory the call had just written a field at a time (see [`Record::meta`]); inlined, the
    // shard thread of `cargo bench --bench local_replay` spent 2-5 % less per single frame (3 runs each).
    #[inline(always)]
    pub fn decode(frame: &'a [u8]) -> Result<Self, DecodeError> {
        let topic_len = find_nul(frame).ok_or(DecodeError::MissingTopicTerminator)?;
        if topic_len == 0 {
            return Err(DecodeError::EmptyTopic);
        }
        let rest = &frame[topic_len + 1..];
        let version = *rest.first().ok_or(DecodeError::TruncatedHeader {
            needed: HEADER_LEN,
            got: 0,
        })?;
        let header_len = match version {
            1 => HEADER_LEN_V1,
            2 => HEADER_LEN,
            other => return Err(DecodeError::UnknownVersion(other)),
        };
        let h = rest.get(..header_len).ok_or(DecodeError::TruncatedHeader {
            needed: header_len,
            got: rest.len(),
        })?;
        let kind = Kind::try_from(h[1])?;
        let header = Header {
            kind,
            flags: Flags(u16::from_le_bytes([h[2], h[3]])),
            publisher_id: u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
            sequence: u64_at(h, 8),
            send_time_ns: u64_at(h, 16),
            origin_time_ns: u64_at(h, 24),
            session: if version == 1 { 0 } else { u64_at(h, 32) },
        };
        let payload_at = topic_len + 1 + header_len;
        let expected = Payload::encoded_len(kind);
        let got = frame.len() - payload_at;
        if got != expected {
            return Err(DecodeError::PayloadLength {
                kind,
                expected,
                got,
            });
        }
        // A frame longer than 4 GiB cannot have a payload of a fixed small size, so these fit.
        Ok(Record {
            frame,
            meta: Meta {
                topic_len: topic_len as u32,
                payload_at: payload_at as u32,
                header,
            },
        })
    }

    /// Puts a frame and the [`Meta`] decoded from those very bytes back together. Only the hand-off does this,
    /// with the bytes it was given alongside the meta.
    #[inline]
    pub(crate) fn from_parts(frame: &'a [u8], meta: Meta) -> Self {
        debug_assert!(meta.payload_at as usize <= frame.len());
        Record { frame, meta }
    }

    /// What was learnt by decoding, to carry with the bytes. Lent, not copied: a copy made right after
    /// [`Self::decode`] loads it in wide words, each spanning several of the decoder's narrower stores, which the
    /// core cannot forward, so it waits for them to reach the cache (16 % of a local replay's shard samples in
    /// `on_decoded` sat on that load); a caller that stores it elsewhere copies it as late as it can.
    #[inline]
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The whole frame.
    #[inline]
    pub fn frame(&self) -> &'a [u8] {
        self.frame
    }

    /// The topic's bytes, without its terminator and without a UTF-8 check: what dispatch hashes.
    #[inline]
    pub fn topic_bytes(&self) -> &'a [u8] {
        &self.frame[..self.meta.topic_len as usize]
    }

    /// The topic as a string; fails (as the wire spec requires) when it is not UTF-8.
    #[inline]
    pub fn topic(&self) -> Result<&'a str, DecodeError> {
        tickbox_wire::topic_str(self.topic_bytes())
    }

    /// The decoded header.
    #[inline]
    pub fn header(&self) -> &Header {
        &self.meta.header
    }

    /// The header's kind.
    #[inline]
    pub fn kind(&self) -> Kind {
        self.meta.header.kind
    }

    /// The raw payload (its length already checked for the kind).
    #[inline]
    pub fn payload_bytes(&self) -> &'a [u8] {
        &self.frame[self.meta.payload_at as usize..]
    }

    /// Decodes the payload; fails on an invalid enum byte, or on a topic that is not UTF-8 (as
    /// [`MessageRef::decode`] would). The header and payload offset decoded at the shard are used as they are:
    /// the frame is not decoded a second time.
    #[inline]
    pub fn payload(&self) -> Result<Payload, DecodeError> {
        self.topic()?;
        Payload::decode(self.kind(), self.payload_bytes())
    }

    /// The full [`MessageRef`] view, for code written against it (a worker's default
    /// [`on_record`](crate::Worker::on_record)): checks the topic's UTF-8 and takes the header and offsets decoded
    /// at the shard as they are, without decoding the frame a second time.
    #[inline]
    pub fn message(&self) -> Result<MessageRef<'a>, DecodeError> {
        MessageRef::from_decoded(
            self.frame,
            self.meta.topic_len as usize,
            self.meta.payload_at as usize,
            self.meta.header,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Quote, Trade};

    fn frames() -> Vec<Vec<u8>> {
        let mut header =
            Header::live(Kind::Quote, 7, 42, 1_700_000_000_000_000_000).with_session(9);
        header.flags = Flags::REPLAY;
        let quote = encode_to_vec("Q.XNAS.AAPL", &header, &Quote::default().into()).unwrap();
        header.kind = Kind::Trade;
        let trade = encode_to_vec("T.XNAS.A.B", &header, &Trade::default().into()).unwrap();
        // Version 1: the same quote without the session.
        let mut v1 = quote.clone();
        v1[12] = 1;
        v1.drain(12 + 32..12 + 40);
        vec![quote, trade, v1]
    }

    /// The two decoders must agree on every frame but a non-UTF-8 topic, or shard and worker could disagree.
    #[test]
    fn agrees_with_message_ref_on_valid_and_corrupted_frames() {
        let mut cases = Vec::new();
        for f in frames() {
            cases.push(f.clone());
            for cut in 0..f.len() {
                cases.push(f[..cut].to_vec());
            }
            let mut longer = f.clone();
            longer.push(0);
            cases.push(longer);
            for at in 0..f.len().min(20) {
                for value in [0u8, 1, 2, 3, 6, 0xff] {
                    let mut g = f.clone();
                    g[at] = value;
                    cases.push(g);
                }
            }
        }
        let mut checked = 0;
        for case in &cases {
            let full = MessageRef::decode(case);
            let ours = Record::decode(case);
            match (&full, &ours) {
                (Ok(m), Ok(r)) => {
                    assert_eq!(m.header(), r.header());
                    assert_eq!(m.topic().as_bytes(), r.topic_bytes());
                    assert_eq!(m.topic(), r.topic().unwrap());
                    assert_eq!(m.payload_bytes(), r.payload_bytes());
                    assert_eq!(m.payload(), r.payload());
                    assert_eq!(r.message().unwrap(), *m);
                    checked += 1;
                }
                (Err(DecodeError::TopicNotUtf8), Ok(r)) => {
                    assert_eq!(r.topic(), Err(DecodeError::TopicNotUtf8));
                    assert!(r.payload().is_err());
                    assert!(r.message().is_err());
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "frame {case:?}"),
                _ => panic!("decoders disagree on {case:?}: {full:?} vs {ours:?}"),
            }
        }
        assert!(checked >= 3);
        // A non-UTF-8 topic is structurally fine: refused only where a string is needed.
        let mut bad = frames().remove(0);
        bad[2] = 0xff;
        let r = Record::decode(&bad).unwrap();
        assert_eq!(r.topic(), Err(DecodeError::TopicNotUtf8));
        assert_eq!(r.header().sequence, 42);
    }

    #[test]
    fn meta_round_trips_with_its_bytes() {
        for f in frames() {
            let r = Record::decode(&f).unwrap();
            let back = Record::from_parts(&f, *r.meta());
            assert_eq!(back.topic_bytes(), r.topic_bytes());
            assert_eq!(back.header(), r.header());
            assert_eq!(back.payload_bytes(), r.payload_bytes());
        }
    }
}
