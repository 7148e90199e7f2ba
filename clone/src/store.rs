//! Optional persistence for the Clone server: a snapshot file plus an append-only update log.
//!
//! Both files hold the same record: `[len u32 LE][crc32c u32 LE][payload]`, payload =
//! `seq u64 | key_len u32 | key | uuid_len u8 | uuid | props_len u32 | props | value_len u32 | value` (all LE).
//! The snapshot starts with `TBCLONE1` and the sequence it covers. Recovery loads the snapshot, then replays log
//! records with a higher sequence; a torn or corrupt log tail (crash mid-write) is cut off with a warning.
//! Compaction writes `clone.snap.tmp`, fsyncs, renames over `clone.snap`, then truncates the log; a crash between
//! rename and truncate only leaves log records the sequence check skips. Log writes are flushed to the OS every
//! loop turn (they survive a process crash) and fsynced at compaction and shutdown.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::msg::KvMsg;
use crate::CloneError;

const MAGIC: &[u8; 8] = b"TBCLONE1";
const MAX_RECORD: usize = 64 << 20;

/// An open store directory (`clone.snap` + `clone.log`), owned by the server thread.
pub struct Store {
    dir: PathBuf,
    log: BufWriter<File>,
    log_records: u64,
    dirty: bool,
}

fn encode(msg: &KvMsg, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&[0; 8]);
    buf.extend_from_slice(&msg.seq.to_le_bytes());
    buf.extend_from_slice(&(msg.key.len() as u32).to_le_bytes());
    buf.extend_from_slice(msg.key.as_bytes());
    match &msg.uuid {
        Some(u) => {
            buf.push(16);
            buf.extend_from_slice(u);
        }
        None => buf.push(0),
    }
    buf.extend_from_slice(&(msg.props.len() as u32).to_le_bytes());
    buf.extend_from_slice(&msg.props);
    buf.extend_from_slice(&(msg.value.len() as u32).to_le_bytes());
    buf.extend_from_slice(&msg.value);
    let len = (buf.len() - 8) as u32;
    let crc = crc32c::crc32c(&buf[8..]);
    buf[0..4].copy_from_slice(&len.to_le_bytes());
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

fn decode(payload: &[u8]) -> Option<KvMsg> {
    let mut p = payload;
    let mut take = |n: usize| -> Option<&[u8]> {
        if p.len() < n {
            return None;
        }
        let (a, b) = p.split_at(n);
        p = b;
        Some(a)
    };
    let seq = u64::from_le_bytes(take(8)?.try_into().ok()?);
    let klen = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let key = std::str::from_utf8(take(klen)?).ok()?.to_owned();
    let ulen = take(1)?[0] as usize;
    let uuid = match ulen {
        0 => None,
        16 => Some(<[u8; 16]>::try_from(take(16)?).ok()?),
        _ => return None,
    };
    let plen = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let props = take(plen)?.to_vec();
    let vlen = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let value = take(vlen)?.to_vec();
    if !p.is_empty() {
        return None;
    }
    Some(KvMsg {
        key,
        seq,
        uuid,
        props,
        value,
    })
}

/// Reads records until EOF or the first bad one. Returns the messages and the byte offset of the good prefix.
fn read_records(reader: &mut impl Read) -> (Vec<KvMsg>, u64, bool) {
    let mut out = Vec::new();
    let mut offset = 0u64;
    let mut header = [0u8; 8];
    loop {
        match read_exact_or_eof(reader, &mut header) {
            Ok(true) => {}
            Ok(false) => return (out, offset, true),
            Err(_) => return (out, offset, false),
        }
        let len = u32::from_le_bytes(header[0..4].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(header[4..8].try_into().unwrap_or_default());
        if len > MAX_RECORD {
            return (out, offset, false);
        }
        let mut payload = vec![0u8; len];
        if reader.read_exact(&mut payload).is_err() || crc32c::crc32c(&payload) != crc {
            return (out, offset, false);
        }
        match decode(&payload) {
            Some(m) => out.push(m),
            None => return (out, offset, false),
        }
        offset += 8 + len as u64;
    }
}

fn read_exact_or_eof(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut read = 0;
    while read < buf.len() {
        match reader.read(&mut buf[read..])? {
            0 if read == 0 => return Ok(false),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => read += n,
        }
    }
    Ok(true)
}

impl Store {
    /// Opens (creating) the store and returns it with the recovered live entries and sequence.
    pub fn open(dir: &Path) -> Result<(Store, Vec<KvMsg>, u64), CloneError> {
        std::fs::create_dir_all(dir)?;
        let snap_path = dir.join("clone.snap");
        let log_path = dir.join("clone.log");
        let mut map = std::collections::BTreeMap::new();
        let mut seq = 0u64;
        if snap_path.exists() {
            let mut r = BufReader::new(File::open(&snap_path)?);
            let mut head = [0u8; 16];
            r.read_exact(&mut head).map_err(|_| {
                CloneError::Corrupt(format!("{}: short header", snap_path.display()))
            })?;
            if &head[0..8] != MAGIC {
                return Err(CloneError::Corrupt(format!(
                    "{}: bad magic",
                    snap_path.display()
                )));
            }
            seq = u64::from_le_bytes(head[8..16].try_into().unwrap_or_default());
            let (records, _, clean) = read_records(&mut r);
            if !clean {
                // The snapshot was fsynced before being renamed into place: damage here is real corruption.
                return Err(CloneError::Corrupt(format!(
                    "{}: corrupt record",
                    snap_path.display()
                )));
            }
            for m in records {
                map.insert(m.key.clone(), m);
            }
        }
        let snap_seq = seq;
        let mut log_records = 0;
        if log_path.exists() {
            let mut r = BufReader::new(File::open(&log_path)?);
            let (records, good, clean) = read_records(&mut r);
            if !clean {
                tracing::warn!(path = %log_path.display(), offset = good, "clone log has a torn/corrupt tail; truncating");
                OpenOptions::new()
                    .write(true)
                    .open(&log_path)?
                    .set_len(good)?;
            }
            for m in records {
                if m.seq <= snap_seq {
                    continue;
                }
                seq = seq.max(m.seq);
                log_records += 1;
                if m.is_delete() {
                    map.remove(&m.key);
                } else {
                    map.insert(m.key.clone(), m);
                }
            }
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let store = Store {
            dir: dir.to_owned(),
            log: BufWriter::with_capacity(1 << 16, log),
            log_records,
            dirty: false,
        };
        Ok((store, map.into_values().collect(), seq))
    }

    /// Appends one published update (a delete is a record with an empty value).
    pub fn append(&mut self, msg: &KvMsg) -> Result<(), CloneError> {
        let mut buf = Vec::with_capacity(64 + msg.key.len() + msg.value.len());
        encode(msg, &mut buf);
        self.log.write_all(&buf)?;
        self.log_records += 1;
        self.dirty = true;
        Ok(())
    }

    /// Flushes to the OS; compacts when the log has grown past twice the live key count (and 100 000 records).
    pub fn maybe_compact<'a>(
        &mut self,
        entries: impl Iterator<Item = &'a KvMsg>,
        live: usize,
        seq: u64,
    ) -> Result<(), CloneError> {
        if self.dirty {
            self.log.flush()?;
            self.dirty = false;
        }
        if self.log_records > 100_000 && self.log_records > 2 * live as u64 {
            self.compact(entries, seq)?;
        }
        Ok(())
    }

    /// Writes a full snapshot and truncates the log.
    pub fn compact<'a>(
        &mut self,
        entries: impl Iterator<Item = &'a KvMsg>,
        seq: u64,
    ) -> Result<(), CloneError> {
        self.log.flush()?;
        let tmp = self.dir.join("clone.snap.tmp");
        {
            let mut w = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
            w.write_all(MAGIC)?;
            w.write_all(&seq.to_le_bytes())?;
            let mut buf = Vec::new();
            for m in entries {
                encode(m, &mut buf);
                w.write_all(&buf)?;
            }
            let file = w.into_inner().map_err(|e| CloneError::Io(e.into_error()))?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, self.dir.join("clone.snap"))?;
        if let Ok(d) = File::open(&self.dir) {
            let _ = d.sync_all();
        }
        let log = self.log.get_ref();
        log.set_len(0)?;
        log.sync_all()?;
        self.log_records = 0;
        Ok(())
    }

    /// Flush and fsync the log.
    pub fn sync(&mut self) -> Result<(), CloneError> {
        self.log.flush()?;
        self.log.get_ref().sync_data()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(key: &str, seq: u64, value: &str) -> KvMsg {
        let mut m = KvMsg::new(key, seq, value.as_bytes().to_vec());
        m.uuid = Some([seq as u8; 16]);
        m
    }

    #[test]
    fn log_replay_compaction_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut s, entries, seq) = Store::open(dir.path()).unwrap();
            assert!(entries.is_empty());
            assert_eq!(seq, 0);
            s.append(&m("/a", 1, "1")).unwrap();
            s.append(&m("/b", 2, "2")).unwrap();
            s.append(&m("/a", 3, "")).unwrap();
            s.sync().unwrap();
        }
        let (mut s, entries, seq) = Store::open(dir.path()).unwrap();
        assert_eq!(seq, 3);
        assert_eq!(entries, vec![m("/b", 2, "2")]);
        // Compact, then add more to the log.
        s.compact(entries.iter(), seq).unwrap();
        s.append(&m("/c", 4, "4")).unwrap();
        s.sync().unwrap();
        drop(s);
        // Simulate a crash mid-append: a partial record at the end of the log.
        let log = dir.path().join("clone.log");
        let good_len = std::fs::metadata(&log).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(&[40, 0, 0, 0, 1, 2, 3, 4, 9, 9]).unwrap();
        drop(f);
        let (_s, entries, seq) = Store::open(dir.path()).unwrap();
        assert_eq!(seq, 4);
        let keys: Vec<_> = entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["/b", "/c"]);
        assert_eq!(
            std::fs::metadata(&log).unwrap().len(),
            good_len,
            "torn tail truncated"
        );
    }

    #[test]
    fn corrupt_log_record_stops_replay_there() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut s, _, _) = Store::open(dir.path()).unwrap();
            s.append(&m("/a", 1, "1")).unwrap();
            s.append(&m("/b", 2, "2")).unwrap();
            s.sync().unwrap();
        }
        let log = dir.path().join("clone.log");
        let mut bytes = std::fs::read(&log).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&log, &bytes).unwrap();
        let (_s, entries, seq) = Store::open(dir.path()).unwrap();
        assert_eq!(entries, vec![m("/a", 1, "1")]);
        assert_eq!(seq, 1);
    }

    #[test]
    fn log_records_covered_by_snapshot_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _, _) = Store::open(dir.path()).unwrap();
        s.append(&m("/a", 1, "old")).unwrap();
        s.append(&m("/a", 2, "new")).unwrap();
        s.log.flush().unwrap();
        // Crash between snapshot rename and log truncate: write the snapshot by hand, keep the log.
        let snap = [m("/a", 2, "new")];
        let mut tmp = Store {
            dir: dir.path().to_owned(),
            log: BufWriter::new(tempfile::tempfile().unwrap()),
            log_records: 0,
            dirty: false,
        };
        tmp.compact(snap.iter(), 2).unwrap();
        drop(s);
        let (_s, entries, seq) = Store::open(dir.path()).unwrap();
        assert_eq!(entries, vec![m("/a", 2, "new")]);
        assert_eq!(seq, 2);
    }
}
