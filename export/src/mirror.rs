//! A journal or history kept in an object store, brought to a local directory so every reader (export, `journal
//! ls`, replay) reads it as it reads a local one. Objects are streamed to disk one at a time (memory stays a
//! chunk); the directory is removed when the [`Mirror`] is dropped. Compressed journals are fetched whole here:
//! range reads of their frames straight from the store are not built yet.

use std::path::{Path, PathBuf};

use object_store::ObjectStoreExt;

use crate::error::ExportError;
use crate::store::{Store, StoreUrl};

/// A local copy of a journal or history from an object store.
#[derive(Debug)]
pub struct Mirror {
    root: PathBuf,
    path: PathBuf,
    /// Objects and bytes fetched.
    pub objects: u64,
    /// Bytes fetched.
    pub bytes: u64,
}

impl Mirror {
    /// Fetches what `url` names: every object under it (a history, or an archive journal's directory; a Parquet
    /// dataset archived beside the journals, under `parquet/`, is left where it is), or the one object it is (a
    /// ring journal).
    pub fn fetch(url: &StoreUrl) -> Result<Mirror, ExportError> {
        let store = Store::connect(url)?;
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
            path: root.join(&name),
            root,
            objects: 0,
            bytes: 0,
        };
        let objects: Vec<_> = store
            .list_all("")?
            .into_iter()
            .filter(|(rel, _)| !rel.starts_with("parquet/"))
            .collect();
        if objects.is_empty() {
            // One object: a ring journal.
            match store.rt.block_on(store.store.head(&url.object(""))) {
                Ok(_) => {
                    m.bytes += store.download("", &m.path)?;
                    m.objects = 1;
                    return Ok(m);
                }
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(ExportError::Refused(format!(
                        "{}: no journal or history there",
                        url.url
                    )))
                }
                Err(e) => return Err(ExportError::store(&url.url, e)),
            }
        }
        for (rel, _) in &objects {
            let to = m.path.join(rel);
            if let Some(d) = to.parent() {
                std::fs::create_dir_all(d).map_err(|e| ExportError::io(d.display(), e))?;
            }
            m.bytes += store.download(rel, &to)?;
            m.objects += 1;
        }
        Ok(m)
    }

    /// The local path to read: the history directory, or the journal.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
