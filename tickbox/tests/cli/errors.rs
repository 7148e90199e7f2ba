//! What an operator sees when something is wrong, and what scripts rely on: one error line with a hint, exit codes
//! exactly as the book's table (docs/book/src/exit-codes.md) documents them, logs without colour codes when stderr
//! is not a terminal (and with them when it is), `-q`, and JSON log lines for log shippers.

use crate::common;

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{output_within, TempDir, TICKBOX};

fn run(args: &[&str]) -> Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    output_within(cmd, Duration::from_secs(20))
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_endpoint_without_transport_is_one_error_line_with_the_fix() {
    let out = run(&["subscribe", "--connect", "localhost:5556"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected, got:\n{err}");
    assert_eq!(
        lines[0],
        "error: --connect: invalid endpoint `localhost:5556`: no transport: did you mean tcp://localhost:5556?"
    );
}

#[test]
fn a_port_out_of_range_is_an_error_not_a_random_port() {
    let out = run(&[
        "feed",
        "--bind",
        "tcp://127.0.0.1:99999",
        "--duration",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains("--bind"), "{err}");
    assert!(err.contains("99999"), "{err}");
    assert_eq!(err.matches("error:").count(), 1, "{err}");
}

#[test]
fn a_bad_config_file_is_one_error_naming_the_key() {
    let dir = TempDir::new("cli-errors-config");
    let path = dir.0.join("bad.toml");
    std::fs::write(&path, "[feed]\nrat = 5\n").unwrap();
    let out = run(&["--config", path.to_str().unwrap(), "config"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("rat"), "{err}");
    assert!(!err.contains("ERROR"), "the error is printed twice:\n{err}");
}

/// The book's exit-code table (docs/book/src/exit-codes.md) is the program's: every documented code is one the program defines (or clap's usage
/// code 2), every defined code is documented, and the cheap ones are produced for real here.
#[test]
fn book_exit_codes_are_the_programs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let chapter = std::fs::read_to_string(root.join("docs/book/src/exit-codes.md")).unwrap();
    let table = chapter
        .split("# Exit codes")
        .nth(1)
        .expect("the exit-code chapter has its table");
    let documented: BTreeSet<u8> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            l.trim_start_matches('|')
                .split('|')
                .next()?
                .trim()
                .parse()
                .ok()
        })
        .collect();
    let main = std::fs::read_to_string(root.join("tickbox/src/exit_code.rs")).unwrap();
    let mut defined: BTreeSet<u8> = main
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("pub const ")?;
            let (_, value) = rest.split_once(": u8 = ")?;
            value.trim_end_matches(';').parse().ok()
        })
        .collect();
    defined.insert(2); // clap's usage error
    assert_eq!(
        documented, defined,
        "the book's exit codes differ from tickbox's"
    );

    assert_eq!(run(&["config"]).status.code(), Some(0));
    assert_eq!(
        run(&["feed", "--no-such-flag"]).status.code(),
        Some(2),
        "usage error"
    );
    assert_eq!(
        run(&["feed", "--rate", "fast"]).status.code(),
        Some(2),
        "bad value"
    );
    assert_eq!(
        run(&["subscribe", "--connect", "tcp://127.0.0.1:0"])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        run(&[
            "call",
            "--broker",
            "tcp://127.0.0.1:1",
            "--timeout",
            "200ms",
            "--attempts",
            "1",
            "nobody"
        ])
        .status
        .code(),
        Some(4),
        "a request nobody answered"
    );
}

/// A short feed logs at info level: enough to see what the log writer does.
fn feed_args() -> Vec<&'static str> {
    vec![
        "feed",
        "--bind",
        "tcp://127.0.0.1:*",
        "--rate",
        "1k",
        "--duration",
        "300ms",
    ]
}

#[test]
fn logs_to_a_pipe_carry_no_colour_codes_and_q_silences_info() {
    let out = run(&feed_args());
    assert_eq!(out.status.code(), Some(0));
    let err = stderr_of(&out);
    assert!(err.contains("INFO"), "expected info logs:\n{err}");
    assert!(
        !err.contains('\u{1b}'),
        "ANSI codes in piped logs:\n{err:?}"
    );

    let mut quiet = feed_args();
    quiet.push("-q");
    let out = run(&quiet);
    assert_eq!(out.status.code(), Some(0));
    assert!(!stderr_of(&out).contains("INFO"), "{}", stderr_of(&out));
}

#[test]
fn json_log_lines_parse_as_json() {
    let mut args = feed_args();
    args.extend(["--log-format", "json"]);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0));
    let err = stderr_of(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with('{')).collect();
    assert!(!lines.is_empty(), "no JSON log lines:\n{err}");
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v.get("level").is_some(), "{line}");
    }
}

/// On a terminal the same logs are coloured (run under `script`, which gives the command a pseudo-terminal).
#[test]
fn logs_on_a_terminal_are_coloured() {
    let Ok(script) = which("script") else {
        eprintln!("SKIPPED logs_on_a_terminal_are_coloured: no `script` (util-linux) to provide a terminal");
        return;
    };
    let command = format!("{TICKBOX} {}", feed_args().join(" ").replace('*', "'*'"));
    let mut cmd = Command::new(script);
    cmd.args(["-qec", &command, "/dev/null"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = output_within(cmd, Duration::from_secs(20));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("INFO"),
        "no logs seen through the terminal:\n{text}"
    );
    assert!(
        text.contains('\u{1b}'),
        "no colour on a terminal:\n{text:?}"
    );
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        })
        .ok_or(())
}

/// The proxy, the Clone client and the Freelance server check their endpoint flags like every other command.
#[test]
fn lvc_ctl_and_freelance_server_refuse_bad_endpoints_naming_the_flag() {
    for (args, flag) in [
        (vec!["lvc", "--bind", "tcp://127.0.0.1:99999"], "--bind"),
        (vec!["lvc", "--upstream", "localhost:5557"], "--upstream"),
        (
            vec!["ctl", "--connect", "localhost:5556", "get", "/x"],
            "--connect",
        ),
        (
            vec!["freelance-server", "--bind", "tcp://127.0.0.1:70000"],
            "--bind",
        ),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr_of(&out);
        assert!(
            err.starts_with(&format!("error: {flag}: invalid endpoint")),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

/// Count flags have documented maxima: one over is one error line naming the flag and the maximum, and exit 2,
/// at once (`subscribe --workers 10000` took 95 s and 2.95 GB to start a 1 s run).
#[test]
fn a_count_over_its_maximum_is_one_line_and_exit_2_at_once() {
    for args in [
        &["subscribe", "--workers", "10000", "--duration", "1s"][..],
        &["subscribe", "--workers", "257", "--duration", "1s"],
        &["demo", "--shards", "65"],
        &["replay", "--local", "--journal", "x", "--workers", "100000"],
        &["feed", "--symbols", "1000001", "--duration", "1s"],
        &["demo", "--symbols", "100000000"],
        &["feed", "--wait-for-subscribers", "100001"],
        &["bench", "throughput", "--repeats", "1001"],
        &["bench", "throughput", "--sizes", "64,1000000000"],
        &["lvc", "--max-connections", "1000001"],
        &["clone-server", "--max-connections", "99999999"],
    ] {
        let started = std::time::Instant::now();
        let out = run(args);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error:") && first.contains("at most"),
            "{args:?}: {err}"
        );
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error")).count(),
            1,
            "{args:?}: {err}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{args:?}"
        );
    }
    // At the maximum it is accepted (parsing only: --help stops before anything starts).
    assert_eq!(
        run(&["subscribe", "--workers", "256", "--help"])
            .status
            .code(),
        Some(0)
    );
}

/// A long-running server raises its soft file-descriptor limit to the hard one at start (each peer connection
/// costs one; the fault campaign filled an LVC's descriptors with idle TCP connections). Started with a soft
/// limit of 256, the LVC logs the raise (it then stops: no upstream, which is all this needs).
#[test]
#[allow(unsafe_code)] // setrlimit in the child before exec: std has no way to set a child's limits
fn a_long_running_server_raises_its_fd_soft_limit_to_the_hard_limit() {
    use std::os::unix::process::CommandExt;
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through the pointer, a live local.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) };
    assert_eq!(rc, 0);
    if hard.rlim_max <= 256 {
        eprintln!(
            "hard fd limit {} leaves nothing to raise; skipped",
            hard.rlim_max
        );
        return;
    }
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "-v",
        "lvc",
        "--bind",
        "tcp://127.0.0.1:*",
        "--duration",
        "1s",
    ])
    .env_remove("RUST_LOG")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let max = hard.rlim_max;
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit (async-signal-safe) on a
    // local.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: 256,
                rlim_max: max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = output_within(cmd, Duration::from_secs(20));
    let err = stderr_of(&out);
    assert!(
        err.contains(&format!("file-descriptor limit raised from 256 to {max}")),
        "{err}"
    );
}
