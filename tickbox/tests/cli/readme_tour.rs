//! README's tour after "Two processes" (which `readme_two_process.rs` runs), as written: the commands are read from
//! README itself, their fixed ports swapped for free ones read back from each process, the journal `day` put in a
//! temporary directory, and `--json` added where the test reads a summary. Runs that README leaves to Ctrl-C are
//! stopped with SIGINT once they have shown what README says they show.

use crate::common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::{signal, spawn_piped, KillOnDrop, TempDir, TICKBOX};

const README: &str = include_str!("../../../README.md");

/// The `cargo run --release -- …` command lines of README's section `title`, as argument lists.
fn section_commands(title: &str) -> Vec<Vec<String>> {
    let section = README
        .split(&format!("\n## {title}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("README has a {title:?} section"));
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .split("```sh")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .flat_map(str::lines)
        .filter_map(|line| line.trim().strip_prefix("cargo run --release -- "))
        .map(|line| {
            // A trailing `# comment` is the reader's, not the shell's.
            let line = line.split(" #").next().unwrap_or(line);
            line.split_whitespace().map(str::to_owned).collect()
        })
        .collect()
}

/// README's fixed endpoints and journal name mapped to this run's: endpoints a process bound are learnt from
/// what it prints; every other endpoint in a command is one it binds, which gets a free port.
struct Tour {
    endpoints: HashMap<String, String>,
    journal: String,
    _dir: TempDir,
}

/// One of the tour's processes, with its output read as it comes.
struct Running {
    child: KillOnDrop,
    out: Receiver<String>,
    err: Receiver<String>,
}

const BIND_FLAGS: &[&str] = &["--bind", "--tap", "--snapshot"];

impl Tour {
    fn new() -> Tour {
        let dir = TempDir::new("readme-tour");
        Tour {
            journal: dir.path().join("day").display().to_string(),
            endpoints: HashMap::new(),
            _dir: dir,
        }
    }

    /// `args` with README's endpoints and journal replaced; returns the README endpoints this command binds, in
    /// order of appearance.
    fn localize(&self, args: &[String]) -> (Vec<String>, Vec<String>) {
        let mut binds = Vec::new();
        let mut out = Vec::new();
        for (i, arg) in args.iter().enumerate() {
            let flag = i.checked_sub(1).map(|p| args[p].as_str());
            if arg == "day" {
                out.push(self.journal.clone());
            } else if arg.contains("tcp://") {
                let eps: Vec<String> = arg
                    .split(',')
                    .map(|ep| match self.endpoints.get(ep) {
                        Some(actual) if !flag.is_some_and(|f| BIND_FLAGS.contains(&f)) => {
                            actual.clone()
                        }
                        _ => {
                            binds.push(ep.to_owned());
                            "tcp://127.0.0.1:*".to_owned()
                        }
                    })
                    .collect();
                out.push(eps.join(","));
            } else {
                out.push(arg.clone());
            }
        }
        (out, binds)
    }

    /// Starts `args` (localized, plus `extra`) and learns the endpoints it binds from the lines that name them.
    fn start(&mut self, args: &[String], extra: &[&str]) -> Running {
        let (mut args, binds) = self.localize(args);
        args.extend(extra.iter().map(|s| s.to_string()));
        let (child, out, err) = spawn_piped(Command::new(TICKBOX).args(&args));
        let running = Running { child, out, err };
        let mut learnt = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(15);
        while learnt.len() < binds.len() {
            assert!(
                Instant::now() < deadline,
                "{args:?} did not print its endpoints (have {learnt:?})"
            );
            for line in running.lines(Duration::from_millis(50)) {
                if let Some(ep) = bound_endpoint(&line) {
                    learnt.push(ep);
                }
            }
        }
        // A command's bound endpoints are printed in the order its flags name them (feed shards in order; the
        // LVC prints subscribers, tap, snapshot, and its flags are given in that order below).
        let order = bind_order(&args);
        for (readme, actual) in binds
            .into_iter()
            .zip(order.into_iter().map(|i| learnt[i].clone()))
        {
            self.endpoints.insert(readme, actual);
        }
        running
    }
}

/// For the LVC, where its output order (subscribers, tap, snapshot) differs from README's flag order, the index
/// in the output of each bind in flag order; identity elsewhere.
fn bind_order(args: &[String]) -> Vec<usize> {
    if args.first().map(String::as_str) != Some("lvc") {
        let n = args
            .iter()
            .filter(|a| a.contains("127.0.0.1:*"))
            .map(|a| a.split(',').count())
            .sum();
        return (0..n).collect();
    }
    let printed = ["--bind", "--tap", "--snapshot"];
    let present: Vec<&str> = printed
        .iter()
        .copied()
        .filter(|f| args.iter().any(|a| a == f))
        .collect();
    args.iter()
        .filter(|a| present.contains(&a.as_str()))
        .map(|f| present.iter().position(|p| p == f).unwrap())
        .collect()
}

/// The endpoint a line says a process bound: `feed shard … endpoint EP`, `lvc subscribers|tap|snapshot EP`,
/// `replay: shard N publishing on EP`.
fn bound_endpoint(line: &str) -> Option<String> {
    let bound = line.starts_with("feed shard")
        || line.starts_with("lvc subscribers")
        || line.starts_with("lvc tap")
        || line.starts_with("lvc snapshot")
        || line.starts_with("replay: shard");
    bound.then(|| common::endpoint_in(line)).flatten()
}

impl Running {
    /// Lines from stdout and stderr that arrive within `wait`.
    fn lines(&self, wait: Duration) -> Vec<String> {
        let mut lines: Vec<String> = self.out.try_iter().collect();
        lines.extend(self.err.try_iter());
        if lines.is_empty() {
            if let Ok(line) = self.out.recv_timeout(wait) {
                lines.push(line);
            }
            lines.extend(self.err.try_iter());
        }
        lines
    }

    /// Waits at most `limit` for the exit; returns the status and every stdout line.
    fn finish(mut self, limit: Duration) -> (std::process::ExitStatus, Vec<String>, Vec<String>) {
        let status = self.child.wait_exit(limit, "a tour command did not exit");
        let out: Vec<String> = self.out.iter().collect();
        let err: Vec<String> = self.err.iter().collect();
        (status, out, err)
    }

    fn interrupt(self, limit: Duration) -> (std::process::ExitStatus, Vec<String>, Vec<String>) {
        signal(self.child.0.id(), "INT");
        self.finish(limit)
    }
}

/// The last stdout line that is a JSON object.
fn json_of(lines: &[String]) -> serde_json::Value {
    lines
        .iter()
        .rev()
        .find_map(|l| match serde_json::from_str(l) {
            Ok(v @ serde_json::Value::Object(_)) => Some(v),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no JSON summary in {lines:?}"))
}

fn run_to_end(tour: &Tour, args: &[String]) -> (std::process::ExitStatus, String) {
    let (args, _) = tour.localize(args);
    let out = common::output_within(
        {
            let mut c = Command::new(TICKBOX);
            c.args(&args);
            c
        },
        Duration::from_secs(20),
    );
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn readme_record_and_replay_run_as_written() {
    let _turn = common::readme_tour_turn();
    let feed_cmd = section_commands("Two processes")
        .into_iter()
        .next()
        .expect("the tour's feed");
    let cmds = section_commands("Record and replay");
    let find = |verb: &[&str]| {
        cmds.iter()
            .find(|c| c.iter().take(verb.len()).eq(verb.iter()))
            .unwrap_or_else(|| panic!("README's record section has `{}`", verb.join(" ")))
            .clone()
    };
    let mut tour = Tour::new();
    let feed = tour.start(&feed_cmd, &[]);

    // Record for a couple of seconds, then Ctrl-C, as README says.
    let record = tour.start(&find(&["record"]), &["--json"]);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        record.lines(Duration::from_millis(100));
    }
    let (status, out, _) = record.interrupt(Duration::from_secs(15));
    assert!(status.success(), "record exited {status:?}");
    let recorded = json_of(&out);
    let records = recorded["recorded"]
        .as_u64()
        .unwrap_or_else(|| panic!("record's summary counts records: {recorded}"));
    // What the recorder lost (the feed drops for a slow reader by default; on a loaded machine it can) is counted
    // here and must reach the replay's subscriber as recorded gaps.
    let recorder_missing = recorded["missing"].as_u64().expect("missing");
    assert!(records > 10_000, "recorded only {records}: {recorded}");
    let (status, _, _) = feed.interrupt(Duration::from_secs(15));
    assert!(status.success(), "feed exited {status:?}");

    for verb in [&["journal", "info"][..], &["journal", "verify"]] {
        let (status, text) = run_to_end(&tour, &find(verb));
        assert!(
            status.success(),
            "`{}` exited {status:?}: {text}",
            verb.join(" ")
        );
    }
    let (_, verify) = run_to_end(&tour, &find(&["journal", "verify"]));
    let verdict = if recorder_missing == 0 {
        "OK:"
    } else {
        "GAPPY:"
    };
    assert!(
        verify.contains(&format!("verify        {verdict}")),
        "{verify}"
    );

    // Replay at full speed into a subscriber that leaves once the stream goes quiet.
    let replay = tour.start(&find(&["replay"]), &[]);
    let sub = tour.start(&find(&["subscribe"]), &["--json"]);
    let (status, out, err) = sub.finish(Duration::from_secs(60));
    assert!(
        status.success(),
        "the subscriber exited {status:?}: {err:?}"
    );
    let summary = json_of(&out);
    assert_eq!(
        summary["data_received"].as_u64(),
        Some(records),
        "the subscriber gets every recorded record: {summary}"
    );
    assert_eq!(
        summary["missing"], 0,
        "the replay itself loses nothing: {summary}"
    );
    assert_eq!(
        summary["recorded_gaps"].as_u64(),
        Some(recorder_missing),
        "the recorder's holes arrive as recorded gaps: {summary}"
    );
    let (status, _, err) = replay.finish(Duration::from_secs(30));
    assert!(status.success(), "replay exited {status:?}: {err:?}");
}

#[test]
fn readme_lvc_late_joiner_gets_every_last_value() {
    let _turn = common::readme_tour_turn();
    let cmds = section_commands("The Last Value Cache and a late joiner");
    assert_eq!(cmds.len(), 4, "feed, lvc, subscribe, tap: {cmds:?}");
    let mut tour = Tour::new();
    // Terminal 1, then terminal 2 well after it (README's order): the pathological publisher waits for the LVC.
    let feed = tour.start(&cmds[0], &[]);
    std::thread::sleep(Duration::from_millis(500));
    let lvc = tour.start(&cmds[1], &["--json"]);
    // Terminal 3, "any time later": once the proxy holds the burst.
    let sub = tour.start(&cmds[2], &["--json"]);
    let mut snapshot_line = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while snapshot_line.is_none() && Instant::now() < deadline {
        snapshot_line = sub
            .lines(Duration::from_millis(100))
            .into_iter()
            .find(|l| l.contains("LVC snapshot"));
    }
    let line = snapshot_line.expect("the subscriber reports its snapshot");
    assert!(line.contains("LVC snapshot complete"), "{line}");
    // Terminal 4: the tap's table runs and stops cleanly.
    let tap = tour.start(&cmds[3], &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let (status, _, err) = tap.interrupt(Duration::from_secs(10));
    assert!(status.success(), "tap exited {status:?}: {err:?}");

    let (status, out, _) = sub.interrupt(Duration::from_secs(10));
    assert!(status.success(), "subscribe exited {status:?}");
    let summary = json_of(&out);
    let snapshot = &summary["lvc_snapshot"];
    assert_eq!(snapshot["status"], "complete", "{summary}");
    assert_eq!(
        snapshot["received"], 2000,
        "every topic's last value: {snapshot}"
    );
    assert_eq!(snapshot["proxy_missed"], 0, "{snapshot}");

    let (status, out, _) = lvc.interrupt(Duration::from_secs(10));
    assert!(status.success(), "lvc exited {status:?}");
    let lvc_summary = json_of(&out);
    assert_eq!(lvc_summary["schema_version"], 1);
    let stats = &lvc_summary["stats"];
    assert_eq!(stats["topics_cached"], 2000, "{lvc_summary}");
    assert_eq!(stats["sequences"]["missing"], 0, "{lvc_summary}");
    assert_eq!(stats["sequences"]["missed_before_join"], 0, "{lvc_summary}");
    let publishers = lvc_summary["publishers"].as_array().expect("publishers");
    assert_eq!(publishers.len(), 1, "{lvc_summary}");
    assert!(publishers[0]["received"].as_u64().unwrap() >= 2000);
    let (status, _, _) = feed.interrupt(Duration::from_secs(15));
    assert!(status.success(), "feed exited {status:?}");
}
