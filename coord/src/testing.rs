//! A real ZooKeeper server for tests (feature `testing`): the Debian `zookeeper` package's standalone server
//! started on a free loopback port with its own data directory, ready when it answers `ruok`, killed on drop,
//! restartable on the same port and data directory (sessions survive a restart, which is how connection-loss
//! tests are made).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the Debian package puts the server jar.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// The classpath the Debian package's scripts use (the jars and the configuration directory).
pub const CLASSPATH: &str = "/usr/share/java/*:/etc/zookeeper/conf";
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
        let port = free_port()?;
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
        let log = std::fs::File::create(self.log_path())?;
        let child = Command::new("java")
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.4lw.commands.whitelist=ruok,srvr,mntr,cons",
            ])
            // fsync off by default: tests measure coordination, not this machine's disk.
            // TICKBOX_ZK_FORCE_SYNC=yes turns it back on (for figures with a durable log).
            .arg(format!("-Dzookeeper.forceSync={}", force_sync()))
            .args([
                "-cp",
                CLASSPATH,
                "org.apache.zookeeper.server.ZooKeeperServerMain",
            ])
            .arg(self.port.to_string())
            .arg(self.dir.path().join("data"))
            .arg(TICK_MS.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
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
                    let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
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
        let mut s = TcpStream::connect_timeout(
            &([127, 0, 0, 1], self.port).into(),
            Duration::from_millis(500),
        )
        .ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(word.as_bytes()).ok()?;
        let mut out = String::new();
        s.take(1 << 20).read_to_string(&mut out).ok()?;
        Some(out)
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

fn free_port() -> std::io::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
