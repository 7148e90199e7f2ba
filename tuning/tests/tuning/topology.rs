//! Topology read from fixture trees of three kinds of host.

use crate::common;

use tickbox_tuning::format_cpulist;

#[test]
fn two_socket_smt_host_is_read_completely() {
    let t = common::read("two_socket_smt");
    assert_eq!(t.cpus.len(), 64);
    assert_eq!(t.physical_cores(), 32);
    assert_eq!(t.packages(), 2);
    assert!(t.smt());
    assert_eq!(t.nodes.len(), 2);
    assert_eq!(format_cpulist(&t.nodes[1].cpus), "16-31,48-63");
    let cpu40 = t.cpu(40).unwrap();
    assert_eq!((cpu40.package, cpu40.core_id, cpu40.node), (0, 8, Some(0)));
    assert_eq!(cpu40.siblings, vec![8, 40]);
    assert_eq!(t.core_of(40), 8);
    assert_eq!(cpu40.governor.as_deref(), Some("performance"));
    // 32 L1d + 32 L1i + 32 L2 + 2 L3, deduplicated across the CPUs that share them.
    assert_eq!(t.caches.len(), 98);
    assert!(t
        .caches
        .iter()
        .any(|c| c.level == 3 && format_cpulist(&c.cpus) == "0-15,32-47"));
    assert_eq!(t.thp.as_deref(), Some("madvise"));
    assert!(!t.irqbalance);
    assert_eq!(t.net.rmem_max, Some(212_992));
    assert!(t.nohz_full.is_empty() && t.isolated.is_empty());

    let names: Vec<&str> = t.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["eth0", "eth1", "eth2"]);
    let eth2 = t.nic("eth2").unwrap();
    assert_eq!(eth2.driver.as_deref(), Some("ixgbe"));
    assert_eq!(eth2.speed_mbps, Some(10_000));
    assert_eq!(eth2.numa_node, Some(1));
    assert_eq!((eth2.rx_queues, eth2.tx_queues), (4, 4));
    assert_eq!(eth2.irqs.len(), 4);
    assert_eq!(eth2.irqs[3].name, "eth2-TxRx-3");
    assert_eq!(eth2.irqs[3].queue, Some(3));
    assert_eq!(eth2.irqs[3].affinity, vec![17]);
    assert_eq!(t.irq_cpus(eth2), vec![16, 17]);
    // eth0's IRQs may fire anywhere: not steered, so no "IRQ CPUs" to avoid.
    assert!(t.irq_cpus(t.nic("eth0").unwrap()).is_empty());
}

#[test]
fn eight_core_host_without_smt() {
    let t = common::read("eight_core");
    assert_eq!(t.cpus.len(), 8);
    assert_eq!(t.physical_cores(), 8);
    assert!(!t.smt());
    assert!(t.irqbalance);
    assert_eq!(t.thp.as_deref(), Some("always"));
    assert_eq!(t.cpu(3).unwrap().governor.as_deref(), Some("powersave"));
    let eth0 = t.nic("eth0").unwrap();
    assert_eq!(eth0.numa_node, None, "numa_node -1 means unknown");
    assert_eq!(t.nic_cpus(eth0), (0..8).collect::<Vec<_>>());
}

#[test]
fn vm_without_numa_names_irqs_after_the_virtio_device() {
    let t = common::read("vm");
    assert_eq!(t.cpus.len(), 2);
    assert!(t.nodes.is_empty());
    assert_eq!(t.cpu(1).unwrap().node, None);
    assert_eq!(t.cpu(1).unwrap().governor, None);
    let eth0 = t.nic("eth0").unwrap();
    assert_eq!(eth0.driver.as_deref(), Some("virtio_net"));
    assert_eq!(eth0.speed_mbps, None, "speed -1 means unknown");
    assert!(!eth0.is_virtual);
    let irqs: Vec<(u32, Option<usize>)> = eth0.irqs.iter().map(|i| (i.number, i.queue)).collect();
    assert_eq!(irqs, vec![(37, None), (38, Some(0)), (39, Some(0))]);
    assert_eq!(t.irq_cpus(eth0), vec![0, 1]);
    let tables = t.render_tables();
    assert!(tables.contains("virtio2-input.0"), "{tables}");
    assert!(tables.contains("(none reported"), "{tables}");
}

#[test]
fn a_root_without_sysfs_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("tuning-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = tickbox_tuning::topology::read(&dir).unwrap_err();
    assert!(
        err.to_string().contains("sys/devices/system/cpu/online"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn this_machine_reads() {
    // Whatever the host, `/` must read and be self-consistent.
    let t = tickbox_tuning::topology::read(std::path::Path::new("/")).unwrap();
    assert!(!t.cpus.is_empty());
    for c in &t.cpus {
        assert!(c.siblings.contains(&c.id));
    }
}
