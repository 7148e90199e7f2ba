//! Framing of the Espresso tap: a copy of everything the LVC proxy forwards, for the recorder and `tickbox tap`.
//!
//! **What is on it.** Every live message the proxy forwards, in forwarding order, byte for byte in the wire
//! format (so the recorder needs no second decoder); subscription events; and, only with `tap_cached = true`,
//! the cached values sent to late joiners (still marked `CACHED`).
//!
//! **Subscription events** are frames `0x00 | 0x01 prefix` (subscribe) or `0x00 | 0x00 prefix` (unsubscribe):
//! XPUB's own event frame behind a NUL. No wire frame starts with NUL (a topic is never empty), so
//! [`TapFrame::classify`] tells them apart without ambiguity, a consumer subscribing to `"\0"` gets only events,
//! and one subscribing to a data prefix (`Q.`) never sees them. A consumer subscribed to everything (`""`), such
//! as a recorder, must skip frames that start with NUL (or use [`TapFrame::classify`]).
//!
//! **Guide capture framing.** With `[lvc] tap_framing = "guide"` every tap message is instead two frames,
//! `[topic][value]`: a wire frame under its topic, an event under the topic `0x00`, each with the frame described
//! here as the value; plain multipart messages pass as they came (`tickbox_wire::Framing`, docs/book/src/wire.md
//! section 9).
//!
//! **Never slowing the proxy.** The tap is an XPUB with its own per-consumer HWM (`tap_hwm`), and every send is
//! `DONTWAIT`: the proxy never waits for a tap consumer, and live traffic to subscribers is unaffected in every
//! mode. What a slow consumer costs is chosen by `tap_drop`:
//!
//! - `per_consumer` (default): a plain lossy XPUB. libzmq drops a copy only for the consumer whose queue is
//!   full, so a stalled inspector (`tickbox tap` printing to a slow terminal) costs the recorder reading the
//!   same tap nothing. The price is that these drops are silent: the proxy cannot see them and `tap_dropped`
//!   stays 0. Each consumer detects its own loss instead: data frames carry the publisher id and its
//!   per-publisher sequence, which a feed numbers without gaps and the proxy forwards in order, so for a
//!   consumer subscribed to everything a publisher sends, a jump in that publisher's sequence is loss on the
//!   way to that consumer (at its tap queue, or upstream of the proxy, which the proxy's own counters and the
//!   live subscribers' gap detectors tell apart). A consumer subscribed to a topic prefix sees gaps by design
//!   and cannot use this. Subscription events carry no sequence, so a lost event cannot be detected.
//!   `tickbox tap` does this check itself (`GAP` lines, `missed` under `--top`) when it subscribes to everything.
//! - `counted`: `XPUB_NODROP`, so a full queue turns the send into `EAGAIN` and the copy is dropped and
//!   counted (`tap_dropped`). libzmq checks all matching consumers at once: one stalled consumer makes every
//!   other consumer miss the same copies. Use it when a single consumer reads the tap and an exact drop count
//!   at the proxy matters more than isolation.
//!

use crate::error::DecodeError;
use crate::frame::MessageRef;

/// First byte of a tap subscription-event frame.
pub const EVENT_MARKER: u8 = 0x00;

/// Appends the tap frame for an XPUB subscription event (`0x01prefix` / `0x00prefix`) to `out`.
pub fn encode_event(out: &mut Vec<u8>, xpub_event: &[u8]) {
    out.push(EVENT_MARKER);
    out.extend_from_slice(xpub_event);
}

/// One frame read from the tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapFrame<'a> {
    /// A subscriber subscribed to this prefix.
    Subscribe(&'a [u8]),
    /// The last subscriber of this prefix left.
    Unsubscribe(&'a [u8]),
    /// A wire message.
    Message(MessageRef<'a>),
}

/// Why a tap frame could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TapError {
    /// A frame starting with [`EVENT_MARKER`] that is not a subscription event.
    #[error("subscription event frame is truncated or has an unknown type byte")]
    BadEvent,
    /// A frame that is neither an event nor a valid wire message.
    #[error(transparent)]
    Wire(#[from] DecodeError),
}

impl<'a> TapFrame<'a> {
    /// Tells events from messages (no wire frame starts with NUL: a topic is never empty) and decodes the latter.
    pub fn classify(frame: &'a [u8]) -> Result<Self, TapError> {
        match frame {
            [EVENT_MARKER, 1, prefix @ ..] => Ok(TapFrame::Subscribe(prefix)),
            [EVENT_MARKER, 0, prefix @ ..] => Ok(TapFrame::Unsubscribe(prefix)),
            [EVENT_MARKER, ..] => Err(TapError::BadEvent),
            _ => Ok(TapFrame::Message(MessageRef::decode(frame)?)),
        }
    }

    /// True for a frame that starts with [`EVENT_MARKER`]: a tap event (well-formed or not), never market data.
    pub fn is_event(frame: &[u8]) -> bool {
        frame.first() == Some(&EVENT_MARKER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode_to_vec, Header, Kind, Payload, Quote};

    #[test]
    fn events_and_messages_are_told_apart() {
        let mut out = Vec::new();
        encode_event(&mut out, b"\x01Q.XNAS");
        assert_eq!(TapFrame::classify(&out), Ok(TapFrame::Subscribe(b"Q.XNAS")));
        assert!(TapFrame::is_event(&out));
        out.clear();
        encode_event(&mut out, b"\x00");
        assert_eq!(TapFrame::classify(&out), Ok(TapFrame::Unsubscribe(b"")));
        assert_eq!(TapFrame::classify(b"\x00"), Err(TapError::BadEvent));
        assert_eq!(TapFrame::classify(b"\x00\x05x"), Err(TapError::BadEvent));
        let q = encode_to_vec(
            "Q.XNAS.AAPL",
            &Header::live(Kind::Quote, 1, 1, 1),
            &Payload::Quote(Quote::default()),
        )
        .unwrap();
        assert!(!TapFrame::is_event(&q));
        assert!(
            matches!(TapFrame::classify(&q), Ok(TapFrame::Message(m)) if m.topic() == "Q.XNAS.AAPL")
        );
        assert!(matches!(
            TapFrame::classify(b"junk"),
            Err(TapError::Wire(_))
        ));
    }
}
