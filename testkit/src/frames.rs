//! Wire frames as tests write them: one builder instead of a `fn quote(` per test file.

use tickbox_wire::{encode_to_vec, BatchBuilder, Header, Kind, Quote, Trade};

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

/// Record `index` of the benches' synthetic market of `symbols` symbols: a trade on every 8th record and quotes
/// otherwise (`T.XNAS.S<n>` or `Q.XNAS.S<n>`, n = `index % symbols`), with `header` (its kind set to match).
pub fn market_frame(index: u64, symbols: u64, header: Header) -> Vec<u8> {
    let sym = index % symbols;
    let encoded = if index.is_multiple_of(8) {
        let header = Header {
            kind: Kind::Trade,
            ..header
        };
        encode_to_vec(&format!("T.XNAS.S{sym}"), &header, &Trade::default().into())
    } else {
        let header = Header {
            kind: Kind::Quote,
            ..header
        };
        encode_to_vec(&format!("Q.XNAS.S{sym}"), &header, &Quote::default().into())
    };
    encoded.expect("a default quote or trade always encodes")
}

/// `frames` packed in order into batch frames (`#B`) of `per_batch` records each, the last holding the rest, as
/// `feed --batch` and `replay --batch` send them. Panics where `per_batch` records do not fit one 64 KiB frame.
pub fn batches<F: AsRef<[u8]>>(frames: &[F], per_batch: usize) -> Vec<Vec<u8>> {
    let max_records = u16::try_from(per_batch).expect("a batch holds at most 65,535 records");
    frames
        .chunks(per_batch)
        .map(|chunk| {
            let mut batch = BatchBuilder::new(64 << 10, max_records);
            for frame in chunk {
                assert!(
                    batch.try_push(frame.as_ref()),
                    "{per_batch} records fit a 64 KiB batch frame"
                );
            }
            batch.frame().to_vec()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{MessageRef, Payload};

    #[test]
    fn the_market_trades_every_eighth_record_and_quotes_the_rest_over_its_symbols() {
        let header = Header::live(Kind::Heartbeat, 3, 9, 5);
        for (index, kind, topic) in [(8, Kind::Trade, "T.XNAS.S3"), (9, Kind::Quote, "Q.XNAS.S4")] {
            let frame = market_frame(index, 5, header);
            let m = MessageRef::decode(&frame).unwrap();
            assert_eq!((m.topic(), m.header().kind), (topic, kind));
            assert_eq!((m.header().publisher_id, m.header().sequence), (3, 9));
        }
    }

    #[test]
    fn batches_hold_every_frame_in_order_and_the_last_one_the_rest() {
        let frames: Vec<Vec<u8>> = (1..=10).map(|seq| quote("Q.A", 1, seq).frame()).collect();
        let packed = batches(&frames, 4);
        let counts: Vec<usize> = packed
            .iter()
            .map(|b| tickbox_wire::batch_records(b).unwrap().count())
            .collect();
        assert_eq!(counts, [4, 4, 2]);
        let back: Vec<&[u8]> = packed
            .iter()
            .flat_map(|b| tickbox_wire::batch_records(b).unwrap().map(Result::unwrap))
            .collect();
        assert_eq!(back, frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
    }

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
