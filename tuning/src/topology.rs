//! The host as the kernel describes it, read from sysfs and procfs under a root path (`/` on the real machine, a
//! fixture tree in tests). Everything but the online CPU list is optional: VMs and containers hide much of it, and
//! a missing file means "unknown", never an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cpulist::{format_cpulist, parse_cpulist};

/// Bound on the directory entries read from any one sysfs/procfs directory, so a strange tree cannot make a
/// read unbounded.
const MAX_ENTRIES: usize = 65_536;

/// Errors reading a topology.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A file every Linux host has is missing (wrong root?).
    #[error("{path}: {source} (is the root a Linux sysfs/procfs tree?)")]
    Missing {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// A file held something the kernel does not write.
    #[error("{path}: malformed: {what}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
}

/// One logical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cpu {
    /// OS CPU id.
    pub id: usize,
    /// Physical core id within its package (`topology/core_id`).
    pub core_id: usize,
    /// Socket (`topology/physical_package_id`).
    pub package: usize,
    /// NUMA node, when the kernel reports nodes.
    pub node: Option<usize>,
    /// CPUs sharing this CPU's physical core, itself included (`topology/thread_siblings_list`).
    pub siblings: Vec<usize>,
    /// cpufreq governor, when cpufreq is exposed.
    pub governor: Option<String>,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// Node id.
    pub id: usize,
    /// Its CPUs.
    pub cpus: Vec<usize>,
}

/// One cache shared by a set of CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cache {
    /// 1, 2, 3…
    pub level: u8,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    /// As the kernel writes it (`32K`, `1024K`, `32768K`).
    pub size: String,
    /// The CPUs sharing it.
    pub cpus: Vec<usize>,
}

/// One interrupt line of a NIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Irq {
    /// IRQ number (`/proc/irq/<n>`).
    pub number: u32,
    /// Its action name in `/proc/interrupts` (`eth1-TxRx-0`, `virtio2-input.0`), when listed.
    pub name: String,
    /// The queue it serves, when the name says.
    pub queue: Option<usize>,
    /// `smp_affinity_list`: the CPUs it may fire on.
    pub affinity: Vec<usize>,
}

/// One network interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Nic {
    /// Interface name.
    pub name: String,
    /// Kernel driver (`DRIVER=` of the device's uevent); none for virtual interfaces.
    pub driver: Option<String>,
    /// Link speed in Mb/s when the link is up and the driver reports it.
    pub speed_mbps: Option<u64>,
    /// `operstate` (`up`, `down`, `unknown`).
    pub operstate: Option<String>,
    /// NUMA node of the device, when known.
    pub numa_node: Option<usize>,
    /// CPUs local to the device (`device/local_cpulist`).
    pub local_cpus: Vec<usize>,
    /// Receive queues.
    pub rx_queues: usize,
    /// Transmit queues.
    pub tx_queues: usize,
    /// Its interrupt lines.
    pub irqs: Vec<Irq>,
    /// No backing device (bridges, veth, ifb…).
    pub is_virtual: bool,
}

/// Network sysctls that bound or shape socket behaviour.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetSysctls {
    /// `net.core.rmem_max`: the largest `SO_RCVBUF` a socket may ask for.
    pub rmem_max: Option<u64>,
    /// `net.core.wmem_max`: the largest `SO_SNDBUF`.
    pub wmem_max: Option<u64>,
    /// `net.core.busy_poll` (µs).
    pub busy_poll: Option<u64>,
    /// `net.core.busy_read` (µs).
    pub busy_read: Option<u64>,
}

/// Everything `tickbox tune` knows about a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// Online CPUs, by id.
    pub cpus: Vec<Cpu>,
    /// NUMA nodes; empty when the kernel reports none (many VMs).
    pub nodes: Vec<Node>,
    /// Distinct caches.
    pub caches: Vec<Cache>,
    /// `isolcpus` (`/sys/devices/system/cpu/isolated`).
    pub isolated: Vec<usize>,
    /// `nohz_full` CPUs.
    pub nohz_full: Vec<usize>,
    /// Transparent huge pages mode (`always`, `madvise`, `never`).
    pub thp: Option<String>,
    /// Network interfaces other than loopback.
    pub nics: Vec<Nic>,
    /// Whether an `irqbalance` process runs.
    pub irqbalance: bool,
    /// Network sysctls.
    pub net: NetSysctls,
}

/// Reads the host under `root` (`/` for the machine itself).
pub fn read(root: &Path) -> Result<Topology, TopologyError> {
    let fs = Fs { root };
    let cpu_dir = "sys/devices/system/cpu";
    let online_path = format!("{cpu_dir}/online");
    let online_text = fs.required(&online_path)?;
    let online = fs.cpulist_of(&online_path, &online_text)?;

    let mut nodes = Vec::new();
    for (id, name) in fs.numbered_entries("sys/devices/system/node", "node") {
        let path = format!("sys/devices/system/node/{name}/cpulist");
        if let Some(text) = fs.optional(&path) {
            let cpus = fs.cpulist_of(&path, &text)?;
            nodes.push(Node { id, cpus });
        }
    }
    let node_of = |cpu: usize| nodes.iter().find(|n| n.cpus.contains(&cpu)).map(|n| n.id);

    let mut cpus = Vec::with_capacity(online.len());
    let mut caches: Vec<Cache> = Vec::new();
    for &id in &online {
        let dir = format!("{cpu_dir}/cpu{id}");
        let core_id = fs
            .number(&format!("{dir}/topology/core_id"))?
            .unwrap_or(id as u64) as usize;
        let package = fs
            .number(&format!("{dir}/topology/physical_package_id"))?
            .unwrap_or(0) as usize;
        let siblings_path = format!("{dir}/topology/thread_siblings_list");
        let mut siblings = match fs.optional(&siblings_path) {
            Some(text) => fs.cpulist_of(&siblings_path, &text)?,
            None => vec![id],
        };
        // Offline siblings do not compete for the core.
        siblings.retain(|s| online.contains(s));
        if !siblings.contains(&id) {
            siblings.push(id);
            siblings.sort_unstable();
        }
        let governor = fs
            .optional(&format!("{dir}/cpufreq/scaling_governor"))
            .map(|g| g.trim().to_owned());
        for (_, index) in fs.numbered_entries(&format!("{dir}/cache"), "index") {
            let base = format!("{dir}/cache/{index}");
            let (Some(level), Some(kind), Some(list)) = (
                fs.number(&format!("{base}/level"))?,
                fs.optional(&format!("{base}/type")),
                fs.optional(&format!("{base}/shared_cpu_list")),
            ) else {
                continue;
            };
            let cache = Cache {
                level: u8::try_from(level).unwrap_or(u8::MAX),
                kind: kind.trim().to_owned(),
                size: fs
                    .optional(&format!("{base}/size"))
                    .map(|s| s.trim().to_owned())
                    .unwrap_or_default(),
                cpus: fs.cpulist_of(&format!("{base}/shared_cpu_list"), &list)?,
            };
            if !caches.contains(&cache) {
                caches.push(cache);
            }
        }
        cpus.push(Cpu {
            id,
            core_id,
            package,
            node: node_of(id),
            siblings,
            governor,
        });
    }
    caches.sort_by(|a, b| (a.level, &a.kind, &a.cpus).cmp(&(b.level, &b.kind, &b.cpus)));

    let isolated = fs.optional_cpulist(&format!("{cpu_dir}/isolated"))?;
    let nohz_full = fs.optional_cpulist(&format!("{cpu_dir}/nohz_full"))?;
    let thp = fs
        .optional("sys/kernel/mm/transparent_hugepage/enabled")
        .and_then(|t| selected_mode(&t));

    let interrupts = fs
        .optional("proc/interrupts")
        .map(|t| parse_interrupts(&t))
        .unwrap_or_default();
    let mut nics = Vec::new();
    for name in fs.entries("sys/class/net") {
        if name == "lo" {
            continue;
        }
        nics.push(read_nic(&fs, &name, &interrupts)?);
    }
    nics.sort_by(|a, b| a.name.cmp(&b.name));

    let irqbalance = fs
        .entries("proc")
        .into_iter()
        .filter(|e| e.bytes().all(|b| b.is_ascii_digit()))
        .any(|pid| {
            fs.optional(&format!("proc/{pid}/comm"))
                .is_some_and(|c| c.trim() == "irqbalance")
        });

    let net = NetSysctls {
        rmem_max: fs.number("proc/sys/net/core/rmem_max")?,
        wmem_max: fs.number("proc/sys/net/core/wmem_max")?,
        busy_poll: fs.number("proc/sys/net/core/busy_poll")?,
        busy_read: fs.number("proc/sys/net/core/busy_read")?,
    };

    Ok(Topology {
        cpus,
        nodes,
        caches,
        isolated,
        nohz_full,
        thp,
        nics,
        irqbalance,
        net,
    })
}

fn read_nic(fs: &Fs<'_>, name: &str, interrupts: &[(u32, String)]) -> Result<Nic, TopologyError> {
    let dir = format!("sys/class/net/{name}");
    let device = fs.root.join(&dir).join("device");
    let is_virtual = !device.exists();
    // The kernel name of the device (`virtio2`, `0000:3b:00.0`): virtio NICs name their IRQs after it.
    let device_name = std::fs::read_link(&device)
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
    let driver = fs.optional(&format!("{dir}/device/uevent")).and_then(|u| {
        u.lines()
            .find_map(|l| l.strip_prefix("DRIVER="))
            .map(|d| d.trim().to_owned())
    });
    let speed_mbps = fs
        .optional(&format!("{dir}/speed"))
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|s| u64::try_from(s).ok())
        .filter(|&s| s > 0);
    let numa_node = fs
        .optional(&format!("{dir}/device/numa_node"))
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|n| usize::try_from(n).ok());
    let local_cpus = fs.optional_cpulist(&format!("{dir}/device/local_cpulist"))?;
    let queues = fs.entries(&format!("{dir}/queues"));
    let rx_queues = queues.iter().filter(|q| q.starts_with("rx-")).count();
    let tx_queues = queues.iter().filter(|q| q.starts_with("tx-")).count();
    let operstate = fs
        .optional(&format!("{dir}/operstate"))
        .map(|s| s.trim().to_owned());

    let mut numbers: Vec<u32> = fs
        .entries(&format!("{dir}/device/msi_irqs"))
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    for (number, action) in interrupts {
        let mine = irq_belongs(action, name)
            || device_name
                .as_deref()
                .is_some_and(|d| irq_belongs(action, d));
        if mine {
            numbers.push(*number);
        }
    }
    numbers.sort_unstable();
    numbers.dedup();
    let mut irqs = Vec::with_capacity(numbers.len());
    for number in numbers {
        let irq_name = interrupts
            .iter()
            .find(|(n, _)| *n == number)
            .map(|(_, a)| a.clone())
            .unwrap_or_default();
        irqs.push(Irq {
            number,
            queue: queue_of(&irq_name),
            affinity: fs.optional_cpulist(&format!("proc/irq/{number}/smp_affinity_list"))?,
            name: irq_name,
        });
    }
    Ok(Nic {
        name: name.to_owned(),
        driver,
        speed_mbps,
        operstate,
        numa_node,
        local_cpus,
        rx_queues,
        tx_queues,
        irqs,
        is_virtual,
    })
}

/// `eth1-TxRx-0` belongs to `eth1`, not to `eth10`.
fn irq_belongs(action: &str, owner: &str) -> bool {
    action
        .strip_prefix(owner)
        .is_some_and(|rest| rest.starts_with(['-', '@', '_', ':']))
}

/// The queue number of a per-queue IRQ name: trailing digits of a name that mentions a queue.
fn queue_of(action: &str) -> Option<usize> {
    let base = action.split('@').next().unwrap_or(action);
    let lower = base.to_ascii_lowercase();
    if !["rx", "tx", "input", "output", "comp", "queue"]
        .iter()
        .any(|w| lower.contains(w))
    {
        return None;
    }
    let digits: String = base
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// `(irq number, action name)` for every numbered line of `/proc/interrupts`.
fn parse_interrupts(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .filter_map(|line| {
            let (number, rest) = line.trim_start().split_once(':')?;
            let number: u32 = number.trim().parse().ok()?;
            let action = rest.split_whitespace().last()?.to_owned();
            Some((number, action))
        })
        .collect()
}

/// `always [madvise] never` → `madvise`.
fn selected_mode(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_owned())
}

/// File access relative to the root.
struct Fs<'a> {
    root: &'a Path,
}

impl Fs<'_> {
    fn required(&self, rel: &str) -> Result<String, TopologyError> {
        let path = self.root.join(rel);
        std::fs::read_to_string(&path).map_err(|source| TopologyError::Missing { path, source })
    }

    fn optional(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel)).ok()
    }

    fn cpulist_of(&self, rel: &str, text: &str) -> Result<Vec<usize>, TopologyError> {
        parse_cpulist(text).map_err(|e| TopologyError::Malformed {
            path: self.root.join(rel),
            what: e.to_string(),
        })
    }

    fn optional_cpulist(&self, rel: &str) -> Result<Vec<usize>, TopologyError> {
        match self.optional(rel) {
            // nohz_full reads `(null)` when unset.
            Some(text) if text.trim() == "(null)" => Ok(Vec::new()),
            Some(text) => self.cpulist_of(rel, &text),
            None => Ok(Vec::new()),
        }
    }

    fn number(&self, rel: &str) -> Result<Option<u64>, TopologyError> {
        match self.optional(rel) {
            None => Ok(None),
            Some(text) => text
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| TopologyError::Malformed {
                    path: self.root.join(rel),
                    what: format!("not a number: {:?}", text.trim()),
                }),
        }
    }

    /// Entry names of a directory (empty when it does not exist), sorted, bounded.
    fn entries(&self, rel: &str) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(self.root.join(rel)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = dir
            .take(MAX_ENTRIES)
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    /// `(n, name)` for entries named `<prefix><n>`, by n.
    fn numbered_entries(&self, rel: &str, prefix: &str) -> Vec<(usize, String)> {
        let mut found: Vec<(usize, String)> = self
            .entries(rel)
            .into_iter()
            .filter_map(|name| Some((name.strip_prefix(prefix)?.parse().ok()?, name)))
            .collect();
        found.sort();
        found
    }
}

impl Topology {
    /// The CPU with this id, if online.
    pub fn cpu(&self, id: usize) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    /// The NIC with this name.
    pub fn nic(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.name == name)
    }

    /// Online CPU ids.
    pub fn cpu_ids(&self) -> Vec<usize> {
        self.cpus.iter().map(|c| c.id).collect()
    }

    /// Identity of the physical core a CPU belongs to: its lowest sibling.
    pub fn core_of(&self, cpu: usize) -> usize {
        self.cpu(cpu)
            .and_then(|c| c.siblings.first().copied())
            .unwrap_or(cpu)
    }

    /// Number of distinct physical cores.
    pub fn physical_cores(&self) -> usize {
        let mut cores: Vec<usize> = self.cpus.iter().map(|c| self.core_of(c.id)).collect();
        cores.sort_unstable();
        cores.dedup();
        cores.len()
    }

    /// Number of sockets.
    pub fn packages(&self) -> usize {
        let mut p: Vec<usize> = self.cpus.iter().map(|c| c.package).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    }

    /// Whether any core runs more than one hardware thread.
    pub fn smt(&self) -> bool {
        self.cpus.iter().any(|c| c.siblings.len() > 1)
    }

    /// The node a CPU is on (`None` without NUMA information).
    pub fn node_of(&self, cpu: usize) -> Option<usize> {
        self.cpu(cpu).and_then(|c| c.node)
    }

    /// The CPUs of a NIC's node: its NUMA node's CPUs, else its `local_cpulist`, else every CPU.
    pub fn nic_cpus(&self, nic: &Nic) -> Vec<usize> {
        if let Some(node) = nic
            .numa_node
            .and_then(|n| self.nodes.iter().find(|x| x.id == n))
        {
            return node.cpus.clone();
        }
        if !nic.local_cpus.is_empty() {
            return nic.local_cpus.clone();
        }
        self.cpu_ids()
    }

    /// CPUs a NIC's IRQs are steered to, leaving out IRQs allowed on every online CPU (not steered at all).
    pub fn irq_cpus(&self, nic: &Nic) -> Vec<usize> {
        let all = self.cpu_ids();
        let mut cpus: Vec<usize> = nic
            .irqs
            .iter()
            .filter(|irq| !all.iter().all(|c| irq.affinity.contains(c)))
            .flat_map(|irq| irq.affinity.iter().copied())
            .collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }

    /// The topology as plain-text tables, for `tickbox tune show`.
    pub fn render_tables(&self) -> String {
        let mut out = String::new();
        let governors: BTreeMap<&str, Vec<usize>> =
            self.cpus.iter().fold(BTreeMap::new(), |mut m, c| {
                m.entry(c.governor.as_deref().unwrap_or("-"))
                    .or_insert_with(Vec::new)
                    .push(c.id);
                m
            });
        out.push_str(&format!(
            "host: {} CPUs online, {} physical cores, {} socket(s), {} NUMA node(s), SMT {}\n",
            self.cpus.len(),
            self.physical_cores(),
            self.packages(),
            self.nodes.len(),
            if self.smt() { "on" } else { "off" }
        ));
        out.push_str(&format!(
            "isolcpus: {}   nohz_full: {}   THP: {}   irqbalance: {}\n",
            or_dash(&format_cpulist(&self.isolated)),
            or_dash(&format_cpulist(&self.nohz_full)),
            self.thp.as_deref().unwrap_or("-"),
            if self.irqbalance {
                "running"
            } else {
                "not running"
            }
        ));
        out.push_str(&format!(
            "governors: {}\n",
            governors
                .iter()
                .map(|(g, cpus)| format!("{g} on {}", format_cpulist(cpus)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        out.push_str(&format!(
            "net.core: rmem_max {}  wmem_max {}  busy_poll {}  busy_read {}\n\n",
            opt(self.net.rmem_max),
            opt(self.net.wmem_max),
            opt(self.net.busy_poll),
            opt(self.net.busy_read)
        ));

        out.push_str("NUMA nodes\n");
        out.push_str(&format!("{:<6} {}\n", "node", "cpus"));
        if self.nodes.is_empty() {
            out.push_str("(none reported: every CPU treated as one node)\n");
        }
        for n in &self.nodes {
            out.push_str(&format!("{:<6} {}\n", n.id, format_cpulist(&n.cpus)));
        }

        out.push_str("\nCPUs\n");
        out.push_str(&format!(
            "{:<5} {:<7} {:<6} {:<5} {:<10} {}\n",
            "cpu", "socket", "core", "node", "siblings", "governor"
        ));
        for c in &self.cpus {
            out.push_str(&format!(
                "{:<5} {:<7} {:<6} {:<5} {:<10} {}\n",
                c.id,
                c.package,
                c.core_id,
                c.node.map_or("-".to_owned(), |n| n.to_string()),
                format_cpulist(&c.siblings),
                c.governor.as_deref().unwrap_or("-")
            ));
        }

        out.push_str("\nCaches\n");
        out.push_str(&format!(
            "{:<6} {:<12} {:<8} {}\n",
            "level", "type", "size", "cpus"
        ));
        for c in &self.caches {
            out.push_str(&format!(
                "{:<6} {:<12} {:<8} {}\n",
                format!("L{}", c.level),
                c.kind,
                c.size,
                format_cpulist(&c.cpus)
            ));
        }

        out.push_str("\nNICs\n");
        out.push_str(&format!(
            "{:<10} {:<12} {:<8} {:<6} {:<5} {:<12} {:<6} {}\n",
            "nic", "driver", "speed", "state", "node", "local cpus", "rx/tx", "irqs"
        ));
        for n in &self.nics {
            out.push_str(&format!(
                "{:<10} {:<12} {:<8} {:<6} {:<5} {:<12} {:<6} {}\n",
                n.name,
                n.driver
                    .as_deref()
                    .unwrap_or(if n.is_virtual { "(virtual)" } else { "-" }),
                n.speed_mbps.map_or("-".to_owned(), |s| format!("{s}M")),
                n.operstate.as_deref().unwrap_or("-"),
                n.numa_node.map_or("-".to_owned(), |x| x.to_string()),
                or_dash(&format_cpulist(&n.local_cpus)),
                format!("{}/{}", n.rx_queues, n.tx_queues),
                n.irqs.len()
            ));
        }
        let with_irqs: Vec<&Nic> = self.nics.iter().filter(|n| !n.irqs.is_empty()).collect();
        if !with_irqs.is_empty() {
            out.push_str("\nNIC IRQs\n");
            out.push_str(&format!(
                "{:<10} {:<6} {:<24} {:<6} {}\n",
                "nic", "irq", "name", "queue", "affinity"
            ));
            for n in with_irqs {
                for irq in &n.irqs {
                    out.push_str(&format!(
                        "{:<10} {:<6} {:<24} {:<6} {}\n",
                        n.name,
                        irq.number,
                        or_dash(&irq.name),
                        irq.queue.map_or("-".to_owned(), |q| q.to_string()),
                        format_cpulist(&irq.affinity)
                    ));
                }
            }
        }
        out
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irq_names_map_to_owners_and_queues() {
        assert!(irq_belongs("eth1-TxRx-0", "eth1"));
        assert!(!irq_belongs("eth10-TxRx-0", "eth1"));
        assert!(irq_belongs("virtio2-input.0", "virtio2"));
        assert_eq!(queue_of("eth1-TxRx-7"), Some(7));
        assert_eq!(queue_of("virtio2-input.0"), Some(0));
        assert_eq!(queue_of("virtio2-config"), None);
        assert_eq!(queue_of("mlx5_comp3@pci:0000:3b:00.0"), Some(3));
        assert_eq!(
            selected_mode("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        let lines = parse_interrupts(
            "           CPU0       CPU1\n 38:          0       2754 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\nNMI: 0 0 Non-maskable interrupts\n",
        );
        assert_eq!(lines, vec![(38, "virtio2-input.0".to_owned())]);
    }
}
