//! The layout rules that keep protocol logic testable: engines are sans-IO (as `quinn-proto` is for QUIC), and the
//! crates below the sockets do not depend on ZeroMQ at all. Each family crate also has its own `tests/sans_io.rs`;
//! this test covers the data-plane engines and the dependency rules across the workspace.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Source without comment lines, so prose about libzmq does not count as a dependency.
fn code_of(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("//") || t.starts_with("/*") || t.starts_with('*'))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn engines_never_touch_sockets() {
    let engines = [
        "lvc/src/engine.rs",
        "lvc/src/cache.rs",
        "subscriber/src/snail.rs",
        "subscriber/src/clock.rs",
        "feed/src/pacer.rs",
        "feed/src/generator.rs",
        "recorder/src/pacer.rs",
        "wire/src/sequence.rs",
        "units/src/lib.rs",
    ];
    for engine in engines {
        let code = code_of(&workspace().join(engine));
        for socket_word in ["zmq::", "use zmq", "zmq_sys", "Socket"] {
            assert!(
                !code.contains(socket_word),
                "{engine} is a sans-IO engine but its code mentions {socket_word:?}"
            );
        }
    }
}

#[test]
fn crates_below_the_sockets_do_not_depend_on_zeromq() {
    for krate in ["wire", "units", "journal", "reliable", "tuning"] {
        let manifest = std::fs::read_to_string(workspace().join(krate).join("Cargo.toml")).unwrap();
        for dep in ["zmq", "zmq-sys"] {
            assert!(
                !manifest
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{dep}."))
                        || l.trim_start().starts_with(&format!("{dep} "))),
                "{krate} must not depend on {dep}"
            );
        }
    }
}

#[test]
fn the_data_plane_does_not_depend_on_control_plane_crates() {
    let control = [
        "tickbox-clone",
        "tickbox-majordomo",
        "tickbox-pirates",
        "tickbox-messenger",
        "tickbox-bstar",
        "tickbox-reliable",
        "tickbox-coord",
    ];
    for krate in [
        "wire",
        "units",
        "zmqx",
        "journal",
        "feed",
        "lvc",
        "subscriber",
        "workers",
        "recorder",
    ] {
        let manifest = std::fs::read_to_string(workspace().join(krate).join("Cargo.toml")).unwrap();
        let deps = manifest.split("[dev-dependencies]").next().unwrap();
        for c in control {
            assert!(
                !deps.contains(c),
                "data-plane crate {krate} depends on control-plane crate {c}: wire them above both planes (fleet)"
            );
        }
    }
}
