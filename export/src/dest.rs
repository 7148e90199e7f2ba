//! An export's output while it is being written, and how it becomes visible: all of it on success, none of it
//! on failure.
//!
//! Every file is first written under a staging directory. For a local destination the staging directory sits
//! inside the destination's parent (so the last step is a `rename` on one file system), and success renames each
//! file into place after checking that none of them exists; failure removes the staging directory. For an object
//! store, each dataset file is uploaded as soon as it is closed (so local disk holds one file per open partition,
//! not the dataset) and a failure deletes what was uploaded; a single-file output is uploaded at the end.

use std::path::{Path, PathBuf};

use crate::error::ExportError;
use object_store::ObjectStoreExt;

use crate::store::{Location, Store};

/// One file an export wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutFile {
    /// Where it is: a local path or an object URL.
    pub path: String,
    /// Rows in it.
    pub rows: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Whether the output is one file or a tree of files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A directory (or object prefix) of files.
    Dataset,
    /// One file (or object).
    File,
}

enum Target {
    Local {
        /// The destination path: the dataset's root, or the file.
        path: PathBuf,
        /// A directory this export made for a dataset (removed again on failure when still empty).
        made_root: bool,
    },
    Store(Store),
}

/// An output being written.
pub struct Output {
    target: Target,
    shape: Shape,
    staging: PathBuf,
    /// Files staged locally and not yet placed: `(relative name, rows)`.
    staged: Vec<(String, u64)>,
    /// Files already placed (uploaded): what a failure must take back.
    placed: Vec<OutFile>,
    /// Uploaded names (relative), for taking back.
    uploaded: Vec<String>,
    done: bool,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("staging", &self.staging)
            .field("staged", &self.staged.len())
            .finish()
    }
}

fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{}-{nanos}", std::process::id())
}

fn dir_is_empty(p: &Path) -> bool {
    std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none())
}

impl Output {
    /// Opens the output at `loc`. Refused before anything is written: a file destination that exists, a dataset
    /// directory that holds a file the export would write is only found at the end (and refused then, nothing
    /// placed); an object store that cannot be reached or listed.
    pub fn open(loc: &Location, shape: Shape) -> Result<Output, ExportError> {
        let (target, staging) = match loc {
            Location::Local(path) => {
                let mut made_root = false;
                let staging = match shape {
                    Shape::File => {
                        if path.exists() {
                            return Err(ExportError::Refused(format!(
                                "{} exists: export never overwrites; remove it or name another",
                                path.display()
                            )));
                        }
                        let parent = match path.parent() {
                            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                            _ => PathBuf::from("."),
                        };
                        let name = path
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        parent.join(format!(".{name}.export-{}", unique_suffix()))
                    }
                    Shape::Dataset => {
                        if path.is_file() {
                            return Err(ExportError::Refused(format!(
                                "{} is a file: a dataset goes to a directory",
                                path.display()
                            )));
                        }
                        if !path.exists() {
                            std::fs::create_dir_all(path)
                                .map_err(|e| ExportError::io(path.display(), e))?;
                            made_root = true;
                        }
                        path.join(format!(".export-{}", unique_suffix()))
                    }
                };
                (
                    Target::Local {
                        path: path.clone(),
                        made_root,
                    },
                    staging,
                )
            }
            Location::Store(url) => {
                let store = Store::connect(url)?;
                if shape == Shape::File {
                    let exists = match store.rt.block_on(store.store.head(&url.object(""))) {
                        Ok(_) => true,
                        Err(object_store::Error::NotFound { .. }) => false,
                        Err(e) => return Err(ExportError::store(&url.url, e)),
                    };
                    if url.key.is_empty() || exists {
                        return Err(ExportError::Refused(format!(
                            "{} exists (or names no object): export never overwrites",
                            url.url
                        )));
                    }
                }
                let staging =
                    std::env::temp_dir().join(format!("tickbox-export-{}", unique_suffix()));
                (Target::Store(store), staging)
            }
        };
        std::fs::create_dir_all(&staging).map_err(|e| ExportError::io(staging.display(), e))?;
        Ok(Output {
            target,
            shape,
            staging,
            staged: Vec::new(),
            placed: Vec::new(),
            uploaded: Vec::new(),
            done: false,
        })
    }

    /// Whether files go to an object store.
    pub fn is_store(&self) -> bool {
        matches!(self.target, Target::Store(_))
    }

    /// The local path to write `rel` (a dataset-relative name; ignored for a file output) at, creating its
    /// directory.
    pub fn stage(&self, rel: &str) -> Result<PathBuf, ExportError> {
        let p = match self.shape {
            Shape::File => self.staging.join("out"),
            Shape::Dataset => self.staging.join(rel),
        };
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).map_err(|e| ExportError::io(d.display(), e))?;
        }
        Ok(p)
    }

    /// Says the file staged as `rel` is complete with `rows` rows. A dataset file bound for an object store is
    /// uploaded now and its local copy removed.
    pub fn closed(&mut self, rel: &str, rows: u64) -> Result<(), ExportError> {
        if let (Target::Store(store), Shape::Dataset) = (&self.target, self.shape) {
            // Never overwrite: a name taken in the store stops the export (and takes back what it uploaded).
            match store.rt.block_on(store.store.head(&store.url.object(rel))) {
                Err(object_store::Error::NotFound { .. }) => {}
                Ok(_) => {
                    return Err(ExportError::Refused(format!(
                    "{} exists: export never overwrites (what this export uploaded was taken back)",
                    store.url.url_of(rel)
                )))
                }
                Err(e) => return Err(ExportError::store(&store.url.url_of(rel), e)),
            }
            let local = self.stage(rel)?;
            let bytes = store.upload(&local, rel)?;
            self.uploaded.push(rel.to_owned());
            self.placed.push(OutFile {
                path: store.url.url_of(rel),
                rows,
                bytes,
            });
            let _ = std::fs::remove_file(&local);
        } else {
            self.staged.push((rel.to_owned(), rows));
        }
        Ok(())
    }

    /// Makes the output visible: renames (or uploads) every staged file into place. Refused, with nothing
    /// placed, when a local file it would write exists.
    pub fn commit(mut self) -> Result<Vec<OutFile>, ExportError> {
        let staged = std::mem::take(&mut self.staged);
        match &self.target {
            Target::Local { path, .. } => {
                let dest = |rel: &str| match self.shape {
                    Shape::File => path.clone(),
                    Shape::Dataset => path.join(rel),
                };
                if let Some((rel, _)) = staged.iter().find(|(rel, _)| dest(rel).exists()) {
                    return Err(ExportError::Refused(format!(
                        "{} exists: export never overwrites (nothing was written)",
                        dest(rel).display()
                    )));
                }
                for (rel, rows) in &staged {
                    let from = self.stage(rel)?;
                    let to = dest(rel);
                    if let Some(d) = to.parent() {
                        std::fs::create_dir_all(d).map_err(|e| ExportError::io(d.display(), e))?;
                    }
                    let bytes = std::fs::metadata(&from).map_or(0, |m| m.len());
                    std::fs::rename(&from, &to).map_err(|e| ExportError::io(to.display(), e))?;
                    self.placed.push(OutFile {
                        path: to.display().to_string(),
                        rows: *rows,
                        bytes,
                    });
                }
            }
            Target::Store(store) => {
                for (rel, rows) in &staged {
                    let local = self.stage(rel)?;
                    let name = if self.shape == Shape::File {
                        ""
                    } else {
                        rel.as_str()
                    };
                    let bytes = store.upload(&local, name)?;
                    self.uploaded.push(name.to_owned());
                    self.placed.push(OutFile {
                        path: store.url.url_of(name),
                        rows: *rows,
                        bytes,
                    });
                }
            }
        }
        self.done = true;
        let _ = std::fs::remove_dir_all(&self.staging);
        Ok(std::mem::take(&mut self.placed))
    }

    /// Takes everything back (also what dropping an uncommitted output does).
    pub fn abort(mut self) {
        self.take_back();
    }

    fn take_back(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        let _ = std::fs::remove_dir_all(&self.staging);
        match &self.target {
            Target::Local { path, made_root } => {
                if *made_root && dir_is_empty(path) {
                    let _ = std::fs::remove_dir(path);
                }
            }
            Target::Store(store) => {
                for rel in &self.uploaded {
                    if let Err(e) = store.delete(rel) {
                        tracing::warn!("could not take back {}: {e}", store.url.url_of(rel));
                    }
                }
            }
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.take_back();
    }
}
