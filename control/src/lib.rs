//! tickbox control plane: the Clone key-value store (CHP) with Binary Star failover, and the reliable
//! request-reply stack (Pirate, Majordomo + MMI, Titanic, Freelance, messenger). Independent of the data-plane
//! crates. Protocol engines are sans-IO state machines driven by thin socket loops.

pub mod bstar;
pub mod clone;
pub mod freelance;
pub mod mdp;
pub mod messenger;
pub mod pirate;
pub mod titanic;
