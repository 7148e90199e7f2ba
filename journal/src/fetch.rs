//! A hook for journal files that are local copies of remote objects fetched by range (an object store's, see the
//! `tickbox-export` crate's mirror): the copy is a sparse file whose unfetched bytes read as zeros, so before a
//! reader reads a compressed frame, or the records of a plain file, it asks the copy's owner to fetch them.
//!
//! Nothing is registered in a process that reads only local journals: opening a file then costs one atomic load.
//! With a copy registered, a lookup is one read lock per file opened, and a compressed file asks once per frame
//! (never per record).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// Fetches the bytes of a local copy that a reader is about to read.
pub trait FetchOnRead: Send + Sync {
    /// Makes bytes `range` of the file at `path` present in the copy (clamped to the file's length), fetching
    /// what it lacks; an error when they cannot be fetched (the reader then reports the bytes as unreadable).
    fn fetch(&self, path: &Path, range: Range<u64>) -> std::io::Result<()>;
}

/// A registered fetcher, as an open file holds it.
#[derive(Clone)]
pub(crate) struct Fetcher(Arc<dyn FetchOnRead>);

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fetcher")
    }
}

impl Fetcher {
    pub(crate) fn fetch(&self, path: &Path, range: Range<u64>) -> std::io::Result<()> {
        self.0.fetch(path, range)
    }
}

static ANY: AtomicBool = AtomicBool::new(false);
type Registry = Vec<(PathBuf, Arc<dyn FetchOnRead>)>;
static REGISTERED: RwLock<Registry> = RwLock::new(Vec::new());

/// Makes `fetcher` answer for every journal file under `root` (a local copy) opened from now on, until
/// [`unregister_fetcher`].
pub fn register_fetcher(root: &Path, fetcher: Arc<dyn FetchOnRead>) {
    let mut reg = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    reg.retain(|(r, _)| r != root);
    reg.push((root.to_path_buf(), fetcher));
    ANY.store(true, Ordering::Release);
}

/// Removes the fetcher of `root` (files opened before keep theirs).
pub fn unregister_fetcher(root: &Path) {
    let mut reg = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    reg.retain(|(r, _)| r != root);
    ANY.store(!reg.is_empty(), Ordering::Release);
}

/// The fetcher of the copy that holds `path`, if any.
pub(crate) fn fetcher_of(path: &Path) -> Option<Fetcher> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    reg.iter()
        .find(|(root, _)| path.starts_with(root))
        .map(|(_, f)| Fetcher(Arc::clone(f)))
}
