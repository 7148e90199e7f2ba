//! What a history holds, journal by journal, without scanning: which entries of a history directory are journals,
//! and each journal's card (`journal ls`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tickbox_journal::{JournalError, Reader};

use crate::ledger::Ledger;

/// Suffixes of the files a history keeps beside its journals (never journals themselves).
/// The file that makes a directory a history, holding its roll.
pub const HISTORY_FILE: &str = "tickbox-history.json";
/// Suffix of a journal's cached summary, beside it.
pub const SUMMARY_SUFFIX: &str = ".summary.json";

const SIDE_FILES: [&str; 4] = [SUMMARY_SUFFIX, ".readers", ".leadership.jsonl", ".tmp"];

/// Whether `name`, an entry of a history directory, may be a journal (not the roll file, a summary, a lease, a
/// leadership log, a temporary or a hidden file).
pub(crate) fn is_journal_name(name: &str) -> bool {
    !name.starts_with('.') && name != HISTORY_FILE && !SIDE_FILES.iter().any(|s| name.ends_with(s))
}

/// Whether `path` holds a journal: an archive directory with a segment, or a file that starts like one.
pub(crate) fn holds_journal(path: &Path) -> bool {
    if path.is_dir() {
        return tickbox_journal::list_segments(path).is_ok_and(|s| !s.is_empty());
    }
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|()| magic == tickbox_journal::MAGIC[..])
}

/// One journal of a history as `journal ls` lists it: read from its header, its first and last records and its
/// ledger (a few reads, whatever its size), and cached beside it (`NAME.summary.json`) once it is closed, with
/// the verdict of the last `journal verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalCard {
    /// The journal's name: its period.
    pub name: String,
    /// Sequence of its first record.
    pub first_seq: Option<u64>,
    /// Sequence of its last record.
    pub last_seq: Option<u64>,
    /// Records it holds (its sequence range).
    pub records: u64,
    /// Capture time of its first record, ns since the epoch.
    pub first_capture_ns: Option<u64>,
    /// Capture time of its last record.
    pub last_capture_ns: Option<u64>,
    /// Publishers with records or losses in it (the recorder's ledger; those carried over from the journal
    /// before with nothing new are not counted).
    pub publishers: u64,
    /// Data records the recorder wrote into it.
    pub recorded: u64,
    /// Publisher sequences its gap records name as lost.
    pub missing: u64,
    /// Bytes it takes on disk (allocated blocks).
    pub bytes_on_disk: u64,
    /// Whether its segments are stored compressed.
    pub compressed: bool,
    /// A writer has it open: the figures are as of now, and it is never cached.
    pub open: bool,
    /// The verdict of the last `journal verify` of it, while its files are unchanged since.
    pub verified: Option<Verified>,
    /// Sizes and modification times of its files when the card was made: a card whose stamp no longer matches
    /// is made again.
    pub stamp: u64,
}

/// A cached verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verified {
    /// `ok`, `gappy` or `corrupt`.
    pub verdict: String,
    /// When it was checked, ns since the epoch.
    pub at_ns: u64,
}

/// The files of a journal (its segments, or the file itself).
fn journal_files(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        tickbox_journal::list_segments(path)
            .map(|s| s.into_iter().map(|(_, p)| p).collect())
            .unwrap_or_default()
    } else {
        vec![path.to_path_buf()]
    }
}

/// A digest of the journal's files' sizes and modification times: equal as long as nothing wrote to it.
pub fn stamp_of(path: &Path) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |v: u64| {
        for b in v.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for f in journal_files(path) {
        if let Ok(m) = std::fs::metadata(&f) {
            mix(m.len());
            mix(m.mtime() as u64);
            mix(m.mtime_nsec() as u64);
        }
    }
    h
}

/// Bytes the journal takes on disk: allocated blocks of its files (a sparse or trimmed file counts what it uses).
pub fn bytes_on_disk(path: &Path) -> u64 {
    journal_files(path)
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// Whether the journal's segments are stored compressed (zstd frames, see `tickbox journal compress`).
pub fn is_compressed(path: &Path) -> bool {
    let files = journal_files(path);
    !files.is_empty()
        && files.iter().all(|f| {
            let mut head = [0u8; 16];
            std::fs::File::open(f)
                .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut head))
                .is_ok_and(|()| head[..4] == ZSTD_SKIPPABLE && head[8..16] == PACKED_MAGIC)
        })
}

/// The first bytes of a compressed segment: a zstd skippable frame (magic `0x184D2A5B`) holding the journal's
/// packed header (`TBXJPAK\0`).
const ZSTD_SKIPPABLE: [u8; 4] = 0x184D_2A5Bu32.to_le_bytes();
const PACKED_MAGIC: [u8; 8] = *b"TBXJPAK\0";

/// The card file of journal `path`.
pub fn card_path(journal: &Path) -> PathBuf {
    let mut name = journal.file_name().unwrap_or_default().to_os_string();
    name.push(SUMMARY_SUFFIX);
    journal.with_file_name(name)
}

impl JournalCard {
    /// The card of the journal at `path`: the cached one while its files are unchanged, else made now (and cached
    /// when the journal is closed).
    pub fn of(path: &Path) -> Result<JournalCard, JournalError> {
        let stamp = stamp_of(path);
        if let Some(card) = Self::cached(path).filter(|c| c.stamp == stamp && !c.open) {
            return Ok(card);
        }
        let card = Self::make(path, stamp)?;
        if !card.open {
            card.store(path);
        }
        Ok(card)
    }

    /// The cached card, whatever its stamp.
    pub fn cached(path: &Path) -> Option<JournalCard> {
        let text = std::fs::read_to_string(card_path(path)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Reads the journal's header, first and last records and ledger.
    fn make(path: &Path, stamp: u64) -> Result<JournalCard, JournalError> {
        let mut r = Reader::open(path)?;
        let open = r.writer_active();
        let first = r.next()?.map(|rec| (rec.seq, rec.capture_time_ns));
        r.seek_end()?;
        let end = r.end_seq();
        let last = match first {
            Some((first_seq, _)) if end > first_seq => {
                r.seek_seq(end - 1)?;
                r.next()?.map(|rec| (rec.seq, rec.capture_time_ns))
            }
            _ => first,
        };
        let ledger = crate::journal_ext::read_app_meta(path)
            .ok()
            .filter(|m| !m.is_empty())
            .and_then(|m| Ledger::decode(&m).ok());
        let (publishers, recorded, missing) = ledger.as_ref().map_or((0, 0, 0), |l| {
            let active = l
                .rows()
                .iter()
                .filter(|r| r.recorded > 0 || r.missing > 0)
                .count() as u64;
            let t = l.totals();
            (active + l.overflow.publishers, t.recorded, t.missing)
        });
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(JournalCard {
            name,
            first_seq: first.map(|f| f.0),
            last_seq: last.map(|l| l.0),
            records: match (first, last) {
                (Some(f), Some(l)) => l.0 - f.0 + 1,
                _ => 0,
            },
            first_capture_ns: first.map(|f| f.1),
            last_capture_ns: last.map(|l| l.1),
            publishers,
            recorded,
            missing,
            bytes_on_disk: bytes_on_disk(path),
            compressed: is_compressed(path),
            open,
            verified: None,
            stamp,
        }
        .keep_verdict(path))
    }

    /// A fresh card keeps the cached verdict only while the journal is unchanged since it was checked.
    fn keep_verdict(mut self, path: &Path) -> JournalCard {
        self.verified = Self::cached(path)
            .filter(|c| c.stamp == self.stamp)
            .and_then(|c| c.verified);
        self
    }

    /// Writes the card beside the journal (to a temporary name, then renamed over). A history on a read-only
    /// disk still lists: a card that cannot be written is only not cached.
    pub fn store(&self, journal: &Path) {
        let file = card_path(journal);
        let mut tmp = file.clone().into_os_string();
        tmp.push(".tmp");
        let text = match serde_json::to_string(self) {
            Ok(t) => t,
            Err(_) => return,
        };
        if std::fs::write(&tmp, text + "\n").is_ok() && std::fs::rename(&tmp, &file).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// Records the verdict of a verify run of the journal at `path` (whose files must be those `self` describes).
    pub fn set_verified(&mut self, verdict: &str, journal: &Path) {
        self.verified = Some(Verified {
            verdict: verdict.to_owned(),
            at_ns: tickbox_wire::now_ns(),
        });
        if !self.open {
            self.store(journal);
        }
    }
}
