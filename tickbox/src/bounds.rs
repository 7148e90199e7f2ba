//! The documented maxima of the count flags that make threads, sockets or connections (README, "Bounds"): a value
//! over one is a usage error (one line, exit 2) before anything starts, not a start-up that allocates for
//! minutes (`subscribe --workers 10000` took 95 s and 2.95 GB to start a 1 s run).

/// Most worker threads (`--workers`): far more than the cores of any machine tickbox pins to.
pub(crate) const MAX_WORKERS: usize = 256;
/// Most shards (`--shards`): one socket, one thread and usually one NIC each.
pub(crate) const MAX_SHARDS: usize = 64;

fn count(s: &str, what: &str, max: usize) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("'{s}' is not a count of {what}"))?;
    if n == 0 {
        return Err(format!("at least 1 {what} is needed"));
    }
    if n > max {
        return Err(format!("at most {max} {what} (README, Bounds)"));
    }
    Ok(n)
}

/// `--workers N`: 1..=[`MAX_WORKERS`].
pub(crate) fn workers(s: &str) -> Result<usize, String> {
    count(s, "worker threads", MAX_WORKERS)
}

/// `--shards N`: 1..=[`MAX_SHARDS`].
pub(crate) fn shards(s: &str) -> Result<usize, String> {
    count(s, "shards", MAX_SHARDS)
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
    }
}
