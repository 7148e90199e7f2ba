//! How a one-shot client of the store (`tickbox ctl`) sets itself up for one request: which subtree it
//! subscribes to, how long it gives each server of a pair, and what `ctl watch` prints. Plain functions, tested
//! without sockets.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use crate::{Change, ClientConfig};

/// The subtree a request on `key` needs: the key's parent (`/config/a/b` → `/config/a/`), or the whole store for
/// a key without one.
pub fn parent_subtree(key: &str) -> String {
    match key.rfind('/') {
        Some(i) if i > 0 && key.starts_with('/') => key[..=i].to_owned(),
        _ => String::new(),
    }
}

/// `config` for one request within `timeout` to `servers` servers: with a pair, each server gets at most a third
/// of the timeout (at least 300 ms) so both can be tried; a `snapshot_only` request (get, ls) does not wait for
/// the update stream before asking for the snapshot.
pub fn one_shot_config(
    mut config: ClientConfig,
    servers: usize,
    timeout: Duration,
    snapshot_only: bool,
) -> ClientConfig {
    if servers > 1 {
        let ttl = Duration::from_millis((timeout.as_millis() as u64 / 3).max(300));
        config.server_ttl = config.server_ttl.min(ttl.into());
    }
    if snapshot_only {
        config.subscribe_wait = Duration::ZERO.into();
    }
    config
}

/// `ctl watch`: prints each change `next` yields (`None`: nothing within the poll it is given) as
/// `SEQ<TAB>KEY<TAB>VALUE` (`-` for a deletion) until `count` changes, the `until` instant, or `go_on` saying no.
/// Returns how many were printed.
pub fn print_changes(
    mut next: impl FnMut(Duration) -> Option<Change>,
    out: &mut dyn Write,
    count: Option<u64>,
    until: Option<Instant>,
    go_on: impl Fn() -> bool,
) -> io::Result<u64> {
    let mut seen = 0u64;
    while go_on() && count.is_none_or(|c| seen < c) && until.is_none_or(|u| Instant::now() < u) {
        let Some(change) = next(Duration::from_millis(100)) else {
            continue;
        };
        seen += 1;
        let value = change.value.as_deref().map(String::from_utf8_lossy);
        let value = value.as_deref().unwrap_or("-");
        writeln!(out, "{}\t{}\t{value}", change.seq, change.key)?;
        out.flush()?;
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subtree_is_the_keys_parent() {
        assert_eq!(parent_subtree("/config/a/b"), "/config/a/");
        assert_eq!(parent_subtree("/top"), "");
        assert_eq!(parent_subtree("plain"), "");
        assert_eq!(parent_subtree("rel/key"), "");
        assert_eq!(parent_subtree("/config/"), "/config/");
    }

    #[test]
    fn a_pair_shares_the_timeout_and_a_snapshot_does_not_wait() {
        let base = ClientConfig::default();
        let one = one_shot_config(base.clone(), 1, Duration::from_secs(3), false);
        assert_eq!(one.server_ttl, base.server_ttl);
        assert_eq!(one.subscribe_wait, base.subscribe_wait);
        let pair = one_shot_config(base.clone(), 2, Duration::from_millis(600), true);
        assert_eq!(
            pair.server_ttl.0,
            base.server_ttl.0.min(Duration::from_millis(300))
        );
        assert_eq!(pair.subscribe_wait.0, Duration::ZERO);
    }

    fn change(seq: u64, key: &str, value: Option<&[u8]>) -> Change {
        Change {
            key: key.into(),
            value: value.map(<[u8]>::to_vec),
            seq,
            uuid: None,
            from_snapshot: false,
        }
    }

    #[test]
    fn a_watch_prints_sets_and_deletions_until_its_count() {
        let mut changes = vec![
            None,
            Some(change(7, "/config/a", Some(b"on"))),
            Some(change(8, "/config/b", None)),
            Some(change(9, "/config/c", Some(b"x"))),
        ]
        .into_iter();
        let mut out = Vec::new();
        let next = |_| changes.next().flatten();
        let seen = print_changes(next, &mut out, Some(2), None, || true).unwrap();
        assert_eq!(seen, 2);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "7\t/config/a\ton\n8\t/config/b\t-\n"
        );
        assert_eq!(changes.next().flatten().unwrap().seq, 9, "left unread");
        let past = Some(Instant::now() - Duration::from_millis(1));
        let seen = print_changes(|_| unreachable!(), &mut Vec::new(), None, past, || true);
        assert_eq!(seen.unwrap(), 0);
        let seen = print_changes(|_| unreachable!(), &mut Vec::new(), None, None, || false);
        assert_eq!(seen.unwrap(), 0);
    }
}
