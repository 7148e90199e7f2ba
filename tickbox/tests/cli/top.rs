//! `tickbox top` driven as a person would: inside tmux (send-keys, capture-pane) against two live processes, a
//! feed and a subscriber. The screen shows a table for each, redraws in place, fits a narrowed window, and
//! Ctrl-C quits. `--once` prints one snapshot for scripts. Without tmux (`.ci/run` installs it) the tmux test
//! skips and says why.

use crate::common;

use std::process::Command;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::{spawn_piped, KillOnDrop, TICKBOX};

fn metrics_addr(stderr: &Receiver<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let line = stderr
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("metrics endpoint line");
        if let Some(url) = line.strip_prefix("metrics endpoint http://") {
            return url.trim_end_matches("/metrics").to_owned();
        }
    }
}

/// A feed and a subscriber on it, both serving metrics: (guards, feed addr, subscriber addr).
fn two_processes() -> (Vec<KillOnDrop>, String, String) {
    let (feed, _out, feed_err) = spawn_piped(Command::new(TICKBOX).args([
        "feed",
        "--bind",
        "tcp://127.0.0.1:*",
        "--rate",
        "1k",
        "--duration",
        "30s",
        "--json",
        "--metrics",
        "0",
    ]));
    let feed_addr = metrics_addr(&feed_err);
    let ep = loop {
        let line = feed_err
            .recv_timeout(Duration::from_secs(10))
            .expect("feed endpoint");
        if line.starts_with("feed shard ") {
            break line.rsplit(' ').next().unwrap().to_owned();
        }
    };
    let (sub, _sout, sub_err) = spawn_piped(Command::new(TICKBOX).args([
        "subscribe",
        "--connect",
        &ep,
        "--json",
        "--duration",
        "30s",
        // This test is about `top`; a snail firing on a loaded machine would end the subscriber under it.
        "--max-lateness",
        "0",
        "--metrics",
        "0",
    ]));
    let sub_addr = metrics_addr(&sub_err);
    (vec![feed, sub], feed_addr, sub_addr)
}

#[test]
fn top_once_prints_a_table_per_role_and_says_who_is_unreachable() {
    let (_procs, feed, sub) = two_processes();
    let out = common::output_within(
        {
            let mut c = Command::new(TICKBOX);
            c.args([
                "top",
                "--once",
                "--interval",
                "300ms",
                "--width",
                "100",
                &feed,
                &sub,
                "127.0.0.1:1",
            ]);
            c
        },
        Duration::from_secs(15),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "one process is unreachable: {text}"
    );
    assert!(
        text.contains("== feed (1 process)") && text.contains("== subscribe (1 process)"),
        "{text}"
    );
    assert!(text.contains(&feed) && text.contains(&sub), "{text}");
    assert!(
        text.contains("unreachable") && text.contains("127.0.0.1:1 "),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
}

/// A tmux server of our own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    fn run(&self, args: &[&str]) -> String {
        let out = common::output_within(
            {
                let mut c = self.cmd();
                c.args(args);
                c
            },
            Duration::from_secs(10),
        );
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    /// Waits (bounded) until the screen satisfies `cond`; returns it.
    fn await_screen(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let screen = self.screen();
            if cond(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the screen shows\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

fn rate_of(screen: &str, addr: &str) -> Option<String> {
    screen
        .lines()
        .find(|l| l.starts_with(addr))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
}

#[test]
fn top_under_tmux_shows_both_processes_live_fits_the_window_and_quits_on_ctrl_c() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIP top_under_tmux: no `tmux` on PATH (Debian's `tmux`; .ci/run installs it)");
        return;
    }
    let (_procs, feed, sub) = two_processes();
    let tmux = Tmux {
        socket: format!("tickbox-top-{}", std::process::id()),
    };
    let command =
        format!("{TICKBOX} top --interval 200ms {feed} {sub}; echo top-exited-$?; sleep 30");
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "120",
        "-y",
        "40",
        &command,
    ]);
    let screen = tmux.await_screen("both tables with live rates", |s| {
        s.contains("== feed (1 process)")
            && s.contains("== subscribe (1 process)")
            && rate_of(s, &feed).is_some_and(|r| r.ends_with("/s") && r != "0/s")
            && rate_of(s, &sub).is_some_and(|r| r.ends_with("/s") && r != "0/s")
    });
    assert!(screen.contains("p99 late"), "{screen}");
    // Redrawn in place: the title is on the first line each time, never scrolled into a pile of copies.
    assert_eq!(screen.matches("tickbox top:").count(), 1, "{screen}");
    assert!(
        screen.lines().next().unwrap().starts_with("tickbox top:"),
        "{screen}"
    );
    // A narrower window: the next redraw fits it, keeping the most important columns.
    tmux.run(&["resize-window", "-t", "top", "-x", "52"]);
    let narrow = tmux.await_screen("the view fitted to 52 columns", |s| {
        s.contains("== subscribe") && !s.contains("malformed") && s.contains("p99 late")
    });
    // Nothing wrapped: the title is cut to the width, not continued on a second line.
    assert!(narrow.lines().next().unwrap().ends_with('~'), "{narrow}");
    assert!(narrow.lines().nth(1).unwrap().trim().is_empty(), "{narrow}");
    assert!(
        narrow.lines().all(|l| l.trim_end().chars().count() <= 52),
        "{narrow}"
    );
    tmux.run(&["send-keys", "-t", "top", "C-c"]);
    tmux.await_screen("top quits on Ctrl-C", |s| s.contains("top-exited-0"));
}
