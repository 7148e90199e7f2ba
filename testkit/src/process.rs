//! Child processes a test starts: stopped on every path, and the current test binary re-run as a child.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

/// How often a guard looks whether its process has exited.
const EVERY: Duration = Duration::from_millis(10);

/// Owns a spawned process and kills it on drop.
///
/// A failing assertion unwinds past the test's own clean-up, and a process left running would hold its sockets
/// and keep burning CPU on a two-core machine long after the test binary exits. Killing, then reaping (so no
/// zombie remains) in `Drop` makes "processes started by a test are stopped by the test" hold on every path,
/// including panics.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// The exit status once the process has exited, or `None` if it is still running after `within`.
    pub fn exit_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(EVERY);
        }
    }

    /// Waits for the process to exit, panicking with `failure` if it has not within `within`: a process that
    /// ignores a stop request must fail the test, not hang it (the guard then kills it).
    #[track_caller]
    pub fn wait_exit(&mut self, within: Duration, failure: &str) -> ExitStatus {
        match self.exit_within(within) {
            Some(status) => status,
            None => panic!("{failure}"),
        }
    }

    /// Waits for the process to exit, then returns its status and whatever it wrote to its piped stdout and
    /// stderr; panics (the guard then kills it) if it has not finished within `limit`.
    ///
    /// The pipes are read only after exit, so this suits commands whose output fits in a pipe buffer.
    #[track_caller]
    pub fn wait_output(mut self, limit: Duration) -> Output {
        let status = self.wait_exit(limit, &format!("child did not finish within {limit:?}"));
        let mut stdout = Vec::new();
        if let Some(mut out) = self.0.stdout.take() {
            out.read_to_end(&mut stdout).unwrap();
        }
        let mut stderr = Vec::new();
        if let Some(mut err) = self.0.stderr.take() {
            err.read_to_end(&mut stderr).unwrap();
        }
        Output {
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The name libtest knows test `test` by, for a test function in the module whose `module_path!()` is
/// `module_path`: the path without the test binary's own name (`journal::crash_child_writer` in the `journal`
/// binary, `crash_child_writer` at a binary's top level).
pub fn self_test_name(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_binary, module)) => format!("{module}::{test}"),
        None => test.to_owned(),
    }
}

/// A command that runs exactly one test of the current test binary, alone, in a child process: for tests whose
/// child half must own a process (it crashes, aborts, is killed, or changes process-wide limits). Pass
/// `module_path!()` so the name stays right wherever the module sits.
pub fn self_test_command(module_path: &str, test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary's own path"));
    cmd.args([
        "--exact",
        &self_test_name(module_path, test),
        "--test-threads=1",
    ]);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names_drop_the_binary_and_keep_the_module() {
        assert_eq!(
            self_test_name("journal::hardening", "fsize_child_writer"),
            "hardening::fsize_child_writer"
        );
        assert_eq!(self_test_name("snapshot", "flood"), "flood");
        assert_eq!(self_test_name("cli::a::b", "t"), "a::b::t");
    }

    #[test]
    fn a_guard_kills_and_reaps_a_process_that_would_run_on() {
        let mut guard = ChildGuard(Command::new("sleep").arg("30").spawn().unwrap());
        assert!(guard.exit_within(Duration::from_millis(50)).is_none());
        let pid = guard.0.id();
        drop(guard);
        // Reaped: no /proc entry is left for the pid (a zombie would still have one).
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn wait_output_returns_what_the_child_printed() {
        let out = ChildGuard(
            Command::new("sh")
                .args(["-c", "echo out; echo err >&2; exit 3"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        )
        .wait_output(Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }
}
