//! Integration tests of tickbox-majordomo: Majordomo, MMI, Titanic.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod broker_bounds;
mod guide_findings;
mod mdp_conformance;
mod mdp_faults;
mod mdp_pair_failover;
mod mdp_security;
mod mmi_conformance;
mod sans_io;
mod titanic_durable;
