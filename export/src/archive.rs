//! A history's journals to an object store as they close (`record --roll … --archive-to s3://bucket/prefix`):
//! each closed journal's files are uploaded under `<prefix>/<journal name>/…` with the history's own files beside
//! them (the store's prefix is laid out as the history directory is), and/or the journal is exported as Parquet
//! into the dataset at `<prefix>/parquet/` (its files are named by journal sequence, so periods never collide).
//! A history archived this way is read back from the store by [`crate::mirror`].

use std::path::Path;

use crate::days::Days;
use crate::error::ExportError;
use crate::options::{Dest, ExportOptions, Filter, Format};
use crate::parquet_out::ParquetOptions;
use crate::run::export;
use crate::store::{Location, Store, StoreUrl};
use crate::vocab::PriceType;

/// What an archive holds of each journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveAs {
    /// The journal's own files (replayable, and exportable to any format later).
    pub journal: bool,
    /// A Parquet export of it, into the dataset under `<prefix>/parquet/`.
    pub parquet: bool,
}

/// Uploads closed journals of one history.
#[derive(Debug)]
pub struct Archiver {
    store: Store,
    what: ArchiveAs,
}

/// The files under `dir` (recursively), as paths relative to it.
pub(crate) fn files_under(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    Ok(out)
}

impl Archiver {
    /// Connects to the store (one listing: an unreachable store or a refused key is an error now, before the
    /// recording starts).
    pub fn connect(url: &StoreUrl, what: ArchiveAs) -> Result<Archiver, ExportError> {
        Ok(Archiver {
            store: Store::connect(url)?,
            what,
        })
    }

    /// Archives the closed journal `journal` of the history it sits in; says where it went.
    pub fn archive(&self, journal: &Path) -> Result<String, ExportError> {
        let name = journal
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| {
                ExportError::Refused(format!("{}: no journal name", journal.display()))
            })?;
        let history = journal.parent().unwrap_or(Path::new("."));
        let mut done = Vec::new();
        if self.what.journal {
            // The journal (a ring file, or an archive's directory), then its side files (`NAME.summary.json`, …)
            // and the history's own files (`tickbox-history.json`), small, uploaded again each time.
            let mut files: Vec<(std::path::PathBuf, String)> = Vec::new();
            if journal.is_dir() {
                for rel in
                    files_under(journal).map_err(|e| ExportError::io(journal.display(), e))?
                {
                    if rel.ends_with(".lock") {
                        continue;
                    }
                    files.push((journal.join(&rel), format!("{name}/{rel}")));
                }
            } else {
                files.push((journal.to_path_buf(), name.clone()));
            }
            for e in
                std::fs::read_dir(history).map_err(|e| ExportError::io(history.display(), e))?
            {
                let p = e.map_err(|e| ExportError::io(history.display(), e))?.path();
                let n = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let side = n.starts_with(&format!("{name}.")) || n.starts_with("tickbox-history");
                if p.is_file() && side && !n.ends_with(".lock") {
                    files.push((p.clone(), n));
                }
            }
            let mut bytes = 0;
            for (from, rel) in &files {
                bytes += self.store.upload(from, rel)?;
            }
            done.push(format!(
                "{} ({} files, {bytes} bytes)",
                self.store.url.url_of(&name),
                files.len()
            ));
        }
        if self.what.parquet {
            let url = StoreUrl {
                url: self.store.url.url_of("parquet"),
                bucket: self.store.url.bucket.clone(),
                key: self.store.url.object("parquet").to_string(),
            };
            let opts = ExportOptions {
                format: Format::Parquet,
                filter: Filter::default(),
                price: PriceType::Fixed,
                days: Days::new(jiff::tz::TimeZone::UTC),
                parquet: ParquetOptions::default(),
                dbn_source: None,
                dbn_zstd: false,
            };
            let s = export(
                journal,
                &Dest::At(Location::Store(url.clone())),
                &opts,
                &mut |_| {},
            )?;
            done.push(format!("{} rows to {}", s.rows, url.url));
        }
        Ok(done.join("; "))
    }
}
