//! Stamps the bench with `git describe` of the tree it was built from, so a result file says which code produced
//! it. Git is optional: without it (a source tarball, a build box without git) the stamp is empty and the version
//! is CARGO_PKG_VERSION alone; the binary never runs git itself.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

fn main() {
    let describe = git(&["describe", "--always", "--dirty", "--tags"]).unwrap_or_default();
    println!("cargo:rustc-env=TICKBOX_GIT_DESCRIBE={describe}");
    println!("cargo:rerun-if-changed=build.rs");
    // Re-stamp when the checked-out commit moves: HEAD (branch switch) and the branch ref it points at (a new
    // commit). `--git-path` resolves both for plain clones and worktrees alike.
    // A path that does not exist (a packed ref) would make cargo rerun this script on every build: skip it.
    let mut watch = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(git(&["rev-parse", "--git-path", &branch]));
    }
    for path in watch.into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
