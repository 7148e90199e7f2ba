//! Reading a recording for `tickbox feed --source`: a DBN file (anything [`open_source`] opens) or a tickbox
//! journal (a ring file, an archive directory or segment, imported or recorded), as the tickbox messages a
//! publisher would send, in file order. DBN records take the same road as an import followed by [`derive_wire`],
//! so a record published straight from its file and one published from its import are the same message.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use dbn::{RType, Record as _};
use tickbox_feed::{RecordSource, SourceError, SourceItem, SourceRecord};
use tickbox_journal::Reader;
use tickbox_wire::{Kind, MessageRef};

use crate::derive::{derive_payload, derive_wire};
use crate::error::DbnError;
use crate::frame::{record_fits, VendorFrame, VENDOR_KIND};
use crate::import::{open_source, OpenedSource, Topics};

/// What a recording is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayForm {
    /// A DBN file (plain or zstd, DBZ, fragment).
    Dbn,
    /// A tickbox journal.
    Journal,
}

enum Inner {
    Dbn {
        source: Box<OpenedSource>,
        topics: Topics,
    },
    Journal(Box<Reader>),
}

/// A recording opened for replay.
pub struct ReplaySource {
    inner: Inner,
    path: PathBuf,
    /// Skip reasons already built, so a file of skipped records does not format one string per record.
    reasons: HashMap<(u8, u8), String>,
    /// The frame a DBN record (or a journal's vendor frame) is encoded into, reused record after record.
    frame: Vec<u8>,
    /// Its topic, reused likewise.
    topic: String,
}

/// True when `path` is a journal: an archive directory, or a file that starts with a journal's magic (plain, or
/// compressed by `tickbox journal compress`).
fn is_journal(path: &Path) -> Result<bool, DbnError> {
    if path.is_dir() {
        return Ok(true);
    }
    let mut file = File::open(path).map_err(|e| DbnError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let mut magic = [0u8; 16];
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(DbnError::Io {
                    path: path.to_path_buf(),
                    source: e,
                })
            }
        }
    }
    Ok(tickbox_journal::is_journal_file(&magic[..got]))
}

impl ReplaySource {
    /// Opens `path`: a journal if it is a directory or starts with the journal's magic, else a DBN file. A file
    /// that is neither, or whose header is damaged, is refused with an error naming it and why.
    pub fn open(path: &Path) -> Result<Self, DbnError> {
        let inner = if is_journal(path)? {
            let reader = Reader::open(path).map_err(|e| DbnError::Refused {
                path: path.to_path_buf(),
                why: format!("journal cannot be read: {e}"),
            })?;
            Inner::Journal(Box::new(reader))
        } else {
            let source = open_source(path, None)?;
            let topics = Topics::new(source.metadata.as_ref());
            Inner::Dbn {
                source: Box::new(source),
                topics,
            }
        };
        Ok(ReplaySource {
            inner,
            path: path.to_path_buf(),
            reasons: HashMap::new(),
            frame: Vec::new(),
            topic: String::new(),
        })
    }

    /// What was opened.
    pub fn form(&self) -> ReplayForm {
        match self.inner {
            Inner::Dbn { .. } => ReplayForm::Dbn,
            Inner::Journal(_) => ReplayForm::Journal,
        }
    }

    /// The next item in file order; `Ok(None)` at the end. A damaged record (a truncated or corrupt file, a
    /// failed checksum) is an error naming the file and the record: a replay must not silently publish a prefix.
    /// A journal's tickbox frame is handed over as it lies in the journal; a DBN record (or a journal's vendor
    /// frame) is encoded once into a frame this source reuses.
    pub fn next_item(&mut self) -> Result<Option<SourceItem<'_>>, DbnError> {
        let reasons = &mut self.reasons;
        match &mut self.inner {
            Inner::Dbn { source, topics } => {
                let Some(rec) = source.next_record()? else {
                    return Ok(None);
                };
                let bytes = rec.as_ref();
                if !record_fits(bytes) {
                    let (rtype, len) = (bytes.get(1).copied().unwrap_or(0), bytes.len());
                    return Err(DbnError::Refused {
                        path: self.path.clone(),
                        why: format!(
                            "a record of rtype {rtype:#04x} unknown to the dbn crate, or its {len} bytes too \
                             short for it"
                        ),
                    });
                }
                let rtype = bytes[1];
                // Straight from the decoded record (no vendor frame in between): the same payload an import
                // followed by `derive_wire` gives.
                let Some(payload) = derive_payload(rtype, &rec) else {
                    return Ok(Some(SourceItem::Skipped(reason(reasons, (0, rtype)))));
                };
                let (time_ns, origin_time_ns) = (rec.raw_index_ts(), rec.raw_ts_event());
                let vendor_topic = topics.topic(&rec);
                let rest = vendor_topic
                    .split_once('.')
                    .map_or(vendor_topic, |(_, r)| r);
                self.topic.clear();
                self.topic.push(payload.kind().topic_letter());
                self.topic.push('.');
                self.topic.push_str(rest);
                Ok(Some(encoded(
                    &mut self.frame,
                    time_ns,
                    origin_time_ns,
                    &self.topic,
                    &payload,
                )))
            }
            Inner::Journal(reader) => {
                let record = reader.next().map_err(|e| DbnError::Refused {
                    path: self.path.clone(),
                    why: format!("journal cannot be read on: {e}"),
                })?;
                let Some(record) = record else {
                    return Ok(None);
                };
                let frame = record.payload;
                let time_ns = record.capture_time_ns;
                if let Ok(msg) = MessageRef::decode(frame) {
                    let kind = msg.kind();
                    return Ok(Some(match (kind, msg.payload()) {
                        // Handed over as it lies: the feed writes its identity into its own copy.
                        (Kind::Quote | Kind::Trade | Kind::BookLevel, Ok(_)) => {
                            SourceItem::Record(SourceRecord { time_ns, frame })
                        }
                        (Kind::Quote | Kind::Trade | Kind::BookLevel, Err(_)) => {
                            SourceItem::Skipped(reason(reasons, (2, 0)))
                        }
                        (kind, _) => SourceItem::Skipped(reason(reasons, (1, kind as u8))),
                    }));
                }
                match VendorFrame::decode(frame) {
                    Ok(f) => match derive_wire(&f) {
                        Some((topic, h, payload)) => Ok(Some(encoded(
                            &mut self.frame,
                            time_ns,
                            h.origin_time_ns,
                            &topic,
                            &payload,
                        ))),
                        None => {
                            let rtype = f.rtype;
                            Ok(Some(SourceItem::Skipped(reason(reasons, (0, rtype)))))
                        }
                    },
                    Err(crate::error::FrameError::OtherKind(kind)) if kind != VENDOR_KIND => {
                        Ok(Some(SourceItem::Skipped(reason(reasons, (1, kind)))))
                    }
                    Err(_) => Ok(Some(SourceItem::Skipped(reason(reasons, (2, 0))))),
                }
            }
        }
    }
}

/// A record encoded once into `frame`, or the reason it cannot be (a topic the wire refuses).
fn encoded<'a>(
    frame: &'a mut Vec<u8>,
    time_ns: u64,
    origin_time_ns: u64,
    topic: &str,
    payload: &tickbox_wire::Payload,
) -> SourceItem<'a> {
    match SourceRecord::encode(frame, time_ns, origin_time_ns, topic, payload) {
        Ok(record) => SourceItem::Record(record),
        Err(err) => SourceItem::Skipped(format!("not publishable as a tickbox message: {err}")),
    }
}

/// The text of a skip reason, built once per reason.
fn reason(reasons: &mut HashMap<(u8, u8), String>, key: (u8, u8)) -> String {
    reasons
        .entry(key)
        .or_insert_with(|| match key {
            (0, rtype) => match RType::try_from(rtype) {
                Ok(r) => format!("DBN {}: no tickbox equivalent", r.as_str()),
                Err(_) => format!("DBN rtype {rtype:#04x}: no tickbox equivalent"),
            },
            (1, kind) if kind == Kind::Heartbeat as u8 => {
                "heartbeat: the feed sends its own".to_owned()
            }
            (1, kind) if kind == Kind::Gap as u8 => {
                "gap notice: a recorded loss, not data".to_owned()
            }
            (1, kind) => format!("kind {kind}: not a publishable tickbox message"),
            _ => "frame that does not decode as a tickbox message".to_owned(),
        })
        .clone()
}

/// `tickbox feed --source` publishes a recording straight from here: a damaged record ends the feed with the
/// typed error, named file and record included.
impl RecordSource for ReplaySource {
    fn next_item(&mut self) -> Result<Option<SourceItem<'_>>, SourceError> {
        ReplaySource::next_item(self).map_err(|error| match error {
            DbnError::Io { path, source } => SourceError::Io { path, source },
            other => SourceError::reader(other),
        })
    }
}
