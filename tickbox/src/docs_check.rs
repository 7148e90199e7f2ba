//! The docs' commands are today's: every `tickbox …` and `cargo run … -- …` line of every fenced block in README,
//! the book and the bench README parses with the command line this build defines (clap's own parser, as the
//! binary runs it). A flag renamed or removed, a value that no longer parses, a subcommand that moved: each fails
//! here naming the file and the line, instead of failing a reader.

use std::path::{Path, PathBuf};

/// The documents a reader is pointed at.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs = vec![root.join("README.md"), root.join("bench/README.md")];
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root.join("docs/book/src"))
        .expect("the book's sources")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    docs.extend(chapters);
    docs
}

/// The shell words of one command line, up to the first thing the shell does instead of passing an argument
/// (a pipe, a redirection, `&&`, `;`, `&`, a comment); quotes group words.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, '>') => {
                // `2>`: the `2` names the stream redirected, it is no argument.
                if started && word == "2" {
                    started = false;
                }
                break;
            }
            (None, '|' | ';' | '&' | '<') => break,
            (None, '#') if !started => break,
            (None, c) if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (None, '\\') => {
                if let Some(&next) = chars.peek() {
                    word.push(next);
                    chars.next();
                    started = true;
                }
            }
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// The tickbox arguments of a command line that runs tickbox, if it is one: `tickbox ARGS`, `cargo run [--release]
/// [-p tickbox] -- ARGS`, after any `VAR=value` prefixes and a `$ ` prompt.
fn tickbox_args(line: &str) -> Option<Vec<String>> {
    let line = line.trim().trim_start_matches("$ ");
    let mut words = shell_words(line);
    while words
        .first()
        .is_some_and(|w| w.contains('=') && !w.starts_with('-'))
    {
        words.remove(0);
    }
    match words.first().map(String::as_str) {
        Some("tickbox") => Some(words[1..].to_vec()),
        Some("cargo") if words.get(1).is_some_and(|w| w == "run") => {
            let at = words.iter().position(|w| w == "--")?;
            Some(words[at + 1..].to_vec())
        }
        _ => None,
    }
}

/// Every tickbox command line in the fenced blocks of `text`, with its line number; a line ending in `\` goes on.
fn commands_in(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut fenced: Option<String> = None;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            fenced = match fenced {
                Some(_) => None,
                None => Some(lang.trim().to_owned()),
            };
            continue;
        }
        // Configuration and code blocks hold no command lines.
        if !fenced
            .as_deref()
            .is_some_and(|lang| matches!(lang, "" | "sh" | "bash" | "shell" | "console" | "text"))
        {
            continue;
        }
        let (start, joined) = match pending.take() {
            Some((start, mut so_far)) => {
                so_far.push(' ');
                so_far.push_str(line.trim());
                (start, so_far)
            }
            None => (i + 1, line.to_owned()),
        };
        if let Some(body) = joined.trim_end().strip_suffix('\\') {
            pending = Some((start, body.to_owned()));
            continue;
        }
        if let Some(args) = tickbox_args(&joined) {
            out.push((start, args));
        }
    }
    out
}

#[test]
fn the_words_of_a_command_line_stop_where_the_shell_takes_over() {
    assert_eq!(
        tickbox_args("cargo run --release -- feed --rate 50k  # a comment"),
        Some(vec!["feed".into(), "--rate".into(), "50k".into()])
    );
    assert_eq!(
        tickbox_args("RUST_LOG=debug tickbox completions fish | head -1"),
        Some(vec!["completions".into(), "fish".into()])
    );
    assert_eq!(
        tickbox_args("tickbox man > tickbox.1"),
        Some(vec!["man".into()])
    );
    assert_eq!(
        tickbox_args("tickbox replay --from '2026-11-24 09:30' 2>/dev/null"),
        Some(vec![
            "replay".into(),
            "--from".into(),
            "2026-11-24 09:30".into()
        ])
    );
    assert_eq!(
        tickbox_args("tickbox subscribe --parties 2"),
        Some(vec!["subscribe".into(), "--parties".into(), "2".into()])
    );
    assert_eq!(tickbox_args("cargo test --workspace"), None);
    let text = "```sh\ntickbox feed \\\n  --rate 1k\n```\n```toml\ntickbox = 1\n```\n";
    assert_eq!(
        commands_in(text),
        vec![(2, vec!["feed".into(), "--rate".into(), "1k".into()])]
    );
}

#[test]
fn every_command_in_the_docs_parses_with_todays_cli() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("a document");
        let name = doc
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (line, args) in commands_in(&text) {
            // A synopsis (`[--rate R]`) shows a command's shape, not a command to run.
            if args.iter().any(|a| a.starts_with('[')) {
                continue;
            }
            checked += 1;
            // `tickbox record ... --elect PATH`: the elided arguments are the reader's; the flags shown must
            // still exist and take what they are given.
            let elided = args.iter().any(|a| a == "..." || a == "…");
            let args: Vec<String> = args
                .into_iter()
                .filter(|a| a != "..." && a != "…")
                .collect();
            let argv = std::iter::once("tickbox".to_owned()).chain(args.iter().cloned());
            match crate::command().try_get_matches_from(argv) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        clap::error::ErrorKind::DisplayHelp
                            | clap::error::ErrorKind::DisplayVersion
                    ) => {}
                Err(e) if elided && e.kind() == clap::error::ErrorKind::MissingRequiredArgument => {
                }
                Err(e) => wrong.push(format!(
                    "{name}:{line}: `tickbox {}`: {}",
                    args.join(" "),
                    e.render().to_string().lines().next().unwrap_or_default()
                )),
            }
        }
    }
    assert!(checked >= 20, "found only {checked} commands in the docs");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
