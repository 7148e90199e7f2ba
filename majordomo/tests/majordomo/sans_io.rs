//! The Majordomo and Titanic engines and the MDP codec are sans-IO: none of their source files may mention
//! `zmq`. The socket layers (`broker`, `worker`, `client`, `pair`, `status`, `titanic`) live beside them.

use tickbox_testkit::sans_io::{assert_sans_io, engine_files};

#[test]
fn engine_modules_never_mention_zmq() {
    assert_sans_io(&engine_files(env!("CARGO_MANIFEST_DIR"), &["proto.rs"], 5));
}
