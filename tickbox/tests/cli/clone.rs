//! `tickbox clone-server` and `tickbox ctl` as real processes.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{KillOnDrop, TICKBOX};

fn spawn_server(args: &[&str]) -> (KillOnDrop, String) {
    let mut child = Command::new(TICKBOX)
        .arg("clone-server")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn clone-server");
    let stdout = child.stdout.take().unwrap();
    let proc = KillOnDrop(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("ready line");
    assert!(
        line.starts_with("clone-server port="),
        "unexpected ready line {line:?}"
    );
    (proc, line)
}

fn port_of(line: &str) -> u16 {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
        .expect("port in ready line")
}

fn ctl(server: &str, args: &[&str]) -> Output {
    Command::new(TICKBOX)
        .args(["ctl", "--connect", server, "--timeout", "5s"])
        .args(args)
        .stderr(Stdio::piped())
        .output()
        .expect("run ctl")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn ctl_set_get_ls_del_watch_against_a_real_server() {
    let (_server, line) =
        spawn_server(&["--port", "0", "--interface", "127.0.0.1", "--hugz", "100ms"]);
    let server = format!("tcp://127.0.0.1:{}", port_of(&line));

    // A watcher process started first sees the changes that follow.
    let watcher = Command::new(TICKBOX)
        .args([
            "ctl",
            "--connect",
            &server,
            "watch",
            "/app/",
            "--count",
            "3",
            "--for",
            "15s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watcher = KillOnDrop(watcher);
    // The watcher says when it is synced and subscribed: the changes below are made after that.
    let mut ready = BufReader::new(watcher.0.stderr.take().unwrap());
    let (tx, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        while ready.read_line(&mut line).unwrap_or(0) > 0 {
            if line.starts_with("watching") {
                let _ = tx.send(());
            }
            line.clear();
        }
    });
    said.recv_timeout(Duration::from_secs(10))
        .expect("the watcher says it is watching");

    let o = ctl(&server, &["set", "/app/color", "blue"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let seq: u64 = stdout(&o).trim().parse().expect("set prints the sequence");
    assert!(seq >= 1);
    assert!(ctl(&server, &["set", "/app/size", "3"]).status.success());
    let o = ctl(&server, &["get", "/app/color"]);
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "blue\n"));
    let o = ctl(&server, &["ls", "/app/"]);
    assert_eq!(stdout(&o), "/app/color\tblue\n/app/size\t3\n");
    let o = ctl(&server, &["del", "/app/color"]);
    assert!(o.status.success());
    let o = ctl(&server, &["get", "/app/color"]);
    assert_eq!(o.status.code(), Some(1), "absent key exits 1");

    let mut watcher = watcher;
    let out = {
        watcher.wait_exit(
            Duration::from_secs(10),
            "watch did not stop after --count 3",
        );
        let mut s = String::new();
        std::io::Read::read_to_string(watcher.0.stdout.as_mut().unwrap(), &mut s).unwrap();
        s
    };
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(&lines[0][1..], ["/app/color", "blue"]);
    assert_eq!(&lines[1][1..], ["/app/size", "3"]);
    assert_eq!(&lines[2][1..], ["/app/color", "-"]);
}

#[test]
fn ctl_times_out_with_exit_code_4_when_no_server_answers() {
    // A TCP listener that never speaks ZMTP: connections succeed, nothing answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let t = Instant::now();
    let o = Command::new(TICKBOX)
        .args([
            "ctl",
            "--connect",
            &format!("tcp://127.0.0.1:{port}"),
            "--timeout",
            "500ms",
            "get",
            "/x",
        ])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// Finds P such that P, P+1, P+2 are free right now (released before the server binds them).
fn free_triple() -> u16 {
    for _ in 0..100 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p > u16::MAX - 3 {
            continue;
        }
        let a = std::net::TcpListener::bind(("127.0.0.1", p + 1));
        let b = std::net::TcpListener::bind(("127.0.0.1", p + 2));
        if a.is_ok() && b.is_ok() {
            return p;
        }
    }
    panic!("no free port triple");
}

/// The keys a Clone server at metrics address `addr` holds, as its metrics say.
fn backup_keys(addr: &str) -> Option<f64> {
    let (code, body) =
        tickbox_metrics::fetch(addr, "/metrics", Duration::from_secs(2), 1 << 20).ok()?;
    (code == 200).then_some(())?;
    tickbox_metrics::text::parse(&body)
        .iter()
        .find(|s| s.name == "tickbox_keys" && s.label("role") == Some("clone-server"))
        .map(|s| s.value)
}

#[test]
fn killing_the_primary_process_fails_over_to_the_backup() {
    // ipc endpoints for the state sockets: unique per run, removed at the end.
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir =
        std::env::temp_dir().join(format!("tickbox-cli-clone-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ps = format!("ipc://{}/p-state", dir.display());
    let bs = format!("ipc://{}/b-state", dir.display());
    let (pp, bp) = (free_triple(), free_triple());
    let primary_base = format!("tcp://127.0.0.1:{pp}");
    let backup_base = format!("tcp://127.0.0.1:{bp}");
    let common = [
        "--interface",
        "127.0.0.1",
        "--hugz",
        "100ms",
        "--heartbeat",
        "100ms",
    ];
    let pp_s = pp.to_string();
    let bp_s = bp.to_string();
    let mut pargs = vec![
        "--primary",
        "--port",
        &pp_s,
        "--peer",
        &backup_base,
        "--state-bind",
        &ps,
        "--state-peer",
        &bs,
    ];
    pargs.extend_from_slice(&common);
    let mut bargs = vec![
        "--backup",
        "--port",
        &bp_s,
        "--peer",
        &primary_base,
        "--state-bind",
        &bs,
        "--state-peer",
        &ps,
    ];
    bargs.extend_from_slice(&common);
    // The backup serves its counters, so the test can see its mirror.
    bargs.extend_from_slice(&["--metrics", "0"]);
    let (primary, _) = spawn_server(&pargs);
    let (_backup, backup_out, backup_err) =
        common::spawn_piped(Command::new(TICKBOX).arg("clone-server").args(&bargs));
    common::line_after(&backup_out, "clone-server port=");
    let metrics = common::line_after(&backup_err, "metrics endpoint http://");
    let metrics = metrics.trim_end_matches("/metrics");
    let both = format!("{primary_base},{backup_base}");
    // The pair has settled once each says so on its state socket.
    let ctx = zmq::Context::new();
    for (state_pub, state) in [
        (&ps, tickbox_bstar::State::Active),
        (&bs, tickbox_bstar::State::Passive),
    ] {
        assert!(
            tickbox_testkit::await_published(&ctx, state_pub, Duration::from_secs(10), |f| {
                f == state.wire()
            }),
            "{state_pub} never said {state:?}"
        );
    }

    let o = ctl(&both, &["set", "/ha/before", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Once the passive backup has mirrored it.
    assert!(
        tickbox_testkit::wait_until(Duration::from_secs(5), || {
            backup_keys(metrics) == Some(1.0)
        }),
        "the backup never mirrored /ha/before"
    );
    drop(primary); // SIGKILL

    let t = Instant::now();
    let o = ctl(&both, &["set", "/ha/after", "2"]);
    assert!(
        o.status.success(),
        "set after failover: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("ctl set after primary kill took {:?}", t.elapsed());
    let o = ctl(&backup_base, &["ls", "/ha/"]);
    assert_eq!(stdout(&o), "/ha/after\t2\n/ha/before\t1\n");
    let _ = std::fs::remove_dir_all(&dir);
}
