//! The lines `tickbox coord lock --hold` and `tickbox coord elect` print for scripts and the kill -9 tests:
//! `HELD`/`LEADER <token>`, `SUSPENDED`, `RESUMED`, `REVOKE_REQUESTED`, `REJOINED <was> <ms>`, `LOST <reason>`.
//! Each comes with whether it ends the participation (the command then exits 1).

use crate::{ElectionEvent, HoldState, LostReason};

/// What a script is told of a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptLine {
    /// The line, without its newline.
    pub line: String,
    /// The participation is over: the lock or the candidacy is gone for good.
    pub ends: bool,
}

impl ScriptLine {
    fn on(line: String) -> Self {
        ScriptLine { line, ends: false }
    }
}

impl HoldState {
    /// The line for a lock holder whose hold became this state.
    pub fn script_line(&self) -> ScriptLine {
        match self {
            HoldState::Suspended => ScriptLine::on("SUSPENDED".into()),
            HoldState::Held => ScriptLine::on("RESUMED".into()),
            HoldState::RevokeRequested => ScriptLine::on("REVOKE_REQUESTED".into()),
            HoldState::Lost(r) => ScriptLine {
                line: format!("LOST {r:?}"),
                ends: true,
            },
        }
    }
}

impl ElectionEvent {
    /// The line for a candidate. A session that expired is not the end: the candidacy stands again by itself on
    /// a new session (`REJOINED` follows).
    pub fn script_line(&self) -> ScriptLine {
        match self {
            ElectionEvent::Elected { token } => ScriptLine::on(format!("LEADER {token}")),
            ElectionEvent::Suspended => ScriptLine::on("SUSPENDED".into()),
            ElectionEvent::Resumed => ScriptLine::on("RESUMED".into()),
            ElectionEvent::Lost(r @ LostReason::SessionExpired) => {
                ScriptLine::on(format!("LOST {r:?}"))
            }
            ElectionEvent::Rejoined {
                was_leader,
                out_for,
            } => ScriptLine::on(format!(
                "REJOINED {} {}",
                was_leader.map_or("-".to_owned(), |t| t.to_string()),
                out_for.as_millis()
            )),
            ElectionEvent::Lost(r) => ScriptLine {
                line: format!("LOST {r:?}"),
                ends: true,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lost_lock_ends_the_hold() {
        assert_eq!(HoldState::Held.script_line().line, "RESUMED");
        assert!(!HoldState::Suspended.script_line().ends);
        let lost = HoldState::Lost(LostReason::NodeDeleted).script_line();
        assert_eq!((lost.line.as_str(), lost.ends), ("LOST NodeDeleted", true));
    }

    #[test]
    fn an_expired_session_does_not_end_a_candidacy() {
        let expired = ElectionEvent::Lost(LostReason::SessionExpired).script_line();
        assert_eq!(
            (expired.line.as_str(), expired.ends),
            ("LOST SessionExpired", false)
        );
        assert!(ElectionEvent::Lost(LostReason::Closed).script_line().ends);
        assert_eq!(
            ElectionEvent::Elected { token: 9 }.script_line().line,
            "LEADER 9"
        );
        let rejoined = ElectionEvent::Rejoined {
            was_leader: None,
            out_for: Duration::from_millis(1500),
        };
        assert_eq!(rejoined.script_line().line, "REJOINED - 1500");
        let rejoined = ElectionEvent::Rejoined {
            was_leader: Some(4),
            out_for: Duration::from_millis(20),
        };
        assert_eq!(rejoined.script_line().line, "REJOINED 4 20");
    }
}
