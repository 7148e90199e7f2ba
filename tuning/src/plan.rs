//! The pinning planner: a pure function from a [`Topology`] and a [`PlanRequest`] to a [`Plan`] that places
//! every hot thread (subscriber shards, libzmq I/O threads, workers) on a CPU, explains each choice, and says
//! what a host too small for the request forced it to compromise.
//!
//! Each thread takes the cheapest CPU left, in this order of importance (a higher rule always outweighs every
//! lower one together):
//! 1. a CPU no other hot thread runs on;
//! 2. a physical core no other hot thread runs on (no SMT sibling shares it while free cores remain);
//! 3. a CPU of its NIC's NUMA node (the node's CPUs, else the NIC's `local_cpulist`, else any CPU);
//! 4. not physical core 0 (where the kernel's housekeeping and unbound work lands), and not a CPU its NIC's IRQs
//!    are steered to (a shard sharing a CPU with its own NIC's softirqs is preempted by them);
//! 5. not a CPU another planned NIC's IRQs are steered to; an `isolcpus` CPU when the host isolates some.
//!
//! Ties go to the lowest CPU id, so a plan is deterministic. Shards are placed first (all NICs), then one I/O
//! thread per NIC, then the workers, so the threads that touch the NIC's data first get the best CPUs.

use serde::Serialize;

use crate::cpulist::format_cpulist;
use crate::topology::Topology;

/// Errors planning.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A requested NIC is not on the host (a missing NIC is a start-up error, never a silent fallback).
    #[error("no network interface {nic:?} on this host (have: {have})")]
    NoSuchNic {
        /// The NIC asked for.
        nic: String,
        /// The host's NICs.
        have: String,
    },
    /// The request is empty or inconsistent.
    #[error("invalid plan request: {0}")]
    Invalid(String),
}

/// What to plan for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRequest {
    /// One subscriber shard group per NIC, in this order.
    pub nics: Vec<String>,
    /// Subscriber shards per NIC (≥ 1).
    pub shards_per_nic: usize,
    /// Worker threads per NIC, placed on that NIC's node.
    pub workers_per_nic: usize,
    /// Publisher endpoint of each shard, in shard order (NIC by NIC); empty leaves `connect = []` to fill in.
    pub connect: Vec<String>,
}

/// The kind of hot thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A subscriber SUB shard thread (`tickbox-shard-<n>`).
    Shard,
    /// A libzmq I/O thread (`ZMQbg/IO/<n>`).
    IoThread,
    /// A worker thread (`tickbox-worker-<n>`).
    Worker,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::Shard => "shard",
            Role::IoThread => "I/O thread",
            Role::Worker => "worker",
        }
    }
}

/// One hot thread and where it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// What it is.
    pub role: Role,
    /// Its index among threads of its role (shard n, `ZMQbg/IO/n`, worker n).
    pub index: usize,
    /// The NIC it serves.
    pub nic: String,
    /// The CPU chosen.
    pub cpu: usize,
    /// Why this CPU, in one line.
    pub why: String,
    /// What this choice gave up, if anything.
    pub compromise: Option<String>,
    /// For a shard: the index `n` of the I/O thread planned for its NIC (`ZMQbg/IO/n`), whose bit its SUB sets
    /// in `ZMQ_AFFINITY` so its connection is served near the NIC; `None` for the other roles.
    pub io_thread: Option<usize>,
}

/// A complete placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Every hot thread: shards, then I/O threads, then workers.
    pub placements: Vec<Placement>,
    /// The request's NICs in order.
    pub nics: Vec<String>,
    /// Shards per NIC.
    pub shards_per_nic: usize,
    /// Workers per NIC.
    pub workers_per_nic: usize,
    /// Endpoint per shard (may be empty).
    pub connect: Vec<String>,
    /// One line on the host the plan was made for.
    pub host: String,
}

impl Plan {
    /// The placements of one role, in index order.
    pub fn of(&self, role: Role) -> Vec<&Placement> {
        self.placements.iter().filter(|p| p.role == role).collect()
    }

    /// Index of the I/O thread planned for `nic` (`ZMQbg/IO/<n>`), if that NIC is in the plan.
    pub fn io_thread_of(&self, nic: &str) -> Option<usize> {
        self.placements
            .iter()
            .find(|p| p.role == Role::IoThread && p.nic == nic)
            .map(|p| p.index)
    }

    /// Everything the plan had to give up.
    pub fn compromises(&self) -> Vec<String> {
        self.placements
            .iter()
            .filter_map(|p| p.compromise.clone())
            .collect()
    }

    /// Every CPU a hot thread was put on.
    pub fn hot_cpus(&self) -> Vec<usize> {
        let mut cpus: Vec<usize> = self.placements.iter().map(|p| p.cpu).collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }

    /// The plan as a tickbox configuration (`--config`), a comment line explaining each choice.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        let io_of = |nic: &str| self.io_thread_of(nic);
        out.push_str(&format!(
            "# tickbox tune plan --nic {} --shards-per-nic {} --workers {}\n",
            self.nics.join(","),
            self.shards_per_nic,
            self.workers_per_nic
        ));
        out.push_str(&format!("# host: {}\n", self.host));
        let compromises = self.compromises();
        if compromises.is_empty() {
            out.push_str(
                "# No compromise: every hot thread has a physical core to itself on its NIC's node, away from core 0 and its NIC's IRQs.\n",
            );
        } else {
            out.push_str("# Compromises this host forced:\n");
            for c in &compromises {
                out.push_str(&format!("#   - {c}\n"));
            }
        }

        let io = self.of(Role::IoThread);
        out.push_str("\n[context]\n");
        out.push_str(&format!(
            "# One libzmq I/O thread per NIC, started before any thread is pinned and then each pinned near its NIC ({}).\n",
            io.iter()
                .map(|p| format!("ZMQbg/IO/{} for {}", p.index, p.nic))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        out.push_str(&format!("io_threads = {}\n", io.len().max(1)));
        for p in &io {
            out.push_str(&format!("# ZMQbg/IO/{}: {}\n", p.index, p.why));
        }
        out.push_str(&format!(
            "io_thread_cpus = [{}]\n",
            io.iter()
                .map(|p| p.cpu.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));

        out.push_str("\n[subscriber]\n");
        for p in self.of(Role::Shard) {
            out.push_str("\n[[subscriber.shards]]\n");
            out.push_str(&format!("# shard {}: {}\n", p.index, p.why));
            match self.connect.get(p.index) {
                Some(ep) => out.push_str(&format!("connect = [{}]\n", quote(ep))),
                None => out.push_str(&format!(
                    "# Fill in the publisher endpoint this shard reads through {} (tcp://HOST:PORT).\nconnect = []\n",
                    p.nic
                )),
            }
            out.push_str(&format!("nic = {}\n", quote(&p.nic)));
            out.push_str(&format!("core = {}\n", p.cpu));
            if let Some(n) = io_of(&p.nic) {
                out.push_str(&format!(
                    "# Its SUB sets ZMQ_AFFINITY bit {n} (mask {:#x}), so libzmq serves it on ZMQbg/IO/{n}, the I/O thread pinned near {}.\nio_thread = {n}\n",
                    1u64 << n.min(63),
                    p.nic
                ));
            }
        }

        let workers = self.of(Role::Worker);
        out.push_str("\n[workers]\n");
        out.push_str(&format!(
            "# {} worker(s) per NIC on that NIC's node; note that every worker pulls from every shard (one pool per subscriber).\n",
            self.workers_per_nic
        ));
        for p in &workers {
            out.push_str(&format!("# worker {}: {}\n", p.index, p.why));
        }
        out.push_str(&format!("count = {}\n", workers.len()));
        out.push_str(&format!(
            "cores = [{}]\n",
            workers
                .iter()
                .map(|p| p.cpu.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        out
    }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

const USED: u64 = 1_000_000;
const SHARED_CORE: u64 = 100_000;
const OFF_NODE: u64 = 10_000;
const CORE_ZERO: u64 = 1_000;
const OWN_IRQ: u64 = 1_000;
const OTHER_IRQ: u64 = 10;
const NOT_ISOLATED: u64 = 1;

/// Plans `request` on `topology`.
pub fn plan(topology: &Topology, request: &PlanRequest) -> Result<Plan, PlanError> {
    if request.nics.is_empty() {
        return Err(PlanError::Invalid("no NIC given".into()));
    }
    if request.shards_per_nic == 0 {
        return Err(PlanError::Invalid(
            "shards per NIC must be at least 1".into(),
        ));
    }
    if topology.cpus.is_empty() {
        return Err(PlanError::Invalid("the topology has no online CPU".into()));
    }
    let total_shards = request.nics.len() * request.shards_per_nic;
    if !request.connect.is_empty() && request.connect.len() != total_shards {
        return Err(PlanError::Invalid(format!(
            "{} endpoints for {total_shards} shards: give one per shard (NIC by NIC) or none",
            request.connect.len()
        )));
    }
    let mut seen = Vec::new();
    let mut nics = Vec::new();
    for name in &request.nics {
        if seen.contains(name) {
            return Err(PlanError::Invalid(format!("NIC {name} given twice")));
        }
        seen.push(name.clone());
        let nic = topology.nic(name).ok_or_else(|| PlanError::NoSuchNic {
            nic: name.clone(),
            have: topology
                .nics
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        nics.push(nic);
    }
    let all_irq: Vec<usize> = {
        let mut v: Vec<usize> = nics.iter().flat_map(|n| topology.irq_cpus(n)).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let core_zero = topology.core_of(topology.cpus[0].id);
    let hot_total = total_shards + nics.len() + nics.len() * request.workers_per_nic;

    let mut placements: Vec<Placement> = Vec::with_capacity(hot_total);
    let mut jobs: Vec<(Role, usize)> = Vec::new(); // (role, nic index), in placement order
    for (i, _) in nics.iter().enumerate() {
        jobs.extend(std::iter::repeat_n(
            (Role::Shard, i),
            request.shards_per_nic,
        ));
    }
    for (i, _) in nics.iter().enumerate() {
        jobs.push((Role::IoThread, i));
    }
    for (i, _) in nics.iter().enumerate() {
        jobs.extend(std::iter::repeat_n(
            (Role::Worker, i),
            request.workers_per_nic,
        ));
    }
    let mut counters = [0usize; 3];
    for (role, nic_index) in jobs {
        let nic = nics[nic_index];
        let local = topology.nic_cpus(nic);
        let own_irq = topology.irq_cpus(nic);
        let cost = |cpu: usize| -> u64 {
            let core = topology.core_of(cpu);
            let mut c = 0;
            if placements.iter().any(|p| p.cpu == cpu) {
                c += USED;
            }
            if placements
                .iter()
                .any(|p| p.cpu != cpu && topology.core_of(p.cpu) == core)
            {
                c += SHARED_CORE;
            }
            if !local.contains(&cpu) {
                c += OFF_NODE;
            }
            if core == core_zero {
                c += CORE_ZERO;
            }
            if own_irq.contains(&cpu) {
                c += OWN_IRQ;
            }
            if all_irq.contains(&cpu) && !own_irq.contains(&cpu) {
                c += OTHER_IRQ;
            }
            if !topology.isolated.is_empty() && !topology.isolated.contains(&cpu) {
                c += NOT_ISOLATED;
            }
            c
        };
        let (cpu, c) = topology
            .cpus
            .iter()
            .map(|x| (x.id, cost(x.id)))
            .min_by_key(|&(id, c)| (c, id))
            .expect("topology has CPUs (checked above)");
        let index = counters[role as usize];
        counters[role as usize] += 1;
        let who = format!("{} {} ({})", role.label(), index, nic.name);
        let node = match topology.node_of(cpu) {
            Some(n) => format!("node {n}"),
            None => "the only node".into(),
        };
        let nic_node = match nic.numa_node {
            Some(n) => format!("node {n}"),
            None if topology.nodes.is_empty() => "no NUMA information".into(),
            None => "node unknown".into(),
        };
        let mut why = vec![format!(
            "CPU {cpu} on {node} ({} is on {nic_node})",
            nic.name
        )];
        let mut gave_up: Vec<String> = Vec::new();
        let sharing: Vec<String> = placements
            .iter()
            .filter(|p| topology.core_of(p.cpu) == topology.core_of(cpu))
            .map(|p| {
                format!(
                    "{} {} ({}) on CPU {}",
                    p.role.label(),
                    p.index,
                    p.nic,
                    p.cpu
                )
            })
            .collect();
        if c >= USED {
            gave_up.push(format!(
                "CPU {cpu} also runs {} ({hot_total} hot threads, {} CPUs)",
                sharing.join(", "),
                topology.cpus.len()
            ));
        } else if c >= SHARED_CORE {
            gave_up.push(format!(
                "shares physical core {} with {} ({hot_total} hot threads, {} physical cores)",
                topology.core_of(cpu),
                sharing.join(", "),
                topology.physical_cores()
            ));
        } else {
            why.push(format!("physical core {} to itself", topology.core_of(cpu)));
        }
        if c % SHARED_CORE >= OFF_NODE {
            gave_up.push(format!(
                "runs off {}'s node: no free core left on {nic_node}",
                nic.name
            ));
        }
        if topology.core_of(cpu) == core_zero {
            gave_up.push("runs on physical core 0, with the kernel's housekeeping".into());
        } else {
            why.push("away from core 0".into());
        }
        if own_irq.contains(&cpu) {
            gave_up.push(format!(
                "shares CPU {cpu} with {}'s IRQs (steered to {})",
                nic.name,
                format_cpulist(&own_irq)
            ));
        } else if !own_irq.is_empty() {
            why.push(format!(
                "away from {}'s IRQ CPUs {}",
                nic.name,
                format_cpulist(&own_irq)
            ));
        } else {
            why.push(format!("{}'s IRQs are not steered", nic.name));
        }
        if topology.isolated.contains(&cpu) {
            why.push("an isolcpus CPU".into());
        }
        placements.push(Placement {
            role,
            index,
            nic: nic.name.clone(),
            cpu,
            why: why.join(", "),
            compromise: (!gave_up.is_empty()).then(|| format!("{who}: {}", gave_up.join("; "))),
            io_thread: None,
        });
    }
    // I/O thread `i` serves NIC `i` (they are placed in NIC order); each shard names its NIC's.
    let io_index: Vec<(String, usize)> = placements
        .iter()
        .filter(|p| p.role == Role::IoThread)
        .map(|p| (p.nic.clone(), p.index))
        .collect();
    for p in placements.iter_mut().filter(|p| p.role == Role::Shard) {
        p.io_thread = io_index
            .iter()
            .find(|(nic, _)| *nic == p.nic)
            .map(|&(_, n)| n);
    }
    Ok(Plan {
        placements,
        nics: request.nics.clone(),
        shards_per_nic: request.shards_per_nic,
        workers_per_nic: request.workers_per_nic,
        connect: request.connect.clone(),
        host: format!(
            "{} CPUs, {} physical cores, {} socket(s), {} NUMA node(s), SMT {}",
            topology.cpus.len(),
            topology.physical_cores(),
            topology.packages(),
            topology.nodes.len(),
            if topology.smt() { "on" } else { "off" }
        ),
    })
}
