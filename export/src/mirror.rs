//! A journal or history kept in an object store, read through a local copy so every reader (export, `journal
//! ls`, replay) reads it as it reads a local one: the copy holds only the bytes asked for, fetched by range.
//!
//! [`Mirror::open`] lists the location and fetches the small files whole (the history's roll file, each journal's
//! card `NAME.summary.json`) and, of each compressed journal file, its header frame and its index frame (two
//! ranged reads); the rest of such a file is a hole in a local file of the object's length. That is all `journal
//! ls` reads of a journal the recorder carded before archiving it. Then:
//!
//! - [`Mirror::fill_ends`]: the first and last frame of each compressed file (a journal's card made afresh, the
//!   first capture time a `+DURATION` is counted from);
//! - [`Mirror::fill_window`]: the frames a reader of a capture-time window reads: in each file, from the first
//!   frame whose last record is at or after `from` through the first whose last record is at or after `to`, both
//!   widened by [`SLACK_NS`] (an export reads on that far past `to`; a capture clock never steps back more);
//! - [`Mirror::fill_all`], everything;
//! - [`Mirror::fill_replay`]: a replay's window (origin times): the capture-time window's frames, checked at both
//!   ends against the records' origin times ([`replay_frames`]), or a sequence window's frames.
//!
//! Adjacent frames are fetched in one ranged read. A plain (uncompressed) journal file has no index to read by, so
//! a fill fetches it whole (opening fetches its first bytes only), as it does a compressed file whose index is
//! missing or damaged (its frames are found by a scan). With [`Mirror::fetch_on_read`] (a replay's copy), the
//! journal reader asks the copy for what it is about to read (see `tickbox_journal::FetchOnRead`): a compressed
//! frame (with a read-ahead of those after it), or a plain file whole before its first record is read; so a
//! reader never reads a hole, a replay without a window streams, and a plain journal's segments are fetched only
//! when their records are read. Without it, a frame the copy lacks reads as zeros, which no frame checksum passes:
//! a reader that went outside what was fetched would report damage, never read wrong records. Each journal's card,
//! when the store holds one, is trusted (its stamp is set to the copy's): an archived journal is closed and never
//! changes.
//! Memory stays one chunk of a stream, whatever the sizes; the copy is removed when the [`Mirror`] is dropped.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use object_store::{GetOptions, GetRange, ObjectStoreExt};
use tickbox_journal::FrameSpan;

use crate::error::ExportError;
use crate::store::{Store, StoreUrl};

/// How far past a window's ends the frames are fetched (capture time, ns): as far as an export reads past `--to`
/// (see `run::READ_PAST_TO_NS`), and more than a capture clock steps back.
pub const SLACK_NS: u64 = 60_000_000_000;

/// Bytes of a file's start fetched to tell what it is (and, for a compressed journal, usually its whole header:
/// a longer one is fetched in a second read).
const HEAD: u64 = 16 << 10;
/// Bytes of a compressed file's end fetched for its index (about 340 frames' entries; a longer index is fetched
/// in a second read).
const TAIL: u64 = 16 << 10;
/// Bytes of following frames fetched with a frame a reader asks for: the first time, and at most (doubled at
/// each ask that follows on where the last one ended, as a reader going through a file does).
const AHEAD_MIN: u64 = 256 << 10;
const AHEAD_MAX: u64 = 8 << 20;

/// Suffixes of the small files fetched whole without looking at them.
const SMALL: [&str; 3] = [".json", ".jsonl", ".txt"];

/// One journal file of the copy fetched by range: a compressed one by frame, a plain one as one span.
#[derive(Debug)]
struct Sparse {
    rel: String,
    local: PathBuf,
    frames: Vec<FrameSpan>,
    have: Vec<bool>,
    /// Bytes `..head` and `tail..` are there already (the header and index reads took in some frames' bytes).
    head: u64,
    tail: u64,
    /// A plain file (or a compressed one without a usable index): one span, fetched whole.
    whole: bool,
    /// Read-ahead of the next ask, and the frame where the last ask's fetch ended.
    ahead: u64,
    ahead_from: usize,
}

/// What fills and readers share: the store, the files fetched by range, and the counts.
#[derive(Debug)]
struct Core {
    store: Store,
    sparse: Vec<Sparse>,
    bytes: u64,
    reads: u64,
    /// Why a fetch a reader asked for failed (the store went away): every later ask fails at once.
    failed: Option<String>,
}

/// A local copy of a journal or history from an object store.
#[derive(Debug)]
pub struct Mirror {
    core: Arc<Mutex<Core>>,
    url: StoreUrl,
    root: PathBuf,
    path: PathBuf,
    /// Fetches what readers ask for (registered with the journal reader by [`Mirror::fetch_on_read`]).
    on_read: bool,
    /// Cards from the store (their journal paths in the copy), re-stamped after each fill.
    cards: Vec<PathBuf>,
    /// Bytes of the objects under each top-level name (a journal's, for its card).
    sizes: std::collections::BTreeMap<String, u64>,
    /// Objects at the location.
    pub objects: u64,
    /// Bytes of those objects.
    pub bytes_total: u64,
}

/// Fetches bytes `range` of object `rel` into `file` at the same offsets, streaming; the bytes fetched.
fn fetch(
    store: &Store,
    rel: &str,
    file: &File,
    local: &Path,
    range: Range<u64>,
) -> Result<u64, ExportError> {
    use futures_util::StreamExt;
    if range.is_empty() {
        return Ok(0);
    }
    let at = store.url.object(rel);
    let url = store.url.url_of(rel);
    let err = |e: object_store::Error| ExportError::store(&url, e);
    let opts = GetOptions {
        range: Some(GetRange::Bounded(range.clone())),
        ..GetOptions::default()
    };
    let got = store.rt.block_on(async {
        let got = store.store.get_opts(&at, opts).await.map_err(err)?;
        let mut stream = got.into_stream();
        let mut off = range.start;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(err)?;
            file.write_all_at(&chunk, off)
                .map_err(|e| ExportError::io(local.display(), e))?;
            off += chunk.len() as u64;
        }
        Ok::<_, ExportError>(off - range.start)
    })?;
    if got != range.end - range.start {
        return Err(ExportError::Store {
            url,
            reason: format!(
                "bytes {}..{} read as {got} bytes: the object changed while it was read",
                range.start, range.end
            ),
        });
    }
    Ok(got)
}

impl Core {
    fn fetch(
        &mut self,
        rel: &str,
        file: &File,
        local: &Path,
        range: Range<u64>,
    ) -> Result<(), ExportError> {
        if range.is_empty() {
            return Ok(());
        }
        self.bytes += fetch(&self.store, rel, file, local, range)?;
        self.reads += 1;
        Ok(())
    }

    /// Makes the local file of object `rel` (`len` bytes): small files whole, journal files as a hole with
    /// their first bytes (and a compressed one's header and index).
    fn copy_in(&mut self, rel: &str, local: &Path, len: u64) -> Result<(), ExportError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(local)
            .map_err(|e| ExportError::io(local.display(), e))?;
        if SMALL.iter().any(|s| rel.ends_with(s)) || len <= HEAD + TAIL {
            return self.fetch(rel, &file, local, 0..len);
        }
        file.set_len(len)
            .map_err(|e| ExportError::io(local.display(), e))?;
        self.fetch(rel, &file, local, 0..HEAD)?;
        let mut first = [0u8; 16];
        file.read_exact_at(&mut first, 0)
            .map_err(|e| ExportError::io(local.display(), e))?;
        let Some(head) = tickbox_journal::packed_header_len(&first).filter(|&h| h < len) else {
            // Not a compressed journal (a plain journal file, or a file of another kind): the rest of it, whole,
            // when anything of it is read (its card, when there is one, answers `journal ls`).
            self.whole(rel, local, HEAD, len);
            return Ok(());
        };
        let head = head.max(HEAD);
        if head > HEAD {
            self.fetch(rel, &file, local, HEAD..head)?;
        }
        let mut tail = len - TAIL;
        self.fetch(rel, &file, local, tail..len)?;
        let mut trailer = [0u8; 24];
        file.read_exact_at(&mut trailer, len - 24)
            .map_err(|e| ExportError::io(local.display(), e))?;
        let index = tickbox_journal::packed_index_len(len, &trailer);
        if let Some(index) = index.filter(|&i| i > TAIL && len - i >= head) {
            self.fetch(rel, &file, local, len - index..tail)?;
            tail = len - index;
        }
        let frames = match index {
            Some(_) => tickbox_journal::packed_frames(local).ok().flatten(),
            None => None,
        };
        let Some(frames) = frames else {
            tracing::warn!(
                object = %self.store.url.url_of(rel),
                "the compressed file's index is missing or damaged: read whole"
            );
            self.whole(rel, local, head, tail);
            return Ok(());
        };
        self.sparse.push(Sparse {
            rel: rel.to_owned(),
            local: local.to_path_buf(),
            head,
            tail,
            have: vec![false; frames.len()],
            frames,
            whole: false,
            ahead: AHEAD_MIN,
            ahead_from: usize::MAX,
        });
        Ok(())
    }

    /// Notes a file whose bytes `from..to` are fetched in one read when any of it is wanted: one span of no
    /// capture times that every fill picks.
    fn whole(&mut self, rel: &str, local: &Path, from: u64, to: u64) {
        self.sparse.push(Sparse {
            rel: rel.to_owned(),
            local: local.to_path_buf(),
            head: from,
            tail: to,
            have: vec![false],
            frames: vec![FrameSpan {
                offset: from,
                stored: to - from,
                first_seq: 0,
                records: 0,
                first_time: 0,
                last_time: u64::MAX,
            }],
            whole: true,
            ahead: AHEAD_MIN,
            ahead_from: usize::MAX,
        });
    }

    /// Fetches the frames of file `i` that `pick` picks and the copy lacks, adjacent ones in one read.
    fn fetch_picked(&mut self, i: usize, pick: &[bool]) -> Result<(), ExportError> {
        let mut sparse = std::mem::take(&mut self.sparse);
        let result = self.fetch_in(&mut sparse[i], pick);
        self.sparse = sparse;
        result
    }

    fn fetch_in(&mut self, s: &mut Sparse, pick: &[bool]) -> Result<(), ExportError> {
        let mut file = None;
        let mut k = 0;
        while k < s.frames.len() {
            if !pick[k] || s.have[k] {
                k += 1;
                continue;
            }
            let start = s.frames[k].offset;
            let mut end = start + s.frames[k].stored;
            s.have[k] = true;
            k += 1;
            while k < s.frames.len() && pick[k] && !s.have[k] && s.frames[k].offset == end {
                end += s.frames[k].stored;
                s.have[k] = true;
                k += 1;
            }
            // Less what the header and index reads brought in already.
            let (start, end) = (start.max(s.head), end.min(s.tail));
            if start < end {
                if file.is_none() {
                    file = Some(
                        std::fs::OpenOptions::new()
                            .write(true)
                            .open(&s.local)
                            .map_err(|e| ExportError::io(s.local.display(), e))?,
                    );
                }
                if let Some(f) = &file {
                    self.fetch(&s.rel, f, &s.local, start..end)?;
                }
            }
        }
        Ok(())
    }

    /// What a reader asks for: the frames of `path` that `range` overlaps, and a read-ahead of those that
    /// follow (see [`AHEAD_MIN`]).
    fn on_read(&mut self, path: &Path, range: Range<u64>) -> Result<(), ExportError> {
        let Some(i) = self.sparse.iter().position(|s| s.local == path) else {
            // A small file, fetched whole when the copy was made.
            return Ok(());
        };
        let s = &mut self.sparse[i];
        let n = s.frames.len();
        let mut pick = vec![false; n];
        let mut last = None;
        for (k, f) in s.frames.iter().enumerate() {
            if f.offset < range.end && f.offset + f.stored > range.start && !s.have[k] {
                pick[k] = true;
                last = Some(k);
            }
        }
        let Some(mut k) = last else {
            return Ok(());
        };
        let first = pick.iter().position(|p| *p).unwrap_or(k);
        s.ahead = if first == s.ahead_from {
            (s.ahead * 2).min(AHEAD_MAX)
        } else {
            AHEAD_MIN
        };
        let mut budget = s.ahead;
        while k + 1 < n && !s.have[k + 1] && s.frames[k + 1].stored <= budget {
            k += 1;
            budget -= s.frames[k].stored;
            pick[k] = true;
        }
        s.ahead_from = k + 1;
        self.fetch_picked(i, &pick)
    }
}

/// The journal reader's hook into a copy: fetches what a reader is about to read.
struct OnRead(Arc<Mutex<Core>>);

impl tickbox_journal::FetchOnRead for OnRead {
    fn fetch(&self, path: &Path, range: Range<u64>) -> std::io::Result<()> {
        let mut core = lock(&self.0);
        if let Some(why) = &core.failed {
            return Err(std::io::Error::other(why.clone()));
        }
        core.on_read(path, range).map_err(|e| {
            let why = e.to_string();
            tracing::error!("{why}");
            core.failed = Some(why.clone());
            std::io::Error::other(why)
        })
    }
}

fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    core.lock().unwrap_or_else(|e| e.into_inner())
}

/// A replay's window, as its plan resolved it: origin times (`to` exclusive), else journal sequences.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    /// First origin time, ns since the epoch.
    pub from_ns: Option<u64>,
    /// Origin time to stop before.
    pub to_ns: Option<u64>,
    /// First journal sequence (when no time is given).
    pub from_seq: Option<u64>,
    /// Sequence to stop at (when no time is given).
    pub to_seq: Option<u64>,
}

impl Mirror {
    /// Connects to the store and makes the copy of what `url` names (every object under it: a history, or an
    /// archive journal's directory; a Parquet dataset archived beside the journals, under `parquet/`, is left out;
    /// or the one object it is: a ring journal), holding the small files and the compressed files' headers and
    /// indexes.
    pub fn open(url: &StoreUrl) -> Result<Mirror, ExportError> {
        Self::open_in(Store::connect(url)?)
    }

    /// [`Mirror::open`] of the location of a connected store.
    pub(crate) fn open_in(store: Store) -> Result<Mirror, ExportError> {
        let url = store.url.clone();
        let root = std::env::temp_dir().join(format!(
            "tickbox-mirror-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        std::fs::create_dir_all(&root).map_err(|e| ExportError::io(root.display(), e))?;
        // Removed again if the copy cannot be made (the Mirror's drop removes it once there is one).
        let mut made = RemoveOnDrop(Some(root.clone()));
        let name = url
            .key
            .rsplit('/')
            .next()
            .filter(|n| !n.is_empty())
            .unwrap_or("journal")
            .to_owned();
        let path = root.join(&name);
        let mut core = Core {
            store,
            sparse: Vec::new(),
            bytes: 0,
            reads: 0,
            failed: None,
        };
        let mut objects: Vec<(String, u64)> = core
            .store
            .list_all("")?
            .into_iter()
            .filter(|(rel, _)| !rel.starts_with("parquet/") && !rel.is_empty())
            .collect();
        // Directory markers (empty objects named as the directory their neighbours are in, as some tools and
        // consoles make) hold nothing.
        let dirs: std::collections::BTreeSet<&str> = objects
            .iter()
            .filter_map(|(rel, _)| rel.rsplit_once('/').map(|(d, _)| d))
            .collect();
        let markers: Vec<String> = objects
            .iter()
            .filter(|(rel, len)| *len == 0 && dirs.contains(rel.trim_end_matches('/')))
            .map(|(rel, _)| rel.clone())
            .collect();
        objects.retain(|(rel, _)| !markers.contains(rel));
        if objects.is_empty() {
            // One object: a ring journal.
            match core
                .store
                .rt
                .block_on(core.store.store.head(&url.object("")))
            {
                Ok(meta) => objects.push((String::new(), meta.size)),
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(ExportError::Refused(format!(
                        "{}: no journal or history there",
                        url.url
                    )))
                }
                Err(e) => return Err(ExportError::store(&url.url, e)),
            }
        }
        let mut sizes = std::collections::BTreeMap::new();
        for (rel, len) in &objects {
            let local = if rel.is_empty() {
                path.clone()
            } else {
                path.join(rel)
            };
            if let Some(d) = local.parent() {
                std::fs::create_dir_all(d).map_err(|e| ExportError::io(d.display(), e))?;
            }
            *sizes
                .entry(rel.split('/').next().unwrap_or_default().to_owned())
                .or_default() += len;
            core.copy_in(rel, &local, *len)?;
        }
        made.0 = None;
        let mut m = Mirror {
            core: Arc::new(Mutex::new(core)),
            url: url.clone(),
            path,
            root,
            on_read: false,
            cards: Vec::new(),
            sizes,
            objects: objects.len() as u64,
            bytes_total: objects.iter().map(|(_, len)| len).sum(),
        };
        m.restamp();
        tracing::info!(store = %url.url, "opened: {} object(s); {}", m.objects, m.fetched());
        Ok(m)
    }

    /// From now on until the copy is dropped, a journal reader of the copy fetches what it reads and the copy
    /// lacks (a frame, with a read-ahead of those that follow; a plain file whole), so nothing it reads is
    /// a hole. A fetch that fails (the store went away) reads as unreadable bytes, and [`Mirror::failure`] says
    /// why.
    pub fn fetch_on_read(&mut self) {
        tickbox_journal::register_fetcher(&self.root, Arc::new(OnRead(Arc::clone(&self.core))));
        self.on_read = true;
    }

    /// Why a fetch a reader asked for failed, if one did.
    pub fn failure(&self) -> Option<String> {
        lock(&self.core).failed.clone()
    }

    /// Bytes fetched and reads made so far, those of readers included.
    pub fn counts(&self) -> (u64, u64) {
        let core = lock(&self.core);
        (core.bytes, core.reads)
    }

    /// Fetches, of each journal file, the frames `want` picks (by index into its frames) that are not there
    /// yet, adjacent ones in one read.
    /// A file read whole (a plain one, or one whose index is damaged) is left to the reader that opens its
    /// records when the copy fetches on read (see [`Mirror::fetch_on_read`]), if one does.
    fn fill(&mut self, want: &dyn Fn(usize, &[FrameSpan]) -> Vec<bool>) -> Result<(), ExportError> {
        let picks: Vec<Vec<bool>> = {
            let core = lock(&self.core);
            core.sparse
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    if s.whole && self.on_read {
                        vec![false; s.frames.len()]
                    } else {
                        want(i, &s.frames)
                    }
                })
                .collect()
        };
        self.fetch_picks(&picks)
    }

    fn fetch_picks(&mut self, picks: &[Vec<bool>]) -> Result<(), ExportError> {
        {
            let mut core = lock(&self.core);
            for (i, pick) in picks.iter().enumerate() {
                core.fetch_picked(i, pick)?;
            }
        }
        self.restamp();
        let (bytes, reads) = self.counts();
        tracing::info!(
            store = %self.url.url,
            "{bytes} of {} bytes fetched in {reads} read(s)",
            self.bytes_total,
        );
        Ok(())
    }

    /// Fetches the first and last frame of each compressed file.
    /// Turns on [`Mirror::fetch_on_read`].
    pub fn fill_ends(&mut self) -> Result<(), ExportError> {
        if !self.on_read {
            self.fetch_on_read();
        }
        self.fill(&|_, frames| ends(frames.len()))
    }

    /// Fetches the first and last frame of each compressed file of the journals the store holds no card of: then
    /// `journal ls` reads the copy as it reads a history on disk.
    pub fn fill_for_cards(&mut self) -> Result<(), ExportError> {
        let carded: Vec<String> = self
            .cards
            .iter()
            .filter_map(|j| j.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        let names: Vec<String> = lock(&self.core)
            .sparse
            .iter()
            .map(|s| s.rel.split('/').next().unwrap_or_default().to_owned())
            .collect();
        let uncarded: Vec<bool> = names
            .iter()
            .map(|journal| !carded.iter().any(|c| c == journal))
            .collect();
        self.fill(&|i, frames| {
            if uncarded[i] {
                ends(frames.len())
            } else {
                vec![false; frames.len()]
            }
        })?;
        // Card each of those journals now, with the bytes its objects take in the store (the copy's blocks are
        // only what was fetched).
        let mut made: Vec<&str> = Vec::new();
        for (name, _) in names.iter().zip(&uncarded).filter(|(_, u)| **u) {
            if name.is_empty() || made.contains(&name.as_str()) {
                continue;
            }
            made.push(name);
            let journal = self.path.join(name);
            if let Ok(mut card) = tickbox_recorder::JournalCard::of(&journal) {
                card.bytes_on_disk = self.sizes.get(name).copied().unwrap_or(card.bytes_on_disk);
                card.store(&journal);
            }
        }
        Ok(())
    }

    /// Fetches the frames a reader of capture times `from_ns..to_ns` reads (see the module's docs), and the first
    /// frame of each file (where a reader that rolls into it starts).
    pub fn fill_window(
        &mut self,
        from_ns: Option<u64>,
        to_ns: Option<u64>,
    ) -> Result<(), ExportError> {
        if !self.on_read {
            self.fetch_on_read();
        }
        let from = from_ns.map(|f| f.saturating_sub(SLACK_NS));
        let to = to_ns.map(|t| t.saturating_add(SLACK_NS));
        self.fill(&|_, frames| window(frames, from, to))
    }

    /// Fetches everything not fetched yet.
    pub fn fill_all(&mut self) -> Result<(), ExportError> {
        self.fill(&|_, frames| vec![true; frames.len()])
    }

    /// Fetches what a replay of `w` reads, in as few ranged reads as the frames allow (see the module's docs):
    /// in each compressed file the frames of the window by capture time, widened by [`SLACK_NS`] and then
    /// checked against the records' origin times ([`replay_frames`]); by sequence when the window is one.
    /// Without a window nothing is fetched here: the replay reads the copy from its start and fetches as it goes
    /// (see [`Mirror::fetch_on_read`], which the check needs and this turns on).
    pub fn fill_replay(&mut self, w: &ReplayWindow) -> Result<(), ExportError> {
        if !self.on_read {
            self.fetch_on_read();
        }
        let timed = w.from_ns.is_some() || w.to_ns.is_some();
        if !timed && w.from_seq.is_none() && w.to_seq.is_none() {
            return Ok(());
        }
        // The capture-time window (or the sequence range) first, in bulk.
        let from = w.from_ns.map(|f| f.saturating_sub(SLACK_NS));
        let to = w.to_ns.map(|t| t.saturating_add(SLACK_NS));
        self.fill(&|_, frames| {
            if timed {
                window(frames, from, to)
            } else {
                seq_window(frames, w.from_seq, w.to_seq)
            }
        })?;
        if !timed {
            return Ok(());
        }
        // Then the check at each end, by the records' origin times: the frames it adds are fetched as it reads
        // them, and once more in bulk (nothing twice).
        let files: Vec<(PathBuf, Vec<FrameSpan>, bool)> = lock(&self.core)
            .sparse
            .iter()
            .map(|s| (self.journal_of(&s.rel), s.frames.clone(), s.whole))
            .collect();
        let picks: Vec<Vec<bool>> = files
            .iter()
            .map(|(journal, frames, whole)| {
                if *whole {
                    return vec![false; frames.len()];
                }
                let origin = |seq: u64| origin_of(journal, seq);
                replay_frames(
                    frames,
                    w.from_ns,
                    w.to_ns,
                    &mut |k| origin(frames[k].first_seq),
                    &mut |k| origin((frames[k].first_seq + frames[k].records).saturating_sub(1)),
                )
            })
            .collect();
        self.fetch_picks(&picks)
    }

    /// The journal (in the copy) that object `rel` belongs to.
    fn journal_of(&self, rel: &str) -> PathBuf {
        match rel.split_once('/') {
            Some((journal, _)) => self.path.join(journal),
            None => self.path.clone(),
        }
    }

    /// Each card from the store describes its journal as archived (closed, never written again): its stamp is set
    /// to the copy's, so readers take it instead of reading the journal to make one.
    fn restamp(&mut self) {
        if self.cards.is_empty() {
            let Ok(entries) = std::fs::read_dir(&self.path) else {
                return;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(journal) = name.strip_suffix(tickbox_recorder::SUMMARY_SUFFIX) {
                    if !journal.is_empty() && self.path.join(journal).exists() {
                        self.cards.push(self.path.join(journal));
                    }
                }
            }
        }
        for journal in &self.cards {
            if let Some(mut card) = tickbox_recorder::JournalCard::cached(journal) {
                if !card.open {
                    card.stamp = tickbox_recorder::stamp_of(journal);
                    card.store(journal);
                }
            }
        }
    }

    /// The local path to read: the history directory, or the journal.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store location it copies (no credentials: those come from the environment).
    pub fn url(&self) -> &str {
        &self.url.url
    }

    /// What was fetched, for a summary: `fetched N of M bytes (R reads)`.
    pub fn fetched(&self) -> String {
        let (bytes, reads) = self.counts();
        format!(
            "fetched {} of {} bytes of {} object(s) in {} read(s)",
            bytes, self.bytes_total, self.objects, reads
        )
    }

    /// [`Mirror::fetched`] for `--json`.
    pub fn fetched_json(&self) -> serde_json::Value {
        let (bytes, reads) = self.counts();
        serde_json::json!({
            "url": self.url.url,
            "objects": self.objects,
            "bytes_total": self.bytes_total,
            "bytes": bytes,
            "reads": reads,
        })
    }
}

/// Replaces each of `journals` that names an object store location (`s3://…`) by a local copy that fetches what
/// a replay of `ask` reads (see [`Mirror::fill_replay`]): the replay's plan is made against the copies, as the
/// replay will make it, and its window's frames fetched. The copies, to keep until the replay is done.
pub fn replay_copies(
    journals: &mut [PathBuf],
    ask: &tickbox_recorder::ReplayAsk,
    tz: &tickbox_recorder::TimeZone,
) -> Result<Vec<Mirror>, ExportError> {
    let mut mirrors = Vec::new();
    for journal in journals.iter_mut() {
        let s = journal.to_string_lossy();
        if !s.contains("://") {
            continue;
        }
        if let crate::store::Location::Store(url) = crate::store::Location::parse(&s)? {
            let mut m = Mirror::open(&url)?;
            m.fetch_on_read();
            *journal = m.path().to_path_buf();
            mirrors.push(m);
        }
    }
    if mirrors.is_empty() {
        return Ok(mirrors);
    }
    // A plan that fails is the replay's to report (it makes the same one): nothing more is fetched up front.
    let Ok(plan) = tickbox_recorder::ReplayPlan::for_journals(journals, ask, tz) else {
        return Ok(mirrors);
    };
    let (from_ns, to_ns) = plan.selection.window();
    let seq = |p: Option<tickbox_recorder::Position>| match p {
        Some(tickbox_recorder::Position::Seq(s)) => Some(s),
        _ => None,
    };
    let w = ReplayWindow {
        from_ns,
        to_ns,
        from_seq: seq(plan.from),
        to_seq: seq(plan.to),
    };
    for m in &mut mirrors {
        m.fill_replay(&w)?;
    }
    Ok(mirrors)
}

/// The origin time of the record with sequence `seq` in the journal at `journal` (a copy: the frame is fetched
/// as it is read), `None` when it is not a tickbox record or cannot be read.
fn origin_of(journal: &Path, seq: u64) -> Option<u64> {
    let mut r = tickbox_journal::Reader::open(journal).ok()?;
    r.seek_seq(seq).ok()?;
    let rec = r.next().ok()??;
    if rec.seq != seq {
        return None;
    }
    tickbox_wire::MessageRef::decode(rec.payload)
        .ok()
        .map(|m| m.header().origin_time_ns)
}

/// The first and last of `n` frames.
fn ends(n: usize) -> Vec<bool> {
    (0..n).map(|k| k == 0 || k + 1 == n).collect()
}

/// Which frames of one file a reader of `from..to` (already widened) reads: from the first whose last record is at
/// or after `from` through the first after it whose last record is at or after `to`; and the first frame.
fn window(frames: &[FrameSpan], from: Option<u64>, to: Option<u64>) -> Vec<bool> {
    let mut pick = vec![false; frames.len()];
    if let Some(p) = pick.first_mut() {
        *p = true;
    }
    let start = frames
        .iter()
        .position(|f| from.is_none_or(|t| f.last_time >= t));
    if let Some(start) = start {
        for (k, f) in frames.iter().enumerate().skip(start) {
            pick[k] = true;
            if to.is_some_and(|t| f.last_time >= t) {
                break;
            }
        }
    }
    pick
}

/// Which frames of one file a replay of journal sequences `from..=to` reads: those holding any of them (the
/// replay reads the record at `to` to stop there), and the first frame.
fn seq_window(frames: &[FrameSpan], from: Option<u64>, to: Option<u64>) -> Vec<bool> {
    frames
        .iter()
        .enumerate()
        .map(|(k, f)| {
            k == 0
                || (from.is_none_or(|s| f.first_seq + f.records > s)
                    && to.is_none_or(|s| f.first_seq <= s))
        })
        .collect()
}

/// Which frames of one file a replay of origin times `from..to` reads, checked: the frames of the capture-time
/// window widened by [`SLACK_NS`] (`window`), then, while the first record of the first frame picked has an
/// origin time at or after `from` (an earlier frame may hold records the window wants: a publisher clock ahead
/// of the recorder's), the frame before it too, up to the file's start; and likewise while the last record of
/// the last frame picked is before `to`, the frame after it. `first_origin(k)` and `last_origin(k)` are the
/// origin times of frame `k`'s first and last records (`None` when not known: the check stops there).
pub fn replay_frames(
    frames: &[FrameSpan],
    from: Option<u64>,
    to: Option<u64>,
    first_origin: &mut dyn FnMut(usize) -> Option<u64>,
    last_origin: &mut dyn FnMut(usize) -> Option<u64>,
) -> Vec<bool> {
    let wide_from = from.map(|f| f.saturating_sub(SLACK_NS));
    let wide_to = to.map(|t| t.saturating_add(SLACK_NS));
    let mut pick = window(frames, wide_from, wide_to);
    let n = frames.len();
    let start = frames
        .iter()
        .position(|f| wide_from.is_none_or(|t| f.last_time >= t));
    if let Some(from) = from {
        // `start == n`: the window is past the file; its last record says whether it is before `from`.
        let mut s = start.unwrap_or(n);
        while s > 0 {
            let o = if s < n {
                first_origin(s)
            } else {
                last_origin(n - 1)
            };
            if o.is_none_or(|o| o < from) {
                break;
            }
            s -= 1;
            pick[s] = true;
        }
    }
    if let (Some(to), Some(start)) = (to, start) {
        let mut e = (start..n)
            .find(|&k| wide_to.is_some_and(|t| frames[k].last_time >= t))
            .unwrap_or(n - 1);
        while e + 1 < n && last_origin(e).is_some_and(|o| o < to) {
            e += 1;
            pick[e] = true;
        }
    }
    pick
}

/// A directory removed when dropped.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        if self.on_read {
            tickbox_journal::unregister_fetcher(&self.root);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Dest, ExportOptions, Filter, Format};
    use crate::run::export;
    use crate::store::{runtime, Location};
    use object_store::memory::InMemory;
    use object_store::ObjectStore;
    use std::sync::Arc;

    const T0: u64 = 1_767_364_200_000_000_000;
    /// Records of the journal, one every 10 ms of capture time: ten minutes.
    const N: u64 = 60_000;

    /// A compressed archive journal of `N` quotes (frames of 64 KiB), its files put into a store under `j/`.
    fn journal_in_store(dir: &Path) -> Store {
        journal_ahead_in_store(dir, 0)
    }

    /// [`journal_in_store`] with origin times `ahead` ns after the capture times (a publisher clock ahead).
    fn journal_ahead_in_store(dir: &Path, ahead: u64) -> Store {
        use tickbox_wire::{encode_to_vec, Header, Kind, Payload, Quote};
        let path = dir.join("j");
        let mut w =
            tickbox_journal::Writer::open(&path, &tickbox_journal::WriterOptions::archive(4 << 20))
                .unwrap();
        for i in 0..N {
            let t = T0 + i * 10_000_000;
            let f = encode_to_vec(
                &format!("Q.XNAS.S{:03}", i % 100),
                &Header {
                    origin_time_ns: t + ahead,
                    ..Header::live(Kind::Quote, 7, i + 1, t)
                },
                &Payload::Quote(Quote {
                    instrument_id: (i % 100) as u32,
                    bid_px: i as i64 * 1_000,
                    bid_size: (i % 777) as u32,
                    ..Quote::default()
                }),
            )
            .unwrap();
            w.append(t, &f).unwrap();
        }
        w.close().unwrap();
        let opts = tickbox_journal::CompressOptions {
            level: 3,
            frame_bytes: 64 << 10,
        };
        tickbox_journal::compress(&path, &opts).unwrap();
        put_dir(empty_store(), &path, "j")
    }

    /// An empty in-memory store.
    fn empty_store() -> Store {
        let Location::Store(url) = Location::parse("s3://bucket/x").unwrap() else {
            unreachable!()
        };
        Store {
            url,
            store: Arc::new(InMemory::new()),
            rt: runtime().unwrap(),
        }
    }

    /// The records of the journal `j` in `dir` written again, plain, as `k` in segments of `segment` bytes.
    fn plain_copy(dir: &Path, segment: u64) -> PathBuf {
        let plain = dir.join("k");
        let mut w = tickbox_journal::Writer::open(
            &plain,
            &tickbox_journal::WriterOptions::archive(segment),
        )
        .unwrap();
        let mut r = tickbox_journal::Reader::open(dir.join("j")).unwrap();
        while let Some(rec) = r.next().unwrap() {
            w.append(rec.capture_time_ns, rec.payload).unwrap();
        }
        w.close().unwrap();
        plain
    }

    fn json_export(input: &Path, out: &Path, from: Option<u64>, to: Option<u64>) -> (u64, String) {
        let opts = ExportOptions {
            format: Format::Json,
            filter: Filter {
                from_ns: from,
                to_ns: to,
                ..Filter::default()
            },
            price: crate::vocab::PriceType::Fixed,
            days: crate::days::Days::new(jiff::tz::TimeZone::UTC),
            parquet: crate::parquet_out::ParquetOptions::default(),
            dbn_source: None,
            dbn_zstd: false,
        };
        let s = export(
            input,
            &Dest::At(Location::Local(out.to_path_buf())),
            &opts,
            &mut |_| {},
        )
        .unwrap();
        assert!(s.damaged.is_empty(), "{:?}", s.damaged);
        (s.rows, std::fs::read_to_string(out).unwrap())
    }

    #[test]
    fn a_window_of_a_compressed_journal_in_a_store_reads_its_frames_only_and_exports_as_the_whole_copy(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Mirror::open_in(journal_in_store(dir.path())).unwrap();
        assert!(
            !lock(&m.core).sparse.is_empty(),
            "the segments are read by range"
        );
        let opened = m.counts().0;
        assert!(
            opened * 5 < m.bytes_total,
            "opening fetches headers and indexes: {opened} of {}",
            m.bytes_total
        );
        // Ten seconds of the ten minutes: the frames of the window, widened by a minute each side.
        let (from, to) = (T0 + 200_000_000_000, T0 + 210_000_000_000);
        m.fill_window(Some(from), Some(to)).unwrap();
        let windowed = m.counts().0;
        let (rows, window_json) =
            json_export(m.path(), &dir.path().join("w.jsonl"), Some(from), Some(to));
        assert_eq!(rows, 1_000);
        // Everything: the same records, read from a copy with every byte.
        m.fill_all().unwrap();
        assert_eq!(
            m.counts().0,
            m.bytes_total,
            "every byte once, nothing twice"
        );
        let (_, all_json) =
            json_export(m.path(), &dir.path().join("a.jsonl"), Some(from), Some(to));
        assert_eq!(window_json, all_json);
        assert!(
            windowed * 2 < m.bytes_total,
            "a window of 10 s (130 s with the slack) of 600 s: {windowed} of {} bytes",
            m.bytes_total
        );
    }

    fn span(k: u64, first: u64, last: u64) -> FrameSpan {
        FrameSpan {
            offset: 100 + k * 10,
            stored: 10,
            first_seq: k * 5,
            records: 5,
            first_time: first,
            last_time: last,
        }
    }

    #[test]
    fn a_plain_journal_in_a_store_is_fetched_whole_only_when_its_records_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = journal_in_store(dir.path());
        // A plain copy of the same records beside it, as `k/`.
        let plain = plain_copy(dir.path(), 16 << 20);
        let mut m = Mirror::open_in(put_dir(store, &plain, "k")).unwrap();
        assert_eq!(m.counts().0, HEAD, "its first bytes only: {}", m.fetched());
        m.fill_window(Some(T0 + 200_000_000_000), Some(T0 + 210_000_000_000))
            .unwrap();
        assert_eq!(m.counts().0, HEAD, "left to the reader: {}", m.fetched());
        let (rows, _) = json_export(
            m.path(),
            &dir.path().join("p.jsonl"),
            Some(T0 + 200_000_000_000),
            Some(T0 + 210_000_000_000),
        );
        assert_eq!(rows, 1_000);
        assert_eq!(
            m.counts().0,
            m.bytes_total,
            "a plain file (one segment) is fetched whole when its records are read"
        );
    }

    #[test]
    fn a_window_picks_the_frames_a_reader_reads() {
        let frames: Vec<_> = (0..10).map(|k| span(k, k * 100, k * 100 + 90)).collect();
        let picked = |from, to| -> Vec<usize> {
            window(&frames, from, to)
                .iter()
                .enumerate()
                .filter_map(|(k, p)| p.then_some(k))
                .collect()
        };
        // From 350: the frame holding 350 (3, whose last record is 390) on; to 520: through the frame whose last
        // record is at or after it (5); and frame 0.
        assert_eq!(picked(Some(350), Some(520)), [0, 3, 4, 5]);
        assert_eq!(picked(None, Some(150)), [0, 1]);
        assert_eq!(picked(Some(950), None), [0, 9]);
        // A window after the file: only its first frame (where a reader rolling into it would look).
        assert_eq!(picked(Some(5_000), None), [0]);
        assert_eq!(picked(None, None).len(), 10);
        // A clock that stepped back inside the file: the frames from the first that reaches `from` are all read.
        let mut odd = frames.clone();
        odd[6].last_time = 200;
        assert_eq!(
            window(&odd, Some(450), Some(700)),
            [true, false, false, false, true, true, true, true, false, false]
        );
    }

    const S: u64 = 1_000_000_000;

    /// Frame `k` of 20: capture times `k*100 s ..= k*100+90 s`.
    fn frames_100s() -> Vec<FrameSpan> {
        (0..20)
            .map(|k| span(k, k * 100 * S, (k * 100 + 90) * S))
            .collect()
    }

    fn replay_picked(from: u64, to: Option<u64>, ahead: i64, known: bool) -> Vec<usize> {
        let frames = frames_100s();
        let shift = |t: u64| known.then(|| t.saturating_add_signed(ahead * S as i64));
        replay_frames(
            &frames,
            Some(from * S),
            to.map(|t| t * S),
            &mut |k| shift(frames[k].first_time),
            &mut |k| shift(frames[k].last_time),
        )
        .iter()
        .enumerate()
        .filter_map(|(k, p)| p.then_some(k))
        .collect()
    }

    #[test]
    fn a_replay_selection_is_checked_against_origin_times_at_both_ends() {
        // Origin times as capture times: the capture window widened by a minute, nothing more.
        assert_eq!(
            replay_picked(1_000, Some(1_200), 0, true),
            [0, 9, 10, 11, 12]
        );
        // A publisher clock 250 s ahead: frames before the window hold records whose origin is in it; the
        // selection goes back until a frame's first record is before --from (frame 7 starts at origin 950 s).
        assert_eq!(
            replay_picked(1_000, Some(1_200), 250, true),
            [0, 7, 8, 9, 10, 11, 12]
        );
        // 250 s behind: frames after the window hold records whose origin is before --to; it goes on until a
        // frame's last record is at or after it (frame 14 ends at origin 1,240 s).
        assert_eq!(
            replay_picked(1_000, Some(1_200), -250, true),
            [0, 9, 10, 11, 12, 13, 14]
        );
        // Origin times not known (not tickbox records): the capture window.
        assert_eq!(
            replay_picked(1_000, Some(1_200), 250, false),
            [0, 9, 10, 11, 12]
        );
        // A window after the file by capture time, but the publisher's clock 4,000 s ahead: its last frames
        // hold records of the window.
        assert_eq!(replay_picked(5_000, None, 0, true), [0]);
        assert_eq!(
            replay_picked(5_000, None, 4_000, true),
            (std::iter::once(0).chain(9..20)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_sequence_window_picks_the_frames_holding_it() {
        let frames = frames_100s();
        let picked: Vec<usize> = seq_window(&frames, Some(12), Some(20))
            .iter()
            .enumerate()
            .filter_map(|(k, p)| p.then_some(k))
            .collect();
        assert_eq!(picked, [0, 2, 3, 4]);
    }

    /// What a replay of origin times `from..to` sends from the journal at `path`, read as the replayer reads it
    /// (a seek by capture time `CLOCK_SLACK` early, a stop as far past `to`): (seq, origin time) of each record.
    fn replayed(path: &Path, from: u64, to: u64) -> Vec<(u64, u64)> {
        let slack = tickbox_recorder::CLOCK_SLACK.as_nanos() as u64;
        let mut r = tickbox_recorder::HistoryReader::open(path).unwrap();
        r.seek_time(from - slack).unwrap();
        let mut out = Vec::new();
        while let Some(rec) = r.next().expect("every record the replay reads is there") {
            if rec.capture_time_ns >= to + slack {
                break;
            }
            let o = tickbox_wire::MessageRef::decode(rec.payload)
                .unwrap()
                .header()
                .origin_time_ns;
            if (from..to).contains(&o) {
                out.push((rec.seq, o));
            }
        }
        out
    }

    /// A replay of `from..to` (seconds after `T0`) from a copy of the journal whose origin times are `ahead` of
    /// its capture times: the records sent, as from the journal on disk, and the bytes fetched for them.
    fn replay_from_copy(ahead: u64, from: u64, to: u64) -> (Vec<(u64, u64)>, u64, u64) {
        let dir = tempfile::tempdir().unwrap();
        let store = journal_ahead_in_store(dir.path(), ahead * S);
        let mut m = Mirror::open_in(store).unwrap();
        let (from, to) = (T0 + from * S, T0 + to * S);
        m.fill_replay(&ReplayWindow {
            from_ns: Some(from),
            to_ns: Some(to),
            ..ReplayWindow::default()
        })
        .unwrap();
        let filled = m.counts().0;
        let sent = replayed(m.path(), from, to);
        assert_eq!(sent, replayed(&dir.path().join("j"), from, to));
        assert_eq!(m.counts().0, filled, "the selection covered what was read");
        assert!(m.failure().is_none());
        (sent, filled, m.bytes_total)
    }

    #[test]
    fn a_replay_window_from_a_store_reads_its_frames_and_sends_what_the_journal_on_disk_sends() {
        let (sent, bytes, total) = replay_from_copy(0, 200, 300);
        assert_eq!(sent.len(), 10_000);
        assert!(
            bytes * 2 < total,
            "100 s (220 s with the slack) of 600 s: {bytes} of {total} bytes"
        );
        // Origin times 90 s ahead of capture: the check takes in the frames before the window whose records'
        // origin times are in it (more than the minute of slack), and the records sent are the same as from disk.
        let (sent_ahead, bytes_ahead, _) = replay_from_copy(90, 200, 300);
        assert!(!sent_ahead.is_empty());
        assert!(
            bytes_ahead > bytes,
            "the selection was extended: {bytes_ahead} vs {bytes} bytes"
        );
    }

    #[test]
    fn a_replay_without_a_window_streams_the_copy_as_it_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Mirror::open_in(journal_in_store(dir.path())).unwrap();
        m.fill_replay(&ReplayWindow::default()).unwrap();
        let (opened, _) = m.counts();
        assert!(opened * 5 < m.bytes_total, "nothing fetched up front");
        let mut r = tickbox_recorder::HistoryReader::open(m.path()).unwrap();
        let mut n = 0;
        let mut first_at = None;
        while let Some(rec) = r.next().unwrap() {
            first_at.get_or_insert(m.counts().0);
            assert_eq!(rec.seq, n + 1);
            n += 1;
        }
        assert_eq!(n, N);
        let (bytes, reads) = m.counts();
        assert_eq!(bytes, m.bytes_total, "every byte once");
        let first_at = first_at.unwrap();
        assert!(
            first_at < opened + (AHEAD_MIN << 1),
            "the first record was read after its frame and a read-ahead: {first_at} bytes"
        );
        let frames = lock(&m.core)
            .sparse
            .iter()
            .map(|s| s.frames.len())
            .sum::<usize>();
        assert!(
            (reads as usize) * 4 < frames,
            "read-ahead: {reads} reads for {frames} frames"
        );
    }

    /// `journal` (a directory) put into `store` under `prefix`, and a store at that location.
    fn put_dir(store: Store, journal: &Path, prefix: &str) -> Store {
        for rel in crate::archive::files_under(journal).unwrap() {
            let bytes = std::fs::read(journal.join(&rel)).unwrap();
            store
                .rt
                .block_on(
                    store
                        .store
                        .put(&format!("{prefix}/{rel}").as_str().into(), bytes.into()),
                )
                .unwrap();
        }
        let Location::Store(url) = Location::parse(&format!("s3://bucket/{prefix}")).unwrap()
        else {
            unreachable!()
        };
        Store { url, ..store }
    }

    #[test]
    fn a_plain_journal_is_fetched_by_segment_as_a_replay_reads_it_and_a_damaged_index_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = journal_in_store(dir.path());
        // The same records plain, in segments of 1 MiB.
        let plain = plain_copy(dir.path(), 1 << 20);
        let segments = tickbox_journal::list_segments(&plain).unwrap().len();
        assert!(segments >= 5, "{segments} segments");
        let store = put_dir(store, &plain, "k");
        let (from, to) = (T0 + 200 * S, T0 + 260 * S);
        let mut m = Mirror::open_in(store).unwrap();
        let w = ReplayWindow {
            from_ns: Some(from),
            to_ns: Some(to),
            ..ReplayWindow::default()
        };
        m.fill_replay(&w).unwrap();
        let sent = replayed(m.path(), from, to);
        assert_eq!(sent, replayed(&plain, from, to));
        assert_eq!(sent.len(), 6_000);
        let (bytes, _) = m.counts();
        assert!(
            bytes * 2 < m.bytes_total,
            "the segments a minute of ten reads, whole: {bytes} of {}",
            m.bytes_total
        );
        // A compressed journal whose index is damaged: read whole when it is opened, the same records.
        let j = dir.path().join("j");
        let seg = tickbox_journal::list_segments(&j).unwrap()[0].1.clone();
        let mut bytes = std::fs::read(&seg).unwrap();
        let n = bytes.len();
        bytes[n - 30] ^= 0xff;
        std::fs::write(&seg, bytes).unwrap();
        let store = put_dir(empty_store(), &j, "d");
        let mut m = Mirror::open_in(store).unwrap();
        m.fill_replay(&w).unwrap();
        assert_eq!(replayed(m.path(), from, to), replayed(&j, from, to));
        let damaged = std::fs::metadata(&seg).unwrap().len();
        assert!(m.counts().0 >= damaged, "the damaged file read whole");
    }

    #[test]
    fn a_store_gone_during_a_read_is_said_and_never_read_as_records() {
        let dir = tempfile::tempdir().unwrap();
        let store = journal_in_store(dir.path());
        let (mem, rt) = (Arc::clone(&store.store), runtime().unwrap());
        let mut m = Mirror::open_in(store).unwrap();
        m.fill_replay(&ReplayWindow::default()).unwrap();
        // The objects go away after the copy was opened.
        let names: Vec<_> = rt
            .block_on(async {
                use futures_util::TryStreamExt;
                mem.list(None).try_collect::<Vec<_>>().await
            })
            .unwrap();
        for o in names {
            rt.block_on(mem.delete(&o.location)).unwrap();
        }
        let mut r = tickbox_recorder::HistoryReader::open(m.path()).unwrap();
        let mut records = 0;
        let mut damaged = 0;
        for _ in 0..1_000 {
            match r.next() {
                Ok(Some(_)) => records += 1,
                Ok(None) => break,
                Err(tickbox_journal::JournalError::CorruptRecord { reason, .. }) => {
                    assert!(reason.contains("cannot be fetched"), "{reason}");
                    damaged += 1;
                    if r.skip_damage().is_err() {
                        break;
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(records, 0, "nothing read from a frame that was not fetched");
        assert!(damaged > 0);
        let why = m.failure().expect("the failure is kept for the exit code");
        assert!(why.contains("s3://bucket/j"), "{why}");
    }
}
