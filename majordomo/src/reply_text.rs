//! What `tickbox call` makes of a reply: each frame as a line, and the broker's answers that are not the
//! service's (an unknown service, a refusal by the `[security]` grants).

use crate::engine::broker::unauthorised_reply;

/// A reply frame as one line: UTF-8 as text, anything else (or text with control characters other than tab,
/// which would break the line) as `0x…` hex.
pub fn frame_text(frame: &[u8]) -> String {
    match std::str::from_utf8(frame) {
        Ok(s) if !s.chars().any(|c| c.is_control() && c != '\t') => s.to_string(),
        _ => {
            let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}")
        }
    }
}

/// True for the broker's answer to a call the `[security]` grants refuse (docs/book/src/protocols.md §2.4).
pub fn is_unauthorised(reply: &[Vec<u8>]) -> bool {
    let prefix = unauthorised_reply("");
    matches!(reply, [only] if only.starts_with(prefix.as_bytes()))
}

/// True for MMI's answer that no worker serves the service asked about (`mmi.service` → `404`).
pub fn is_unknown_service(mmi_reply: &[Vec<u8>]) -> bool {
    matches!(mmi_reply, [code] if code.as_slice() == b"404")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_stays_text_and_anything_else_is_hex() {
        assert_eq!(frame_text(b"200\tok"), "200\tok");
        assert_eq!(frame_text(b"a\nb"), "0x610a62");
        assert_eq!(frame_text(&[0xff, 0x00]), "0xff00");
        assert_eq!(frame_text(b""), "");
    }

    #[test]
    fn the_brokers_own_answers_are_recognised() {
        let refused = vec![unauthorised_reply("echo").into_bytes()];
        assert!(is_unauthorised(&refused));
        assert!(!is_unauthorised(&[
            b"403 unauthorised: echo".to_vec(),
            b"more".to_vec()
        ]));
        assert!(!is_unauthorised(&[b"200".to_vec()]));
        assert!(is_unknown_service(&[b"404".to_vec()]));
        assert!(!is_unknown_service(&[b"200".to_vec()]));
    }
}
