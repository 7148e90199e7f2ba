//! Per-NIC subscribers, for real: two network namespaces joined by two veth pairs, a two-shard `tickbox feed` in
//! one and `tickbox subscribe --nic` in the other, and the kernel's per-interface byte counters as the witness.
//!
//! The feed binds both shards on one service address (on the feed namespace's loopback) reachable over either
//! link. The subscriber namespace routes that address over NIC 0 by default, and over NIC 1 for traffic sourced
//! from NIC 1's address (policy routing: the usual multi-homed set-up). So without `--nic` both streams cross
//! NIC 0, and only a working source-interface connect (`tcp://IFACE:0;HOST:PORT`, which the stock bundled libzmq
//! accepts and then silently never connects) puts shard 1's stream on NIC 1. The test runs both and compares.
//!
//! Needs root and iproute2 (`.ci/run` installs it); skips with the reason printed when it cannot make a namespace.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{output_within, KillOnDrop, TICKBOX};

const FEED_ADDR: &str = "10.91.9.1";

struct Topology {
    feed_ns: String,
    sub_ns: String,
    sub_nics: [String; 2],
}

impl Topology {
    fn create() -> Result<Self, String> {
        let id = std::process::id() % 100_000;
        let topo = Topology {
            feed_ns: format!("tbxfeed{id}"),
            sub_ns: format!("tbxsub{id}"),
            sub_nics: [format!("tbs0_{id}"), format!("tbs1_{id}")],
        };
        let feed_nics = [format!("tbf0_{id}"), format!("tbf1_{id}")];
        ip(&["netns", "add", &topo.feed_ns])?;
        // From here on, Drop cleans up whatever was made.
        ip(&["netns", "add", &topo.sub_ns])?;
        for (i, (feed_nic, sub_nic)) in feed_nics.iter().zip(&topo.sub_nics).enumerate() {
            ip(&[
                "link", "add", feed_nic, "type", "veth", "peer", "name", sub_nic,
            ])?;
            ip(&["link", "set", feed_nic, "netns", &topo.feed_ns])?;
            ip(&["link", "set", sub_nic, "netns", &topo.sub_ns])?;
            let subnet = i + 1;
            ip(&[
                "-n",
                &topo.feed_ns,
                "addr",
                "add",
                &format!("10.91.{subnet}.1/24"),
                "dev",
                feed_nic,
            ])?;
            ip(&[
                "-n",
                &topo.sub_ns,
                "addr",
                "add",
                &format!("10.91.{subnet}.2/24"),
                "dev",
                sub_nic,
            ])?;
            ip(&["-n", &topo.feed_ns, "link", "set", feed_nic, "up"])?;
            ip(&["-n", &topo.sub_ns, "link", "set", sub_nic, "up"])?;
        }
        ip(&["-n", &topo.feed_ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &topo.sub_ns, "link", "set", "lo", "up"])?;
        ip(&[
            "-n",
            &topo.feed_ns,
            "addr",
            "add",
            &format!("{FEED_ADDR}/32"),
            "dev",
            "lo",
        ])?;
        let feed_host = format!("{FEED_ADDR}/32");
        ip(&[
            "-n",
            &topo.sub_ns,
            "route",
            "add",
            &feed_host,
            "via",
            "10.91.1.1",
            "dev",
            &topo.sub_nics[0],
        ])?;
        ip(&[
            "-n",
            &topo.sub_ns,
            "rule",
            "add",
            "from",
            "10.91.2.2",
            "table",
            "102",
        ])?;
        ip(&[
            "-n",
            &topo.sub_ns,
            "route",
            "add",
            &feed_host,
            "via",
            "10.91.2.1",
            "dev",
            &topo.sub_nics[1],
            "table",
            "102",
        ])?;
        Ok(topo)
    }

    fn rx_bytes(&self, nic: usize) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/rx_bytes", self.sub_nics[nic]);
        let out = Command::new("ip")
            .args(["netns", "exec", &self.sub_ns, "cat", &path])
            .output()
            .expect("read rx_bytes");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("rx_bytes is a number")
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Deleting a namespace destroys its veth ends and, with them, their peers.
        let _ = ip(&["netns", "del", &self.sub_ns]);
        let _ = ip(&["netns", "del", &self.feed_ns]);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn subscribe(topo: &Topology, endpoints: &[String], nics: Option<&str>) -> (u64, u64, String) {
    let before = [topo.rx_bytes(0), topo.rx_bytes(1)];
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &topo.sub_ns, TICKBOX, "subscribe"])
        .args(["--connect", &endpoints.join(",")])
        .args(["--duration", "2s", "--workers", "1"]);
    if let Some(nics) = nics {
        cmd.args(["--nic", nics]);
    }
    let out = output_within(cmd, Duration::from_secs(20));
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "subscribe failed: {report}");
    (
        topo.rx_bytes(0) - before[0],
        topo.rx_bytes(1) - before[1],
        report,
    )
}

#[test]
fn each_shard_streams_over_its_own_nic() {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    #[allow(unsafe_code)]
    let is_root = unsafe { libc::geteuid() } == 0;
    if !is_root {
        eprintln!(
            "SKIPPED each_shard_streams_over_its_own_nic: needs root to create network namespaces"
        );
        return;
    }
    let topo = match Topology::create() {
        Ok(topo) => topo,
        Err(reason) => {
            eprintln!(
                "SKIPPED each_shard_streams_over_its_own_nic: cannot build namespaces: {reason}"
            );
            return;
        }
    };

    let bind = format!("tcp://{FEED_ADDR}:*,tcp://{FEED_ADDR}:*");
    let mut feed = KillOnDrop(
        Command::new("ip")
            .args(["netns", "exec", &topo.feed_ns, TICKBOX, "feed"])
            .args(["--bind", &bind, "--rate", "20000", "--duration", "15s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn feed"),
    );
    let stdout = feed.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(endpoint) = line
                .split_whitespace()
                .skip_while(|w| *w != "endpoint")
                .nth(1)
            {
                let _ = tx.send(endpoint.to_owned());
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut endpoints = Vec::new();
    while endpoints.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        endpoints.push(
            rx.recv_timeout(left)
                .expect("feed printed both shard endpoints"),
        );
    }

    // Control: without --nic the route sends both shards over NIC 0.
    let (nic0, nic1, report) = subscribe(&topo, &endpoints, None);
    assert!(
        nic0 > 200_000,
        "control run moved only {nic0} bytes over NIC 0\n{report}"
    );
    assert!(
        nic1 < nic0 / 20,
        "control run: NIC 1 carried {nic1} bytes vs {nic0} on NIC 0\n{report}"
    );

    // Per-NIC: shard 0 from NIC 0, shard 1 from NIC 1.
    let nics = format!("{},{}", topo.sub_nics[0], topo.sub_nics[1]);
    let (nic0, nic1, report) = subscribe(&topo, &endpoints, Some(&nics));
    eprintln!("per-NIC run: NIC 0 received {nic0} bytes, NIC 1 received {nic1} bytes");
    assert!(
        nic0 > 100_000 && nic1 > 100_000,
        "NIC 0 {nic0} B, NIC 1 {nic1} B\n{report}"
    );
    // Shards carry a similar share of the symbols, so neither NIC may carry both streams.
    let (lo, hi) = (nic0.min(nic1), nic0.max(nic1));
    assert!(
        lo * 4 > hi,
        "streams not split across NICs: NIC 0 {nic0} B, NIC 1 {nic1} B\n{report}"
    );
    drop(feed);
}
