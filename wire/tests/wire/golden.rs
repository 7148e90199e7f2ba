//! Golden frames: one concrete frame per kind, pinned byte for byte against the encoder and the decoder, and
//! against the specification (`docs/book/src/wire.md`), which shows the same frames as hex dumps. A change to the wire
//! format fails here until the spec, these frames and (for a layout change) the version byte are updated together.

use tickbox_wire::tap::{encode_event, TapFrame};
use tickbox_wire::{
    batch_records, encode_to_vec, encoded_len, is_batch, BatchBuilder, BookLevel, DecodeError,
    Flags, GapCause, GapNotice, Header, Heartbeat, Kind, MessageRef, Payload, Quote, Side, Trade,
    HEADER_LEN, HEADER_LEN_V1, WIRE_VERSION,
};

/// The session every golden frame of publisher 1 carries (a publisher's start time, ns since the epoch).
const SESSION: u64 = 1_699_999_000_000_000_000;

/// One golden frame: its name in the spec, its bytes as hex, and what it holds.
struct Golden {
    name: &'static str,
    hex: &'static str,
    topic: &'static str,
    header: Header,
    payload: Payload,
}

fn goldens() -> Vec<Golden> {
    vec![
        Golden {
            name: "quote",
            hex: "512e584e41532e4141504c0002010000010000002a0000000000000000002a36fe9c971700002a36fe9c97170\
                  0f08461159c97170700000080d42d102c000000006bc6102c0000002c010000c8000000030000000200000\
                  0f0d82936fe9c9717",
            topic: "Q.XNAS.AAPL",
            header: Header {
                kind: Kind::Quote,
                flags: Flags::NONE,
                publisher_id: 1,
                sequence: 42,
                send_time_ns: 1_700_000_000_000_000_000,
                origin_time_ns: 1_700_000_000_000_000_000,
                session: SESSION,
            },
            payload: Payload::Quote(Quote {
                instrument_id: 7,
                bid_px: 189_250_000_000,
                ask_px: 189_260_000_000,
                bid_size: 300,
                ask_size: 200,
                bid_orders: 3,
                ask_orders: 2,
                venue_time_ns: 1_699_999_999_999_990_000,
            }),
        },
        Golden {
            name: "trade",
            hex: "542e584e41532e4d534654000202020002000000070000000000000000e8a07e159d97170065f753fe9c97170\
                  1f08461159c97170b000000007dea0a600000006400000002b168de3a00000000c022e853fe9c9717",
            topic: "T.XNAS.MSFT",
            header: Header {
                kind: Kind::Trade,
                flags: Flags::REPLAY,
                publisher_id: 2,
                sequence: 7,
                send_time_ns: 1_700_000_100_000_000_000,
                origin_time_ns: 1_700_000_000_500_000_000,
                session: SESSION + 1,
            },
            payload: Payload::Trade(Trade {
                instrument_id: 11,
                price: 412_500_000_000,
                size: 100,
                aggressor: Side::Sell,
                trade_id: 987_654_321,
                venue_time_ns: 1_700_000_000_499_000_000,
            }),
        },
        Golden {
            name: "heartbeat",
            hex: "482e310002030000010000002a0000000000000000e11f3cfe9c971700e11f3cfe9c971700f08461159c97170\
                  0e1f505000000002a00000000000000",
            topic: "H.1",
            header: Header {
                kind: Kind::Heartbeat,
                flags: Flags::NONE,
                publisher_id: 1,
                sequence: 42,
                send_time_ns: 1_700_000_000_100_000_000,
                origin_time_ns: 1_700_000_000_100_000_000,
                session: SESSION,
            },
            payload: Payload::Heartbeat(Heartbeat {
                interval_ns: 100_000_000,
                messages_sent: 42,
            }),
        },
        Golden {
            name: "book_level",
            hex: "422e584e41532e4141504c000204010003000000d20400000000000080d11a3ffe9c971780d11a3ffe9c97170\
                  3f08461159c971707000000010280a7fc0e2c000000f401000004000000408f0b3ffe9c9717",
            topic: "B.XNAS.AAPL",
            header: Header {
                kind: Kind::BookLevel,
                flags: Flags::CACHED,
                publisher_id: 3,
                sequence: 1234,
                send_time_ns: 1_700_000_000_150_000_000,
                origin_time_ns: 1_700_000_000_150_000_000,
                session: SESSION + 3,
            },
            payload: Payload::BookLevel(BookLevel {
                instrument_id: 7,
                side: Side::Buy,
                level: 2,
                price: 189_230_000_000,
                size: 500,
                order_count: 4,
                venue_time_ns: 1_700_000_000_149_000_000,
            }),
        },
        Golden {
            name: "gap",
            hex: "472e31000205000001000000290000000000000000a30b48fe9c971700a30b48fe9c971700f08461159c97172\
                  600000000000000290000000000000000a30b48fe9c971701",
            topic: "G.1",
            header: Header {
                kind: Kind::Gap,
                flags: Flags::NONE,
                publisher_id: 1,
                sequence: 41,
                send_time_ns: 1_700_000_000_300_000_000,
                origin_time_ns: 1_700_000_000_300_000_000,
                session: SESSION,
            },
            payload: Payload::Gap(GapNotice {
                first_missing: 38,
                last_missing: 41,
                detected_ns: 1_700_000_000_300_000_000,
                cause: GapCause::NotReceived,
            }),
        },
    ]
}

/// The golden quote as an old publisher wrote it: version 1, a 32-byte header without `session`. Read, never
/// written, by this build.
const QUOTE_V1_HEX: &str =
    "512e584e41532e4141504c0001010000010000002a0000000000000000002a36fe9c971700002a36fe9c97170700000080d42d102c\
     000000006bc6102c0000002c010000c80000000300000002000000f0d82936fe9c9717";

/// A batch of two records: the golden heartbeat then the golden gap notice (`"#B"`, NUL, version 1, reserved 0,
/// count 2, then each record's u16 length and bytes).
const BATCH_HEX: &str =
    "234200010002003c00482e310002030000010000002a0000000000000000e11f3cfe9c971700e11f3cfe9c971700f08461159c97170\
     0e1f505000000002a000000000000004500472e31000205000001000000290000000000000000a30b48fe9c971700a30b48fe9c9717\
     00f08461159c97172600000000000000290000000000000000a30b48fe9c971701";

/// A tap subscription event: a subscriber subscribed to `Q.` (marker 0x00, XPUB event byte 0x01, the prefix).
const TAP_SUBSCRIBE_HEX: &str = "0001512e";

fn unhex(hex: &str) -> Vec<u8> {
    let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits
        .chunks(2)
        .map(|pair| {
            u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16)
                .unwrap_or_else(|_| panic!("not hex: {pair:?}"))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The golden hex without the line-continuation whitespace of the source.
fn compact(hex_text: &str) -> String {
    hex_text
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect()
}

#[test]
fn every_kind_has_exactly_one_golden_frame() {
    let kinds: Vec<Kind> = goldens().iter().map(|g| g.header.kind).collect();
    assert_eq!(kinds, Kind::ALL.to_vec());
    for g in goldens() {
        assert_eq!(g.name, g.header.kind.name());
    }
}

#[test]
fn golden_frames_encode_byte_for_byte() {
    for g in goldens() {
        let encoded = encode_to_vec(g.topic, &g.header, &g.payload).unwrap();
        assert_eq!(
            hex(&encoded),
            compact(g.hex),
            "{}: the encoder no longer writes the golden frame",
            g.name
        );
        assert_eq!(encoded.len(), encoded_len(g.topic, g.header.kind));
        assert_eq!(encoded[g.topic.len() + 1], WIRE_VERSION);
    }
}

#[test]
fn golden_frames_decode_to_their_fields() {
    for g in goldens() {
        let bytes = unhex(g.hex);
        let msg = MessageRef::decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        assert_eq!(msg.topic(), g.topic, "{}", g.name);
        assert_eq!(*msg.header(), g.header, "{}", g.name);
        assert_eq!(msg.kind(), g.header.kind, "{}", g.name);
        assert_eq!(msg.payload().unwrap(), g.payload, "{}", g.name);
        assert_eq!(
            msg.payload_bytes(),
            &bytes[g.topic.len() + 1 + HEADER_LEN..],
            "{}",
            g.name
        );
    }
}

#[test]
fn golden_version_1_frame_reads_with_session_zero() {
    let bytes = unhex(QUOTE_V1_HEX);
    let quote = &goldens()[0];
    assert_eq!(
        bytes.len(),
        quote.topic.len() + 1 + HEADER_LEN_V1 + Payload::encoded_len(Kind::Quote)
    );
    let msg = MessageRef::decode(&bytes).unwrap();
    assert_eq!(msg.topic(), quote.topic);
    assert_eq!(*msg.header(), quote.header.with_session(0));
    assert_eq!(msg.payload().unwrap(), quote.payload);
}

#[test]
fn golden_tap_event_is_an_event() {
    let mut out = Vec::new();
    encode_event(&mut out, b"\x01Q.");
    assert_eq!(hex(&out), TAP_SUBSCRIBE_HEX);
    assert_eq!(
        TapFrame::classify(&unhex(TAP_SUBSCRIBE_HEX)),
        Ok(TapFrame::Subscribe(b"Q."))
    );
}

#[test]
fn golden_batch_builds_byte_for_byte_and_reads_back_its_records() {
    let heartbeat = unhex(goldens()[2].hex);
    let gap = unhex(goldens()[4].hex);
    assert_eq!(goldens()[2].name, "heartbeat");
    assert_eq!(goldens()[4].name, "gap");
    let mut builder = BatchBuilder::new(1024, 16);
    assert!(builder.try_push(&heartbeat));
    assert!(builder.try_push(&gap));
    assert_eq!(hex(builder.frame()), compact(BATCH_HEX));

    let bytes = unhex(BATCH_HEX);
    assert!(is_batch(&bytes));
    let records = batch_records(&bytes).unwrap();
    assert_eq!(records.declared_count(), 2);
    let records: Vec<&[u8]> = records.map(Result::unwrap).collect();
    assert_eq!(records, vec![&heartbeat[..], &gap[..]]);
    assert_eq!(
        MessageRef::decode(records[1]).unwrap().header(),
        &goldens()[4].header
    );
    // A batch is not a frame: a reader that does not know batches rejects it (the byte after "#B\0" is read as
    // a wire version, and 1 means a 32-byte header whose kind 0 is unknown).
    assert!(MessageRef::decode(&bytes).is_err());
    // And no golden frame is a batch.
    for g in goldens() {
        assert!(!is_batch(&unhex(g.hex)), "{}", g.name);
        assert_eq!(
            batch_records(&unhex(g.hex)).err(),
            Some(DecodeError::NotABatch)
        );
    }
}

#[test]
fn goldens_are_rejected_once_mangled() {
    // The rules the spec states for a reader, exercised on the golden frames.
    let quote = unhex(goldens()[0].hex);
    let at = "Q.XNAS.AAPL".len() + 1;
    let mut unknown_version = quote.clone();
    unknown_version[at] = 3;
    assert!(MessageRef::decode(&unknown_version).is_err());
    let mut unknown_kind = quote.clone();
    unknown_kind[at + 1] = 6;
    assert!(MessageRef::decode(&unknown_kind).is_err());
    let mut unknown_flag = quote.clone();
    unknown_flag[at + 3] = 0x80;
    let msg = MessageRef::decode(&unknown_flag).unwrap();
    assert_eq!(msg.header().flags, Flags(0x8000), "unknown flags are kept");
    let trade = unhex(goldens()[1].hex);
    let mut bad_side = trade.clone();
    bad_side["T.XNAS.MSFT".len() + 1 + HEADER_LEN + 16] = 3;
    assert!(MessageRef::decode(&bad_side).unwrap().payload().is_err());
    assert!(MessageRef::decode(&trade[..trade.len() - 1]).is_err());
}

fn spec() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/book/src/wire.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The bytes of the annotated dump that follows `<!-- golden:NAME -->` in the spec. Each dump line is
/// `OFFSET  HEX BYTES  field`: the offset must be the running byte count, and bytes are single-space separated.
fn annotated_dump(spec: &str, name: &str) -> Vec<u8> {
    let marker = format!("<!-- golden:{name} -->");
    let start = spec
        .find(&marker)
        .unwrap_or_else(|| panic!("the spec has no {marker}"));
    let mut lines = spec[start + marker.len()..].lines();
    let fence = lines
        .by_ref()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap();
    assert!(
        fence.starts_with("```"),
        "{marker} is not followed by a code block"
    );
    let mut bytes = Vec::new();
    for line in lines.by_ref() {
        if line.trim_start().starts_with("```") {
            return bytes;
        }
        let line = line.trim_start();
        if line.is_empty() || line.starts_with("offset") {
            continue;
        }
        let (offset, rest) = line.split_once(' ').unwrap_or((line, ""));
        let offset: usize = offset
            .parse()
            .unwrap_or_else(|_| panic!("{name}: line without an offset: {line:?}"));
        assert_eq!(
            offset,
            bytes.len(),
            "{name}: the dump says offset {offset}: {line:?}"
        );
        let rest = rest.trim_start();
        let hex_part = rest.split("  ").next().unwrap();
        for byte in hex_part.split(' ') {
            assert_eq!(byte.len(), 2, "{name}: {line:?}");
            bytes.push(u8::from_str_radix(byte, 16).unwrap_or_else(|_| panic!("{name}: {line:?}")));
        }
    }
    panic!("{marker}: unterminated code block")
}

#[test]
fn the_spec_shows_every_golden_frame() {
    let spec = spec();
    let mut all: Vec<(&str, String)> = goldens().iter().map(|g| (g.name, compact(g.hex))).collect();
    all.push(("quote_v1", compact(QUOTE_V1_HEX)));
    all.push(("batch", compact(BATCH_HEX)));
    all.push(("tap_subscribe", TAP_SUBSCRIBE_HEX.to_string()));
    for (name, hex_text) in all {
        assert!(
            spec.contains(&format!("`{hex_text}`")),
            "docs/book/src/wire.md lacks the {name} golden frame as one hex string: {hex_text}"
        );
        assert_eq!(
            hex(&annotated_dump(&spec, name)),
            hex_text,
            "docs/book/src/wire.md's annotated {name} dump differs from the golden frame"
        );
    }
}

#[test]
fn the_spec_states_every_kind_and_size() {
    // The kinds table: `| value | name | topic | payload bytes |`, one row per kind.
    let spec = spec();
    for kind in Kind::ALL {
        let row = format!(
            "| {} | `{}` | `{}.` | {} |",
            kind as u8,
            kind.name(),
            kind.topic_letter(),
            Payload::encoded_len(kind)
        );
        assert!(
            spec.contains(&row),
            "docs/book/src/wire.md's kinds table lacks the row {row}"
        );
    }
    for fact in [
        format!("version {WIRE_VERSION} header is {HEADER_LEN} bytes"),
        format!("version 1 header is {HEADER_LEN_V1} bytes"),
        format!("| `CACHED` | {} |", Flags::CACHED.0),
        format!("| `REPLAY` | {} |", Flags::REPLAY.0),
    ] {
        assert!(
            spec.contains(&fact),
            "docs/book/src/wire.md does not say {fact:?}"
        );
    }
}
