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
//! - [`Mirror::fill_all`], everything.
//!
//! Adjacent frames are fetched in one ranged read. A plain (uncompressed) journal file has no index to read by, so
//! any fill fetches it whole (opening fetches its first bytes only), as it does a compressed file whose index is
//! missing or damaged (its frames are found by a scan). A frame the copy lacks reads as zeros, which no frame checksum passes: a reader that went
//! outside what was fetched would report damage, never read wrong records. Each journal's card, when the store
//! holds one, is trusted (its stamp is set to the copy's): an archived journal is closed and never changes.
//! Memory stays one chunk of a stream, whatever the sizes; the copy is removed when the [`Mirror`] is dropped.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

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

/// Suffixes of the small files fetched whole without looking at them.
const SMALL: [&str; 3] = [".json", ".jsonl", ".txt"];

/// One compressed file of the copy, fetched by range.
#[derive(Debug)]
struct Sparse {
    rel: String,
    local: PathBuf,
    frames: Vec<FrameSpan>,
    have: Vec<bool>,
    /// Bytes `..head` and `tail..` are there already (the header and index reads took in some frames' bytes).
    head: u64,
    tail: u64,
}

/// A local copy of a journal or history from an object store.
#[derive(Debug)]
pub struct Mirror {
    store: Store,
    root: PathBuf,
    path: PathBuf,
    sparse: Vec<Sparse>,
    /// Cards from the store (their journal paths in the copy), re-stamped after each fill.
    cards: Vec<PathBuf>,
    /// Bytes of the objects under each top-level name (a journal's, for its card).
    sizes: std::collections::BTreeMap<String, u64>,
    /// Objects at the location.
    pub objects: u64,
    /// Bytes of those objects.
    pub bytes_total: u64,
    /// Bytes fetched so far.
    pub bytes: u64,
    /// Ranged reads made so far (whole-object reads included).
    pub reads: u64,
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
        let name = url
            .key
            .rsplit('/')
            .next()
            .filter(|n| !n.is_empty())
            .unwrap_or("journal")
            .to_owned();
        let mut m = Mirror {
            store,
            path: root.join(&name),
            root,
            sparse: Vec::new(),
            cards: Vec::new(),
            sizes: std::collections::BTreeMap::new(),
            objects: 0,
            bytes_total: 0,
            bytes: 0,
            reads: 0,
        };
        let mut objects: Vec<(String, u64)> = m
            .store
            .list_all("")?
            .into_iter()
            .filter(|(rel, _)| !rel.starts_with("parquet/"))
            .collect();
        let single = objects.is_empty();
        if single {
            // One object: a ring journal.
            match m.store.rt.block_on(m.store.store.head(&url.object(""))) {
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
        for (rel, len) in &objects {
            let local = if rel.is_empty() {
                m.path.clone()
            } else {
                m.path.join(rel)
            };
            if let Some(d) = local.parent() {
                std::fs::create_dir_all(d).map_err(|e| ExportError::io(d.display(), e))?;
            }
            m.objects += 1;
            m.bytes_total += len;
            *m.sizes
                .entry(rel.split('/').next().unwrap_or_default().to_owned())
                .or_default() += len;
            m.copy_in(rel, &local, *len)?;
        }
        m.restamp();
        tracing::info!(
            store = %url.url,
            "opened: {} object(s) of {} bytes; {} bytes fetched in {} read(s)",
            m.objects,
            m.bytes_total,
            m.bytes,
            m.reads
        );
        Ok(m)
    }

    /// Makes the local file of object `rel` (`len` bytes): small or plain files whole, compressed journal files
    /// as a hole with their header and index.
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
        });
    }

    /// Fetches bytes `range` of object `rel` into `file` at the same offsets, streaming.
    fn fetch(
        &mut self,
        rel: &str,
        file: &File,
        local: &Path,
        range: std::ops::Range<u64>,
    ) -> Result<(), ExportError> {
        use futures_util::StreamExt;
        if range.is_empty() {
            return Ok(());
        }
        let at = self.store.url.object(rel);
        let url = self.store.url.url_of(rel);
        let err = |e: object_store::Error| ExportError::store(&url, e);
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            ..GetOptions::default()
        };
        let got = self.store.rt.block_on(async {
            let got = self.store.store.get_opts(&at, opts).await.map_err(err)?;
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
        self.bytes += got;
        self.reads += 1;
        Ok(())
    }

    /// Fetches, of each compressed file, the frames `want` picks (by index into its frames) that are not there
    /// yet, adjacent ones in one read.
    fn fill(&mut self, want: &dyn Fn(usize, &[FrameSpan]) -> Vec<bool>) -> Result<(), ExportError> {
        let mut sparse = std::mem::take(&mut self.sparse);
        let result = sparse.iter_mut().enumerate().try_for_each(|(i, s)| {
            let pick = want(i, &s.frames);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&s.local)
                .map_err(|e| ExportError::io(s.local.display(), e))?;
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
                    self.fetch(&s.rel, &file, &s.local, start..end)?;
                }
            }
            Ok::<_, ExportError>(())
        });
        self.sparse = sparse;
        result?;
        self.restamp();
        tracing::info!(
            store = %self.store.url.url,
            "{} of {} bytes fetched in {} read(s)",
            self.bytes,
            self.bytes_total,
            self.reads
        );
        Ok(())
    }

    /// Fetches the first and last frame of each compressed file.
    pub fn fill_ends(&mut self) -> Result<(), ExportError> {
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
        let uncarded: Vec<bool> = self
            .sparse
            .iter()
            .map(|s| {
                let journal = s.rel.split('/').next().unwrap_or_default();
                !carded.iter().any(|c| c == journal)
            })
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
        for (s, _) in self.sparse.iter().zip(&uncarded).filter(|(_, u)| **u) {
            let name = s.rel.split('/').next().unwrap_or_default();
            if name.is_empty() || made.contains(&name) {
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
        let from = from_ns.map(|f| f.saturating_sub(SLACK_NS));
        let to = to_ns.map(|t| t.saturating_add(SLACK_NS));
        self.fill(&|_, frames| window(frames, from, to))
    }

    /// Fetches everything not fetched yet.
    pub fn fill_all(&mut self) -> Result<(), ExportError> {
        self.fill(&|_, frames| vec![true; frames.len()])
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

    /// What was fetched, for a summary: `fetched N of M bytes (R reads)`.
    pub fn fetched(&self) -> String {
        format!(
            "fetched {} of {} bytes of {} object(s) in {} read(s)",
            self.bytes, self.bytes_total, self.objects, self.reads
        )
    }
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

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{export, Dest, ExportOptions, Filter, Format};
    use crate::store::{runtime, Location};
    use object_store::memory::InMemory;
    use object_store::ObjectStore;
    use std::sync::Arc;

    const T0: u64 = 1_767_364_200_000_000_000;
    /// Records of the journal, one every 10 ms of capture time: ten minutes.
    const N: u64 = 60_000;

    /// A compressed archive journal of `N` quotes (frames of 64 KiB), its files put into a store under `j/`.
    fn journal_in_store(dir: &Path) -> Store {
        use tickbox_wire::{encode_to_vec, Header, Kind, Payload, Quote};
        let path = dir.join("j");
        let mut w =
            tickbox_journal::Writer::open(&path, &tickbox_journal::WriterOptions::archive(4 << 20))
                .unwrap();
        for i in 0..N {
            let t = T0 + i * 10_000_000;
            let f = encode_to_vec(
                &format!("Q.XNAS.S{:03}", i % 100),
                &Header::live(Kind::Quote, 7, i + 1, t),
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
        let mem: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let rt = runtime().unwrap();
        for rel in crate::archive::files_under(&path).unwrap() {
            let bytes = std::fs::read(path.join(&rel)).unwrap();
            rt.block_on(mem.put(&format!("j/{rel}").as_str().into(), bytes.into()))
                .unwrap();
        }
        let Location::Store(url) = Location::parse("s3://bucket/j").unwrap() else {
            unreachable!()
        };
        Store {
            url,
            store: mem,
            rt,
        }
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
        assert!(!m.sparse.is_empty(), "the segments are read by range");
        let opened = m.bytes;
        assert!(
            opened * 5 < m.bytes_total,
            "opening fetches headers and indexes: {opened} of {}",
            m.bytes_total
        );
        // Ten seconds of the ten minutes: the frames of the window, widened by a minute each side.
        let (from, to) = (T0 + 200_000_000_000, T0 + 210_000_000_000);
        m.fill_window(Some(from), Some(to)).unwrap();
        let windowed = m.bytes;
        let (rows, window_json) =
            json_export(m.path(), &dir.path().join("w.jsonl"), Some(from), Some(to));
        assert_eq!(rows, 1_000);
        // Everything: the same records, read from a copy with every byte.
        m.fill_all().unwrap();
        assert_eq!(m.bytes, m.bytes_total, "every byte once, nothing twice");
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
    fn a_plain_journal_in_a_store_is_fetched_whole_only_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = journal_in_store(dir.path());
        // A plain copy of the same records beside it, as `k/`.
        let plain = dir.path().join("k");
        let mut w = tickbox_journal::Writer::open(
            &plain,
            &tickbox_journal::WriterOptions::archive(16 << 20),
        )
        .unwrap();
        let mut r = tickbox_journal::Reader::open(dir.path().join("j")).unwrap();
        while let Some(rec) = r.next().unwrap() {
            w.append(rec.capture_time_ns, rec.payload).unwrap();
        }
        w.close().unwrap();
        for rel in crate::archive::files_under(&plain).unwrap() {
            let bytes = std::fs::read(plain.join(&rel)).unwrap();
            store
                .rt
                .block_on(
                    store
                        .store
                        .put(&format!("k/{rel}").as_str().into(), bytes.into()),
                )
                .unwrap();
        }
        let Location::Store(url) = Location::parse("s3://bucket/k").unwrap() else {
            unreachable!()
        };
        let mut m = Mirror::open_in(Store { url, ..store }).unwrap();
        assert_eq!(m.bytes, HEAD, "its first bytes only: {}", m.fetched());
        m.fill_window(Some(T0 + 200_000_000_000), Some(T0 + 210_000_000_000))
            .unwrap();
        assert_eq!(
            m.bytes, m.bytes_total,
            "a window of a plain file reads it whole"
        );
        let (rows, _) = json_export(
            m.path(),
            &dir.path().join("p.jsonl"),
            Some(T0 + 200_000_000_000),
            Some(T0 + 210_000_000_000),
        );
        assert_eq!(rows, 1_000);
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
}
