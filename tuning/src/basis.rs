//! Which NIC a pinning sweep plans for (`tickbox tune sweep --pin plan`): the one asked for, which must exist,
//! else the host's first physical NIC, else its first NIC at all.

use crate::sweep::PlanBasis;
use crate::topology::{Nic, Topology};

/// The NIC named `wanted` (`Err` with the name when the host has none such), else the first physical NIC, else
/// the first NIC; `Ok(None)` on a host without any.
pub fn choose_nic<'a>(nics: &'a [Nic], wanted: Option<&str>) -> Result<Option<&'a Nic>, String> {
    match wanted {
        Some(name) => nics
            .iter()
            .find(|n| n.name == name)
            .map(Some)
            .ok_or_else(|| name.to_owned()),
        None => Ok(nics.iter().find(|n| !n.is_virtual).or_else(|| nics.first())),
    }
}

impl PlanBasis {
    /// The basis of a pinning sweep on `topology`, for the NIC [`choose_nic`] picks; `Err` names a NIC asked for
    /// that the host lacks.
    pub fn choose(topology: Topology, wanted: Option<&str>) -> Result<Option<PlanBasis>, String> {
        let nic = choose_nic(&topology.nics, wanted)?.map(|n| n.name.clone());
        Ok(nic.map(|nic| PlanBasis { topology, nic }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(name: &str, is_virtual: bool) -> Nic {
        Nic {
            name: name.into(),
            driver: None,
            speed_mbps: None,
            operstate: None,
            numa_node: None,
            local_cpus: vec![],
            rx_queues: 1,
            tx_queues: 1,
            irqs: vec![],
            is_virtual,
        }
    }

    #[test]
    fn a_named_nic_must_exist() {
        let nics = [nic("lo", true), nic("eth0", false)];
        assert_eq!(choose_nic(&nics, Some("lo")).unwrap().unwrap().name, "lo");
        assert_eq!(choose_nic(&nics, Some("eth9")).unwrap_err(), "eth9");
    }

    #[test]
    fn otherwise_the_first_physical_nic_then_any() {
        let nics = [nic("lo", true), nic("eth0", false), nic("eth1", false)];
        assert_eq!(choose_nic(&nics, None).unwrap().unwrap().name, "eth0");
        let virtual_only = [nic("lo", true), nic("veth0", true)];
        assert_eq!(choose_nic(&virtual_only, None).unwrap().unwrap().name, "lo");
        assert!(choose_nic(&[], None).unwrap().is_none());
    }
}
