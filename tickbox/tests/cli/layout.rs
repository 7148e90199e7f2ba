//! The layout rules that keep protocol logic testable: engines are sans-IO (as `quinn-proto` is for QUIC), and the
//! crates below the sockets do not depend on ZeroMQ at all. Each family crate also has its own `tests/sans_io.rs`;
//! this test covers the data-plane engines and the dependency rules across the workspace.

use std::collections::{BTreeMap, BTreeSet};
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
        "units/src/pace.rs",
        "wire/src/sequence.rs",
        "wire/src/history.rs",
        "subscriber/src/catch_up.rs",
        "recorder/src/history.rs",
        "units/src/lib.rs",
    ];
    // The engines that also turn on the clock, randomness, sleep and socket bans of the workspace `clippy.toml`.
    let linted = [
        "lvc/src/engine.rs",
        "lvc/src/cache.rs",
        "subscriber/src/snail.rs",
        "subscriber/src/clock.rs",
        "wire/src/sequence.rs",
        "wire/src/history.rs",
        "subscriber/src/catch_up.rs",
        "recorder/src/history.rs",
        "coord/src/logic.rs",
        "tuning/src/sweep.rs",
    ];
    for engine in linted {
        assert!(
            code_of(&workspace().join(engine))
                .contains("#![deny(clippy::disallowed_methods, clippy::disallowed_types)]"),
            "{engine} is a sans-IO engine but does not deny the sans-IO lints"
        );
    }
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

/// Every file the workspace's sources and documents name as a document (`*.md`) or as a test that shows something
/// (`lvc/tests/lvc/hostile.rs`) exists inside the repository, so a reader never meets a reference to something only
/// the authors' machines had, or to a test file that moved.
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
        for reference in markdown_references(&text)
            .into_iter()
            .chain(test_file_references(&text))
        {
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

/// Tokens that look like a path to a Markdown file: `docs/book/src/protocols.md`, `../../README.md`.
fn markdown_references(text: &str) -> Vec<String> {
    let mut refs = Vec::new();
    for (at, _) in text.match_indices(".md") {
        let after = text[at + 3..].chars().next();
        if after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let token = &text[path_start(text, at)..at + 3];
        if token.len() > 3 && !token.starts_with('.')
            || token.starts_with("../")
            || token.starts_with("./")
        {
            refs.push(token.to_string());
        }
    }
    refs
}

/// Characters a path token is made of.
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./".contains(c)
}

/// Where the path token that reaches byte `at` of `text` starts.
fn path_start(text: &str, at: usize) -> usize {
    text[..at]
        .char_indices()
        .rev()
        .find(|&(_, c)| !is_path_char(c))
        .map_or(0, |(i, c)| i + c.len_utf8())
}

/// Tokens that look like a path to a test source: `tickbox/tests/cli/connection_cap.rs`.
fn test_file_references(text: &str) -> Vec<String> {
    let mut refs = Vec::new();
    for (at, _) in text.match_indices("/tests/") {
        let start = path_start(text, at);
        let end = text[at..]
            .char_indices()
            .find(|&(_, c)| !is_path_char(c))
            .map_or(text.len(), |(i, _)| at + i);
        // A sentence may end right after the path.
        let token = text[start..end].trim_end_matches('.');
        if token.ends_with(".rs")
            && start < at
            && !token.starts_with('.')
            && !token.starts_with('/')
        {
            refs.push(token.to_string());
        }
    }
    refs
}

/// README's crate map is the workspace's: a row for every crate `cargo metadata` lists and for nothing else, each
/// naming exactly the workspace crates it depends on (normal dependencies; dev and build ones are not the map).
#[test]
fn readme_crate_map_matches_cargo_metadata() {
    let root = workspace();
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let meta_root = PathBuf::from(metadata["workspace_root"].as_str().unwrap());
    let packages = metadata["packages"].as_array().unwrap();
    // The map names crates by folder (`units`), cargo by package name (`tickbox-units`).
    let folder_of: BTreeMap<&str, String> = packages
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().unwrap());
            let folder = manifest.parent().unwrap().strip_prefix(&meta_root).unwrap();
            (
                p["name"].as_str().unwrap(),
                folder.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let actual: BTreeMap<String, BTreeSet<String>> = packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| folder_of.get(d["name"].as_str().unwrap()).cloned())
                .collect();
            (folder_of[p["name"].as_str().unwrap()].clone(), deps)
        })
        .collect();

    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let map = readme
        .split("<!-- ANCHOR: crates -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- ANCHOR_END: crates -->").next())
        .expect("README has the crate map between its ANCHOR comments (the book includes it from there)");
    let mut documented = BTreeMap::new();
    for row in map.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
        assert_eq!(cells.len(), 3, "a crate-map row has three cells: {row}");
        let krate = cells[0].trim().trim_matches('`').to_string();
        // "auth, units (no ZeroMQ)": the notes in brackets are prose; "—" is no workspace dependency.
        let listed = cells[2]
            .split('(')
            .next()
            .unwrap()
            .split(',')
            .map(|d| d.trim().trim_matches('`'))
            .filter(|d| !d.is_empty() && *d != "—")
            .map(str::to_string)
            .collect::<BTreeSet<_>>();
        assert!(
            documented.insert(krate.clone(), listed).is_none(),
            "the crate map has two rows for {krate}"
        );
    }
    let missing: Vec<_> = actual
        .keys()
        .filter(|k| !documented.contains_key(*k))
        .collect();
    let extra: Vec<_> = documented
        .keys()
        .filter(|k| !actual.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "README's crate map lacks rows for {missing:?} and has rows for crates the workspace lacks: {extra:?}"
    );
    for (krate, deps) in &actual {
        assert_eq!(
            &documented[krate], deps,
            "README's crate map lists other workspace dependencies for {krate} than its Cargo.toml has"
        );
    }
}

/// mdBook builds a book whose links point nowhere (and creates an empty chapter for a SUMMARY entry whose file is
/// missing), so this checks what it does not: every relative link of the book and of README reaches a file of the
/// repository, every `#anchor` into a Markdown file matches one of its headings as mdBook names them, every
/// `{{#include}}` finds its file and anchor, and every chapter file is in the book's table of contents
/// (docs/book/src/SUMMARY.md).
#[test]
fn book_and_readme_links_resolve() {
    let root = workspace();
    let src = root.join("docs/book/src");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&src)
        .expect("docs/book/src")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    assert!(pages.len() > 10, "found only {} chapters", pages.len());
    let summary_path = root.join("docs/book/src/SUMMARY.md");
    let summary = std::fs::read_to_string(&summary_path).unwrap();
    let mut broken = Vec::new();
    for page in &pages {
        let name = page.file_name().unwrap().to_string_lossy();
        if *page != summary_path && !summary.contains(&format!("]({name})")) {
            broken.push(format!(
                "{name} is not in docs/book/src/SUMMARY.md, so mdBook leaves it out"
            ));
        }
    }
    pages.push(root.join("README.md"));
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let shown = page.strip_prefix(&root).unwrap().display().to_string();
        let dir = page.parent().unwrap();
        for target in markdown_links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() || !file.canonicalize().unwrap().starts_with(&root) {
                broken.push(format!("{shown}: {target}: no such file in the repository"));
                continue;
            }
            if let Some(anchor) = anchor {
                let heading_ids = heading_ids(&std::fs::read_to_string(&file).unwrap_or_default());
                if !heading_ids.iter().any(|id| id == anchor) {
                    broken.push(format!("{shown}: {target}: no heading has the id {anchor}"));
                }
            }
        }
        for include in text.split("{{#include ").skip(1) {
            let spec = include.split("}}").next().unwrap().trim();
            let (path, anchor) = spec.split_once(':').unwrap_or((spec, ""));
            match std::fs::read_to_string(dir.join(path)) {
                Ok(included) => {
                    if !anchor.is_empty() && !included.contains(&format!("ANCHOR: {anchor} ")) {
                        broken.push(format!("{shown}: include {spec}: no ANCHOR {anchor}"));
                    }
                }
                Err(e) => broken.push(format!("{shown}: include {spec}: {e}")),
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Text with fenced code blocks and inline code spans blanked out: a link or heading shown as code is not one.
fn prose_of(text: &str) -> String {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            prose.push('\n');
            continue;
        }
        if !fenced {
            let mut in_code = false;
            for c in line.chars() {
                if c == '`' {
                    in_code = !in_code;
                } else if !in_code {
                    prose.push(c);
                }
            }
        }
        prose.push('\n');
    }
    prose
}

/// The targets of the inline links `[text](target)` of a Markdown text.
fn markdown_links(text: &str) -> Vec<String> {
    let prose = prose_of(text);
    prose
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|target| target.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

/// The ids mdBook gives the headings of a chapter: the heading's text without markup, letters and digits kept
/// (ASCII lowercased), whitespace made `-`, everything else dropped; a repeated id gets `-1`, `-2`, ...
fn heading_ids(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        // Markup that does not reach the rendered text: code ticks, emphasis, a link's target.
        let mut plain = String::new();
        let mut chars = title.trim().chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '`' | '*' => {}
                ']' if chars.peek() == Some(&'(') => {
                    for c in chars.by_ref() {
                        if c == ')' {
                            break;
                        }
                    }
                }
                '[' => {}
                c => plain.push(c),
            }
        }
        let id: String = plain
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_ascii_lowercase())
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let repeats = ids
            .iter()
            .filter(|seen| {
                *seen == &id
                    || seen
                        .strip_prefix(&format!("{id}-"))
                        .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .count();
        ids.push(if repeats == 0 {
            id
        } else {
            format!("{id}-{repeats}")
        });
    }
    ids
}

/// The book's configuration reference covers the program's configuration both ways: every key `tickbox config`
/// prints has a row in its section's table, and every row names a key the program accepts. A key that is not
/// printed by default (an optional endpoint, a per-role table) is written into a config file and loaded: the
/// config types reject unknown keys, so only a key that does not exist is refused as `unknown field`.
#[test]
fn book_config_reference_documents_every_key() {
    let root = workspace();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tickbox"))
        .arg("config")
        .output()
        .expect("run tickbox config");
    assert!(out.status.success(), "tickbox config failed");
    let defaults: toml::Table = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let mut printed = BTreeSet::new();
    let mut tables = BTreeSet::new();
    config_keys(&defaults, "", &mut printed, &mut tables);
    assert!(printed.len() > 100, "only {} keys printed", printed.len());

    let chapter = std::fs::read_to_string(root.join("docs/book/src/config.md")).unwrap();
    let mut rows = Vec::new();
    let mut section: Option<(String, bool)> = None;
    for line in chapter.lines() {
        if let Some(heading) = line.strip_prefix("## `[") {
            let array = heading.starts_with('[');
            let name = heading.trim_start_matches('[').split(']').next().unwrap();
            section = Some((name.to_string(), array));
        } else if line.starts_with("## ") {
            section = None;
        } else if let (Some((name, array)), Some(cell)) = (&section, line.strip_prefix("| `")) {
            let key = cell.split('`').next().unwrap();
            rows.push((name.clone(), *array, key.to_string()));
        }
    }
    let documented: BTreeSet<String> = rows.iter().map(|(s, _, k)| format!("{s}.{k}")).collect();
    let undocumented: Vec<_> = printed.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "keys `tickbox config` prints that docs/book/src/config.md does not document: {undocumented:?}"
    );

    // A file of this process's own, removed below; no other test of this binary writes it.
    let probe =
        std::env::temp_dir().join(format!("tickbox-config-probe-{}.toml", std::process::id()));
    let mut unknown = Vec::new();
    for (section, array, key) in &rows {
        let path = format!("{section}.{key}");
        if printed.contains(&path) || tables.contains(&path) {
            continue;
        }
        let header = if *array {
            format!("[[{section}]]")
        } else {
            format!("[{section}]")
        };
        // A value of no config field's type: a known key fails on its type (or loads), an unknown one by name.
        std::fs::write(&probe, format!("{header}\n{key} = {{ probe = true }}\n")).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tickbox"))
            .args(["--config", probe.to_str().unwrap(), "config"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // `probe` itself is unknown to a field whose type is a table: the key was found.
        if err.contains("unknown field") && !err.contains("unknown field `probe`") {
            unknown.push(format!("{path}: {}", err.trim()));
        }
    }
    let _ = std::fs::remove_file(&probe);
    assert!(
        unknown.is_empty(),
        "docs/book/src/config.md documents keys the program does not have:\n{}",
        unknown.join("\n")
    );
}

/// Dotted paths of the leaf keys of a config (`feed.rate`; an array of tables counts its first table's keys under
/// the array's path, `feed.shards.endpoint`), and of its tables.
fn config_keys(
    table: &toml::Table,
    prefix: &str,
    leaves: &mut BTreeSet<String>,
    tables: &mut BTreeSet<String>,
) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => {
                tables.insert(path.clone());
                config_keys(inner, &path, leaves, tables);
            }
            toml::Value::Array(items) if items.first().is_some_and(toml::Value::is_table) => {
                tables.insert(path.clone());
                for item in items {
                    config_keys(item.as_table().unwrap(), &path, leaves, tables);
                }
            }
            _ => {
                leaves.insert(path);
            }
        }
    }
}

/// Every Markdown file a reader is pointed at: README, the book, the crates' own READMEs.
fn documents() -> Vec<PathBuf> {
    let root = workspace();
    let mut docs = vec![root.join("README.md"), root.join("bench/README.md")];
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root.join("docs/book/src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    docs.extend(chapters);
    docs
}

/// The `cargo test …` commands a document prints, in code spans or code blocks (a span may wrap onto the next line).
fn cargo_test_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let line = line.split(" #").next().unwrap_or(line);
            if let Some(at) = line.find("cargo test") {
                out.push(line[at..].trim().to_owned());
            }
        }
    }
    for (i, span) in text.split('`').enumerate() {
        if i % 2 == 1 {
            if let Some(at) = span.find("cargo test") {
                out.push(span[at..].split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    out
}

/// Every `cargo test` command the docs print names a package and a test target that exist, and a filter that
/// names something in that package's tests: the layout moved to one test binary per crate, and five commands of
/// the old layout (`--test clean_pipes`, `--test kill`, ...) went on being printed after it.
#[test]
fn every_cargo_test_command_the_docs_print_runs_today() {
    let root = workspace();
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success());
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // package → (its folder, its test targets)
    let mut packages: BTreeMap<String, (PathBuf, BTreeSet<String>)> = BTreeMap::new();
    for p in metadata["packages"].as_array().unwrap() {
        let dir = Path::new(p["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap()
            .to_path_buf();
        let tests = p["targets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "test"))
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        packages.insert(p["name"].as_str().unwrap().to_owned(), (dir, tests));
    }
    let mut checked = 0;
    let mut wrong = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for command in cargo_test_commands(&text) {
            checked += 1;
            let words: Vec<&str> = command
                .split(" -- ")
                .next()
                .unwrap()
                .split_whitespace()
                .collect();
            let value_of = |flag: &str| {
                words
                    .iter()
                    .position(|w| *w == flag)
                    .and_then(|i| words.get(i + 1))
                    .copied()
            };
            if words.contains(&"--workspace") {
                continue;
            }
            let name = doc.strip_prefix(&root).unwrap().display().to_string();
            let Some(package) = value_of("-p") else {
                wrong.push(format!("{name}: `{command}` names no package (-p)"));
                continue;
            };
            let Some((dir, tests)) = packages.get(package) else {
                wrong.push(format!("{name}: `{command}`: no package {package}"));
                continue;
            };
            if let Some(test) = value_of("--test") {
                if !tests.contains(test) {
                    wrong.push(format!(
                        "{name}: `{command}`: {package} has no test target {test} (it has {tests:?})"
                    ));
                    continue;
                }
            }
            // The filter: the first word after `cargo test` that is neither a flag nor a flag's value.
            let takes_value = ["-p", "--test", "--bench", "--features"];
            let filter = words
                .iter()
                .enumerate()
                .skip(2)
                .find(|(i, w)| !w.starts_with('-') && !takes_value.contains(&words[i - 1]))
                .map(|(_, w)| *w);
            if let Some(filter) = filter {
                let last = filter
                    .trim_end_matches("::")
                    .rsplit("::")
                    .next()
                    .unwrap_or(filter);
                let mut sources = Vec::new();
                for sub in ["tests", "src", "benches"] {
                    if dir.join(sub).is_dir() {
                        collect_sources(&dir.join(sub), &mut sources);
                    }
                }
                let found = sources.iter().any(|s| {
                    s.file_stem().is_some_and(|f| f == last)
                        || std::fs::read_to_string(s).is_ok_and(|t| t.contains(last))
                });
                if !found {
                    wrong.push(format!(
                        "{name}: `{command}`: nothing in {package} is called {last}"
                    ));
                }
            }
        }
    }
    assert!(checked >= 8, "found only {checked} cargo test commands");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
