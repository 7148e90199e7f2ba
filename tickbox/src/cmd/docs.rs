//! `tickbox completions SHELL` and `tickbox man`: shell completion scripts and man pages, both generated from the
//! CLI definition itself so they can never list a flag the program does not take. Both are written whole to
//! stdout, and a reader that goes away early (`| head -1`) is not an error.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::docs::{CompletionsArgs, ManArgs};
use crate::config::TickboxConfig;

pub(crate) fn completions(
    args: CompletionsArgs,
    _config: &TickboxConfig,
) -> anyhow::Result<ExitCode> {
    let mut command = crate::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "tickbox", &mut script);
    crate::out::write(&String::from_utf8_lossy(&script))?;
    Ok(ExitCode::from(crate::exit_code::OK))
}

pub(crate) fn man(args: ManArgs, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let mut root = crate::command().disable_help_subcommand(true);
    // Built once so every subcommand knows its full name (`tickbox-journal-verify`) for its page's title.
    root.build();
    if let Some(dir) = &args.dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut written = Vec::new();
        write_pages(&root, dir, &mut written)
            .with_context(|| format!("writing man pages into {}", dir.display()))?;
        for path in written {
            crate::out::outln!("{}", path.display());
        }
        return Ok(ExitCode::from(crate::exit_code::OK));
    }
    let mut page = &root;
    for name in &args.command {
        page = page.find_subcommand(name).ok_or_else(|| {
            let known: Vec<&str> = page
                .get_subcommands()
                .filter(|c| !c.is_hide_set())
                .map(|c| c.get_name())
                .collect();
            anyhow::anyhow!(
                "`{}` has no command `{name}` (it has: {})",
                page.get_display_name().unwrap_or(page.get_name()),
                known.join(", ")
            )
        })?;
    }
    let mut roff = Vec::new();
    clap_mangen::Man::new(page.clone()).render(&mut roff)?;
    crate::out::write(&String::from_utf8_lossy(&roff))?;
    Ok(ExitCode::from(crate::exit_code::OK))
}

/// Writes `cmd`'s page and every visible subcommand's, depth first, into `dir`.
fn write_pages(
    cmd: &clap::Command,
    dir: &std::path::Path,
    written: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    written.push(clap_mangen::Man::new(cmd.clone()).generate_to(dir)?);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}
