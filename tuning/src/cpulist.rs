//! The kernel's CPU list format (`0-3,8,10-11`), used by sysfs, procfs and `taskset -c`.

/// A malformed CPU list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed CPU list {0:?}")]
pub struct CpuListError(pub String);

/// Largest CPU id accepted: a bound on what a corrupt file can make us allocate.
const MAX_CPU: usize = 1 << 16;

/// Parses `0-3,8,10-11` (whitespace around it ignored; empty means no CPU) into sorted, unique ids.
pub fn parse_cpulist(text: &str) -> Result<Vec<usize>, CpuListError> {
    let text = text.trim();
    let bad = || CpuListError(text.to_owned());
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Ok(cpus);
    }
    for part in text.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse::<usize>(), hi.parse::<usize>()),
            None => (part.parse::<usize>(), part.parse::<usize>()),
        };
        let (lo, hi) = (lo.map_err(|_| bad())?, hi.map_err(|_| bad())?);
        if lo > hi || hi > MAX_CPU {
            return Err(bad());
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats ids as the kernel does, runs collapsed: `[0,1,2,3,8]` → `0-3,8`.
pub fn format_cpulist(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kernel_lists_parse() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpulist("").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpulist("5").unwrap(), vec![5]);
        for bad in ["a", "3-1", "1-", ",", "0-999999999"] {
            assert!(parse_cpulist(bad).is_err(), "{bad}");
        }
        assert_eq!(format_cpulist(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpulist(&[]), "");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(mut cpus in proptest::collection::vec(0usize..300, 0..60)) {
            cpus.sort_unstable();
            cpus.dedup();
            prop_assert_eq!(parse_cpulist(&format_cpulist(&cpus)).unwrap(), cpus);
        }

        #[test]
        fn parse_never_panics(text in "[0-9,\\- ]{0,20}") {
            let _ = parse_cpulist(&text);
        }
    }
}
