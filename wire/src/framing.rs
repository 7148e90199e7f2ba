//! How tickbox messages are laid out in ZeroMQ frames, one enum for writers (`[feed] framing`, `[lvc]
//! tap_framing`) and readers (`[subscriber] framing`, `tickbox tap --framing`).

use crate::tap::{TapFrame, EVENT_MARKER};

/// How a message is laid out in ZeroMQ frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// One ZeroMQ frame per message: the tickbox frame (topic, NUL, header, payload), or a tap event.
    #[default]
    Tickbox,
    /// The Guide's envelope: the topic alone in a first frame, the body after it, as plain ZeroMQ publishers
    /// send. Plain subscribers and proxies key on the first frame; a tickbox body stays decodable.
    Guide,
    /// Readers only: per message, a multipart message whose first frame is not a tickbox frame is a Guide
    /// envelope; anything else is read as tickbox frames. A writer has to choose, so writers refuse it
    /// ([`Framing::for_writer`]).
    Auto,
}

impl std::str::FromStr for Framing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tickbox" => Ok(Framing::Tickbox),
            "guide" => Ok(Framing::Guide),
            "auto" => Ok(Framing::Auto),
            _ => Err(format!("{s:?} is not one of tickbox, guide, auto")),
        }
    }
}

impl std::fmt::Display for Framing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Framing {
    /// The spelling [`str::parse`] reads back (`tickbox`, `guide`, `auto`).
    pub fn as_str(self) -> &'static str {
        match self {
            Framing::Tickbox => "tickbox",
            Framing::Guide => "guide",
            Framing::Auto => "auto",
        }
    }

    /// `self` if a writer can send it; `auto` is an error saying why (it describes what a reader accepts, not
    /// what goes out).
    pub fn for_writer(self) -> Result<Self, String> {
        match self {
            Framing::Auto => {
                Err("`auto` is for readers; a writer sends `tickbox` or `guide`".into())
            }
            framing => Ok(framing),
        }
    }

    /// Whether the message starting with frame `first` (`more`: further frames follow) is a Guide envelope.
    /// Tap events (a single frame starting with the event marker) are the tap's own and never are.
    pub fn reads_as_guide(self, first: &[u8], more: bool) -> bool {
        let event = !more && first.first() == Some(&EVENT_MARKER);
        match self {
            Framing::Tickbox => false,
            Framing::Guide => !event,
            Framing::Auto => more && !matches!(TapFrame::classify(first), Ok(TapFrame::Message(_))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip_and_writers_refuse_auto() {
        for f in [Framing::Tickbox, Framing::Guide, Framing::Auto] {
            assert_eq!(f.as_str().parse::<Framing>(), Ok(f));
            assert_eq!(f.to_string().to_uppercase().parse::<Framing>(), Ok(f));
        }
        assert!("espresso".parse::<Framing>().is_err());
        assert_eq!(Framing::default(), Framing::Tickbox);
        assert_eq!(Framing::Guide.for_writer(), Ok(Framing::Guide));
        assert_eq!(Framing::Tickbox.for_writer(), Ok(Framing::Tickbox));
        assert!(Framing::Auto.for_writer().unwrap_err().contains("auto"));
    }
}
