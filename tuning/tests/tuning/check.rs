//! Host checks on fixture hosts.

use crate::common;

use tickbox_tuning::{check, plan, CheckInput, PlanRequest, Severity};

#[test]
fn powersave_and_irqbalance_are_reported_with_their_fixes() {
    let t = common::read("eight_core");
    let findings = check(&t, &CheckInput::default());
    let governor = findings
        .iter()
        .find(|f| f.check == "governor")
        .expect("governor finding");
    assert_eq!(governor.severity, Severity::Warning);
    assert!(governor.message.contains("powersave"), "{governor:?}");
    assert_eq!(
        governor.fix.as_deref(),
        Some("sudo cpupower -c 0-7 frequency-set -g performance")
    );
    let irqbalance = findings
        .iter()
        .find(|f| f.check == "irqbalance")
        .expect("irqbalance finding");
    assert_eq!(irqbalance.severity, Severity::Warning);
    assert_eq!(
        irqbalance.fix.as_deref(),
        Some("sudo systemctl disable --now irqbalance")
    );
    let thp = findings
        .iter()
        .find(|f| f.check == "thp")
        .expect("thp finding");
    assert_eq!(
        thp.fix.as_deref(),
        Some("echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled")
    );
    // Warnings first.
    assert!(findings.windows(2).all(|w| w[0].severity >= w[1].severity));
}

#[test]
fn a_clean_plan_on_a_clean_host_has_no_warning() {
    let t = common::read("two_socket_smt");
    let p = plan(
        &t,
        &PlanRequest {
            nics: vec!["eth1".into(), "eth2".into()],
            shards_per_nic: 1,
            workers_per_nic: 2,
            connect: Vec::new(),
        },
    )
    .unwrap();
    let findings = check(&t, &CheckInput::from_plan(&p));
    let warnings: Vec<_> = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .collect();
    assert!(warnings.is_empty(), "{warnings:?}");
    // The SMT siblings of the hot CPUs are left to other work: worth knowing.
    assert!(findings.iter().any(|f| f.check == "smt_sibling"));
}

#[test]
fn irqs_on_a_shard_cpu_shared_cores_and_small_buffers_are_warned() {
    let t = common::read("two_socket_smt");
    let mut input = CheckInput {
        rcvbuf: Some(8 << 20),
        sndbuf: Some(1 << 10),
        ..CheckInput::default()
    };
    input.hot = vec![
        tickbox_tuning::HotThread {
            role: tickbox_tuning::Role::Shard,
            index: 0,
            nic: Some("eth1".into()),
            cpu: 1,
        },
        tickbox_tuning::HotThread {
            role: tickbox_tuning::Role::Worker,
            index: 0,
            nic: Some("eth1".into()),
            cpu: 33,
        },
    ];
    let findings = check(&t, &input);
    let irq = findings
        .iter()
        .find(|f| f.check == "nic_irq_on_hot_cpu")
        .expect("irq finding");
    assert!(irq.message.contains("eth1"), "{irq:?}");
    // Move IRQ 100 (eth1-TxRx-0 on CPU 1) and 102 to node 0's CPUs that run no hot thread.
    assert_eq!(
        irq.fix.as_deref(),
        Some("echo 0,2-15,32,34-47 | sudo tee /proc/irq/100/smp_affinity_list && echo 0,2-15,32,34-47 | sudo tee /proc/irq/102/smp_affinity_list")
    );
    assert!(findings
        .iter()
        .any(|f| f.check == "smt_shared" && f.severity == Severity::Warning));
    let rmem = findings
        .iter()
        .find(|f| f.check == "rmem_max")
        .expect("rmem finding");
    assert_eq!(
        rmem.fix.as_deref(),
        Some("sudo sysctl -w net.core.rmem_max=8388608")
    );
    assert!(!findings.iter().any(|f| f.check == "wmem_max"));
}
