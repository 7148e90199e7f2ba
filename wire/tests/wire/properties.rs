//! Round-trip every kind through encode/decode, and feed the decoder arbitrary bytes: it must answer with a value
//! or a typed error, never a panic.

use proptest::prelude::*;
use tickbox_wire::{
    encode, encode_to_vec, encoded_len, topic_str, BookLevel, Flags, GapCause, GapNotice, Header,
    Heartbeat, Kind, MessageRef, Payload, Quote, Side, Trade,
};

fn side() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::None), Just(Side::Buy), Just(Side::Sell)]
}

fn payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        (
            any::<u32>(),
            any::<i64>(),
            any::<i64>(),
            any::<[u32; 4]>(),
            any::<u64>()
        )
            .prop_map(
                |(instrument_id, bid_px, ask_px, s, venue_time_ns)| Payload::Quote(Quote {
                    instrument_id,
                    bid_px,
                    ask_px,
                    bid_size: s[0],
                    ask_size: s[1],
                    bid_orders: s[2],
                    ask_orders: s[3],
                    venue_time_ns,
                })
            ),
        (
            any::<u32>(),
            any::<i64>(),
            any::<u32>(),
            side(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(
                |(instrument_id, price, size, aggressor, trade_id, venue_time_ns)| {
                    Payload::Trade(Trade {
                        instrument_id,
                        price,
                        size,
                        aggressor,
                        trade_id,
                        venue_time_ns,
                    })
                }
            ),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(first_missing, last_missing, detected_ns)| {
                Payload::Gap(GapNotice {
                    first_missing,
                    last_missing,
                    detected_ns,
                    cause: GapCause::NotReceived,
                })
            }
        ),
        (any::<u64>(), any::<u64>()).prop_map(|(interval_ns, messages_sent)| {
            Payload::Heartbeat(Heartbeat {
                interval_ns,
                messages_sent,
            })
        }),
        (
            any::<u32>(),
            side(),
            any::<u8>(),
            any::<i64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>()
        )
            .prop_map(
                |(instrument_id, side, level, price, size, order_count, venue_time_ns)| {
                    Payload::BookLevel(BookLevel {
                        instrument_id,
                        side,
                        level,
                        price,
                        size,
                        order_count,
                        venue_time_ns,
                    })
                }
            ),
    ]
}

fn topic() -> impl Strategy<Value = String> {
    "[A-Z]\\.[A-Z0-9]{1,6}\\.[A-Za-z0-9._-]{1,24}"
}

proptest! {
    #[test]
    fn every_kind_round_trips(
        topic in topic(),
        payload in payload(),
        flags in any::<u16>(),
        publisher_id in any::<u32>(),
        sequence in any::<u64>(),
        send_time_ns in any::<u64>(),
        origin_time_ns in any::<u64>(),
        session in any::<u64>(),
    ) {
        let header = Header {
            kind: payload.kind(),
            flags: Flags(flags),
            publisher_id,
            sequence,
            send_time_ns,
            origin_time_ns,
            session,
        };
        let frame = encode_to_vec(&topic, &header, &payload).unwrap();
        prop_assert_eq!(frame.len(), encoded_len(&topic, header.kind));
        let msg = MessageRef::decode(&frame).unwrap();
        prop_assert_eq!(msg.topic(), topic.as_str());
        prop_assert_eq!(*msg.header(), header);
        prop_assert_eq!(msg.payload().unwrap(), payload);
    }

    #[test]
    fn encoding_into_a_reused_buffer_matches(topic in topic(), a in payload(), b in payload()) {
        // The hot path reuses one buffer; a longer earlier message must not leak into a later one.
        let mut buf = [0xAAu8; 256];
        for payload in [a, b] {
            let header = Header::live(payload.kind(), 1, 2, 3);
            let n = encode(&mut buf, &topic, &header, &payload).unwrap();
            let fresh = encode_to_vec(&topic, &header, &payload).unwrap();
            prop_assert_eq!(&buf[..n], fresh.as_slice());
        }
    }

    #[test]
    fn a_topic_is_text_exactly_when_the_full_utf8_check_says_so(
        // Mostly ASCII, as topics are, with a byte of any value now and then: the fast path and the full check
        // both get their turn, on every length a word-at-a-time check splits differently.
        bytes in proptest::collection::vec(prop_oneof![4 => 0u8..0x80, 1 => any::<u8>()], 0..40),
    ) {
        let full = std::str::from_utf8(&bytes).ok();
        prop_assert_eq!(topic_str(&bytes).ok(), full);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(msg) = MessageRef::decode(&bytes) {
            let _ = msg.payload();
        }
    }

    #[test]
    fn mutated_frames_never_panic(payload in payload(), at in any::<usize>(), value in any::<u8>(), cut in any::<usize>()) {
        let header = Header::live(payload.kind(), 9, 9, 9);
        let mut frame = encode_to_vec("Q.XNAS.AAPL", &header, &payload).unwrap();
        let at = at % frame.len();
        frame[at] = value;
        let cut = cut % (frame.len() + 1);
        if let Ok(msg) = MessageRef::decode(&frame[..cut]) {
            let _ = msg.payload();
        }
    }
}

#[test]
fn every_kind_has_a_distinct_topic_letter_and_size() {
    let letters: std::collections::HashSet<char> =
        Kind::ALL.iter().map(|k| k.topic_letter()).collect();
    assert_eq!(letters.len(), Kind::ALL.len());
    // A typical quote frame is in the 100-byte class the performance targets are stated for.
    let n = encoded_len("Q.XNAS.AAPL", Kind::Quote);
    assert!((80..=120).contains(&n), "{n}");
}
