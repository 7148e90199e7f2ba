//! ZooKeeper sessions for the coordinating flags of several commands (`--start-barrier`, `--elect`, `--group`)
//! and for `tickbox coord`: which ensemble, with the `[coord]` timings. Wiring only.

use anyhow::Context;
use tickbox_coord::{Coord, CoordOptions};

use crate::config::TickboxConfig;

/// The ensemble a coordinating flag uses: `--zk`, else `[coord] zk`.
pub(crate) fn ensemble(
    flag: Option<&str>,
    config: &TickboxConfig,
    wanted_by: &str,
) -> anyhow::Result<String> {
    match flag {
        Some(zk) if !zk.is_empty() => Ok(zk.to_owned()),
        _ if !config.coord.zk.is_empty() => Ok(config.coord.zk.clone()),
        _ => anyhow::bail!("{wanted_by} needs ZooKeeper: give --zk HOST:PORT[,HOST:PORT...] or [coord] zk in the config"),
    }
}

/// A session for a coordinating flag of a command (`--start-barrier`, `--elect`, `--group`), with the `[coord]`
/// timings.
pub(crate) fn connect(
    flag: Option<&str>,
    config: &TickboxConfig,
    wanted_by: &str,
) -> anyhow::Result<Coord> {
    let zk = ensemble(flag, config, wanted_by)?;
    let opts = CoordOptions {
        session_timeout: config.coord.session_timeout.0,
        connect_timeout: config.coord.connect_timeout.0,
    };
    Coord::connect_with(&zk, &opts)
        .with_context(|| format!("{wanted_by}: connecting to ZooKeeper at {zk}"))
}
