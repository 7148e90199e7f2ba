//! Host checks: a pure function from a [`Topology`] and where the hot threads are planned to run to findings,
//! each with a severity and the exact command that fixes it.

use serde::Serialize;

use crate::cpulist::format_cpulist;
use crate::plan::{Plan, Role};
use crate::topology::Topology;

/// How much a finding matters. `tickbox tune check --strict` fails on any [`Severity::Warning`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; costs little or nothing measurable.
    Info,
    /// Costs latency or throughput on the planned threads; fix before measuring or deploying.
    Warning,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// A stable short name (`governor`, `irqbalance`, `nic_irq_on_hot_cpu`, `smt_shared`, `smt_sibling`,
    /// `rmem_max`, `wmem_max`, `thp`, `hot_cpu_offline`).
    pub check: &'static str,
    /// What is wrong and why it matters.
    pub message: String,
    /// The exact command that fixes it, when there is one.
    pub fix: Option<String>,
}

/// One planned hot thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HotThread {
    /// What it is.
    pub role: Role,
    /// Its index among its role.
    pub index: usize,
    /// The NIC it serves, when known.
    pub nic: Option<String>,
    /// Its CPU.
    pub cpu: usize,
}

/// What the checks look at besides the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckInput {
    /// The planned hot threads; empty checks every CPU as if it could be hot.
    pub hot: Vec<HotThread>,
    /// The largest `SO_RCVBUF` the configuration asks for, in bytes.
    pub rcvbuf: Option<u64>,
    /// The largest `SO_SNDBUF` the configuration asks for, in bytes.
    pub sndbuf: Option<u64>,
}

impl CheckInput {
    /// The hot threads of a plan.
    pub fn from_plan(plan: &Plan) -> Self {
        Self {
            hot: plan
                .placements
                .iter()
                .map(|p| HotThread {
                    role: p.role,
                    index: p.index,
                    nic: Some(p.nic.clone()),
                    cpu: p.cpu,
                })
                .collect(),
            ..Self::default()
        }
    }
}

fn label(t: &HotThread) -> String {
    let role = match t.role {
        Role::Shard => "shard",
        Role::IoThread => "I/O thread",
        Role::Worker => "worker",
    };
    match &t.nic {
        Some(nic) => format!("{role} {} ({nic})", t.index),
        None => format!("{role} {}", t.index),
    }
}

/// The hot threads a deployment config pins, indexed within their role: subscriber shards (`(core, nic)` for
/// every shard in order; unpinned ones are skipped but keep their index), libzmq I/O threads, then workers.
pub fn hot_threads<'a>(
    shards: impl IntoIterator<Item = (Option<usize>, Option<&'a str>)>,
    io_thread_cpus: &[usize],
    worker_cpus: &[usize],
) -> Vec<HotThread> {
    let mut hot = Vec::new();
    for (index, (core, nic)) in shards.into_iter().enumerate() {
        if let Some(cpu) = core {
            hot.push(HotThread {
                role: Role::Shard,
                index,
                nic: nic.map(str::to_owned),
                cpu,
            });
        }
    }
    for (index, &cpu) in io_thread_cpus.iter().enumerate() {
        hot.push(HotThread {
            role: Role::IoThread,
            index,
            nic: None,
            cpu,
        });
    }
    for (index, &cpu) in worker_cpus.iter().enumerate() {
        hot.push(HotThread {
            role: Role::Worker,
            index,
            nic: None,
            cpu,
        });
    }
    hot
}

/// Findings as the lines `tickbox tune check` prints: severity, check name, message, and an indented `fix:` line
/// when there is one; `no findings` when there are none.
pub fn render_findings(findings: &[Finding]) -> String {
    use std::fmt::Write as _;
    if findings.is_empty() {
        return "no findings\n".to_owned();
    }
    let mut out = String::new();
    for f in findings {
        let severity = match f.severity {
            Severity::Warning => "WARNING",
            Severity::Info => "info",
        };
        let _ = writeln!(out, "{severity:<8} {:<18} {}", f.check, f.message);
        if let Some(fix) = &f.fix {
            let _ = writeln!(out, "{:<8} {:<18} fix: {fix}", "", "");
        }
    }
    out
}

/// Runs every check. Findings come warnings first, in a stable order.
pub fn check(topology: &Topology, input: &CheckInput) -> Vec<Finding> {
    let mut findings = Vec::new();
    let online = topology.cpu_ids();
    let mut hot_cpus: Vec<usize> = input.hot.iter().map(|h| h.cpu).collect();
    hot_cpus.sort_unstable();
    hot_cpus.dedup();

    let offline: Vec<usize> = hot_cpus
        .iter()
        .copied()
        .filter(|c| !online.contains(c))
        .collect();
    if !offline.is_empty() {
        findings.push(Finding {
            severity: Severity::Warning,
            check: "hot_cpu_offline",
            message: format!(
                "planned CPUs {} are not online here (online: {}): the config was made for another host",
                format_cpulist(&offline),
                format_cpulist(&online)
            ),
            fix: Some("tickbox tune plan --nic <IFACE[,IFACE…]> --out tickbox.toml   # re-plan on this host".into()),
        });
    }

    // Governor: on the planned CPUs, or everywhere when nothing is planned.
    let considered: Vec<usize> = if hot_cpus.is_empty() {
        online.clone()
    } else {
        hot_cpus.clone()
    };
    let mut by_governor: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    let mut no_cpufreq = Vec::new();
    for &id in &considered {
        match topology.cpu(id).and_then(|c| c.governor.as_deref()) {
            Some("performance") => {}
            Some(g) => by_governor.entry(g).or_default().push(id),
            None => no_cpufreq.push(id),
        }
    }
    for (governor, cpus) in by_governor {
        let list = format_cpulist(&cpus);
        findings.push(Finding {
            severity: Severity::Warning,
            check: "governor",
            message: format!(
                "CPUs {list} run the {governor} governor: clocks drop while idle and ramp up after a burst starts, adding latency"
            ),
            fix: Some(format!("sudo cpupower -c {list} frequency-set -g performance")),
        });
    }
    if !no_cpufreq.is_empty() && no_cpufreq.len() == considered.len() {
        findings.push(Finding {
            severity: Severity::Info,
            check: "governor",
            message: "no cpufreq governor is exposed (a VM, or frequency is managed elsewhere)"
                .into(),
            fix: None,
        });
    }

    if topology.irqbalance {
        findings.push(Finding {
            severity: Severity::Warning,
            check: "irqbalance",
            message: "irqbalance is running: it moves NIC IRQs every few seconds, possibly onto the cores planned for shards".into(),
            fix: Some("sudo systemctl disable --now irqbalance".into()),
        });
    }

    // A NIC's IRQs on the CPU of a thread that serves that NIC.
    for nic in &topology.nics {
        let on_hot: Vec<(&HotThread, u32)> = input
            .hot
            .iter()
            .filter(|h| h.nic.as_deref() == Some(nic.name.as_str()) && h.role != Role::Worker)
            .flat_map(|h| {
                nic.irqs
                    .iter()
                    .filter(move |irq| irq.affinity.contains(&h.cpu))
                    .map(move |irq| (h, irq.number))
            })
            .collect();
        if on_hot.is_empty() {
            continue;
        }
        let mut target: Vec<usize> = topology
            .nic_cpus(nic)
            .into_iter()
            .filter(|c| !hot_cpus.contains(c))
            .collect();
        if target.is_empty() {
            target = online
                .iter()
                .copied()
                .filter(|c| !hot_cpus.contains(c))
                .collect();
        }
        let mut irqs: Vec<u32> = on_hot.iter().map(|(_, n)| *n).collect();
        irqs.sort_unstable();
        irqs.dedup();
        let mut threads: Vec<String> = on_hot
            .iter()
            .map(|(h, _)| format!("{} on CPU {}", label(h), h.cpu))
            .collect();
        threads.dedup();
        let fix = if target.is_empty() {
            None
        } else {
            let list = format_cpulist(&target);
            Some(
                irqs.iter()
                    .map(|n| format!("echo {list} | sudo tee /proc/irq/{n}/smp_affinity_list"))
                    .collect::<Vec<_>>()
                    .join(" && "),
            )
        };
        findings.push(Finding {
            severity: Severity::Warning,
            check: "nic_irq_on_hot_cpu",
            message: format!(
                "{}'s IRQs {} may fire on the CPU of {}: its softirq work preempts the thread that reads the data",
                nic.name,
                irqs.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","),
                threads.join(", ")
            ),
            fix,
        });
    }

    // SMT: two hot threads on one physical core, or a hot thread's sibling left to other work.
    let mut reported_cores = Vec::new();
    for h in &input.hot {
        let Some(cpu) = topology.cpu(h.cpu) else {
            continue;
        };
        let core = topology.core_of(h.cpu);
        let mates: Vec<&HotThread> = input
            .hot
            .iter()
            .filter(|o| !std::ptr::eq(*o, h) && cpu.siblings.contains(&o.cpu))
            .collect();
        if !mates.is_empty() && !reported_cores.contains(&core) {
            reported_cores.push(core);
            let names: Vec<String> = std::iter::once(h)
                .chain(mates.iter().copied())
                .map(|t| format!("{} on CPU {}", label(t), t.cpu))
                .collect();
            findings.push(Finding {
                severity: Severity::Warning,
                check: "smt_shared",
                message: format!(
                    "{} share physical core {core}: they split its execution units and caches",
                    names.join(" and ")
                ),
                fix: Some("echo off | sudo tee /sys/devices/system/cpu/smt/control   # or re-plan on a host with more cores".into()),
            });
        }
        for &sib in &cpu.siblings {
            if sib != h.cpu && !hot_cpus.contains(&sib) && !topology.isolated.contains(&sib) {
                findings.push(Finding {
                    severity: Severity::Info,
                    check: "smt_sibling",
                    message: format!(
                        "CPU {sib}, SMT sibling of {} on CPU {}, can run any other work and slow it down",
                        label(h),
                        h.cpu
                    ),
                    fix: Some(format!("echo 0 | sudo tee /sys/devices/system/cpu/cpu{sib}/online")),
                });
            }
        }
    }

    for (check, asked, limit, sysctl) in [
        (
            "rmem_max",
            input.rcvbuf,
            topology.net.rmem_max,
            "net.core.rmem_max",
        ),
        (
            "wmem_max",
            input.sndbuf,
            topology.net.wmem_max,
            "net.core.wmem_max",
        ),
    ] {
        if let (Some(asked), Some(limit)) = (asked, limit) {
            if asked > limit {
                findings.push(Finding {
                    severity: Severity::Warning,
                    check,
                    message: format!(
                        "the configuration asks for {asked}-byte socket buffers but {sysctl} is {limit}: the kernel silently caps them"
                    ),
                    fix: Some(format!("sudo sysctl -w {sysctl}={asked}")),
                });
            }
        }
    }

    if topology.thp.as_deref() == Some("always") {
        findings.push(Finding {
            severity: Severity::Warning,
            check: "thp",
            message: "transparent huge pages are `always`: khugepaged compaction stalls hit the hot threads at random".into(),
            fix: Some("echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled".into()),
        });
    }

    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    findings
}

#[cfg(test)]
mod render_tests {
    use super::*;

    #[test]
    fn hot_threads_keep_each_role_index() {
        let hot = hot_threads(
            [(None, Some("eth0")), (Some(5), Some("eth1"))],
            &[7],
            &[2, 3],
        );
        let got: Vec<(Role, usize, Option<&str>, usize)> = hot
            .iter()
            .map(|h| (h.role, h.index, h.nic.as_deref(), h.cpu))
            .collect();
        assert_eq!(
            got,
            [
                (Role::Shard, 1, Some("eth1"), 5),
                (Role::IoThread, 0, None, 7),
                (Role::Worker, 0, None, 2),
                (Role::Worker, 1, None, 3),
            ]
        );
    }

    #[test]
    fn findings_render_one_line_each_with_fix_below() {
        assert_eq!(render_findings(&[]), "no findings\n");
        let f = Finding {
            severity: Severity::Warning,
            check: "thp",
            message: "THP is always".into(),
            fix: Some("echo never".into()),
        };
        assert_eq!(
            render_findings(&[f]),
            format!(
                "WARNING  {:<18} THP is always\n{:<8} {:<18} fix: echo never\n",
                "thp", "", ""
            )
        );
    }
}

/// `unsecured_bind`: endpoints a deployment binds beyond the loopback while `[security]` neither turns CURVE on
/// nor fences peers by IP, so any host that reaches them can read, publish or steer. `binds` pairs a config name
/// with each endpoint it binds.
pub fn check_exposure(binds: &[(String, String)], curve: bool, ip_fenced: bool) -> Vec<Finding> {
    if curve || ip_fenced {
        return Vec::new();
    }
    binds
        .iter()
        .filter(|(_, endpoint)| reachable_from_network(endpoint))
        .map(|(name, endpoint)| Finding {
            severity: Severity::Warning,
            check: "unsecured_bind",
            message: format!(
                "{name} binds {endpoint} with mechanism = \"null\" and no allow_ips: any host that reaches it can \
                 read, publish or steer"
            ),
            fix: Some(
                "add [security] mechanism = \"curve\" with certificate and allow (see docs/book/src/security.md), or \
                 allow_ips"
                    .into(),
            ),
        })
        .collect()
}

/// What `[security]` says about who may connect, for [`check_admission`]: whether CURVE is on, whether a default
/// `allow` is set (a directory or `"any"`), and the roles (or `*` for the default) whose `allow` is `"any"`.
#[derive(Debug, Clone, Default)]
pub struct Admission {
    /// `mechanism = "curve"`.
    pub curve: bool,
    /// The section has a default `allow` (a directory or `"any"`).
    pub default_allow: bool,
    /// Roles set to `allow = "any"` (`*` for the default).
    pub any_roles: Vec<String>,
}

/// `curve_without_allow` (an error: every command that binds would refuse to start) and `curve_allow_any` (a
/// warning: encrypted, but any key gets in) for the section's admission rules.
pub fn check_admission(admission: &Admission) -> Vec<Finding> {
    if !admission.curve {
        return Vec::new();
    }
    let mut findings = Vec::new();
    if !admission.default_allow {
        findings.push(Finding {
            severity: Severity::Warning,
            check: "curve_without_allow",
            message: "mechanism = \"curve\" with no allow: every command that binds refuses to start unless its role \
                      has its own allow"
                .into(),
            fix: Some(
                "allow = \"DIR\" (a directory of public certificates), or allow = \"any\" to admit every CURVE key"
                    .into(),
            ),
        });
    }
    for role in &admission.any_roles {
        findings.push(Finding {
            severity: Severity::Warning,
            check: "curve_allow_any",
            message: format!(
                "allow = \"any\" for {role}: every CURVE key is admitted (encrypted, not authenticated)"
            ),
            fix: Some("list the keys that may connect: allow = \"DIR\"".into()),
        });
    }
    findings
}

/// `metrics_bind`: `[metrics] bind` serves every counter over plain HTTP with no authentication, whatever
/// `[security]` says; off the loopback, any host that reaches it reads them. `loopback` is whether `bind` resolves
/// to a loopback address.
pub fn check_metrics_exposure(bind: &str, loopback: bool) -> Option<Finding> {
    (!bind.is_empty() && !loopback).then(|| Finding {
        severity: Severity::Warning,
        check: "metrics_bind",
        message: format!(
            "[security]: [metrics] bind = \"{bind}\" serves /metrics beyond the loopback, over HTTP with no \
             authentication or encryption (CURVE does not cover it): any host that reaches it reads every counter"
        ),
        fix: Some(
            "bind 127.0.0.1:PORT and scrape through a proxy with TLS and authentication, or fence the port off"
                .into(),
        ),
    })
}

/// True for a TCP endpoint whose address is not a loopback address (`*`, `0.0.0.0`, an interface name, or any
/// routable address); ipc and inproc never are.
fn reachable_from_network(endpoint: &str) -> bool {
    let Some(rest) = endpoint.strip_prefix("tcp://") else {
        return false;
    };
    // A source-interface form `tcp://eth1:0;10.0.0.1:5556` binds what follows the ';'.
    let rest = rest.rsplit(';').next().unwrap_or(rest);
    let host = match rest.rsplit_once(':') {
        Some((host, _port)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => rest,
    };
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => !ip.is_loopback(),
        Err(_) => host != "localhost",
    }
}

#[cfg(test)]
mod exposure_tests {
    use super::*;

    #[test]
    fn a_metrics_endpoint_off_the_loopback_warns_whatever_security_says() {
        assert!(check_metrics_exposure("", false).is_none());
        assert!(check_metrics_exposure("127.0.0.1:9100", true).is_none());
        let f = check_metrics_exposure("0.0.0.0:9100", false).unwrap();
        assert_eq!((f.severity, f.check), (Severity::Warning, "metrics_bind"));
        assert!(f.message.contains("[security]") && f.message.contains("0.0.0.0:9100"));
    }

    #[test]
    fn only_network_binds_without_security_warn() {
        let binds = vec![
            ("lvc.bind".to_string(), "tcp://*:5556".to_string()),
            ("lvc.tap".to_string(), "tcp://127.0.0.1:5557".to_string()),
            (
                "feed.shards[0]".to_string(),
                "tcp://10.0.0.1:5555".to_string(),
            ),
            ("lvc.snapshot".to_string(), "ipc:///tmp/lvc".to_string()),
            ("x".to_string(), "tcp://[::1]:1".to_string()),
            ("y".to_string(), "tcp://localhost:1".to_string()),
        ];
        let found = check_exposure(&binds, false, false);
        let names: Vec<&str> = found
            .iter()
            .map(|f| f.message.split(' ').next().unwrap())
            .collect();
        assert_eq!(names, ["lvc.bind", "feed.shards[0]"]);
        assert!(found
            .iter()
            .all(|f| f.check == "unsecured_bind" && f.severity == Severity::Warning));
        assert!(check_exposure(&binds, true, false).is_empty());
        assert!(check_exposure(&binds, false, true).is_empty());
    }
}
