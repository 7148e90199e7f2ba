//! The memory a process holds as the kernel reports it (`/proc/<pid>/status`), for tests that bound what a
//! component keeps while a hostile peer floods it.

/// Which process to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// The test's own process.
    This,
    /// A child the test started.
    Pid(u32),
}

/// Resident memory now (`VmRSS`), KiB; `None` when the process is gone or the kernel does not report it.
pub fn resident_kib(process: Process) -> Option<u64> {
    status_kib(process, "VmRSS")
}

/// The most resident memory the process has had (`VmHWM`), KiB; `None` as for [`resident_kib`].
pub fn peak_resident_kib(process: Process) -> Option<u64> {
    status_kib(process, "VmHWM")
}

fn status_kib(process: Process, field: &str) -> Option<u64> {
    let path = match process {
        Process::This => "/proc/self/status".to_owned(),
        Process::Pid(pid) => format!("/proc/{pid}/status"),
    };
    parse_kib(&std::fs::read_to_string(path).ok()?, field)
}

/// The value of a `Field:   1234 kB` line.
fn parse_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_read_by_its_whole_name() {
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nVmRSSx:\t 9 kB\n";
        assert_eq!(parse_kib(status, "VmRSS"), Some(1024));
        assert_eq!(parse_kib(status, "VmHWM"), Some(2048));
        assert_eq!(parse_kib(status, "VmSwap"), None);
        assert_eq!(parse_kib("VmRSS:\tlots\n", "VmRSS"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_holds_what_it_touched() {
        let before = resident_kib(Process::This).expect("VmRSS of this process");
        let held = vec![1u8; 64 << 20];
        let during = resident_kib(Process::This).expect("VmRSS of this process");
        assert!(during >= before + (60 << 10), "{before} KiB → {during} KiB");
        assert!(peak_resident_kib(Process::This).unwrap() >= during);
        assert_eq!(
            resident_kib(Process::Pid(std::process::id())).map(|k| k >= 60 << 10),
            Some(true)
        );
        drop(std::hint::black_box(held));
        assert_eq!(resident_kib(Process::Pid(u32::MAX)), None);
    }
}
