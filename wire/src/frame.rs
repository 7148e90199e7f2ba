use crate::error::{DecodeError, EncodeError};
use crate::header::{Flags, Header, HEADER_LEN};
use crate::kind::Kind;
use crate::payload::Payload;

/// Total frame size for a message of `kind` on `topic`.
#[inline]
pub const fn encoded_len(topic: &str, kind: Kind) -> usize {
    topic.len() + 1 + HEADER_LEN + Payload::encoded_len(kind)
}

/// Encodes one message into `out` (which may be a reused `zmq::Message` buffer); returns the bytes written.
pub fn encode(
    out: &mut [u8],
    topic: &str,
    header: &Header,
    payload: &Payload,
) -> Result<usize, EncodeError> {
    // '#' first is reserved for non-data frames (batches), so no data topic can collide with them.
    if topic.is_empty() || topic.as_bytes()[0] == b'#' || topic.as_bytes().contains(&0) {
        return Err(EncodeError::InvalidTopic);
    }
    if header.kind != payload.kind() {
        return Err(EncodeError::KindMismatch {
            header: header.kind,
            payload: payload.kind(),
        });
    }
    let needed = encoded_len(topic, header.kind);
    if out.len() < needed {
        return Err(EncodeError::BufferTooSmall {
            needed,
            have: out.len(),
        });
    }
    let t = topic.len();
    out[..t].copy_from_slice(topic.as_bytes());
    out[t] = 0;
    let header_bytes: &mut [u8; HEADER_LEN] = (&mut out[t + 1..t + 1 + HEADER_LEN])
        .try_into()
        .expect("slice has HEADER_LEN bytes");
    header.write(header_bytes);
    let written = payload.encode_into(&mut out[t + 1 + HEADER_LEN..needed]);
    debug_assert_eq!(t + 1 + HEADER_LEN + written, needed);
    Ok(needed)
}

/// Convenience for tests and cold paths; the hot path encodes into reused buffers with [`encode`].
pub fn encode_to_vec(
    topic: &str,
    header: &Header,
    payload: &Payload,
) -> Result<Vec<u8>, EncodeError> {
    let mut out = vec![0u8; encoded_len(topic, header.kind)];
    encode(&mut out, topic, header, payload)?;
    Ok(out)
}

/// A decoded view of one frame, borrowing from it. Decoding the topic and header is enough for routing, the snail
/// and gap detection; the payload is decoded only on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef<'a> {
    topic: &'a str,
    header: Header,
    payload: &'a [u8],
}

impl<'a> MessageRef<'a> {
    /// Validates the topic and header and checks the payload length for the kind. Never allocates.
    #[inline]
    pub fn decode(frame: &'a [u8]) -> Result<Self, DecodeError> {
        let (topic_len, header_len, header) = split_header(frame)?;
        let payload = &frame[topic_len + 1 + header_len..];
        let expected = Payload::encoded_len(header.kind);
        if payload.len() != expected {
            return Err(DecodeError::PayloadLength {
                kind: header.kind,
                expected,
                got: payload.len(),
            });
        }
        let topic = topic_str(&frame[..topic_len])?;
        Ok(MessageRef {
            topic,
            header,
            payload,
        })
    }

    /// The view of a frame whose topic terminator and header a caller has already found and read from these very
    /// bytes (`topic_len`: the terminator's index; `payload_at`: where the payload starts; a worker's record carries
    /// them from the shard's decode): no second scan for the terminator and no second header parse. Checks what
    /// such a decode leaves out, the topic's UTF-8, and that the offsets fit the frame and the payload its kind, so
    /// offsets that do not belong to `frame` give an error, never a wrong view.
    #[inline]
    pub fn from_decoded(
        frame: &'a [u8],
        topic_len: usize,
        payload_at: usize,
        header: Header,
    ) -> Result<Self, DecodeError> {
        let expected = Payload::encoded_len(header.kind);
        let (Some(topic), Some(payload)) = (frame.get(..topic_len), frame.get(payload_at..)) else {
            return Err(DecodeError::MissingTopicTerminator);
        };
        if payload_at <= topic_len || payload.len() != expected {
            return Err(DecodeError::PayloadLength {
                kind: header.kind,
                expected,
                got: payload.len(),
            });
        }
        let topic = topic_str(topic)?;
        Ok(MessageRef {
            topic,
            header,
            payload,
        })
    }

    /// The topic, without its NUL terminator (`Q.XNAS.AAPL`).
    #[inline]
    pub fn topic(&self) -> &'a str {
        self.topic
    }
    /// The decoded header (a version 1 frame reads with session 0).
    #[inline]
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// The header's kind: which [`Payload`] variant [`MessageRef::payload`] returns.
    #[inline]
    pub fn kind(&self) -> Kind {
        self.header.kind
    }
    /// The raw payload bytes (fixed size for the kind).
    #[inline]
    pub fn payload_bytes(&self) -> &'a [u8] {
        self.payload
    }
    /// Decodes the payload; fails only on an invalid enum byte (the length was checked by `decode`).
    #[inline]
    pub fn payload(&self) -> Result<Payload, DecodeError> {
        Payload::decode(self.header.kind, self.payload)
    }
}

/// A topic's bytes as text. Every topic tickbox publishes is ASCII, which `is_ascii` checks a word at a time
/// inline; anything else takes the full UTF-8 check. In a `record` profile `std::str::from_utf8` on 10 to 20
/// bytes was an out-of-line call whose result the decoder read back through memory, 7 % of the process's samples.
// One unsafe line for a hot path; the workspace otherwise keeps unsafe to modules that call C or map memory.
#[allow(unsafe_code)]
#[inline]
pub fn topic_str(bytes: &[u8]) -> Result<&str, DecodeError> {
    if bytes.is_ascii() {
        // SAFETY: every byte is below 0x80, and a sequence of such bytes is valid UTF-8 (each one a whole
        // character).
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).map_err(|_| DecodeError::TopicNotUtf8)
}

/// Index of the first NUL byte (a frame's topic terminator), eight bytes at a time: topics are 10 to 20 bytes,
/// where a byte loop costs more than the rest of the header decode together.
#[inline]
pub fn find_nul(frame: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    while let Some(chunk) = frame.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let v = u64::from_le_bytes(word);
        // Sets the high bit of every zero byte (and possibly of bytes above one, which the lowest set bit
        // never is): the lowest one marks the first NUL.
        let zero = v.wrapping_sub(LO) & !v & HI;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    frame[at..].iter().position(|&b| b == 0).map(|i| at + i)
}

/// Finds the topic terminator and reads the header (either wire version). Returns the topic length and the
/// header's encoded length.
#[inline]
fn split_header(frame: &[u8]) -> Result<(usize, usize, Header), DecodeError> {
    let topic_len = find_nul(frame).ok_or(DecodeError::MissingTopicTerminator)?;
    if topic_len == 0 {
        return Err(DecodeError::EmptyTopic);
    }
    let rest = &frame[topic_len + 1..];
    let version = *rest.first().ok_or(DecodeError::TruncatedHeader {
        needed: HEADER_LEN,
        got: 0,
    })?;
    let header_len = Header::len_for_version(version)?;
    let header_bytes = rest.get(..header_len).ok_or(DecodeError::TruncatedHeader {
        needed: header_len,
        got: rest.len(),
    })?;
    Ok((topic_len, header_len, Header::read(header_bytes)?))
}

/// Rewrites who sent a frame and when, in place, without re-encoding. `origin_time_ns` is kept.
pub fn restamp_in_place(
    frame: &mut [u8],
    publisher_id: u32,
    sequence: u64,
    send_time_ns: u64,
    add_flags: Flags,
) -> Result<Header, DecodeError> {
    let (topic_len, header_len, mut header) = split_header(frame)?;
    header.publisher_id = publisher_id;
    header.sequence = sequence;
    header.send_time_ns = send_time_ns;
    header.flags = header.flags.with(add_flags);
    write_header_at(frame, topic_len, header_len, &header);
    Ok(header)
}

/// Rewrites only the send time and adds `add_flags`, in place: the replayer re-publishes a recorded frame under
/// its original publisher id, session and sequence, stamped with its own send time. `origin_time_ns` is kept.
pub fn stamp_send_time_in_place(
    frame: &mut [u8],
    send_time_ns: u64,
    add_flags: Flags,
) -> Result<Header, DecodeError> {
    let (topic_len, header_len, mut header) = split_header(frame)?;
    header.send_time_ns = send_time_ns;
    header.flags = header.flags.with(add_flags);
    write_header_at(frame, topic_len, header_len, &header);
    Ok(header)
}

/// Writes a re-publisher's header fields (flags, publisher id, sequence, send time) into a copy of a frame that
/// was already decoded, at `header_at` (its topic length + 1, e.g. `MessageRef::topic().len() + 1`): no second
/// scan for the topic terminator and no second header parse. These four fields sit at the same offsets in both
/// header versions; `kind`, `origin_time_ns` and `session` are left as they are. False, writing nothing, when the
/// frame is too short to hold them there.
#[inline]
pub fn write_send_fields_at(frame: &mut [u8], header_at: usize, header: &Header) -> bool {
    let Some(h) = frame.get_mut(header_at..header_at + 24) else {
        return false;
    };
    h[2..4].copy_from_slice(&header.flags.0.to_le_bytes());
    h[4..8].copy_from_slice(&header.publisher_id.to_le_bytes());
    h[8..16].copy_from_slice(&header.sequence.to_le_bytes());
    h[16..24].copy_from_slice(&header.send_time_ns.to_le_bytes());
    true
}

/// [`write_send_fields_at`] plus the session (a version 2 header; a version 1 header has none): what a publisher
/// writes when it sends a ready frame as its own message (`feed --source` of a journal), so the frame carries its
/// identity whole. False, writing nothing, when the frame is too short.
#[inline]
pub fn write_identity_at(frame: &mut [u8], header_at: usize, header: &Header) -> bool {
    let v2 = frame.get(header_at) == Some(&crate::header::WIRE_VERSION);
    if v2 && frame.len() < header_at + HEADER_LEN {
        return false;
    }
    if !write_send_fields_at(frame, header_at, header) {
        return false;
    }
    if v2 {
        frame[header_at + 32..header_at + HEADER_LEN]
            .copy_from_slice(&header.session.to_le_bytes());
    }
    true
}

/// Replaces a frame's flags in place (the LVC marks cached values with [`Flags::CACHED`]).
pub fn set_flags_in_place(frame: &mut [u8], flags: Flags) -> Result<Header, DecodeError> {
    let (topic_len, header_len, mut header) = split_header(frame)?;
    header.flags = flags;
    write_header_at(frame, topic_len, header_len, &header);
    Ok(header)
}

/// Writes `header` over a frame's existing header of `header_len` bytes, keeping that header's wire version (a
/// version 1 frame stays version 1 and keeps its length).
fn write_header_at(frame: &mut [u8], topic_len: usize, header_len: usize, header: &Header) {
    let at = topic_len + 1;
    let mut bytes = [0u8; HEADER_LEN];
    header.write(&mut bytes);
    bytes[0] = frame[at];
    frame[at..at + header_len].copy_from_slice(&bytes[..header_len]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{Heartbeat, Quote, Side, Trade};

    /// [`trade_frame`] as version 2 and as version 1 (the same frame without the 8 session bytes).
    fn trade_frame_in_both_versions() -> [Vec<u8>; 2] {
        let v2 = trade_frame();
        let topic_len = "T.XNAS.MSFT".len();
        let mut v1 = v2[..topic_len + 1 + crate::HEADER_LEN_V1].to_vec();
        v1[topic_len + 1] = 1;
        v1.extend_from_slice(&v2[topic_len + 1 + HEADER_LEN..]);
        [v2, v1]
    }

    fn trade_frame() -> Vec<u8> {
        let header = Header::live(Kind::Trade, 7, 42, 1_000);
        let trade = Trade {
            instrument_id: 3,
            price: 101 * crate::PRICE_SCALE,
            size: 500,
            aggressor: Side::Sell,
            trade_id: 9,
            venue_time_ns: 999,
        };
        encode_to_vec("T.XNAS.MSFT", &header, &trade.into()).unwrap()
    }

    #[test]
    fn round_trip_and_sizes() {
        let frame = trade_frame();
        assert_eq!(frame.len(), encoded_len("T.XNAS.MSFT", Kind::Trade));
        let msg = MessageRef::decode(&frame).unwrap();
        assert_eq!(msg.topic(), "T.XNAS.MSFT");
        assert_eq!(msg.header().sequence, 42);
        let Payload::Trade(t) = msg.payload().unwrap() else {
            panic!("wrong kind")
        };
        assert_eq!(t.aggressor, Side::Sell);
        assert_eq!(t.price, 101 * crate::PRICE_SCALE);
    }

    #[test]
    fn topic_prefix_is_the_frame_prefix() {
        // ZeroMQ subscriptions match raw frame prefixes; an exact-symbol subscription includes the NUL.
        let frame = trade_frame();
        assert!(frame.starts_with(b"T.XNAS."));
        assert!(frame.starts_with(b"T.XNAS.MSFT\0"));
    }

    #[test]
    fn truncation_anywhere_is_an_error_not_a_panic() {
        let frame = trade_frame();
        for cut in 0..frame.len() {
            assert!(MessageRef::decode(&frame[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = frame.clone();
        long.push(0);
        assert!(matches!(
            MessageRef::decode(&long),
            Err(DecodeError::PayloadLength { .. })
        ));
    }

    #[test]
    fn find_nul_finds_the_first_nul_at_every_position_and_length() {
        for len in 0..40 {
            for nul in 0..=len {
                // Bytes that trip a careless word trick: 0x01 (just above zero) and 0x80 (high bit set).
                let mut frame: Vec<u8> =
                    (0..len).map(|i| [b'A', 0x01, 0x80, 0xff][i % 4]).collect();
                if nul < len {
                    frame[nul] = 0;
                    // A second NUL later must not win.
                    if nul + 3 < len {
                        frame[nul + 3] = 0;
                    }
                }
                let want = frame.iter().position(|&b| b == 0);
                assert_eq!(find_nul(&frame), want, "len {len}, nul at {nul}");
            }
        }
    }

    #[test]
    fn a_view_from_decoded_parts_is_the_decoded_view_and_wrong_parts_are_errors() {
        for frame in trade_frame_in_both_versions() {
            let full = MessageRef::decode(&frame).unwrap();
            let topic_len = full.topic().len();
            let payload_at = frame.len() - full.payload_bytes().len();
            let header = *full.header();
            assert_eq!(
                MessageRef::from_decoded(&frame, topic_len, payload_at, header),
                Ok(full)
            );
            // Offsets that do not belong to this frame: an error, never a panic or a wrong view.
            for (t, p) in [
                (topic_len, payload_at + 1),
                (topic_len, payload_at - 1),
                (frame.len() + 1, payload_at),
                (topic_len, frame.len() + 1),
                (payload_at, topic_len),
            ] {
                assert!(
                    MessageRef::from_decoded(&frame, t, p, header).is_err(),
                    "topic_len {t}, payload_at {p}"
                );
            }
            let mut bad = frame.clone();
            bad[2] = 0xff;
            assert_eq!(
                MessageRef::from_decoded(&bad, topic_len, payload_at, header),
                Err(DecodeError::TopicNotUtf8)
            );
        }
    }

    #[test]
    fn a_topic_is_text_when_it_is_ascii_or_any_valid_utf8_and_an_error_otherwise() {
        assert_eq!(topic_str(b"Q.XNAS.AAPL"), Ok("Q.XNAS.AAPL"));
        // Past the ASCII check: a multi-byte character in the first word, in the last, and across words.
        for topic in ["É.XPAR.AIR", "Q.XPAR.RENAULT.É", "Q.XTKS.7203.トヨタ"] {
            assert_eq!(topic_str(topic.as_bytes()), Ok(topic));
        }
        for bad in [
            &b"Q.\xff"[..],
            b"Q.XNAS.AAPL\xc3",
            b"\x80Q.XNAS",
            b"Q.XNAS.AAPL.\xed\xa0\x80",
        ] {
            assert_eq!(topic_str(bad), Err(DecodeError::TopicNotUtf8), "{bad:?}");
        }
        // And through a whole frame: a non-ASCII topic that is valid UTF-8 decodes to itself.
        let header = Header::live(Kind::Heartbeat, 1, 1, 1);
        let frame =
            encode_to_vec("H.ÉCHO", &header, &Payload::Heartbeat(Heartbeat::default())).unwrap();
        assert_eq!(MessageRef::decode(&frame).unwrap().topic(), "H.ÉCHO");
    }

    #[test]
    fn invalid_side_is_a_typed_error() {
        let mut frame = trade_frame();
        let side_at = "T.XNAS.MSFT".len() + 1 + HEADER_LEN + 4 + 8 + 4;
        frame[side_at] = 7;
        let msg = MessageRef::decode(&frame).unwrap();
        assert_eq!(
            msg.payload(),
            Err(DecodeError::InvalidField {
                kind: Kind::Trade,
                field: "side",
                value: 7
            })
        );
    }

    #[test]
    fn restamp_keeps_payload_and_origin_time() {
        let mut frame = trade_frame();
        let before = MessageRef::decode(&frame).unwrap().payload().unwrap();
        let header = restamp_in_place(&mut frame, 99, 5, 2_000, Flags::REPLAY).unwrap();
        let msg = MessageRef::decode(&frame).unwrap();
        assert_eq!(*msg.header(), header);
        assert_eq!(header.publisher_id, 99);
        assert_eq!(header.sequence, 5);
        assert_eq!(header.send_time_ns, 2_000);
        assert_eq!(header.origin_time_ns, 1_000);
        assert!(header.flags.contains(Flags::REPLAY));
        assert_eq!(msg.payload().unwrap(), before);
        let header = set_flags_in_place(&mut frame, Flags::CACHED).unwrap();
        assert_eq!(header.flags, Flags::CACHED);
    }

    #[test]
    fn write_send_fields_at_matches_restamp_in_place_in_both_versions() {
        for frame in trade_frame_in_both_versions() {
            let mut expected = frame.clone();
            let header = restamp_in_place(&mut expected, 77, 88, 99_000, Flags::REPLAY).unwrap();
            let mut got = frame.clone();
            let msg = MessageRef::decode(&frame).unwrap();
            let mut h = *msg.header();
            h.publisher_id = 77;
            h.sequence = 88;
            h.send_time_ns = 99_000;
            h.flags = h.flags.with(Flags::REPLAY);
            assert_eq!(h, header);
            assert!(write_send_fields_at(&mut got, msg.topic().len() + 1, &h));
            assert_eq!(got, expected);
        }
        let mut short = [0u8; 20];
        assert!(!write_send_fields_at(
            &mut short,
            1,
            &Header::live(Kind::Quote, 1, 1, 1)
        ));
        assert_eq!(short, [0u8; 20]);
    }

    #[test]
    fn write_identity_at_writes_the_session_where_the_header_has_one() {
        let topic_len = "T.XNAS.MSFT".len();
        for frame in trade_frame_in_both_versions() {
            let msg = MessageRef::decode(&frame).unwrap();
            let mut h = *msg.header();
            h.publisher_id = 9001;
            h.sequence = 5;
            h.send_time_ns = 123;
            h.session = 77;
            let mut got = frame.clone();
            assert!(write_identity_at(&mut got, topic_len + 1, &h));
            let back = MessageRef::decode(&got).unwrap();
            let v2 = frame[topic_len + 1] == crate::header::WIRE_VERSION;
            assert_eq!(
                *back.header(),
                Header {
                    session: if v2 { 77 } else { 0 },
                    ..h
                }
            );
            assert_eq!(back.payload().unwrap(), msg.payload().unwrap());
        }
        let mut short = [0u8; 30];
        short[1] = crate::header::WIRE_VERSION;
        assert!(!write_identity_at(
            &mut short,
            1,
            &Header::live(Kind::Quote, 1, 1, 1)
        ));
    }

    #[test]
    fn version_1_frames_decode_and_restamp_in_their_own_layout() {
        let [v2, mut v1] = trade_frame_in_both_versions();
        let old = MessageRef::decode(&v1).unwrap();
        assert_eq!(old.header().session, 0);
        assert_eq!(old.header().sequence, 42);
        assert_eq!(
            old.payload().unwrap(),
            MessageRef::decode(&v2).unwrap().payload().unwrap()
        );
        let len = v1.len();
        stamp_send_time_in_place(&mut v1, 5_000, Flags::REPLAY).unwrap();
        assert_eq!(v1.len(), len);
        let msg = MessageRef::decode(&v1).unwrap();
        assert_eq!(msg.header().send_time_ns, 5_000);
        assert_eq!(msg.header().origin_time_ns, 1_000);
        assert_eq!(msg.header().sequence, 42);
    }

    #[test]
    fn encode_rejects_bad_input() {
        let header = Header::live(Kind::Quote, 1, 1, 1);
        let quote: Payload = Quote::default().into();
        let mut small = [0u8; 10];
        assert!(matches!(
            encode(&mut small, "Q.X.Y", &header, &quote),
            Err(EncodeError::BufferTooSmall { .. })
        ));
        let mut buf = [0u8; 256];
        assert_eq!(
            encode(&mut buf, "", &header, &quote),
            Err(EncodeError::InvalidTopic)
        );
        assert_eq!(
            encode(&mut buf, "a\0b", &header, &quote),
            Err(EncodeError::InvalidTopic)
        );
        // '#' leads only reserved frames (a batch is "#B\0..."); a data topic may still contain it later.
        assert_eq!(
            encode(&mut buf, "#B", &header, &quote),
            Err(EncodeError::InvalidTopic)
        );
        assert!(encode(&mut buf, "Q.X.#1", &header, &quote).is_ok());
        let trade_header = Header::live(Kind::Trade, 1, 1, 1);
        assert!(matches!(
            encode(&mut buf, "T.X.Y", &trade_header, &quote),
            Err(EncodeError::KindMismatch { .. })
        ));
    }
}
