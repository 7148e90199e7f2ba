//! The pinning planner on fixture hosts and, as properties, on generated topologies.

use crate::common;

use proptest::prelude::*;
use tickbox_tuning::topology::{Cpu, Irq, NetSysctls, Nic, Node, Topology};
use tickbox_tuning::{plan, PlanError, PlanRequest, Role};

fn request(nics: &[&str], shards: usize, workers: usize) -> PlanRequest {
    PlanRequest {
        nics: nics.iter().map(|s| s.to_string()).collect(),
        shards_per_nic: shards,
        workers_per_nic: workers,
        connect: Vec::new(),
    }
}

#[test]
fn two_socket_host_puts_each_nic_on_its_node_without_compromise() {
    let t = common::read("two_socket_smt");
    let p = plan(&t, &request(&["eth1", "eth2"], 1, 2)).unwrap();
    assert!(p.compromises().is_empty(), "{:?}", p.compromises());
    for pl in &p.placements {
        let nic = t.nic(&pl.nic).unwrap();
        assert_eq!(t.node_of(pl.cpu), nic.numa_node, "{pl:?}");
        assert_ne!(t.core_of(pl.cpu), 0, "{pl:?} on core 0");
        assert!(
            !t.irq_cpus(nic).contains(&pl.cpu),
            "{pl:?} on its NIC's IRQ CPU"
        );
    }
    let cores: Vec<usize> = p.placements.iter().map(|pl| t.core_of(pl.cpu)).collect();
    let mut unique = cores.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        cores.len(),
        "two hot threads share a core: {cores:?}"
    );
    let shards: Vec<(String, usize)> = p
        .of(Role::Shard)
        .iter()
        .map(|s| (s.nic.clone(), s.cpu))
        .collect();
    // eth1's IRQs are on 1-2 and core 0 is avoided: CPU 3 is node 0's first clean core; eth2's are on 16-17.
    assert_eq!(shards, vec![("eth1".into(), 3), ("eth2".into(), 18)]);
    assert_eq!(p.of(Role::IoThread).len(), 2);
    assert_eq!(p.of(Role::Worker).len(), 4);
}

#[test]
fn eight_core_host_compromises_when_asked_for_more_than_it_has() {
    let t = common::read("eight_core");
    let fits = plan(&t, &request(&["eth0"], 2, 4)).unwrap();
    // 7 hot threads (2 shards, 1 I/O thread, 4 workers) fit the 7 cores besides core 0.
    assert!(fits.compromises().is_empty(), "{:?}", fits.compromises());
    let too_big = plan(&t, &request(&["eth0"], 4, 6)).unwrap();
    let compromises = too_big.compromises();
    assert!(
        compromises.iter().any(|c| c.contains("core 0")),
        "{compromises:?}"
    );
    assert!(
        compromises.iter().any(|c| c.contains("also runs")),
        "{compromises:?}"
    );
    assert_eq!(too_big.placements.len(), 11);
}

#[test]
fn vm_compromises_are_spelled_out() {
    let t = common::read("vm");
    let p = plan(&t, &request(&["eth0"], 1, 1)).unwrap();
    // 3 hot threads on 2 vCPUs whose only IRQs are steered to both: everything is a compromise.
    let text = p.to_toml();
    assert!(text.contains("# Compromises this host forced:"), "{text}");
    assert!(text.contains("shares CPU"), "{text}");
    assert!(text.contains("no NUMA information"), "{text}");
}

#[test]
fn a_missing_nic_is_an_error_naming_the_ones_present() {
    let t = common::read("vm");
    let err = plan(&t, &request(&["eth9"], 1, 1)).unwrap_err();
    assert!(matches!(err, PlanError::NoSuchNic { .. }));
    assert!(err.to_string().contains("eth0"), "{err}");
    assert!(plan(&t, &request(&["eth0"], 0, 1)).is_err());
    assert!(plan(&t, &request(&["eth0", "eth0"], 1, 1)).is_err());
}

#[test]
fn the_plan_file_loads_into_the_crates_config_types() {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Planned {
        context: tickbox_zmqx::context::ContextConfig,
        subscriber: tickbox_subscriber::SubscriberConfig,
        workers: tickbox_workers::WorkerPoolConfig,
    }
    let t = common::read("two_socket_smt");
    let mut req = request(&["eth1", "eth2"], 2, 1);
    req.connect = vec![
        "tcp://10.0.1.1:5556".into(),
        "tcp://10.0.1.1:5557".into(),
        "tcp://10.0.2.1:5556".into(),
        "tcp://10.0.2.1:5557".into(),
    ];
    let p = plan(&t, &req).unwrap();
    let text = p.to_toml();
    let parsed: Planned = toml::from_str(&text).unwrap();
    assert_eq!(parsed.context.io_threads, 2);
    assert_eq!(
        parsed.context.io_thread_cpus,
        p.of(Role::IoThread)
            .iter()
            .map(|x| x.cpu)
            .collect::<Vec<_>>()
    );
    assert_eq!(parsed.subscriber.shards.len(), 4);
    assert_eq!(parsed.subscriber.shards[2].nic.as_deref(), Some("eth2"));
    assert_eq!(
        parsed.subscriber.shards[2].connect,
        vec!["tcp://10.0.2.1:5556".to_owned()]
    );
    assert_eq!(
        parsed.subscriber.shards[2].core,
        Some(p.of(Role::Shard)[2].cpu)
    );
    assert_eq!(parsed.workers.count, Some(2));
    // Every value line has a comment explaining it somewhere above it in its section.
    assert!(
        text.lines().filter(|l| l.starts_with("# shard ")).count() == 4,
        "{text}"
    );
    assert!(
        text.lines().filter(|l| l.starts_with("# worker ")).count() == 2,
        "{text}"
    );
}

/// Each shard's SUB is told (`io_thread`, hence its `ZMQ_AFFINITY` bit) to use the I/O thread pinned near its own
/// NIC: on the two-NIC fixture the two NICs' shards get different bits, and the bit's thread is the one whose
/// `io_thread_cpus` entry is on that NIC's node.
#[test]
fn each_shard_gets_the_affinity_bit_of_its_nics_io_thread() {
    #[derive(serde::Deserialize)]
    struct Planned {
        context: tickbox_zmqx::context::ContextConfig,
        subscriber: tickbox_subscriber::SubscriberConfig,
    }
    let t = common::read("two_socket_smt");
    let p = plan(&t, &request(&["eth1", "eth2"], 2, 1)).unwrap();
    let parsed: Planned = toml::from_str(&p.to_toml()).unwrap();
    let mut bits_by_nic: Vec<(String, u64)> = Vec::new();
    for shard in &parsed.subscriber.shards {
        let nic = shard.nic.clone().unwrap();
        let n = shard
            .io_thread
            .expect("every planned shard names an I/O thread");
        let bit = tickbox_zmqx::profile::io_thread_affinity(n).unwrap();
        assert_eq!(bit.count_ones(), 1);
        // The thread behind that bit is pinned on this NIC's node, to the CPU the plan chose for this NIC.
        let cpu = parsed.context.io_thread_cpus[n];
        assert_eq!(t.node_of(cpu), t.nic(&nic).unwrap().numa_node, "{nic}");
        let io = p.of(Role::IoThread);
        assert_eq!((io[n].nic.as_str(), io[n].cpu), (nic.as_str(), cpu));
        bits_by_nic.push((nic, bit));
    }
    bits_by_nic.dedup();
    assert_eq!(
        bits_by_nic,
        vec![("eth1".to_owned(), 0b01), ("eth2".to_owned(), 0b10)],
        "shards of one NIC share its bit, the two NICs differ"
    );
    // The JSON plan says the same per shard, and nothing for the other roles.
    for pl in &p.placements {
        match pl.role {
            Role::Shard => assert_eq!(pl.io_thread, p.io_thread_of(&pl.nic)),
            _ => assert_eq!(pl.io_thread, None),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Properties over generated hosts.

#[derive(Debug, Clone)]
struct Host {
    topology: Topology,
    nics: Vec<String>,
}

fn host() -> impl Strategy<Value = Host> {
    (
        1usize..=2,
        1usize..=8,
        1usize..=2,
        any::<bool>(),
        1usize..=3,
    )
        .prop_flat_map(|(packages, cores, smt, numa, nics)| {
            let nic_nodes = proptest::collection::vec(0..packages, nics);
            let irq_cpu =
                proptest::collection::vec(proptest::option::of(0..packages * cores * smt), nics);
            (Just((packages, cores, smt, numa)), nic_nodes, irq_cpu)
        })
        .prop_map(|((packages, cores, smt, numa), nic_nodes, irq_cpu)| {
            let per_thread = packages * cores;
            let mut cpus = Vec::new();
            for t in 0..smt {
                for p in 0..packages {
                    for c in 0..cores {
                        let id = t * per_thread + p * cores + c;
                        let first = p * cores + c;
                        cpus.push(Cpu {
                            id,
                            core_id: c,
                            package: p,
                            node: numa.then_some(p),
                            siblings: (0..smt).map(|s| first + s * per_thread).collect(),
                            governor: None,
                        });
                    }
                }
            }
            cpus.sort_by_key(|c| c.id);
            let nodes = if numa {
                (0..packages)
                    .map(|p| Node {
                        id: p,
                        cpus: cpus
                            .iter()
                            .filter(|c| c.package == p)
                            .map(|c| c.id)
                            .collect(),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let nics: Vec<Nic> = nic_nodes
                .iter()
                .zip(&irq_cpu)
                .enumerate()
                .map(|(i, (&node, irq))| Nic {
                    name: format!("eth{i}"),
                    driver: Some("ixgbe".into()),
                    speed_mbps: Some(10_000),
                    operstate: Some("up".into()),
                    numa_node: numa.then_some(node),
                    local_cpus: Vec::new(),
                    rx_queues: 1,
                    tx_queues: 1,
                    irqs: irq
                        .map(|cpu| Irq {
                            number: 100 + i as u32,
                            name: format!("eth{i}-TxRx-0"),
                            queue: Some(0),
                            affinity: vec![cpu],
                        })
                        .into_iter()
                        .collect(),
                    is_virtual: false,
                })
                .collect();
            let names = nics.iter().map(|n| n.name.clone()).collect();
            Host {
                topology: Topology {
                    cpus,
                    nodes,
                    caches: Vec::new(),
                    isolated: Vec::new(),
                    nohz_full: Vec::new(),
                    thp: None,
                    nics,
                    irqbalance: false,
                    net: NetSysctls::default(),
                },
                nics: names,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn plans_hold_their_promises(h in host(), shards in 1usize..=3, workers in 0usize..=4) {
        let t = &h.topology;
        let req = PlanRequest {
            nics: h.nics.clone(),
            shards_per_nic: shards,
            workers_per_nic: workers,
            connect: Vec::new(),
        };
        let p = plan(t, &req).unwrap();
        let hot = h.nics.len() * (shards + 1 + workers);
        prop_assert_eq!(p.placements.len(), hot);
        // Deterministic.
        prop_assert_eq!(&plan(t, &req).unwrap(), &p);
        for pl in &p.placements {
            prop_assert!(t.cpu(pl.cpu).is_some(), "{:?} on an offline CPU", pl);
        }
        // Never two hot threads on one physical core when the host has a core for each.
        let mut cores: Vec<usize> = p.placements.iter().map(|pl| t.core_of(pl.cpu)).collect();
        let n = cores.len();
        cores.sort_unstable();
        cores.dedup();
        if t.physical_cores() >= hot {
            prop_assert_eq!(cores.len(), n, "shared cores with {} cores for {} threads", t.physical_cores(), hot);
        }
        // Each NIC's shards on its node when every node has a core for each shard of its NICs.
        let fits = t.nodes.iter().all(|node| {
            let node_cores = { let mut c: Vec<usize> = node.cpus.iter().map(|&x| t.core_of(x)).collect(); c.sort_unstable(); c.dedup(); c.len() };
            let wanted = t.nics.iter().filter(|n| n.numa_node == Some(node.id)).count() * shards;
            node_cores >= wanted
        });
        if fits {
            for s in p.of(Role::Shard) {
                let nic = t.nic(&s.nic).unwrap();
                if let Some(node) = nic.numa_node {
                    prop_assert_eq!(t.node_of(s.cpu), Some(node), "{:?}", s);
                }
            }
        }
        // No compromise reported means every promise was kept; any broken promise is reported (a shared core
        // by the later of the two threads, which is the one that chose it).
        for (i, pl) in p.placements.iter().enumerate() {
            let nic = t.nic(&pl.nic).unwrap();
            let shares_earlier = p.placements[..i].iter().any(|o| t.core_of(o.cpu) == t.core_of(pl.cpu));
            let off_node = nic.numa_node.is_some() && t.node_of(pl.cpu) != nic.numa_node;
            let on_core0 = t.core_of(pl.cpu) == t.core_of(t.cpus[0].id);
            let on_irq = t.irq_cpus(nic).contains(&pl.cpu);
            let broken = shares_earlier || off_node || on_core0 || on_irq;
            prop_assert_eq!(broken, pl.compromise.is_some(), "{:?}", pl);
        }
    }
}
