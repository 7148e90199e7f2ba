//! Wire frames as tests write them: one builder instead of a `fn quote(` per test file.

use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

/// A quote frame being built; [`QuoteFrame::frame`] encodes it.
#[derive(Debug, Clone)]
#[must_use = "a QuoteFrame does nothing until .frame() encodes it"]
pub struct QuoteFrame {
    topic: String,
    header: Header,
    quote: Quote,
}

/// A live quote on `topic` from `publisher` with sequence `seq`, sent (and originated) at `seq` nanoseconds,
/// session 0 and a default quote: tests that only count and order frames need nothing more.
pub fn quote(topic: &str, publisher: u32, seq: u64) -> QuoteFrame {
    QuoteFrame {
        topic: topic.to_owned(),
        header: Header::live(Kind::Quote, publisher, seq, seq),
        quote: Quote::default(),
    }
}

impl QuoteFrame {
    /// The publisher's session (its start, as the wire says).
    pub fn session(mut self, session: u64) -> Self {
        self.header = self.header.with_session(session);
        self
    }

    /// Send and origin time, nanoseconds since the epoch (latency tests stamp the real send time).
    pub fn sent_at(mut self, ns: u64) -> Self {
        self.header.send_time_ns = ns;
        self.header.origin_time_ns = ns;
        self
    }

    /// Best bid price (tests that check which value a cache kept).
    pub fn bid(mut self, px: i64) -> Self {
        self.quote.bid_px = px;
        self
    }

    /// The instrument id (tests that check a record's identity through a journal).
    pub fn instrument(mut self, id: u32) -> Self {
        self.quote.instrument_id = id;
        self
    }

    /// The header as it stands.
    pub fn header(&self) -> Header {
        self.header
    }

    /// The encoded frame.
    pub fn frame(&self) -> Vec<u8> {
        encode_to_vec(&self.topic, &self.header, &self.quote.into())
            .expect("a quote always encodes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{MessageRef, Payload};

    #[test]
    fn the_frame_decodes_to_what_was_built() {
        let frame = quote("Q.XNAS.AAPL", 7, 42)
            .session(9)
            .bid(101)
            .instrument(3)
            .frame();
        let m = MessageRef::decode(&frame).unwrap();
        assert_eq!(m.topic(), "Q.XNAS.AAPL");
        let h = m.header();
        assert_eq!(
            (h.publisher_id, h.sequence, h.session, h.send_time_ns),
            (7, 42, 9, 42)
        );
        match m.payload().unwrap() {
            Payload::Quote(q) => assert_eq!((q.bid_px, q.instrument_id), (101, 3)),
            other => panic!("not a quote: {other:?}"),
        }
        let late = quote("Q.X", 1, 1).sent_at(5).header();
        assert_eq!((late.send_time_ns, late.origin_time_ns), (5, 5));
    }
}
