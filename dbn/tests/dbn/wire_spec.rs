//! Every example frame in docs/book/src/wire.md section 11, read from the document's own text and decoded: each kind as a
//! single frame, the batch, the tap events, the vendor record and the Guide's two-frame envelope. A reader who
//! works from the document alone decodes exactly these bytes; an example that no decoder accepts, or that decodes
//! as something other than its heading says, fails here. (This crate sees both the wire decoder and the vendor
//! kind's, which `tickbox-wire` alone does not know.)

use tickbox_dbn::{encode_vendor_frame, VendorFrame, VendorHeader};
use tickbox_wire::tap::TapFrame;
use tickbox_wire::{batch_records, is_batch, Kind, MessageRef};

/// `(heading, [frame hex…])` for every `### ` heading of section 11 with `N bytes: \`hex\`` lines under it.
fn examples() -> Vec<(String, Vec<Vec<u8>>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/book/src/wire.md");
    let spec = std::fs::read_to_string(path).unwrap();
    let start = spec.find("## 11. Golden frames").expect("section 11");
    let end = spec[start..]
        .find("\n## 12.")
        .map_or(spec.len(), |e| start + e);
    let mut out: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for line in spec[start..end].lines() {
        if let Some(h) = line.strip_prefix("### ") {
            out.push((h.trim().to_string(), Vec::new()));
            continue;
        }
        // "96 bytes: `…`" or "Frame 2, 96 bytes: `…`": the length stated must be the length given.
        let Some((head, rest)) = line.split_once(" bytes: `") else {
            continue;
        };
        let hex = rest.strip_suffix('`').expect("hex string ends the line");
        let stated: usize = head
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .expect("byte count");
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        assert_eq!(bytes.len(), stated, "{line}");
        out.last_mut()
            .expect("an example under a heading")
            .1
            .push(bytes);
    }
    out.retain(|(_, frames)| !frames.is_empty());
    out
}

fn kind_of_heading(h: &str) -> Option<Kind> {
    Some(match h {
        "Quote" | "Quote, version 1" => Kind::Quote,
        "Trade" => Kind::Trade,
        "Heartbeat" => Kind::Heartbeat,
        "Book level" => Kind::BookLevel,
        "Gap notice" => Kind::Gap,
        _ => return None,
    })
}

fn single(frame: &[u8], heading: &str) -> Kind {
    let m = MessageRef::decode(frame).unwrap_or_else(|e| panic!("{heading}: {e}"));
    m.payload()
        .unwrap_or_else(|e| panic!("{heading}: payload: {e}"));
    m.kind()
}

#[test]
fn every_example_in_the_spec_decodes_as_its_heading_says() {
    let examples = examples();
    let headings: Vec<&str> = examples.iter().map(|(h, _)| h.as_str()).collect();
    for want in [
        "Quote",
        "Trade",
        "Heartbeat",
        "Book level",
        "Gap notice",
        "Quote, version 1",
        "Batch",
        "Tap subscription event",
        "Tap unsubscribe event",
        "Vendor record",
        "Guide envelope",
    ] {
        assert!(
            headings.contains(&want),
            "docs/book/src/wire.md section 11 has no {want:?} example: {headings:?}"
        );
    }
    for (heading, frames) in &examples {
        let h = heading.as_str();
        match h {
            "Batch" => {
                let [frame] = &frames[..] else {
                    panic!("{h}: one frame")
                };
                assert!(is_batch(frame));
                let kinds: Vec<Kind> = batch_records(frame)
                    .unwrap()
                    .map(|r| single(r.expect("batch record"), h))
                    .collect();
                assert_eq!(kinds, [Kind::Heartbeat, Kind::Gap]);
            }
            "Tap subscription event" | "Tap unsubscribe event" => {
                let [frame] = &frames[..] else {
                    panic!("{h}: one frame")
                };
                match (h, TapFrame::classify(frame).unwrap()) {
                    ("Tap subscription event", TapFrame::Subscribe(p))
                    | ("Tap unsubscribe event", TapFrame::Unsubscribe(p)) => assert_eq!(p, b"Q."),
                    (_, other) => panic!("{h}: {other:?}"),
                }
            }
            "Vendor record" => {
                let [frame] = &frames[..] else {
                    panic!("{h}: one frame")
                };
                let v = VendorFrame::decode(frame).unwrap();
                assert_eq!(v.topic, "V.GLBX.ESH1");
                assert_eq!((v.vendor, v.version, v.rtype, v.source), (1, 2, 0, 0));
                assert_eq!(v.record.len(), 48);
                assert_eq!(v.header.publisher_id, 1);
                // The encoder writes exactly the document's bytes from the fields its dump states.
                let mut again = Vec::new();
                let header = VendorHeader {
                    flags: 0,
                    publisher_id: 1,
                    sequence: 1,
                    send_time_ns: 1_700_000_000_000_100_000,
                    origin_time_ns: 1_700_000_000_000_000_000,
                    session: 1_699_999_000_000_000_000,
                };
                encode_vendor_frame(&mut again, "V.GLBX.ESH1", &header, 2, 0, v.record);
                assert_eq!(&again, frame);
                // A reader knowing kinds 1 to 5 only rejects it as an unknown kind (section 10).
                assert!(MessageRef::decode(frame).is_err());
            }
            "Guide envelope" => {
                let [topic, frame] = &frames[..] else {
                    panic!("{h}: two frames")
                };
                assert_eq!(single(frame, h), Kind::Quote);
                let m = MessageRef::decode(frame).unwrap();
                assert_eq!(
                    m.topic().as_bytes(),
                    topic.as_slice(),
                    "frame 1 is frame 2's topic"
                );
                assert!(!topic.contains(&0));
            }
            _ => {
                let want = kind_of_heading(h).unwrap_or_else(|| panic!("unexpected example {h:?}"));
                let [frame] = &frames[..] else {
                    panic!("{h}: one frame")
                };
                assert_eq!(single(frame, h), want, "{h}");
            }
        }
    }
}
