//! The loops of `tickbox coord watch`, `coord lock --hold` and `coord elect`: what they print and when they stop.
//! They take their events from a closure and write to any writer, so the stopping rules are tested without a
//! ZooKeeper; the binary hands them the real watch, lock or candidacy and stdout.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use crate::script_lines::ScriptLine;
use crate::{SessionStatus, TreeEvent};

/// How often a loop wakes without an event, to look at its stop condition (Ctrl-C, `--for`).
pub const POLL: Duration = Duration::from_millis(200);

/// How a `coord watch` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEnd {
    /// The count was reached, the time ran out or the caller stopped it; this many events were printed.
    Stopped(u64),
    /// The session expired or was closed: no more events can come (the command exits 1).
    SessionGone,
}

/// Prints each change `next` yields as `KIND<TAB>PATH` until `count` events, the `until` instant, or `go_on`
/// saying no. Session events are logged, not printed; one that ends the session ends the watch.
pub fn print_tree_events(
    mut next: impl FnMut(Duration) -> Option<TreeEvent>,
    out: &mut dyn Write,
    count: Option<u64>,
    until: Option<Instant>,
    go_on: impl Fn() -> bool,
) -> io::Result<WatchEnd> {
    let mut seen = 0u64;
    while count.is_none_or(|c| seen < c) && until.is_none_or(|u| Instant::now() < u) && go_on() {
        // Wake at least every POLL to honour Ctrl-C and --for; the watch keeps events meanwhile.
        let Some(ev) = next(POLL) else { continue };
        if ev.kind == "Session" {
            tracing::warn!("session event: {:?}", ev.session);
            if matches!(ev.session, SessionStatus::Expired | SessionStatus::Closed) {
                return Ok(WatchEnd::SessionGone);
            }
            continue;
        }
        writeln!(out, "{}\t{}", ev.kind, ev.path)?;
        out.flush()?;
        seen += 1;
    }
    Ok(WatchEnd::Stopped(seen))
}

/// Prints each line `next` yields (`None`: nothing changed within [`POLL`]) while `go_on` says so. `Ok(false)`
/// when a line ended the participation (the lock or the candidacy is gone for good), `Ok(true)` when stopped.
pub fn print_script_lines(
    mut next: impl FnMut() -> Option<ScriptLine>,
    out: &mut dyn Write,
    go_on: impl Fn() -> bool,
) -> io::Result<bool> {
    while go_on() {
        let Some(said) = next() else { continue };
        writeln!(out, "{}", said.line)?;
        if said.ends {
            return Ok(false);
        }
        out.flush()?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn event(kind: &str, path: &str, session: SessionStatus) -> TreeEvent {
        TreeEvent {
            kind: kind.into(),
            path: path.into(),
            session,
        }
    }

    #[test]
    fn a_watch_stops_at_its_count_and_logs_session_events_without_printing_them() {
        let mut events = vec![
            event("NodeCreated", "/a", SessionStatus::Connected),
            event("Session", "", SessionStatus::Disconnected),
            event("NodeDeleted", "/b", SessionStatus::Connected),
            event("NodeCreated", "/c", SessionStatus::Connected),
        ]
        .into_iter();
        let mut out = Vec::new();
        let end = print_tree_events(|_| events.next(), &mut out, Some(2), None, || true).unwrap();
        assert_eq!(end, WatchEnd::Stopped(2));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "NodeCreated\t/a\nNodeDeleted\t/b\n"
        );
        assert_eq!(
            events.next().unwrap().path,
            "/c",
            "the third change is left unread"
        );
    }

    #[test]
    fn an_expired_session_ends_a_watch_and_a_stop_ends_it_quietly() {
        let mut events = vec![
            event("NodeCreated", "/a", SessionStatus::Connected),
            event("Session", "", SessionStatus::Expired),
        ]
        .into_iter();
        let mut out = Vec::new();
        let end = print_tree_events(|_| events.next(), &mut out, None, None, || true).unwrap();
        assert_eq!(end, WatchEnd::SessionGone);
        let polls = Cell::new(0);
        let end = print_tree_events(
            |_| None,
            &mut Vec::new(),
            None,
            None,
            || {
                polls.set(polls.get() + 1);
                polls.get() < 3
            },
        )
        .unwrap();
        assert_eq!((end, polls.get()), (WatchEnd::Stopped(0), 3));
        let past = Instant::now() - Duration::from_millis(1);
        let end = print_tree_events(|_| unreachable!(), &mut out, None, Some(past), || true);
        assert_eq!(end.unwrap(), WatchEnd::Stopped(0));
    }

    #[test]
    fn a_line_that_ends_the_participation_is_printed_and_ends_the_loop() {
        let line = |l: &str, ends| ScriptLine {
            line: l.into(),
            ends,
        };
        let mut lines = vec![
            None,
            Some(line("SUSPENDED", false)),
            Some(line("LOST NodeDeleted", true)),
            Some(line("RESUMED", false)),
        ]
        .into_iter();
        let mut out = Vec::new();
        let lasted = print_script_lines(|| lines.next().flatten(), &mut out, || true).unwrap();
        assert!(!lasted);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "SUSPENDED\nLOST NodeDeleted\n"
        );
        let lasted = print_script_lines(|| unreachable!(), &mut Vec::new(), || false).unwrap();
        assert!(
            lasted,
            "stopped before any change: the hold is released normally"
        );
    }
}
