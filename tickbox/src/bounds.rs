//! The documented maxima of the count flags that make threads, sockets or connections (docs/book/src/bounds.md): a value
//! over one is a usage error (one line, exit 2) before anything starts, not a start-up that allocates for
//! minutes (`subscribe --workers 10000` took 95 s and 2.95 GB to start a 1 s run).

/// Most worker threads (`--workers`): far more than the cores of any machine tickbox pins to.
pub(crate) const MAX_WORKERS: usize = 256;
/// Most shards (`--shards`): one socket, one thread and usually one NIC each.
pub(crate) const MAX_SHARDS: usize = 64;

/// Most runs of each system a bench repeats (`--repeats`): each is seconds of traffic.
pub(crate) const MAX_REPEAT: usize = 1_000;
/// Most symbols of a generated universe (`--symbols`): each is a topic, a price walk and cache entries downstream.
pub(crate) const MAX_SYMBOLS: usize = 1_000_000;
/// Largest bench frame (`--size`, `--sizes`): every in-flight message of every socket on the path is this big.
pub(crate) const MAX_FRAME_BYTES: usize = 16 << 20;
/// Most subscriptions a feed waits for per shard (`--wait-for-subscribers`): each is a connection.
pub(crate) const MAX_WAIT_FOR_SUBSCRIBERS: usize = 100_000;

fn count(s: &str, what: &str, max: usize) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("'{s}' is not a count of {what}"))?;
    if n == 0 {
        return Err(format!("at least 1 {what} is needed"));
    }
    if n > max {
        return Err(format!("at most {max} {what} (docs/book/src/bounds.md)"));
    }
    Ok(n)
}

/// Most concurrent connections a bound socket may be capped at (`--max-connections`, `max_connections`): more
/// than any process's file descriptors allow.
pub(crate) const MAX_CONNECTIONS: u64 = 1_000_000;

/// `--max-connections N`: 0 (no cap) ..=[`MAX_CONNECTIONS`].
pub(crate) fn max_connections(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a count of connections"))?;
    if n > MAX_CONNECTIONS {
        return Err(format!(
            "at most {MAX_CONNECTIONS} connections (docs/book/src/bounds.md)"
        ));
    }
    Ok(n)
}

/// `--repeats N`: 1..=[`MAX_REPEAT`].
pub(crate) fn repeat(s: &str) -> Result<usize, String> {
    count(s, "repeats", MAX_REPEAT)
}

/// `--symbols N`: 1..=[`MAX_SYMBOLS`].
pub(crate) fn symbols(s: &str) -> Result<usize, String> {
    count(s, "symbols", MAX_SYMBOLS)
}

/// `--size B`, `--sizes B,…`: 1..=[`MAX_FRAME_BYTES`] bytes.
pub(crate) fn frame_bytes(s: &str) -> Result<usize, String> {
    count(s, "bytes per frame", MAX_FRAME_BYTES)
}

/// `--wait-for-subscribers N`: 0..=[`MAX_WAIT_FOR_SUBSCRIBERS`] (0: do not wait).
pub(crate) fn wait_for_subscribers(s: &str) -> Result<usize, String> {
    if s == "0" {
        return Ok(0);
    }
    count(s, "subscriptions", MAX_WAIT_FOR_SUBSCRIBERS)
}

/// `--workers N`: 1..=[`MAX_WORKERS`].
pub(crate) fn workers(s: &str) -> Result<usize, String> {
    count(s, "worker threads", MAX_WORKERS)
}

/// `--shards N`: 1..=[`MAX_SHARDS`].
pub(crate) fn shards(s: &str) -> Result<usize, String> {
    count(s, "shards", MAX_SHARDS)
}

/// Raises this process's soft limit on open file descriptors to its hard limit, for the long-running servers:
/// each connection a peer opens costs one, and a soft limit of 1,024 (a common default) is far below what the
/// hard limit allows. Returns the (old, new) soft limits; a failure is logged and changes nothing.
// getrlimit/setrlimit: std has neither.
#[allow(unsafe_code)]
pub(crate) fn raise_fd_limit() -> Option<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through the pointer, a live local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        tracing::warn!(
            "reading the file-descriptor limit: {}",
            std::io::Error::last_os_error()
        );
        return None;
    }
    let old = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads one `rlimit` through the pointer, a live local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            tracing::warn!(
                "raising the file-descriptor limit from {old} to {}: {}",
                lim.rlim_max,
                std::io::Error::last_os_error()
            );
            return None;
        }
        tracing::debug!(
            "file-descriptor limit raised from {old} to {}",
            lim.rlim_max
        );
    }
    Some((old, lim.rlim_cur))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_bounded_both_ways() {
        assert_eq!(workers("256"), Ok(256));
        assert!(workers("257").unwrap_err().contains("at most 256"));
        assert!(workers("0").is_err());
        assert!(workers("many").is_err());
        assert_eq!(shards("64"), Ok(64));
        assert!(shards("65").is_err());
        assert_eq!(repeat("1000"), Ok(1000));
        assert!(repeat("1001").unwrap_err().contains("at most 1000"));
        assert!(symbols("1000001").is_err());
        assert_eq!(frame_bytes("16777216"), Ok(16 << 20));
        assert!(frame_bytes("16777217").is_err());
        assert_eq!(wait_for_subscribers("0"), Ok(0));
        assert!(wait_for_subscribers("100001").is_err());
        assert_eq!(max_connections("0"), Ok(0));
        assert!(max_connections("1000001").is_err());
    }
}
