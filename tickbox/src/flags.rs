//! Endpoint flags are validated before anything is bound, connected or created, so a typo such as
//! `tcp://host:70000` is an error naming the flag instead of libzmq quietly truncating it to some other port.

use anyhow::Context;
use tickbox_zmqx::endpoint::{check, Direction};

/// `ep`, given as `flag`, will be connected to: it needs a concrete port.
pub(crate) fn check_connect(flag: &str, ep: &str) -> anyhow::Result<()> {
    check(ep.trim(), Direction::Connect).with_context(|| flag.to_string())
}

/// `ep`, given as `flag`, will be bound: `*` or `0` (an ephemeral port) is allowed.
pub(crate) fn check_bind(flag: &str, ep: &str) -> anyhow::Result<()> {
    check(ep.trim(), Direction::Bind).with_context(|| flag.to_string())
}

/// [`check_connect`] for every endpoint of a list flag.
pub(crate) fn check_connect_all<S: AsRef<str>>(flag: &str, eps: &[S]) -> anyhow::Result<()> {
    eps.iter()
        .try_for_each(|ep| check_connect(flag, ep.as_ref()))
}

/// [`check_bind`] for every endpoint of a list flag.
pub(crate) fn check_bind_all<S: AsRef<str>>(flag: &str, eps: &[S]) -> anyhow::Result<()> {
    eps.iter().try_for_each(|ep| check_bind(flag, ep.as_ref()))
}
