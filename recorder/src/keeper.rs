//! The housekeeping behind `record` into a history, on its own thread so the recording never waits for it: each
//! journal a roll closes is compressed (`--compress`: seekable zstd frames, read transparently by every reader),
//! gets its card cached (`journal ls` reads it) and goes to the hook the caller gives (`record --archive-to`: an
//! upload to an object store), then retention runs (`--retain`, `--retain-size`). When the recording starts, closed
//! journals left plain by an earlier run are compressed and retention runs once.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use serde::Serialize;

use crate::catalog::{is_compressed, JournalCard};
use crate::error::RecorderError;
use crate::history_dir::{Closed, HistoryDir};
use crate::retention::{prune, Pruned, Retention};

/// What the housekeeping did during a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeeperReport {
    /// Closed journals whose card was cached.
    pub cards: u64,
    /// Journals compressed.
    pub compressed: u64,
    /// Bytes they took on disk before.
    pub compressed_from_bytes: u64,
    /// Bytes they take now.
    pub compressed_to_bytes: u64,
    /// Journals retention deleted, oldest first.
    pub deleted: Vec<Pruned>,
    /// Bytes they took.
    pub freed_bytes: u64,
    /// The last time retention had to keep a journal it wanted gone: the journal and why.
    pub kept: Option<(String, &'static str)>,
    /// Housekeeping steps that failed (each logged).
    pub errors: u64,
    /// What the after-close hook did with each closed journal (`record --archive-to`: where it went).
    pub archived: Vec<String>,
    /// Closed journals the hook failed on (each logged; counted in `errors` too).
    pub archive_failures: u64,
}

/// Work done on each journal a roll (or the end of the recording) closes, before retention runs: its `Ok` says
/// what was done (for the summary), its `Err` why it failed (logged and counted; the recording goes on).
#[derive(Clone)]
pub struct AfterClose(pub Arc<AfterCloseFn>);

/// The function an [`AfterClose`] runs.
pub type AfterCloseFn = dyn Fn(&Path) -> Result<String, String> + Send + Sync;

impl std::fmt::Debug for AfterClose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterClose")
    }
}

/// The housekeeping thread of a recording into a history.
pub struct Keeper {
    tx: Option<mpsc::Sender<Closed>>,
    thread: Option<JoinHandle<KeeperReport>>,
}

impl Keeper {
    /// Starts the thread for the history at `dir`, which compresses closed journals when `compress`, runs
    /// `after_close` on each, and runs `retention`, at once and after every closed journal it is sent.
    pub fn start(
        dir: PathBuf,
        retention: Retention,
        compress: bool,
        after_close: Option<AfterClose>,
    ) -> Result<Keeper, RecorderError> {
        let (tx, rx) = mpsc::channel::<Closed>();
        let thread = std::thread::Builder::new()
            .name("tickbox-keeper".into())
            .spawn(move || {
                let mut report = KeeperReport::default();
                let retain = |report: &mut KeeperReport| {
                    if retention.is_none() {
                        return;
                    }
                    match prune(&dir, &retention, tickbox_wire::now_ns(), false) {
                        Ok(p) => {
                            report.freed_bytes += p.freed_bytes;
                            report.deleted.extend(p.deleted);
                            if p.kept.is_some() {
                                report.kept = p.kept;
                            }
                        }
                        Err(e) => {
                            report.errors += 1;
                            tracing::error!(history = %dir.display(), "retention failed: {e}");
                        }
                    }
                };
                let squeeze = |report: &mut KeeperReport, journal: &std::path::Path| {
                    if !compress || is_compressed(journal) {
                        return;
                    }
                    match tickbox_journal::compress(journal, &tickbox_journal::CompressOptions::default()) {
                        Ok(c) => {
                            report.compressed += 1;
                            report.compressed_from_bytes += c.bytes_before;
                            report.compressed_to_bytes += c.bytes_after;
                            tracing::info!(journal = %journal.display(), before = c.bytes_before, after = c.bytes_after, "compressed a closed journal of the history");
                        }
                        Err(e) => {
                            report.errors += 1;
                            tracing::error!(journal = %journal.display(), "cannot compress the closed journal: {e}");
                        }
                    }
                };
                // Journals an earlier run closed and left plain (not the newest: it is being written).
                if compress {
                    let closed = HistoryDir::open(&dir).and_then(|h| h.journals());
                    if let Ok(journals) = closed {
                        for j in journals.iter().rev().skip(1).rev() {
                            if !crate::lease::writer_holds(&j.path) {
                                squeeze(&mut report, &j.path);
                            }
                        }
                    }
                }
                retain(&mut report);
                for Closed { path: closed, rolled } in rx {
                    // Retention may have deleted it already (it ran after an earlier roll, and this journal was
                    // old enough by then): nothing to card.
                    if !closed.exists() {
                        continue;
                    }
                    // Only a period that is over: the journal a recording ended in may be appended to again.
                    if rolled {
                        squeeze(&mut report, &closed);
                    }
                    match JournalCard::of(&closed) {
                        Ok(_) => report.cards += 1,
                        Err(e) => {
                            report.errors += 1;
                            tracing::warn!(journal = %closed.display(), "cannot make the journal's card: {e}");
                        }
                    }
                    if let Some(hook) = &after_close {
                        match (hook.0)(&closed) {
                            Ok(done) => report.archived.push(done),
                            Err(e) => {
                                report.errors += 1;
                                report.archive_failures += 1;
                                tracing::error!(journal = %closed.display(), "archiving failed: {e}");
                            }
                        }
                    }
                    retain(&mut report);
                }
                report
            })
            .map_err(|e| RecorderError::Thread(format!("cannot start the history keeper: {e}")))?;
        Ok(Keeper {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Where closed journals are sent.
    pub fn sender(&self) -> mpsc::Sender<Closed> {
        self.tx
            .as_ref()
            .cloned()
            .unwrap_or_else(|| mpsc::channel().0)
    }

    /// Waits for what was sent to be done and returns the report.
    pub fn finish(mut self) -> KeeperReport {
        drop(self.tx.take());
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
