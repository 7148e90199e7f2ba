//! A real ZooKeeper server for tests (feature `testing`): the Debian `zookeeper` package's standalone server
//! started on a free loopback port with its own data directory, ready when it answers `ruok`, killed on drop,
//! restartable on the same port and data directory (sessions survive a restart, which is how connection-loss
//! tests are made). [`ZkEnsemble`] starts a three-node (quorum) ensemble the same way, for outage tests that stop
//! the whole ensemble or one node at a time.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the Debian package puts the server jar.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// The classpath the Debian package's scripts use (the jars and the configuration directory), with
/// `slf4j-simple` named first: the jar directory holds several SLF4J bindings and the one SLF4J picked from it was
/// the no-op one, so a server that failed to start (a port already in use) left no reason in its log.
pub const CLASSPATH: &str =
    "/usr/share/java/slf4j-simple.jar:/usr/share/java/*:/etc/zookeeper/conf";
/// Server tick (ms): sessions may be negotiated between 2 and 20 ticks (0.5 s to 5 s), short enough for
/// session-expiry tests to finish quickly.
pub const TICK_MS: u64 = 250;

/// Why a ZooKeeper server cannot run here (`None` when it can): java missing, or the jar missing.
pub fn unavailable() -> Option<String> {
    if !Path::new(ZOOKEEPER_JAR).exists() {
        return Some(format!(
            "{ZOOKEEPER_JAR} missing (install the Debian `zookeeper` package; .ci/run does)"
        ));
    }
    match Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("`java -version` failed: {s}")),
        Err(e) => Some(format!("no java on PATH: {e}")),
    }
}

/// A running standalone ZooKeeper server.
#[derive(Debug)]
pub struct ZkServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    starts: u32,
}

impl ZkServer {
    /// Starts a server (fsync off unless `TICKBOX_ZK_FORCE_SYNC=yes`) and waits until it answers `ruok`.
    pub fn start() -> std::io::Result<ZkServer> {
        let dir = tempfile::Builder::new().prefix("tickbox-zk-").tempdir()?;
        std::fs::create_dir_all(dir.path().join("data"))?;
        let port = free_ports(1)?[0];
        let mut s = ZkServer {
            port,
            dir,
            child: None,
            starts: 0,
        };
        s.spawn()?;
        Ok(s)
    }

    /// Starts a server, or prints why it cannot run here and returns `None` (tests then skip). A server that
    /// can run but fails to start is a test failure, not a skip.
    pub fn start_or_skip(test: &str) -> Option<ZkServer> {
        if let Some(why) = unavailable() {
            eprintln!("SKIP {test}: ZooKeeper cannot run here: {why}");
            return None;
        }
        match ZkServer::start() {
            Ok(s) => Some(s),
            Err(e) => panic!("{test}: ZooKeeper failed to start: {e}"),
        }
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        self.starts += 1;
        let args = [
            self.port.to_string(),
            self.dir.path().join("data").display().to_string(),
            TICK_MS.to_string(),
        ];
        // fsync off by default (see `force_sync`): tests measure coordination, not this machine's disk.
        self.child = Some(java(
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            &args,
            &self.log_path(),
        )?);
        self.wait_ready(Duration::from_secs(30))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("server-{}.log", self.starts))
    }

    fn wait_ready(&mut self, within: Duration) -> std::io::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                    let tail = log_tail(&log);
                    return Err(std::io::Error::other(format!(
                        "server exited ({status}); log tail:\n{tail}"
                    )));
                }
            }
            if self.four_letter("ruok").as_deref() == Some("imok") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "server not ready within {within:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends a four-letter word (`ruok`, `srvr`, `mntr`, `cons`) and returns the answer.
    pub fn four_letter(&self, word: &str) -> Option<String> {
        four_letter(self.port, word)
    }

    /// `127.0.0.1:PORT`, for [`crate::Coord::connect`].
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL) and waits for it; clients see a connection loss.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and data directory (after [`ZkServer::stop`], or kills it
    /// first). Sessions and their ephemeral nodes survive if clients reconnect within their timeout.
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.stop();
        self.spawn()
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `yes` when `TICKBOX_ZK_FORCE_SYNC=yes`, else `no`.
pub fn force_sync() -> &'static str {
    match std::env::var("TICKBOX_ZK_FORCE_SYNC").as_deref() {
        Ok("yes") => "yes",
        _ => "no",
    }
}

/// `n` distinct free loopback ports for servers that are stopped and started again on the same port.
///
/// They come from below the kernel's ephemeral range, never from `127.0.0.1:0`: while a server is down its
/// port is just a free port, and one from the ephemeral range can be taken as the local end of any outgoing
/// connection (a client reconnecting, a peer, another test). The restarted server then fails to bind and exits,
/// which is how a whole-ensemble outage test once failed. Below the range only an explicit bind takes a port; a
/// process-wide cursor (starting at a place set by the process id) keeps this process's tests apart.
fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOWEST: u16 = 10_000;
    static CURSOR: AtomicU32 = AtomicU32::new(u32::MAX);
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let span = u32::from(ephemeral_from.saturating_sub(LOWEST));
    // Every listener is held until all `n` are found, so that no two are the same; the caller's servers bind
    // them just after.
    let mut held = Vec::with_capacity(n);
    if span < 1_000 {
        // An unusual kernel setting leaves no room below the range: take what the kernel gives.
        for _ in 0..n {
            held.push(TcpListener::bind("127.0.0.1:0")?);
        }
    } else {
        let _ = CURSOR.compare_exchange(
            u32::MAX,
            std::process::id().wrapping_mul(7_919) % span,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        for _ in 0..span {
            if held.len() == n {
                break;
            }
            let port = LOWEST + (CURSOR.fetch_add(1, Ordering::Relaxed) % span) as u16;
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                held.push(l);
            }
        }
    }
    if held.len() < n {
        return Err(std::io::Error::other(format!(
            "fewer than {n} free ports between {LOWEST} and {ephemeral_from}"
        )));
    }
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// The last 20 lines of a server's log, in order.
fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// One `java` command line for a ZooKeeper server (`main` class, its arguments), output to `log`.
fn java(main: &str, args: &[String], log: &Path) -> std::io::Result<Child> {
    let log = std::fs::File::create(log)?;
    Command::new("java")
        .args([
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=ruok,srvr,mntr,cons",
        ])
        .arg(format!("-Dzookeeper.forceSync={}", force_sync()))
        .args(["-cp", CLASSPATH, main])
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
}

fn four_letter(port: u16, word: &str) -> Option<String> {
    let mut s =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
            .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(word.as_bytes()).ok()?;
    let mut out = String::new();
    s.take(1 << 20).read_to_string(&mut out).ok()?;
    Some(out)
}

/// One node of a [`ZkEnsemble`].
#[derive(Debug)]
struct Node {
    client_port: u16,
    dir: PathBuf,
    child: Option<Child>,
    starts: u32,
}

/// A real three-node ZooKeeper ensemble on loopback (free ports chosen at start, each node's data directory in
/// one temp directory), every node stopped on drop. Nodes can be stopped and started one at a time (the quorum
/// holds with two) or all together (a full outage; sessions are kept in the data directories, and the restarted
/// ensemble gives every recovered session a fresh timeout).
#[derive(Debug)]
pub struct ZkEnsemble {
    _dir: tempfile::TempDir,
    nodes: Vec<Node>,
}

impl ZkEnsemble {
    /// Number of nodes.
    pub const SIZE: usize = 3;

    /// Starts the ensemble and waits until it serves (a quorum has elected a leader).
    pub fn start() -> std::io::Result<ZkEnsemble> {
        let dir = tempfile::Builder::new()
            .prefix("tickbox-zk-ensemble-")
            .tempdir()?;
        // Client, quorum and election port of every node.
        let ports = free_ports(Self::SIZE * 3)?;
        let servers: String = (0..Self::SIZE)
            .map(|i| {
                format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    i + 1,
                    ports[3 * i + 1],
                    ports[3 * i + 2]
                )
            })
            .collect();
        let mut nodes = Vec::new();
        for i in 0..Self::SIZE {
            let node_dir = dir.path().join(format!("node{}", i + 1));
            std::fs::create_dir_all(node_dir.join("data"))?;
            std::fs::write(node_dir.join("data/myid"), format!("{}\n", i + 1))?;
            std::fs::write(
                node_dir.join("zoo.cfg"),
                format!(
                    "tickTime={TICK_MS}\ninitLimit=20\nsyncLimit=8\ndataDir={}\nclientPort={}\n\
                     clientPortAddress=127.0.0.1\nadmin.enableServer=false\n{servers}",
                    node_dir.join("data").display(),
                    ports[3 * i]
                ),
            )?;
            nodes.push(Node {
                client_port: ports[3 * i],
                dir: node_dir,
                child: None,
                starts: 0,
            });
        }
        let mut e = ZkEnsemble { _dir: dir, nodes };
        e.start_all()?;
        Ok(e)
    }

    /// Starts the ensemble, or prints why it cannot run here and returns `None` (tests then skip).
    pub fn start_or_skip(test: &str) -> Option<ZkEnsemble> {
        if let Some(why) = unavailable() {
            eprintln!("SKIP {test}: ZooKeeper cannot run here: {why}");
            return None;
        }
        match ZkEnsemble::start() {
            Ok(s) => Some(s),
            Err(e) => panic!("{test}: ZooKeeper ensemble failed to start: {e}"),
        }
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`, for [`crate::Coord::connect`].
    pub fn connect_string(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills node `i` (SIGKILL) and waits for it.
    pub fn stop_node(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts node `i` again (killing it first if running) and waits until it serves.
    pub fn start_node(&mut self, i: usize) -> std::io::Result<()> {
        self.stop_node(i);
        self.spawn_node(i)?;
        self.wait(Duration::from_secs(30), |e| e.node_serving(i))
    }

    /// Kills every node: a full outage.
    pub fn stop_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.stop_node(i);
        }
    }

    /// Starts every node that is not running and waits until the ensemble serves.
    pub fn start_all(&mut self) -> std::io::Result<()> {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                self.spawn_node(i)?;
            }
        }
        self.wait(Duration::from_secs(40), |e| e.serving())
    }

    /// True when a quorum serves: some node is the leader and answers requests.
    pub fn serving(&self) -> bool {
        (0..self.nodes.len()).any(|i| self.mode(i).as_deref() == Some("leader"))
    }

    /// True when node `i` serves clients (as leader or follower of a quorum).
    pub fn node_serving(&self, i: usize) -> bool {
        matches!(self.mode(i).as_deref(), Some("leader" | "follower"))
    }

    /// Node `i`'s `Mode:` from `srvr` (`leader`, `follower`), `None` while it does not serve.
    pub fn mode(&self, i: usize) -> Option<String> {
        let srvr = four_letter(self.nodes[i].client_port, "srvr")?;
        srvr.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_owned())
    }

    fn spawn_node(&mut self, i: usize) -> std::io::Result<()> {
        let node = &mut self.nodes[i];
        node.starts += 1;
        let log = node.dir.join(format!("server-{}.log", node.starts));
        let cfg = node.dir.join("zoo.cfg").display().to_string();
        node.child = Some(java(
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            &[cfg],
            &log,
        )?);
        Ok(())
    }

    fn wait(&mut self, within: Duration, ok: impl Fn(&ZkEnsemble) -> bool) -> std::io::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            for (i, node) in self.nodes.iter_mut().enumerate() {
                if let Some(child) = node.child.as_mut() {
                    if let Some(status) = child.try_wait()? {
                        let log = node.dir.join(format!("server-{}.log", node.starts));
                        let log = std::fs::read_to_string(log).unwrap_or_default();
                        let tail = log_tail(&log);
                        return Err(std::io::Error::other(format!(
                            "node {} exited ({status}); log tail:\n{tail}",
                            i + 1
                        )));
                    }
                }
            }
            if ok(self) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "ensemble not serving within {within:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ports a restarted server gets back must be ones no outgoing connection can take meanwhile: distinct,
    /// below the kernel's ephemeral range, and free.
    #[test]
    fn free_ports_are_distinct_free_and_below_the_ephemeral_range() {
        let ephemeral_from: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let ports = free_ports(9).unwrap();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 9, "{ports:?}");
        if ephemeral_from >= 11_000 {
            assert!(ports.iter().all(|&p| p < ephemeral_from), "{ports:?}");
        }
        let held: Vec<_> = ports
            .iter()
            .map(|&p| TcpListener::bind(("127.0.0.1", p)))
            .collect();
        assert!(held.iter().all(Result::is_ok), "{held:?}");
        // A second call in the same process hands out none of the first call's ports.
        let again = free_ports(9).unwrap();
        assert!(again.iter().all(|p| !ports.contains(p)), "{again:?}");
    }
}
