//! Z85 (ZeroMQ RFC 32), the text form of CURVE keys in certificates and configs. Written here rather than called
//! through libzmq so that certificate parsing stays free of sockets and can be fuzzed on its own.

const ALPHABET: &[u8; 85] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// `data` (a multiple of 4 bytes) as Z85 text, or `None` when its length is not a multiple of 4.
pub fn encode(data: &[u8]) -> Option<String> {
    if !data.len().is_multiple_of(4) {
        return None;
    }
    let mut out = String::with_capacity(data.len() / 4 * 5);
    for chunk in data.chunks_exact(4) {
        let mut value = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        let mut digits = [0u8; 5];
        for digit in digits.iter_mut().rev() {
            *digit = ALPHABET[(value % 85) as usize];
            value /= 85;
        }
        out.extend(digits.iter().map(|&d| d as char));
    }
    Some(out)
}

/// The bytes of Z85 `text` (a multiple of 5 characters), or `None` for a wrong length, a character outside the
/// alphabet, or a group whose value overflows 32 bits.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(5) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 5 * 4);
    for group in bytes.chunks_exact(5) {
        let mut value: u64 = 0;
        for &c in group {
            let digit = ALPHABET.iter().position(|&a| a == c)? as u64;
            value = value * 85 + digit;
        }
        let value = u32::try_from(value).ok()?;
        out.extend_from_slice(&value.to_be_bytes());
    }
    Some(out)
}

/// A 32-byte CURVE key from its 40-character Z85 text.
pub fn decode_key(text: &str) -> Option<[u8; 32]> {
    decode(text)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc_32_test_vector() {
        let data = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B];
        assert_eq!(encode(&data).unwrap(), "HelloWorld");
        assert_eq!(decode("HelloWorld").unwrap(), data);
    }

    #[test]
    fn bad_text_is_refused() {
        assert!(decode("Hell").is_none());
        assert!(decode("Hell~").is_none());
        assert!(decode("#####").is_none(), "84^5 overflows 32 bits");
        assert!(encode(&[1, 2, 3]).is_none());
        assert!(decode_key("HelloWorld").is_none(), "8 bytes is no key");
    }

    proptest! {
        #[test]
        fn round_trips(data in proptest::collection::vec(any::<[u8; 4]>(), 0..16)) {
            let flat: Vec<u8> = data.concat();
            prop_assert_eq!(decode(&encode(&flat).unwrap()).unwrap(), flat);
        }

        #[test]
        fn arbitrary_text_never_panics(text in ".{0,60}") {
            let _ = decode(&text);
        }
    }
}
