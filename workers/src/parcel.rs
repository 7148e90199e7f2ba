//! The unit of the in-process hand-off: a [`Parcel`] carries up to [`PARCEL_RECORDS`] records for one worker (a
//! local replay fills more into each: it grows as needed, [`Parcel::is_full`] is the live shards' rule), each
//! with the [`Meta`] its shard decoded, in one channel operation. A ring of single messages pays a queue slot, a
//! cache-line transfer and possibly a wake-up per record; a parcel pays them once per burst.
//!
//! Records are not copied when they arrive over a socket: a single frame's `zmq::Message` moves into the parcel,
//! and a batch frame is shared (`Arc`) by the parcels of every worker that got records from it, one reference per
//! parcel, not per record. Records read from a journal (local replay) are copied into the parcel's arena, since
//! the journal reader lends each record only until the next one is read.
//!
//! A Guide message (`subscribe --framing guide`: a `[topic][body]` pair from a plain ZeroMQ publisher) travels the
//! same way: both received frames move into the parcel ([`Parcel::push_guide`]) and the worker sees them as an
//! [`Item::Guide`], so the hand-off's bounds, back-pressure and counts are those of records.
//!
//! Emptied parcels go back to their producers through a [`Recycler`], so the steady state allocates nothing.

use std::sync::Arc;

use crate::record::{Meta, Record};

/// Records a live shard puts in a parcel before handing it over: enough to amortise a hand-off, few enough that a worker starts on the first
/// ones while the shard is still filling the next parcel.
pub const PARCEL_RECORDS: usize = 64;

/// Where a record's bytes live.
#[derive(Debug)]
enum Owner {
    /// A single frame, moved in whole.
    Message(zmq::Message),
    /// A batch frame, shared by the parcels that got records from it.
    Shared(Arc<zmq::Message>),
}

/// `owner` value meaning "in the parcel's own arena".
const ARENA: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Slot {
    owner: u32,
    start: u32,
    len: u32,
    /// `None`: a Guide message, whose body is owner `owner` and whose topic is owner `owner - 1`.
    meta: Option<Meta>,
}

/// One thing a parcel carries, as the worker sees it.
#[derive(Debug, Clone, Copy)]
pub enum Item<'a> {
    /// A tickbox record, decoded at the shard.
    Record(Record<'a>),
    /// A Guide message: the topic frame and the body frame, opaque bytes.
    Guide {
        /// The first frame (the Guide's key, what SUB prefixes match).
        topic: &'a [u8],
        /// The second frame.
        body: &'a [u8],
    },
}

/// Records for one worker (see the module documentation).
#[derive(Debug, Default)]
pub struct Parcel {
    owners: Vec<Owner>,
    arena: Vec<u8>,
    slots: Vec<Slot>,
}

impl Parcel {
    /// An empty parcel with room for a full load.
    pub fn new() -> Self {
        Parcel {
            owners: Vec::with_capacity(PARCEL_RECORDS),
            arena: Vec::new(),
            slots: Vec::with_capacity(PARCEL_RECORDS),
        }
    }

    /// Records in the parcel.
    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when it holds no record.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// True when it holds [`PARCEL_RECORDS`] records and should be handed over.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.slots.len() >= PARCEL_RECORDS
    }

    /// Adds a single frame, moving the message in. `meta` must have been decoded from `msg`'s bytes.
    #[inline]
    pub fn push_message(&mut self, msg: zmq::Message, meta: Meta) {
        let len = msg.len() as u32;
        self.owners.push(Owner::Message(msg));
        self.slots.push(Slot {
            owner: (self.owners.len() - 1) as u32,
            start: 0,
            len,
            meta: Some(meta),
        });
    }

    /// Adds a Guide message, moving its two frames in (no copy: the topic frame and the body frame are owned
    /// side by side, the body's slot naming both).
    #[inline]
    pub fn push_guide(&mut self, topic: zmq::Message, body: zmq::Message) {
        let len = body.len() as u32;
        self.owners.push(Owner::Message(topic));
        self.owners.push(Owner::Message(body));
        self.slots.push(Slot {
            owner: (self.owners.len() - 1) as u32,
            start: 0,
            len,
            meta: None,
        });
    }

    /// Adds the record `frame[start..start + len]` of a shared batch frame, taking a reference to the frame only if
    /// the previous record did not come from it. `meta` must have been decoded from those bytes.
    #[inline]
    pub fn push_shared(&mut self, frame: &Arc<zmq::Message>, start: usize, len: usize, meta: Meta) {
        let same =
            matches!(self.owners.last(), Some(Owner::Shared(last)) if Arc::ptr_eq(last, frame));
        if !same {
            self.owners.push(Owner::Shared(Arc::clone(frame)));
        }
        self.slots.push(Slot {
            owner: (self.owners.len() - 1) as u32,
            start: start as u32,
            len: len as u32,
            meta: Some(meta),
        });
    }

    /// Adds a copy of `frame` (a record lent by a journal reader). `meta` must have been decoded from it.
    #[inline]
    pub fn push_copy(&mut self, frame: &[u8], meta: &Meta) {
        let start = self.arena.len() as u32;
        self.arena.extend_from_slice(frame);
        self.slots.push(Slot {
            owner: ARENA,
            start,
            len: frame.len() as u32,
            meta: Some(*meta),
        });
    }

    /// The bytes of owner `n` (or of the arena).
    #[inline]
    fn bytes(&self, n: u32) -> &[u8] {
        match n {
            ARENA => &self.arena,
            n => match &self.owners[n as usize] {
                Owner::Message(m) => m,
                Owner::Shared(m) => m,
            },
        }
    }

    /// The `i`th item.
    #[inline]
    pub fn item(&self, i: usize) -> Item<'_> {
        let slot = &self.slots[i];
        let frame = &self.bytes(slot.owner)[slot.start as usize..(slot.start + slot.len) as usize];
        match slot.meta {
            Some(meta) => Item::Record(Record::from_parts(frame, meta)),
            None => Item::Guide {
                topic: self.bytes(slot.owner - 1),
                body: frame,
            },
        }
    }

    /// Every item, in the order they were added.
    pub fn items(&self) -> impl Iterator<Item = Item<'_>> + '_ {
        (0..self.len()).map(move |i| self.item(i))
    }

    /// Every record, in the order they were added (Guide messages left out).
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> + '_ {
        self.items().filter_map(|item| match item {
            Item::Record(rec) => Some(rec),
            Item::Guide { .. } => None,
        })
    }

    /// Empties it, releasing the frames it held and keeping its capacity.
    pub fn clear(&mut self) {
        self.owners.clear();
        self.arena.clear();
        self.slots.clear();
    }
}

/// Hands emptied parcels back to producers: a bounded pool shared by one subscriber's shards and workers.
#[derive(Debug, Clone)]
pub struct Recycler {
    tx: crossbeam_channel::Sender<Parcel>,
    rx: crossbeam_channel::Receiver<Parcel>,
}

impl Recycler {
    /// A pool keeping at most `capacity` idle parcels (more are freed).
    pub fn new(capacity: usize) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
        Recycler { tx, rx }
    }

    /// An empty parcel: a returned one when there is one, a new one otherwise.
    #[inline]
    pub fn take(&self) -> Parcel {
        self.rx.try_recv().unwrap_or_else(|_| Parcel::new())
    }

    /// Empties `parcel` and keeps it for reuse (or frees it when the pool is full).
    #[inline]
    pub fn give(&self, mut parcel: Parcel) {
        parcel.clear();
        let _ = self.tx.try_send(parcel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

    fn frame(seq: u64, topic: &str) -> Vec<u8> {
        encode_to_vec(
            topic,
            &Header::live(Kind::Quote, 1, seq, 5),
            &Quote::default().into(),
        )
        .unwrap()
    }

    #[test]
    fn holds_moved_shared_and_copied_records_in_order() {
        let a = frame(1, "Q.X.A");
        let b = frame(2, "Q.X.BB");
        let c = frame(3, "Q.X.CCC");
        let mut batch = b.clone();
        batch.extend_from_slice(&c);
        let shared = Arc::new(zmq::Message::from(&batch[..]));
        let mut p = Parcel::new();
        p.push_message(
            zmq::Message::from(&a[..]),
            *Record::decode(&a).unwrap().meta(),
        );
        p.push_shared(&shared, 0, b.len(), *Record::decode(&b).unwrap().meta());
        p.push_shared(
            &shared,
            b.len(),
            c.len(),
            *Record::decode(&c).unwrap().meta(),
        );
        p.push_copy(&a, Record::decode(&a).unwrap().meta());
        assert_eq!(p.len(), 4);
        // One reference for both records of the batch.
        assert_eq!(Arc::strong_count(&shared), 2);
        let got: Vec<(Vec<u8>, u64)> = p
            .records()
            .map(|r| (r.topic_bytes().to_vec(), r.header().sequence))
            .collect();
        assert_eq!(
            got,
            vec![
                (b"Q.X.A".to_vec(), 1),
                (b"Q.X.BB".to_vec(), 2),
                (b"Q.X.CCC".to_vec(), 3),
                (b"Q.X.A".to_vec(), 1)
            ]
        );
        assert!(matches!(p.item(2), Item::Record(r) if r.frame() == &c[..]));
        // A Guide message: both frames moved in, seen as one item; `records` leaves it out.
        p.push_guide(zmq::Message::from("topic"), zmq::Message::from("body"));
        assert_eq!(p.len(), 5);
        assert!(matches!(
            p.item(4),
            Item::Guide { topic, body } if topic == b"topic" && body == b"body"
        ));
        assert!(matches!(p.item(3), Item::Record(r) if r.frame() == &a[..]));
        assert_eq!(p.records().count(), 4);
        let recycler = Recycler::new(2);
        recycler.give(p);
        assert_eq!(Arc::strong_count(&shared), 1, "clear releases the frame");
        let again = recycler.take();
        assert!(again.is_empty());
        assert!(again.slots.capacity() >= PARCEL_RECORDS);
    }
}
