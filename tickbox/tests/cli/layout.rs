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

/// Every file the workspace's sources and documents name as a document (`*.md`) exists inside the repository, so
/// a reader never meets a reference to something only the authors' machines had.
#[test]
fn referenced_documents_exist_in_the_repository() {
    let root = workspace();
    let mut files = Vec::new();
    collect_sources(&root, &mut files);
    assert!(
        files.len() > 50,
        "found only {} files to check",
        files.len()
    );
    let mut missing = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for reference in markdown_references(&text) {
            // Relative to the file, to any folder above it (a crate root, which `CARGO_MANIFEST_DIR` paths start at), or
            // to the workspace root.
            let found = file.ancestors().skip(1).any(|dir| {
                let c = dir.join(&reference);
                dir.starts_with(&root)
                    && c.canonicalize()
                        .is_ok_and(|c| c.starts_with(&root) && c.is_file())
            });
            if !found {
                missing.push(format!(
                    "{} names {reference}",
                    file.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "references to documents that are not in the repository:\n{}",
        missing.join("\n")
    );
}

fn collect_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !(name.starts_with('.')
                || name == "target"
                || name == "corpus"
                || name == "artifacts")
            {
                collect_sources(&path, out);
            }
        } else if [".rs", ".md", ".toml"]
            .iter()
            .any(|ext| name.ends_with(ext))
        {
            out.push(path);
        }
    }
}

/// Tokens that look like a path to a Markdown file: `docs/PROTOCOLS.md`, `../../README.md`.
fn markdown_references(text: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    let mut refs = Vec::new();
    for (at, _) in text.match_indices(".md") {
        let after = text[at + 3..].chars().next();
        if after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let start = text[..at]
            .char_indices()
            .rev()
            .find(|&(_, c)| !is_path_char(c))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let token = &text[start..at + 3];
        if token.len() > 3 && !token.starts_with('.')
            || token.starts_with("../")
            || token.starts_with("./")
        {
            refs.push(token.to_string());
        }
    }
    refs
}
