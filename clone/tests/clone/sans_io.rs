//! The Clone engines and the CHP codec are sans-IO: none of their source files may mention `zmq`. The socket
//! layers (`server_loop`, `client`, `io`) live beside them.

use tickbox_testkit::sans_io::{assert_sans_io, engine_files};

#[test]
fn engine_modules_never_mention_zmq() {
    assert_sans_io(&engine_files(env!("CARGO_MANIFEST_DIR"), &["msg.rs"], 4));
}
