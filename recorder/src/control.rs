//! The replay's remote control as a sans-IO state machine: start and stop requests in, reply text and effects out.
//! The socket side (the Majordomo services `tickbox.replay.start` / `tickbox.replay.stop`) lives in
//! `tickbox-fleet`, above both planes, so this crate needs no control-plane dependency.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard};

use tickbox_units::format_rfc3339;

use crate::input::Position;
use crate::selection::{TimeZone, When};
use tickbox_units::Speed;

/// What one replay run covers; a start request's unset fields take the command line's values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunSpec {
    /// How fast.
    pub speed: Speed,
    /// Where to start (`None`: the journal's start).
    pub from: Option<Position>,
    /// Where to stop, exclusive (`None`: the journal's end).
    pub to: Option<Position>,
}

impl fmt::Display for RunSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "speed {} from {} to {}",
            self.speed,
            fmt_position(self.from, "start"),
            fmt_position(self.to, "end")
        )
    }
}

/// `seq:N`, a time in RFC 3339, or `none` when unset.
pub fn fmt_position(p: Option<Position>, none: &str) -> String {
    match p {
        None => none.to_string(),
        Some(Position::Seq(s)) => format!("seq:{s}"),
        Some(Position::Time(t)) => format_rfc3339(t),
    }
}

/// `seq:N`, or a capture time in any form `replay --from` takes ([`When`]: ns, RFC 3339, a local date-time or a
/// time of day, both in UTC here, or `+DURATION`); times of day and `+DURATION` are anchored on the journal's
/// first capture time, which `first` supplies and may fail to, e.g. for an empty journal.
pub fn parse_position(
    value: &str,
    first: impl FnOnce() -> Result<u64, String>,
) -> Result<Position, String> {
    if let Some(seq) = value.strip_prefix("seq:") {
        return seq
            .trim()
            .parse()
            .map(Position::Seq)
            .map_err(|_| format!("`seq:{seq}` needs a journal sequence number"));
    }
    let when = When::parse(value).map_err(|e| e.to_string())?;
    let first = if when.needs_first() {
        Some(first().map_err(|reason| format!("{value:?}: {reason}"))?)
    } else {
        None
    };
    when.resolve(&TimeZone::UTC, first)
        .map(Position::Time)
        .map_err(|e| e.to_string())
}

/// A `tickbox.replay.start` body: frames of `key=value` words (`speed=20`, `from=+5s`, `to=seq:1000`); several
/// words may share a frame, empty frames are ignored. Errors are the text of the 400 reply.
pub fn parse_start(
    body: &[Vec<u8>],
    defaults: RunSpec,
    first: impl Fn() -> Result<u64, String>,
) -> Result<RunSpec, String> {
    let mut spec = defaults;
    for frame in body {
        let text =
            std::str::from_utf8(frame).map_err(|_| "body frames must be UTF-8 text".to_string())?;
        for word in text.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| format!("`{word}` is not key=value (keys: speed, from, to)"))?;
            match key {
                "speed" => {
                    spec.speed = value
                        .parse()
                        .map_err(|e: tickbox_units::UnitsError| e.to_string())?
                }
                "from" => spec.from = Some(parse_position(value, &first)?),
                "to" => spec.to = Some(parse_position(value, &first)?),
                _ => return Err(format!("unknown key `{key}` (keys: speed, from, to)")),
            }
        }
    }
    match (spec.from, spec.to) {
        (Some(Position::Seq(a)), Some(Position::Seq(b)))
        | (Some(Position::Time(a)), Some(Position::Time(b)))
            if a >= b =>
        {
            Err(format!(
                "empty range: from {} is not before to {}",
                fmt_position(spec.from, ""),
                fmt_position(spec.to, "")
            ))
        }
        _ => Ok(spec),
    }
}

/// Where a controlled replay is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Bound, never started.
    Idle,
    /// A run is going.
    Running,
    /// Asked to stop, the loop has not noticed yet.
    Stopping,
    /// A run ended (to the end, the range's end, or stopped); startable again.
    Done,
}

impl RunState {
    /// The name status snapshots use.
    pub fn name(self) -> &'static str {
        match self {
            RunState::Idle => "idle",
            RunState::Running => "running",
            RunState::Stopping => "stopping",
            RunState::Done => "done",
        }
    }
}

/// What the caller must do after a command.
#[derive(Debug, PartialEq)]
pub enum Effect {
    /// Nothing.
    None,
    /// Clear the stop flag and hand this run to the replay loop.
    Run(RunSpec),
    /// Raise the stop flag.
    Stop,
}

/// The command logic: start/stop requests against the run state.
#[derive(Debug)]
pub struct ReplayController {
    state: RunState,
    runs: u64,
    current: Option<RunSpec>,
    stopped: bool,
}

impl Default for ReplayController {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayController {
    /// Idle, no run yet.
    pub fn new() -> Self {
        ReplayController {
            state: RunState::Idle,
            runs: 0,
            current: None,
            stopped: false,
        }
    }

    /// The run state.
    pub fn state(&self) -> RunState {
        self.state
    }

    /// Runs accepted so far.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// The current (or last) run.
    pub fn current(&self) -> Option<RunSpec> {
        self.current
    }

    /// Whether the last run ended because of a stop request.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// A start request, already parsed (an `Err` is a 400 with its text).
    pub fn on_start(&mut self, request: Result<RunSpec, String>) -> (String, Effect) {
        let spec = match request {
            Ok(spec) => spec,
            Err(reason) => return (format!("400 {reason}"), Effect::None),
        };
        match self.state {
            RunState::Running | RunState::Stopping => ("409 already running".into(), Effect::None),
            RunState::Idle | RunState::Done => {
                self.state = RunState::Running;
                self.runs += 1;
                self.current = Some(spec);
                self.stopped = false;
                (format!("200 started {spec}"), Effect::Run(spec))
            }
        }
    }

    /// A stop request.
    pub fn on_stop(&mut self) -> (String, Effect) {
        match self.state {
            RunState::Running => {
                self.state = RunState::Stopping;
                self.stopped = true;
                ("200 stopped".into(), Effect::Stop)
            }
            // Already on its way down; a repeated stop is not an error.
            RunState::Stopping => ("200 stopped".into(), Effect::None),
            RunState::Idle | RunState::Done => ("409 not running".into(), Effect::None),
        }
    }

    /// The replay loop finished the current run.
    pub fn on_finished(&mut self) {
        self.state = RunState::Done;
    }
}

/// State shared by the replay loop and the control thread (the Majordomo services in `tickbox-fleet`): the
/// controller behind a mutex, touched per command, never per message, and the running replay's stop flag.
pub struct ReplayShared {
    control: Mutex<ReplayController>,
    /// The running replay's stop flag: a stop request or Ctrl-C.
    pub run_stop: AtomicBool,
}

impl Default for ReplayShared {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayShared {
    /// An idle controller with the stop flag down.
    pub fn new() -> Self {
        ReplayShared {
            control: Mutex::new(ReplayController::new()),
            run_stop: AtomicBool::new(false),
        }
    }

    /// The controller, for status snapshots and `on_finished`.
    pub fn lock(&self) -> MutexGuard<'_, ReplayController> {
        // A panic elsewhere cannot leave the controller half-updated (every method is a few plain assignments).
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies a command under the lock, so a start and a stop can never interleave with the effects; a run goes
    /// to the replay loop through `runs`.
    pub fn command(
        &self,
        runs: &mpsc::Sender<RunSpec>,
        f: impl FnOnce(&mut ReplayController) -> (String, Effect),
    ) -> String {
        let mut control = self.lock();
        let (reply, effect) = f(&mut control);
        match effect {
            Effect::None => {}
            Effect::Stop => self.run_stop.store(true, Ordering::Relaxed),
            Effect::Run(spec) => {
                self.run_stop.store(false, Ordering::Relaxed);
                if runs.send(spec).is_err() {
                    control.on_finished();
                    return "503 the replay loop has exited".into();
                }
            }
        }
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_767_364_200_000_000_000;

    fn defaults() -> RunSpec {
        RunSpec {
            speed: Speed::Times(1.0),
            from: None,
            to: None,
        }
    }

    fn body(frames: &[&str]) -> Vec<Vec<u8>> {
        frames.iter().map(|f| f.as_bytes().to_vec()).collect()
    }

    fn parse(frames: &[&str]) -> Result<RunSpec, String> {
        parse_start(&body(frames), defaults(), || Ok(T0))
    }

    #[test]
    fn start_bodies_parse_like_the_cli_flags() {
        // `tickbox call` sends one empty frame when given no body: the command line's settings.
        assert_eq!(parse(&[""]), Ok(defaults()));
        assert_eq!(parse(&[]), Ok(defaults()));
        let spec = parse(&["speed=max", "from=seq:10", "to=seq:20"]).unwrap();
        assert_eq!(spec.speed, Speed::Max);
        assert_eq!(spec.from, Some(Position::Seq(10)));
        assert_eq!(spec.to, Some(Position::Seq(20)));
        // A time of day falls on the journal's first day (UTC here): T0 is 2026-01-02T14:30:00Z.
        let spec = parse(&["from=14:30:01", "to=2026-01-02T14:30:02"]).unwrap();
        assert_eq!(spec.from, Some(Position::Time(T0 + 1_000_000_000)));
        assert_eq!(spec.to, Some(Position::Time(T0 + 2_000_000_000)));
        let spec = parse(&["speed=20 from=+1s to=+1500ms"]).unwrap();
        assert_eq!(spec.speed, Speed::Times(20.0));
        assert_eq!(spec.from, Some(Position::Time(T0 + 1_000_000_000)));
        assert_eq!(spec.to, Some(Position::Time(T0 + 1_500_000_000)));
        let spec = parse(&["from=2026-01-02T14:30:00Z"]).unwrap();
        assert_eq!(spec.from, Some(Position::Time(T0)));
        assert_eq!(
            parse(&["to=42"]).unwrap().to,
            Some(Position::Time(42)),
            "bare digits are ns since the epoch"
        );
    }

    #[test]
    fn bad_start_bodies_say_why() {
        for (frames, needle) in [
            (&["speed=fast"][..], "speed"),
            (&["speed=0"][..], "speed"),
            (&["velocity=2"][..], "unknown key `velocity`"),
            (&["max"][..], "not key=value"),
            (&["from=seq:x"][..], "seq:x"),
            (&["from=yesterday"][..], "yesterday"),
            (&["from=seq:20", "to=seq:10"][..], "empty range"),
            (&["from=+2s", "to=+1s"][..], "empty range"),
        ] {
            let err = parse(frames).unwrap_err();
            assert!(err.contains(needle), "{frames:?}: {err}");
        }
        let err = parse_start(&[vec![0xff, 0xfe]], defaults(), || Ok(T0)).unwrap_err();
        assert!(err.contains("UTF-8"), "{err}");
        // +DURATION on an empty journal: the reason comes through.
        let err = parse_start(&body(&["from=+1s"]), defaults(), || {
            Err("j.tbj is empty".into())
        })
        .unwrap_err();
        assert!(err.contains("empty"), "{err}");
    }

    #[test]
    fn control_runs_idle_running_stopping_done_and_again() {
        let mut c = ReplayController::new();
        assert_eq!(c.state(), RunState::Idle);
        assert_eq!(c.on_stop(), ("409 not running".into(), Effect::None));
        let (reply, effect) = c.on_start(Err("bad speed".into()));
        assert_eq!(reply, "400 bad speed");
        assert_eq!(effect, Effect::None);
        assert_eq!(
            c.state(),
            RunState::Idle,
            "a rejected start changes nothing"
        );

        let (reply, effect) = c.on_start(Ok(defaults()));
        assert!(reply.starts_with("200 started speed 1x"), "{reply}");
        assert_eq!(effect, Effect::Run(defaults()));
        assert_eq!((c.state(), c.runs()), (RunState::Running, 1));
        assert_eq!(
            c.on_start(Ok(defaults())),
            ("409 already running".into(), Effect::None)
        );
        assert_eq!(c.on_stop(), ("200 stopped".into(), Effect::Stop));
        assert_eq!(c.state(), RunState::Stopping);
        assert_eq!(c.on_stop(), ("200 stopped".into(), Effect::None));
        assert_eq!(
            c.on_start(Ok(defaults())).0,
            "409 already running",
            "not before the loop has wound down"
        );
        c.on_finished();
        assert_eq!(c.state(), RunState::Done);
        assert!(c.stopped());
        assert_eq!(c.on_stop().0, "409 not running");

        let fast = RunSpec {
            speed: Speed::Max,
            ..defaults()
        };
        assert_eq!(c.on_start(Ok(fast)).1, Effect::Run(fast));
        assert!(!c.stopped());
        c.on_finished();
        assert_eq!(
            (c.state(), c.runs(), c.stopped()),
            (RunState::Done, 2, false)
        );
    }
}
