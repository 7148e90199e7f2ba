//! What a replay reads from: the [`ReplayInput`] a journal reader, a history or a merge of several hands over,
//! one [`Input`] step at a time; where a run starts ([`Position`]); and, after damage, where each publisher was
//! ([`PublisherPositions`]) and the gap notice that tells a subscriber what the damage took.

use tickbox_journal::{JournalError, Reader, Record, Skipped};
use tickbox_wire::{Flags, Header, Kind, MessageRef};

use crate::error::RecorderError;

/// What a [`crate::Replayer`] publishes: a journal ([`Reader`]), a history, any input that hands over recorded frames.
pub trait ReplayInput {
    /// Moves to the first record at or past `from` (`None`: the oldest).
    fn seek(&mut self, from: Option<Position>) -> Result<(), RecorderError>;
    /// The next record, or why there is none now.
    fn next_input(&mut self) -> Result<Input<'_>, RecorderError>;
    /// After [`Input::Damaged`]: passes over the damage to the next record that verifies.
    fn skip_damage(&mut self) -> Result<Skipped, RecorderError>;
    /// The sequence the next record will get: the progress denominator (0 where unknown).
    fn end_seq(&self) -> u64;
    /// The sequence the next record read will have, when known (where a run's progress starts).
    fn position_seq(&self) -> Option<u64> {
        None
    }
    /// After [`ReplayInput::skip_damage`] passed damage starting at sequence `before`: where each publisher was
    /// just before it, from a look back over at most `window` records (empty where the input cannot look back).
    fn recent_publishers(
        &mut self,
        _before: u64,
        _window: u64,
    ) -> Result<PublisherPositions, RecorderError> {
        Ok(PublisherPositions::default())
    }
}

/// One step of a [`ReplayInput`].
#[derive(Debug)]
pub enum Input<'a> {
    /// A record: its journal sequence, capture time (which paces it) and tickbox frame.
    Record(Record<'a>),
    /// Nothing more for now (the end, unless the input is still being written and the replay follows it).
    End,
    /// The writer overwrote records before they were read; reading goes on from the oldest still held.
    Lapped {
        /// The sequence that was wanted.
        wanted_seq: u64,
    },
    /// A record that does not verify: [`ReplayInput::skip_damage`] passes over it, or the run ends with it.
    Damaged(JournalError),
}

impl<'a> Input<'a> {
    /// A journal reader's next record as a replay step: a lap and a record that does not verify are steps the
    /// replay handles, every other error ends it.
    pub(crate) fn of(
        next: Result<Option<Record<'a>>, JournalError>,
    ) -> Result<Self, RecorderError> {
        match next {
            Ok(Some(rec)) => Ok(Input::Record(rec)),
            Ok(None) => Ok(Input::End),
            Err(JournalError::Lapped { wanted_seq }) => Ok(Input::Lapped { wanted_seq }),
            Err(e @ JournalError::CorruptRecord { .. }) => Ok(Input::Damaged(e)),
            Err(e) => Err(e.into()),
        }
    }
}

impl ReplayInput for Reader {
    fn seek(&mut self, from: Option<Position>) -> Result<(), RecorderError> {
        match from {
            Some(Position::Seq(s)) => self.seek_seq(s)?,
            Some(Position::Time(t)) => self.seek_time(t)?,
            None => self.seek_oldest(),
        }
        Ok(())
    }

    fn next_input(&mut self) -> Result<Input<'_>, RecorderError> {
        Input::of(self.next())
    }

    fn skip_damage(&mut self) -> Result<Skipped, RecorderError> {
        Ok(Reader::skip_damage(self)?)
    }

    fn end_seq(&self) -> u64 {
        Reader::end_seq(self)
    }

    fn position_seq(&self) -> Option<u64> {
        Reader::position_seq(self)
    }
}

/// The gap notice a replay sends for `first..=last` of a publisher that journal damage took (topic
/// `G.<publisher>`, its sequence the last one it accounts for, stamped `now`): its header and frame.
pub(crate) fn damage_notice(
    publisher: u32,
    session: u64,
    first: u64,
    last: u64,
    now: u64,
    flags: Flags,
) -> Result<(Header, Vec<u8>), RecorderError> {
    let header = Header {
        kind: Kind::Gap,
        flags,
        publisher_id: publisher,
        sequence: last,
        send_time_ns: now,
        origin_time_ns: now,
        session,
    };
    let notice = tickbox_wire::GapNotice {
        first_missing: first,
        last_missing: last,
        detected_ns: now,
        cause: tickbox_wire::GapCause::NotReceived,
    };
    let frame =
        tickbox_wire::encode_to_vec(&tickbox_wire::gap_topic(publisher), &header, &notice.into())
            .map_err(|e| RecorderError::InvalidOption(format!("gap notice: {e}")))?;
    Ok((header, frame))
}

/// Where a replay starts or stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Journal sequence.
    Seq(u64),
    /// Capture time, ns since the Unix epoch.
    Time(u64),
}

/// Where each publisher is, as far as a look at the records around some damage tells (see
/// [`ReplayInput::recent_publishers`]).
#[derive(Debug, Default)]
pub struct PublisherPositions {
    /// (publisher, session, last sequence, damage since: still owed a look at its next record).
    rows: Vec<(u32, u64, u64, bool)>,
    last_hit: usize,
    /// Rows still owed a look.
    pending: usize,
}

/// The header of a data or gap record (heartbeats and cached values move no publisher's sequence).
fn sequenced(frame: &[u8]) -> Option<tickbox_wire::Header> {
    let m = MessageRef::decode(frame).ok()?;
    let h = *m.header();
    (!h.flags.contains(Flags::CACHED) && h.kind != tickbox_wire::Kind::Heartbeat).then_some(h)
}

impl PublisherPositions {
    /// Notes where `frame`'s publisher is (bounded to the sequence tracker's publishers).
    pub fn note(&mut self, frame: &[u8]) {
        let Some(h) = sequenced(frame) else {
            return;
        };
        match self.find(h.publisher_id) {
            Some(i) => self.rows[i] = (h.publisher_id, h.session, h.sequence, false),
            None if self.rows.len() < tickbox_wire::sequence::DEFAULT_MAX_PUBLISHERS => {
                self.rows
                    .push((h.publisher_id, h.session, h.sequence, false));
            }
            None => {}
        }
    }

    fn find(&mut self, publisher: u32) -> Option<usize> {
        let i = match self.rows.get(self.last_hit) {
            Some(r) if r.0 == publisher => self.last_hit,
            _ => self.rows.iter().position(|r| r.0 == publisher)?,
        };
        self.last_hit = i;
        Some(i)
    }

    /// Whether a publisher is still owed a look at its first record after the damage.
    pub(crate) fn owed(&self) -> bool {
        self.pending > 0
    }

    /// Looks at a record after the damage: the gap notice due before it, when the damage took sequences from its
    /// publisher.
    pub(crate) fn after_damage(
        &mut self,
        frame: &[u8],
        now: u64,
    ) -> Result<Option<Vec<u8>>, RecorderError> {
        let Some(h) = sequenced(frame) else {
            return Ok(None);
        };
        let Some(i) = self.find(h.publisher_id) else {
            return Ok(None);
        };
        let row = &mut self.rows[i];
        if !row.3 {
            return Ok(None);
        }
        row.3 = false;
        self.pending -= 1;
        let notice = if row.1 == h.session && h.sequence > row.2 + 1 {
            Some(
                damage_notice(
                    h.publisher_id,
                    h.session,
                    row.2 + 1,
                    h.sequence - 1,
                    now,
                    Flags::REPLAY,
                )?
                .1,
            )
        } else {
            None
        };
        Ok(notice)
    }

    /// Every publisher noted is owed a look at its first record after the damage.
    pub(crate) fn damaged(&mut self) {
        for r in &mut self.rows {
            r.3 = true;
        }
        self.pending = self.rows.len();
    }
}
