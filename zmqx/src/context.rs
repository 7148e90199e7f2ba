//! A tuned `zmq::Context`: I/O thread count, one CPU per I/O thread, thread names and scheduling policy, all
//! applied before any socket of the program exists, so no I/O thread inherits a pinned shard's affinity.
//!
//! The `zmq` crate (0.10) exposes only `ZMQ_IO_THREADS` on a context: it has no accessor for the raw context
//! pointer and no constructor from one, so `zmq_ctx_set(ZMQ_THREAD_AFFINITY_CPU_ADD | ZMQ_THREAD_NAME_PREFIX |
//! ZMQ_THREAD_SCHED_POLICY | ZMQ_THREAD_PRIORITY)` cannot be reached without reading the crate's private layout
//! (unsound) or giving up `zmq::Context` for a raw pointer that every crate in the workspace would then have to
//! carry. Those libzmq options would only be applied by each background thread to itself when it starts, and
//! libzmq applies a single CPU set to *every* background thread of a context, so it cannot put I/O thread 0 near
//! NIC 0 and I/O thread 1 near NIC 1 anyway. [`build`] therefore does the same work with the kernel's own calls:
//!
//! 1. it creates the context and sets `io_threads` (public API);
//! 2. on a short-lived helper thread whose CPU mask is the union of the configured I/O CPUs (all online CPUs when
//!    none are configured) and whose policy is the configured one, it opens and closes one socket: libzmq starts
//!    its reaper and I/O threads there, synchronously, and they inherit that mask and policy, never the caller's;
//! 3. it finds those threads in `/proc/self/task` (new tasks named `ZMQbg/IO/<n>` by libzmq) and pins I/O thread
//!    `n` to its own CPU with `sched_setaffinity`, sets its policy with `sched_setscheduler`, and renames it
//!    `<prefix>/ZMQbg/IO/<n>` (libzmq's own format for `ZMQ_THREAD_NAME_PREFIX`) through its `comm` file.
//!
//! Sockets pick their I/O thread with `ZMQ_AFFINITY` (`Socket::set_affinity(1 << n)`); a shard that connects
//! from NIC `k` should ask for the I/O thread planned for NIC `k`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::profile::SocketProfiles;

/// How long libzmq's new threads get to name themselves before [`build`] gives up looking for them.
const NAME_WAIT: Duration = Duration::from_secs(2);
/// The kernel's limit on a thread name (`comm`), without the terminating NUL.
const COMM_MAX: usize = 15;

/// Scheduling policy for libzmq's background threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedPolicy {
    /// Leave the policy the threads inherit from the process (normally `SCHED_OTHER`).
    #[default]
    Inherit,
    /// `SCHED_OTHER`, the default time-sharing policy (priority must be 0).
    Other,
    /// `SCHED_BATCH`.
    Batch,
    /// `SCHED_IDLE`.
    Idle,
    /// `SCHED_FIFO` real-time (priority 1–99; needs `CAP_SYS_NICE` or an `RLIMIT_RTPRIO`).
    Fifo,
    /// `SCHED_RR` real-time (priority 1–99; needs `CAP_SYS_NICE` or an `RLIMIT_RTPRIO`).
    Rr,
}

impl SchedPolicy {
    fn raw(self) -> Option<libc::c_int> {
        match self {
            SchedPolicy::Inherit => None,
            SchedPolicy::Other => Some(libc::SCHED_OTHER),
            SchedPolicy::Batch => Some(libc::SCHED_BATCH),
            SchedPolicy::Idle => Some(libc::SCHED_IDLE),
            SchedPolicy::Fifo => Some(libc::SCHED_FIFO),
            SchedPolicy::Rr => Some(libc::SCHED_RR),
        }
    }

    fn is_realtime(self) -> bool {
        matches!(self, SchedPolicy::Fifo | SchedPolicy::Rr)
    }
}

/// The `[context]` section: how the one `zmq::Context` of a process is tuned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// libzmq I/O threads (`ZMQ_IO_THREADS`); one per NIC is the usual choice for per-NIC deployments.
    pub io_threads: usize,
    /// OS CPU id of each I/O thread, in order (`io_thread_cpus[n]` pins `ZMQbg/IO/n`); empty leaves them unpinned
    /// on every online CPU. When shorter than `io_threads`, the remaining threads may run on any listed CPU.
    pub io_thread_cpus: Vec<usize>,
    /// Names background threads `<prefix>/ZMQbg/IO/<n>` (cut to the kernel's 15 bytes); empty keeps libzmq's
    /// `ZMQbg/IO/<n>`.
    pub thread_name_prefix: String,
    /// Scheduling policy of the I/O threads.
    pub sched_policy: SchedPolicy,
    /// Scheduling priority for `fifo`/`rr` (1–99); must be 0 for the other policies.
    pub sched_priority: i32,
    /// Socket options per role.
    pub sockets: SocketProfiles,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            io_threads: 1,
            io_thread_cpus: Vec::new(),
            thread_name_prefix: String::new(),
            sched_policy: SchedPolicy::Inherit,
            sched_priority: 0,
            sockets: SocketProfiles::default(),
        }
    }
}

/// Errors building a tuned context.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// A setting is out of range.
    #[error("invalid [context] setting: {0}")]
    Invalid(String),
    /// A configured CPU is not one this process may run on.
    #[error("CPU {cpu} is not available to this process (allowed: {allowed:?})")]
    NoSuchCpu {
        /// The CPU asked for.
        cpu: usize,
        /// The CPUs this process may use.
        allowed: Vec<usize>,
    },
    /// libzmq refused an option or a socket.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// A kernel call failed.
    #[error("{what}: {source}")]
    Os {
        /// Which call.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// libzmq's threads could not be told apart from other threads (another context started at the same time).
    #[error("could not identify this context's I/O threads: {0}")]
    Threads(String),
}

/// One libzmq background thread of a built context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoThread {
    /// Index `n` of `ZMQbg/IO/n`.
    pub index: usize,
    /// Kernel thread id.
    pub tid: i32,
    /// The thread's name after tuning.
    pub name: String,
    /// The CPU it was pinned to, if any.
    pub cpu: Option<usize>,
}

/// Builds the process's context per `config` (see the module docs for how). Call it before pinning any thread.
pub fn build(config: &ContextConfig) -> Result<zmq::Context, ContextError> {
    build_with_threads(config).map(|(ctx, _)| ctx)
}

/// [`build`], also returning where each I/O thread ended up (for logs and tests); the list is empty when the
/// config asks for nothing per thread (no CPUs, no name prefix, policy `inherit`).
pub fn build_with_threads(
    config: &ContextConfig,
) -> Result<(zmq::Context, Vec<IoThread>), ContextError> {
    validate(config)?;
    let allowed = allowed_cpus()?;
    for &cpu in &config.io_thread_cpus {
        if !allowed.contains(&cpu) {
            return Err(ContextError::NoSuchCpu {
                cpu,
                allowed: allowed.iter().copied().collect(),
            });
        }
    }
    let ctx = zmq::Context::new();
    ctx.set_io_threads(i32::try_from(config.io_threads).unwrap_or(i32::MAX))?;
    // The start mask: where background threads run until (and unless) each is pinned on its own.
    let start_mask: BTreeSet<usize> = if config.io_thread_cpus.is_empty() {
        allowed.clone()
    } else {
        config.io_thread_cpus.iter().copied().collect()
    };
    // One start at a time in this process, so the tasks that appear are ours.
    static START: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let new_tids = {
        let _guard = START.lock().unwrap_or_else(|e| e.into_inner());
        let before = task_ids()?;
        let starter_ctx = ctx.clone();
        let policy = config.sched_policy;
        let priority = config.sched_priority;
        let started = std::thread::Builder::new()
            .name("tickbox-zmq-start".into())
            .spawn(move || -> Result<(), ContextError> {
                set_affinity(0, &start_mask)?;
                set_policy(0, policy, priority)?;
                // Creating the first socket starts the reaper and I/O threads, synchronously, from this thread.
                let socket = starter_ctx.socket(zmq::PAIR)?;
                socket.set_linger(0)?;
                drop(socket);
                Ok(())
            })
            .map_err(|source| ContextError::Os {
                what: "spawning the context starter thread".into(),
                source,
            })?
            .join()
            .map_err(|_| ContextError::Threads("the context starter thread panicked".into()))?;
        started?;
        let after = task_ids()?;
        after.difference(&before).copied().collect::<Vec<i32>>()
    };
    // Nothing to do per thread: do not depend on finding them (their names need libzmq's Linux build defines).
    let per_thread = !config.io_thread_cpus.is_empty()
        || !config.thread_name_prefix.is_empty()
        || config.sched_policy != SchedPolicy::Inherit;
    if !per_thread {
        return Ok((ctx, Vec::new()));
    }
    let threads = find_io_threads(&new_tids, config.io_threads)?;
    let mut tuned = Vec::with_capacity(threads.len());
    for (index, tid) in threads {
        let cpu = config.io_thread_cpus.get(index).copied();
        if let Some(cpu) = cpu {
            set_affinity(tid, &BTreeSet::from([cpu]))?;
        }
        set_policy(tid, config.sched_policy, config.sched_priority)?;
        let mut name = format!("ZMQbg/IO/{index}");
        if !config.thread_name_prefix.is_empty() {
            name = comm_name(&format!("{}/{name}", config.thread_name_prefix));
            std::fs::write(format!("/proc/self/task/{tid}/comm"), &name).map_err(|source| {
                ContextError::Os {
                    what: format!("naming I/O thread {index}"),
                    source,
                }
            })?;
        }
        tracing::debug!(index, tid, ?cpu, %name, "libzmq I/O thread tuned");
        tuned.push(IoThread {
            index,
            tid,
            name,
            cpu,
        });
    }
    Ok((ctx, tuned))
}

fn validate(config: &ContextConfig) -> Result<(), ContextError> {
    if config.io_threads == 0 {
        return Err(ContextError::Invalid(
            "io_threads must be at least 1 (tcp and ipc need an I/O thread)".into(),
        ));
    }
    if config.io_thread_cpus.len() > config.io_threads {
        return Err(ContextError::Invalid(format!(
            "io_thread_cpus lists {} CPUs for {} I/O threads",
            config.io_thread_cpus.len(),
            config.io_threads
        )));
    }
    let p = config.sched_priority;
    if config.sched_policy.is_realtime() {
        if !(1..=99).contains(&p) {
            return Err(ContextError::Invalid(format!(
                "sched_priority {p} is out of 1..=99 for a real-time policy"
            )));
        }
    } else if p != 0 {
        return Err(ContextError::Invalid(format!(
            "sched_priority must be 0 unless sched_policy is fifo or rr (got {p})"
        )));
    }
    if config.thread_name_prefix.contains('\n') {
        return Err(ContextError::Invalid(
            "thread_name_prefix contains a newline".into(),
        ));
    }
    Ok(())
}

/// Cuts a thread name to the kernel's limit on a character boundary.
fn comm_name(name: &str) -> String {
    let mut end = name.len().min(COMM_MAX);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

/// Waits until libzmq's new threads have named themselves, and returns `(n, tid)` for each `ZMQbg/IO/n`.
fn find_io_threads(new_tids: &[i32], io_threads: usize) -> Result<Vec<(usize, i32)>, ContextError> {
    let deadline = Instant::now() + NAME_WAIT;
    loop {
        let mut found: Vec<(usize, i32)> = Vec::new();
        for &tid in new_tids {
            let Ok(comm) = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")) else {
                continue;
            };
            if let Some(n) = comm
                .trim_end()
                .strip_prefix("ZMQbg/IO/")
                .and_then(|n| n.parse::<usize>().ok())
            {
                found.push((n, tid));
            }
        }
        found.sort_unstable();
        let indices: Vec<usize> = found.iter().map(|(n, _)| *n).collect();
        if indices == (0..io_threads).collect::<Vec<_>>() {
            return Ok(found);
        }
        if found.len() > io_threads {
            return Err(ContextError::Threads(format!(
                "found {} new I/O threads for {io_threads} (another context started meanwhile?)",
                found.len()
            )));
        }
        if Instant::now() >= deadline {
            return Err(ContextError::Threads(format!(
                "expected I/O threads 0..{io_threads}, found {indices:?} within {NAME_WAIT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn task_ids() -> Result<BTreeSet<i32>, ContextError> {
    let dir = std::fs::read_dir("/proc/self/task").map_err(|source| ContextError::Os {
        what: "listing /proc/self/task".into(),
        source,
    })?;
    Ok(dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

/// The CPUs this process may run on: its main thread's affinity mask, which respects cgroups and `taskset` but
/// not the pinning of whichever thread asks (a pinned shard must not shrink the I/O threads' mask).
// Calls into libc's CPU-set and scheduler API; each block below says why it is sound.
#[allow(unsafe_code)]
pub fn allowed_cpus() -> Result<BTreeSet<usize>, ContextError> {
    // SAFETY: `cpu_set_t` is plain data for which all-zero is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: getpid() is the main thread's tid; the pointer and size describe `set`, which outlives the call.
    let rc = unsafe {
        libc::sched_getaffinity(
            libc::getpid(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        )
    };
    if rc != 0 {
        return Err(ContextError::Os {
            what: "sched_getaffinity".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `CPU_ISSET` reads bit `cpu` of `set`; `cpu` < the set's size in bits.
    Ok((0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Pins thread `tid` (0: the calling thread) to `cpus`.
// Calls into libc's CPU-set and scheduler API; each block below says why it is sound.
#[allow(unsafe_code)]
fn set_affinity(tid: i32, cpus: &BTreeSet<usize>) -> Result<(), ContextError> {
    // SAFETY: all-zero is a valid empty `cpu_set_t`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &cpu in cpus {
        if cpu >= max {
            return Err(ContextError::Invalid(format!("CPU {cpu} is beyond {max}")));
        }
        // SAFETY: `cpu` < the set's size in bits, checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `tid` names a thread of this process (or 0, the caller); pointer and size describe `set`.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(ContextError::Os {
            what: format!("sched_setaffinity({tid}, {cpus:?})"),
            source: std::io::Error::last_os_error(),
        })
    }
}

/// Sets thread `tid`'s (0: the caller's) scheduling policy; `Inherit` leaves it alone.
// Calls into libc's CPU-set and scheduler API; each block below says why it is sound.
#[allow(unsafe_code)]
fn set_policy(tid: i32, policy: SchedPolicy, priority: i32) -> Result<(), ContextError> {
    let Some(raw) = policy.raw() else {
        return Ok(());
    };
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `tid` names a thread of this process (or 0); `param` is a valid struct that outlives the call.
    let rc = unsafe { libc::sched_setscheduler(tid, raw, &param) };
    if rc == 0 {
        Ok(())
    } else {
        let source = std::io::Error::last_os_error();
        let hint = if source.raw_os_error() == Some(libc::EPERM) {
            " (real-time policies need CAP_SYS_NICE or `ulimit -r`)"
        } else {
            ""
        };
        Err(ContextError::Os {
            what: format!("sched_setscheduler({tid}, {policy:?}, {priority}){hint}"),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::SocketProfile;

    #[test]
    fn a_realtime_config_with_a_priority_is_valid() {
        let config = ContextConfig {
            io_threads: 2,
            io_thread_cpus: vec![1, 0],
            thread_name_prefix: "tbx".into(),
            sched_policy: SchedPolicy::Fifo,
            sched_priority: 10,
            sockets: SocketProfiles::default(),
        };
        assert!(validate(&config).is_ok());
        assert!(validate(&ContextConfig::default()).is_ok());
    }

    #[test]
    fn invalid_settings_are_refused() {
        let bad = [
            ContextConfig {
                io_threads: 0,
                ..ContextConfig::default()
            },
            ContextConfig {
                io_thread_cpus: vec![0, 1],
                ..ContextConfig::default()
            },
            ContextConfig {
                sched_policy: SchedPolicy::Fifo,
                sched_priority: 0,
                ..ContextConfig::default()
            },
            ContextConfig {
                sched_priority: 5,
                ..ContextConfig::default()
            },
        ];
        for config in bad {
            assert!(
                matches!(validate(&config), Err(ContextError::Invalid(_))),
                "{config:?}"
            );
        }
        assert!(matches!(
            build(&ContextConfig {
                io_thread_cpus: vec![100_000],
                ..ContextConfig::default()
            }),
            Err(ContextError::NoSuchCpu { cpu: 100_000, .. })
        ));
    }

    #[test]
    fn a_profile_reaches_the_socket() {
        let ctx = zmq::Context::new();
        let socket = ctx.socket(zmq::SUB).unwrap();
        socket.set_linger(0).unwrap();
        let profile = SocketProfile {
            send_hwm: Some(11),
            receive_hwm: Some(12),
            sndbuf: Some(65_536),
            rcvbuf: Some(131_072),
            tcp_keepalive: Some(true),
            tcp_keepalive_idle_s: Some(30),
            tcp_keepalive_intvl_s: Some(5),
            tcp_keepalive_cnt: Some(4),
            maxmsgsize: Some(4096),
            affinity: Some(0b10),
        };
        profile.apply(&socket).unwrap();
        assert_eq!(socket.get_sndhwm().unwrap(), 11);
        assert_eq!(socket.get_rcvhwm().unwrap(), 12);
        assert_eq!(socket.get_sndbuf().unwrap(), 65_536);
        assert_eq!(socket.get_rcvbuf().unwrap(), 131_072);
        assert_eq!(socket.get_tcp_keepalive().unwrap(), 1);
        assert_eq!(socket.get_tcp_keepalive_idle().unwrap(), 30);
        assert_eq!(socket.get_tcp_keepalive_intvl().unwrap(), 5);
        assert_eq!(socket.get_tcp_keepalive_cnt().unwrap(), 4);
        assert_eq!(socket.get_maxmsgsize().unwrap(), 4096);
        assert_eq!(socket.get_affinity().unwrap(), 0b10);
        let profiles = SocketProfiles {
            subscriber: profile.clone(),
            feed: SocketProfile {
                rcvbuf: Some(1 << 20),
                ..SocketProfile::default()
            },
            ..SocketProfiles::default()
        };
        assert_eq!(profiles.max_rcvbuf(), Some(1 << 20));
        assert_eq!(profiles.max_sndbuf(), Some(65_536));
        assert!(SocketProfile::default().is_empty() && !profile.is_empty());
    }

    #[test]
    fn long_names_are_cut_to_the_kernel_limit() {
        assert_eq!(comm_name("tickbox/ZMQbg/IO/12"), "tickbox/ZMQbg/I");
        assert_eq!(comm_name("t/ZMQbg/IO/0"), "t/ZMQbg/IO/0");
        assert_eq!(comm_name("ééééééééé"), "ééééééé");
    }
}
