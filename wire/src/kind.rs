//! The message kinds: the byte in every header that says what its payload is.

/// What the payload is. The discriminant is the byte on the wire; `Kind::try_from(byte)` reads it back (an
/// unknown byte is [`crate::DecodeError::UnknownKind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// Top of book: a [`crate::Quote`].
    Quote = 1,
    /// A print: a [`crate::Trade`].
    Trade = 2,
    /// Liveness from an idle publisher: a [`crate::Heartbeat`].
    Heartbeat = 3,
    /// One depth level: a [`crate::BookLevel`].
    BookLevel = 4,
    /// A journal's statement that it lacks a publisher's sequences (see [`crate::GapNotice`]).
    Gap = 5,
}

impl Kind {
    /// Every kind, in wire-byte order (for per-kind tables and exhaustive tests).
    pub const ALL: [Kind; 5] = [
        Kind::Quote,
        Kind::Trade,
        Kind::Heartbeat,
        Kind::BookLevel,
        Kind::Gap,
    ];

    /// The letter that starts topics of this kind (`Q.XNAS.AAPL`).
    pub fn topic_letter(self) -> char {
        match self {
            Kind::Quote => 'Q',
            Kind::Trade => 'T',
            Kind::Heartbeat => 'H',
            Kind::BookLevel => 'B',
            Kind::Gap => 'G',
        }
    }

    /// Lower-case `snake_case` name for human-readable output (journal dumps, `tickbox tap`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Quote => "quote",
            Kind::Trade => "trade",
            Kind::Heartbeat => "heartbeat",
            Kind::BookLevel => "book_level",
            Kind::Gap => "gap",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DecodeError;

    #[test]
    fn every_kind_reads_back_from_its_wire_byte_and_no_other_byte_reads() {
        for kind in Kind::ALL {
            assert_eq!(Kind::try_from(kind as u8), Ok(kind));
        }
        for byte in [0, 6, 255] {
            assert_eq!(Kind::try_from(byte), Err(DecodeError::UnknownKind(byte)));
        }
    }
}
