//! `tickbox.<component>.status` over Majordomo for the long-running data-plane commands (`--broker EP`): the
//! board lives in `tickbox_majordomo::board`.

pub(crate) use tickbox_majordomo::board::StatusBoard;
