//! Compatibility facade, to be removed: the control plane now lives in one crate per protocol family
//! (`tickbox-reliable`, `tickbox-bstar`, `tickbox-clone`, `tickbox-majordomo`, `tickbox-pirates`,
//! `tickbox-messenger`). This crate only re-exports them under the module paths `tickbox_control::…` had, so
//! code not yet migrated keeps compiling. New code should depend on the family crates directly.

/// Binary Star: the sans-IO engine (`tickbox_reliable::bstar`) and its state sockets (`tickbox_bstar`).
pub mod bstar {
    pub use tickbox_bstar::*;
}

pub use tickbox_clone as clone;
pub use tickbox_majordomo as mdp;
pub use tickbox_majordomo::titanic;
pub use tickbox_messenger as messenger;
pub use tickbox_pirates::freelance;

/// Lazy and Paranoid Pirate, with the shared heartbeat/back-off timers they used to define.
pub mod pirate {
    pub use tickbox_pirates::*;
    pub use tickbox_reliable::{Backoff, Liveness, LivenessEvent};
}
