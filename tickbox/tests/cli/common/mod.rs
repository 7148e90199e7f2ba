//! Scaffolding shared by the integration tests that drive the real `tickbox` binary as a child process.
//!
//! What only these tests need; what tests of other crates need too is in `tickbox-testkit`. Items not used by
//! every configuration of the suite carry `#[allow(dead_code)]`.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `tickbox` binary Cargo built for these tests.
#[allow(dead_code)]
pub(crate) const TICKBOX: &str = env!("CARGO_BIN_EXE_tickbox");

/// `tickbox_journal::compress` of a journal whose writer this process has just closed, a `Locked` waited out
/// (bounded): a `tickbox` another test is starting holds the closed writer's lock until it execs
/// ([`tickbox_testkit::retry_while`]).
#[allow(dead_code)]
pub(crate) fn compress_closed(
    journal: &std::path::Path,
    options: &tickbox_journal::CompressOptions,
) -> tickbox_journal::CompressReport {
    tickbox_testkit::retry_while(
        Duration::from_secs(5),
        || tickbox_journal::compress(journal, options),
        |r| matches!(r, Err(tickbox_journal::JournalError::Locked { .. })),
    )
    .unwrap_or_else(|e| panic!("compressing {}: {e}", journal.display()))
}

/// Held by each test that runs README's tour at README's rates (50k msg/s feeds, a subscriber that dies if a message
/// is 100 ms late): on a 2-core machine two of them at once would each make the other miss what README promises.
#[allow(dead_code)]
pub(crate) static README_TOUR: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`README_TOUR`], whatever a test that panicked holding it left behind.
#[allow(dead_code)]
pub(crate) fn readme_tour_turn() -> std::sync::MutexGuard<'static, ()> {
    README_TOUR.lock().unwrap_or_else(|e| e.into_inner())
}

/// A private scratch directory per test and a child-process guard that kills and reaps on every path: the kit's,
/// under the names these tests have always used.
pub(crate) use tickbox_testkit::{ChildGuard as KillOnDrop, TempDir};

/// A `tickbox` process with stdout and stderr both captured, for tests that judge its final output. Stderr is read
/// as it comes, so a test can wait for a line the process says ([`Captured::stderr_line`]).
///
/// Killed on drop for the same reason as [`KillOnDrop`].
#[allow(dead_code)]
pub(crate) struct Captured {
    pub child: Child,
    stderr: std::sync::Arc<StderrLines>,
}

/// Every stderr line of a [`Captured`] so far and whether the pipe has closed, with a signal for each change.
type StderrLines = (std::sync::Mutex<(Vec<String>, bool)>, std::sync::Condvar);

#[allow(dead_code)]
impl Captured {
    /// Spawns `tickbox ARGS` with `RUST_LOG=info`, so the log lines tests look for on stderr are emitted.
    pub(crate) fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(TICKBOX)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickbox");
        let stderr = std::sync::Arc::new((
            std::sync::Mutex::new((Vec::new(), false)),
            std::sync::Condvar::new(),
        ));
        let pipe = child.stderr.take().unwrap();
        let lines = std::sync::Arc::clone(&stderr);
        std::thread::spawn(move || {
            let (said, more) = &*lines;
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                said.lock().unwrap().0.push(line);
                more.notify_all();
            }
            said.lock().unwrap().1 = true;
            more.notify_all();
        });
        Captured { child, stderr }
    }

    /// Sends SIGINT, as Ctrl-C in a terminal would, to exercise the graceful-shutdown path.
    pub(crate) fn interrupt(&self) {
        signal(self.child.id(), "INT");
    }

    /// The exit status if the process has already exited; never blocks.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// The first stderr line that starts with `prefix` (without it), waiting at most `limit` for it to be said.
    pub(crate) fn stderr_line(&self, prefix: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        let (said, more) = &*self.stderr;
        let mut guard = said.lock().unwrap();
        loop {
            if let Some(rest) = guard.0.iter().find_map(|l| l.strip_prefix(prefix)) {
                return Some(rest.to_owned());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if guard.1 || left.is_zero() {
                return None;
            }
            guard = more.wait_timeout(guard, left).unwrap().0;
        }
    }

    /// Waits at most `limit` for the process to exit (panicking past it, so a hung process fails the test
    /// instead of hanging it) and returns its status, stdout and stderr.
    ///
    /// Stdout is read only after exit, so this suits commands whose output fits in a pipe buffer.
    pub(crate) fn wait(mut self, limit: Duration) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "tickbox did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        // The pipe closes with the process; its last lines are read by then or soon after.
        let closed_by = Instant::now() + Duration::from_secs(5);
        let (said, more) = &*self.stderr;
        let mut guard = said.lock().unwrap();
        while !guard.1 {
            let left = closed_by.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "stderr still open after exit");
            guard = more.wait_timeout(guard, left).unwrap().0;
        }
        let err = guard.0.iter().map(|l| format!("{l}\n")).collect();
        (status, out, err)
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends signal `name` (e.g. `"INT"`, `"TERM"`) to process `pid` with `kill(1)`, as an operator would, and
/// asserts it was delivered.
#[allow(dead_code)]
pub(crate) fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// Forwards every line of `out` to the returned channel from a background thread, reading to the end of the
/// stream even after the receiver is gone.
#[allow(dead_code)]
pub(crate) fn forward_lines(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Once the test drops the receiver the lines are discarded, but the pipe is still read to its end: a
        // child writing to a closed pipe gets EPIPE, and `eprintln!` panics on it, killing a process the test
        // still relies on (its metrics endpoint, say).
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Every line still to come from a [`forward_lines`] reader of a process that has exited: read until the reader
/// reaches the end of the stream (bounded by 5 s). `try_iter` right after the exit races the reader thread, which
/// may not have forwarded the last lines yet.
#[allow(dead_code)]
pub(crate) fn remaining_lines(lines: &mpsc::Receiver<String>) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut rest = Vec::new();
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => rest.push(line),
            Err(_) => break,
        }
    }
    rest
}

/// Spawns `cmd` with stdout and stderr piped and returns it with the lines of each, read as they come, so the
/// child never blocks on a full pipe.
#[allow(dead_code)]
pub(crate) fn spawn_piped(
    cmd: &mut Command,
) -> (KillOnDrop, mpsc::Receiver<String>, mpsc::Receiver<String>) {
    let mut child = KillOnDrop(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let out = forward_lines(child.0.stdout.take().unwrap());
    let err = forward_lines(child.0.stderr.take().unwrap());
    (child, out, err)
}

/// Spawns `tickbox ARGS` (stdout piped, stderr discarded) and returns it with its stdout lines.
#[allow(dead_code)]
pub(crate) fn spawn_with_lines(args: &[&str]) -> (KillOnDrop, mpsc::Receiver<String>) {
    let mut child = KillOnDrop(
        Command::new(TICKBOX)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tickbox"),
    );
    let stdout = child.0.stdout.take().unwrap();
    (child, forward_lines(stdout))
}

/// Spawns `cmd` (whose stdout or, with `on_stderr`, stderr must be piped) and returns it with the first line
/// of that stream that `pick` maps to `Some`, waiting at most 10 s: the bound keeps a process that never
/// becomes ready from hanging the test.
///
/// The stream keeps being drained afterwards, so the child never blocks on a full pipe.
#[allow(dead_code)]
pub(crate) fn spawn_and_read(
    cmd: &mut Command,
    on_stderr: bool,
    pick: fn(&str) -> Option<String>,
) -> (KillOnDrop, String) {
    let mut child = cmd.spawn().expect("spawn tickbox");
    let out: Box<dyn Read + Send> = if on_stderr {
        Box::new(child.stderr.take().unwrap())
    } else {
        Box::new(child.stdout.take().unwrap())
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(found) = pick(&line) {
                let _ = tx.send(found);
            }
        }
    });
    let child = KillOnDrop(child);
    let found = rx
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{cmd:?} printed nothing usable"));
    (child, found)
}

/// Spawns `tickbox ARGS` (stderr discarded) and returns it with the first stdout line that `pick` maps to
/// `Some`, mapped; see [`spawn_and_read`].
#[allow(dead_code)]
pub(crate) fn spawn_and_pick(
    args: &[&str],
    pick: fn(&str) -> Option<String>,
) -> (KillOnDrop, String) {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::null());
    spawn_and_read(&mut cmd, false, pick)
}

/// Spawns `tickbox ARGS` and returns it with the first `tcp://` endpoint it prints on stdout, waiting at
/// most 10 s.
#[allow(dead_code)]
pub(crate) fn spawn_printing_endpoint(args: &[&str]) -> (KillOnDrop, String) {
    spawn_and_pick(args, endpoint_in)
}

/// The first `tcp://…` token in `line`.
#[allow(dead_code)]
pub(crate) fn endpoint_in(line: &str) -> Option<String> {
    let at = line.find("tcp://")?;
    Some(
        line[at..]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_owned(),
    )
}

/// Polls `cond` every `every` until it holds (true) or `limit` has passed (false).
///
/// Components start, register and converge asynchronously, so tests wait for a state instead of sleeping
/// a guessed time; the bound keeps a state that never arrives from hanging the test.
pub(crate) use tickbox_testkit::poll_until as eventually;

/// Runs `cmd` to completion with stdout and stderr captured, SIGKILLing it and panicking if it has not
/// finished within `timeout`, so a wedged command fails the test instead of hanging it.
///
/// Unlike [`KillOnDrop::wait_output`], the pipes are drained while the command runs, so it may write any
/// amount of output.
#[allow(dead_code)]
pub(crate) fn output_within(mut cmd: Command, timeout: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            send_signal(pid, libc::SIGKILL);
            panic!("command did not finish within {timeout:?}");
        }
    }
}

/// A command started now and collected later, its output drained meanwhile: for tests that drive a process
/// while it runs. Collecting is bounded, and a process not collected (the test panicked first) is SIGKILLed on
/// drop, so a wedged child can neither hang the suite nor outlive it.
#[allow(dead_code)]
pub(crate) struct Background {
    pid: u32,
    output: Option<mpsc::Receiver<std::io::Result<Output>>>,
}

#[allow(dead_code)]
impl Background {
    pub(crate) fn spawn(mut cmd: Command) -> Self {
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        Background {
            pid,
            output: Some(rx),
        }
    }

    /// Waits for the process to exit by itself within `limit`; kills it and panics otherwise.
    pub(crate) fn finish(mut self, limit: Duration) -> Output {
        let rx = self.output.take().expect("collected once");
        match rx.recv_timeout(limit) {
            Ok(out) => out.expect("wait"),
            Err(_) => {
                self.kill();
                panic!("process {} did not finish within {limit:?}", self.pid);
            }
        }
    }

    /// Waits up to `limit` for the first subscription message on `xpub` (the process connecting and
    /// subscribing) and returns it. A process that exits first fails the test with its output, so a start-up
    /// error (a journal it could not create, a bad flag) is reported as itself rather than as a receive timeout.
    pub(crate) fn await_subscription(&mut self, xpub: &zmq::Socket, limit: Duration) -> Vec<u8> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if xpub.poll(zmq::POLLIN, 100).expect("poll") > 0 {
                return xpub.recv_bytes(0).expect("recv");
            }
            let rx = self.output.as_ref().expect("not collected yet");
            if let Ok(out) = rx.try_recv() {
                self.output = None;
                panic!(
                    "process {} exited before subscribing: {:?}",
                    self.pid,
                    out.expect("wait")
                );
            }
        }
        panic!("process {} did not subscribe within {limit:?}", self.pid);
    }

    fn kill(&self) {
        send_signal(self.pid, libc::SIGKILL);
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.output.is_some() {
            self.kill();
        }
    }
}

/// Runs `tickbox call` once (one attempt, `timeout_ms` to answer) and returns its exit code and stdout, which
/// holds the reply frames.
#[allow(dead_code)]
pub(crate) fn call_service(
    broker: &str,
    service: &str,
    body: &[&str],
    timeout_ms: u64,
) -> (i32, String) {
    let timeout = format!("{timeout_ms}ms");
    let out = Command::new(TICKBOX)
        .args([
            "call",
            "--broker",
            broker,
            "--timeout",
            &timeout,
            "--attempts",
            "1",
            service,
        ])
        .args(body)
        .stderr(Stdio::null())
        .output()
        .expect("run tickbox call");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Sends `signal` to the process `pid` the test started (and has not reaped, so the pid cannot have been reused).
#[allow(dead_code)]
#[allow(unsafe_code)] // libc::kill has no safe wrapper in std
pub(crate) fn send_signal(pid: u32, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid, signal) };
}

/// Every frame `sock` receives until `want` have arrived or `timeout` passes (polling, so never stuck).
#[allow(dead_code)]
pub(crate) fn recv_for(sock: &zmq::Socket, timeout: Duration, want: usize) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        if sock.poll(zmq::POLLIN, 20).unwrap() > 0 {
            while let Ok(f) = sock.recv_bytes(zmq::DONTWAIT) {
                got.push(f);
            }
        }
    }
    got
}

/// The rest of the first line starting with `prefix` (trimmed); panics after 10 s without one.
#[allow(dead_code)]
pub(crate) fn line_after(lines: &mpsc::Receiver<String>, prefix: &str) -> String {
    first_line_where(
        lines,
        Duration::from_secs(10),
        &format!("no `{prefix}` line"),
        |line| line.strip_prefix(prefix).map(|rest| rest.trim().to_owned()),
    )
}

/// What `pick` makes of the first line on `lines` it accepts (returns `Some` for), reading for at most `within`;
/// panics with `missing` without one.
#[allow(dead_code)]
pub(crate) fn first_line_where<T>(
    lines: &mpsc::Receiver<String>,
    within: Duration,
    missing: &str,
    mut pick: impl FnMut(&str) -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{missing}"));
        if let Some(picked) = pick(&line) {
            return picked;
        }
    }
}

/// Spawns `tickbox feed ARGS` with stdout and stderr piped and returns it with the endpoints of its first
/// `shards` shards, in shard order, from the `feed shard N … endpoint EP` lines it prints at start (on stderr;
/// `--json` keeps stdout for the summary), waiting at most 10 s. Stderr keeps being drained afterwards, so the
/// feed never blocks on a full pipe; its stdout is left to the caller.
#[allow(dead_code)]
pub(crate) fn spawn_feed_with_endpoints(args: &[&str], shards: usize) -> (KillOnDrop, Vec<String>) {
    let mut child = KillOnDrop(
        Command::new(TICKBOX)
            .arg("feed")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickbox feed"),
    );
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut endpoints = vec![String::new(); shards];
    while endpoints.iter().any(String::is_empty) {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("the feed printed no endpoints");
        for (shard, ep) in endpoints.iter_mut().enumerate() {
            if line.starts_with(&format!("feed shard {shard} ")) {
                *ep = endpoint_in(&line).expect("an endpoint on the shard line");
            }
        }
    }
    (child, endpoints)
}
