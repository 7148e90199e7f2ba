//! placeholder, owned by the helper implementing it
