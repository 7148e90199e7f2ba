//! Writing to stdout: summaries, tables and `--json` objects.
//!
//! * **A closed pipe is not an error.** `tickbox ... | head -1` closes stdout early; `println!` would panic (exit
//!   101) and `?` on the write would exit 1. [`print`] and [`json`] notice `BrokenPipe`, remember it and write
//!   nothing more, so the command finishes what it was doing (a journal closed cleanly, its exit code its own).
//!   Commands that stream (`journal dump`, `coord watch`) ask [`closed`] to stop early. The process keeps
//!   ignoring SIGPIPE (Rust's default): libzmq writes to TCP peers without `MSG_NOSIGNAL`, so the default action
//!   would kill a server whenever a peer vanished.
//! * **A closed stderr is not fatal either**: diagnostics go through [`errln!`], which drops what it cannot
//!   write, and the log writer is told not to complain about its own failed writes.
//! * **Every `--json` object carries `schema_version`** ([`SCHEMA_VERSION`]): a consumer checks it before it
//!   reads the fields, and the number changes when a field changes meaning or goes away (new fields do not
//!   change it).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

/// The version of every `--json` summary's layout. Raised when a field is renamed, removed or changes meaning;
/// adding a field keeps it.
pub(crate) const SCHEMA_VERSION: u64 = 1;

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether the reader of stdout has gone away (a write met `BrokenPipe`).
pub(crate) fn closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Writes `text` to stdout and flushes; a closed pipe is remembered and otherwise ignored, any other failure is
/// an error.
pub(crate) fn write(text: &str) -> anyhow::Result<()> {
    if closed() {
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// stdout as a writer that takes a closed pipe as the end of its reader's interest, not as an error: what is
/// written after it is dropped (and [`closed`] says so), so `writeln!(out, ...)?` carries on.
pub(crate) struct Stdout(std::io::StdoutLock<'static>);

/// stdout, locked, as a [`Stdout`].
pub(crate) fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if closed() {
            return Ok(buf.len());
        }
        match self.0.write(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                STDOUT_CLOSED.store(true, Ordering::Relaxed);
                Ok(buf.len())
            }
            other => other,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if closed() {
            return Ok(());
        }
        match self.0.flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                STDOUT_CLOSED.store(true, Ordering::Relaxed);
                Ok(())
            }
            other => other,
        }
    }
}

/// `println!` that survives a closed pipe (see the module documentation). Use it where a failure to print must
/// not change the outcome: a write error other than a closed pipe is reported on stderr, once per line.
macro_rules! outln {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// `eprintln!` that survives a closed stderr: a diagnostic nobody is left to read is dropped. `eprintln!` panics
/// on the write error, so a supervisor that closed a recorder's stderr would kill it (exit 101) at its next
/// status line; clippy's `print_stderr` keeps `eprintln!` out of this crate.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::err_line(format_args!($($arg)*))
    };
}
pub(crate) use errln;

/// One line on stderr, ignoring a failure to write it (the body of [`errln!`]).
pub(crate) fn err_line(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// `print!` that survives a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::text(format_args!($($arg)*))
    };
}
pub(crate) use out;

/// One line (the body of [`outln!`]).
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    let mut text = args.to_string();
    text.push('\n');
    if let Err(e) = write(&text) {
        errln!("error: {e:#}");
    }
}

/// Text as it is (the body of [`out!`]).
pub(crate) fn text(args: std::fmt::Arguments<'_>) {
    if let Err(e) = write(&args.to_string()) {
        errln!("error: {e:#}");
    }
}

/// `value` as one line of JSON on stdout, with `schema_version` added (an object gets the field; anything else
/// is wrapped as `{"schema_version": N, "items": value}`).
pub(crate) fn json(value: &impl Serialize) -> anyhow::Result<()> {
    write(&format!("{}\n", versioned(value)?))
}

/// [`json`], indented (for commands whose output people read as often as programs do).
pub(crate) fn json_pretty(value: &impl Serialize) -> anyhow::Result<()> {
    write(&format!(
        "{}\n",
        serde_json::to_string_pretty(&versioned(value)?)?
    ))
}

/// `value` as JSON with `schema_version` first.
pub(crate) fn versioned(value: &impl Serialize) -> anyhow::Result<serde_json::Value> {
    let value = serde_json::to_value(value)?;
    let mut object = serde_json::Map::new();
    object.insert("schema_version".into(), SCHEMA_VERSION.into());
    match value {
        serde_json::Value::Object(fields) => {
            for (k, v) in fields {
                if k != "schema_version" {
                    object.insert(k, v);
                }
            }
        }
        other => {
            object.insert("items".into(), other);
        }
    }
    Ok(serde_json::Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_json_object_carries_the_schema_version_and_keeps_its_fields() {
        let v = versioned(&serde_json::json!({"a": 1, "b": [2]})).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!((v["a"].clone(), v["b"][0].clone()), (1.into(), 2.into()));
        let v = versioned(&vec![1, 2]).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["items"], serde_json::json!([1, 2]));
    }
}
