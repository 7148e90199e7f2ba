//! The snapshot protocol's golden frames in `docs/book/src/lvc-snapshot.md`, byte for byte against the code: the
//! document and the encoder or decoder cannot drift apart silently.

use tickbox_lvc::snapshot::{encode_request_in, End, EndStatus, KnownLoss, END_LEN, END_LEN_V2};

const ID: u64 = 0x0102_0304_0506_0708;

fn spec() -> String {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/book/src/lvc-snapshot.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The bytes of the annotated dump after `<!-- golden:NAME -->`: lines `OFFSET  HEX BYTES  field`, each offset the
/// running byte count.
fn golden(spec: &str, name: &str) -> Vec<u8> {
    let marker = format!("<!-- golden:{name} -->");
    let start = spec
        .find(&marker)
        .unwrap_or_else(|| panic!("the document has no {marker}"));
    let block = spec[start + marker.len()..]
        .split("```text")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("{marker} is not followed by a text block"));
    let mut bytes = Vec::new();
    for line in block.lines().map(str::trim_start) {
        if line.is_empty() || line.starts_with("offset") {
            continue;
        }
        let (offset, rest) = line.split_once(' ').unwrap_or((line, ""));
        let offset: usize = offset
            .parse()
            .unwrap_or_else(|_| panic!("{name}: {line:?}"));
        assert_eq!(offset, bytes.len(), "{name}: {line:?}");
        for byte in rest.trim_start().split("  ").next().unwrap().split(' ') {
            bytes.push(u8::from_str_radix(byte, 16).unwrap_or_else(|_| panic!("{name}: {line:?}")));
        }
    }
    bytes
}

#[test]
fn request_heads_encode_as_documented() {
    let spec = spec();
    assert_eq!(
        encode_request_in(2, ID, &["Q."])[0],
        golden(&spec, "request-v2")
    );
    assert_eq!(
        encode_request_in(1, ID, &["Q."])[0],
        golden(&spec, "request-v1")
    );
}

#[test]
fn end_markers_encode_and_decode_as_documented() {
    let spec = spec();
    let v1 = End {
        request_id: ID,
        sent: 2000,
        status: EndStatus::Complete,
        loss: None,
    };
    let v2 = End {
        loss: Some(KnownLoss {
            missed: 102,
            dropped: 0,
        }),
        ..v1
    };
    let (g1, g2) = (golden(&spec, "end-v1"), golden(&spec, "end-v2"));
    assert_eq!((g1.len(), g2.len()), (END_LEN, END_LEN_V2));
    assert_eq!(&*v1.encode(), g1.as_slice());
    assert_eq!(&*v2.encode(), g2.as_slice());
    assert_eq!(End::decode(&g1), Some(v1));
    assert_eq!(End::decode(&g2), Some(v2));
    // A version 1 marker is the first 25 bytes of a version 2 one but for the version byte: an old client's
    // reading of its own version is unchanged.
    assert_eq!(g1[..6], g2[..6]);
    assert_eq!(g1[7..], g2[7..END_LEN]);
}
