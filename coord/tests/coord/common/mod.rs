//! Shared helpers for the recipe tests: a real server per test, sessions with short timeouts.
#![allow(dead_code)]

use std::time::Duration;

use tickbox_coord::testing::ZkServer;
use tickbox_coord::{Coord, CoordOptions};

/// Session timeout used by tests (the test server allows 0.5 s to 5 s).
pub(crate) const SESSION: Duration = Duration::from_secs(2);

/// The longest session the test server allows (20 ticks): for tests that restart the server.
pub(crate) const LONG_SESSION: Duration = Duration::from_secs(5);

/// Starts a server for `test`, or prints why it cannot and returns `None`.
pub(crate) fn server(test: &str) -> Option<ZkServer> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    ZkServer::start_or_skip(test)
}

/// A new session (each call is a distinct client).
pub(crate) fn connect(zk: &ZkServer) -> Coord {
    connect_timeout(zk, SESSION)
}

/// A new session with an explicit timeout.
pub(crate) fn connect_timeout(zk: &ZkServer, session_timeout: Duration) -> Coord {
    Coord::connect_with(
        &zk.connect_string(),
        &CoordOptions {
            session_timeout,
            connect_timeout: Duration::from_secs(10),
        },
    )
    .expect("connect to the test server")
}

/// Makes sure every notification the server sent this session before now has been delivered: ZooKeeper
/// delivers a session's watch events before the reply to a later request on that session.
pub(crate) fn drain_notifications(c: &Coord) {
    c.block_on(c.client().sync("/")).expect("sync");
}

/// Median and 99th percentile of samples (sorted in place), in microseconds.
pub(crate) fn median_p99(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let at =
        |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.5), at(0.99))
}
