//! The import manifest: `dbn-sources.json` beside the segments of an archive journal, one entry per imported file.
//! It holds what export needs to rebuild each file's header (the metadata bytes, base64) and a readable summary.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::error::DbnError;

/// File name of the manifest inside an archive journal directory.
pub const MANIFEST_FILE: &str = "dbn-sources.json";
/// Manifest format version written by this build.
pub const MANIFEST_FORMAT: u32 = 1;

/// How the source file was laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceForm {
    /// A DBN stream: metadata header then records.
    Dbn,
    /// A legacy DBZ file (its metadata is re-encoded as DBN version 1 metadata).
    Dbz,
    /// Records without a metadata header.
    Fragment,
}

/// One imported file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// The file's name (without directories).
    pub file: String,
    /// Its layout.
    pub form: SourceForm,
    /// Whether it was zstd-compressed.
    pub compressed: bool,
    /// DBN version of its records (1 to 3).
    pub version: u8,
    /// Whether records carry an appended `ts_out`.
    pub ts_out: bool,
    /// The DBN metadata (prefix included) as base64: the file's own bytes when `metadata_exact`, else as the
    /// `dbn` crate encodes the decoded metadata. Absent for fragments.
    pub metadata: Option<String>,
    /// Whether `metadata` is byte-for-byte the file's.
    pub metadata_exact: bool,
    /// Dataset code.
    pub dataset: Option<String>,
    /// Schema name.
    pub schema: Option<String>,
    /// Input symbology type.
    pub stype_in: Option<String>,
    /// Output symbology type.
    pub stype_out: Option<String>,
    /// Symbol mappings in the metadata.
    pub mappings: usize,
    /// Records imported.
    pub records: u64,
}

impl Source {
    /// The metadata bytes, decoded from base64.
    pub fn metadata_bytes(&self) -> Result<Option<Vec<u8>>, DbnError> {
        self.metadata
            .as_deref()
            .map(|m| {
                base64::engine::general_purpose::STANDARD
                    .decode(m)
                    .map_err(|e| {
                        DbnError::Invalid(format!("manifest metadata of {}: {e}", self.file))
                    })
            })
            .transpose()
    }

    pub(crate) fn encode_metadata(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}

/// Every file imported into one journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// The import run (also every vendor frame's header `session`).
    pub session: u64,
    /// In import order; a vendor frame's `source` indexes this list.
    pub sources: Vec<Source>,
}

impl Manifest {
    /// Path of the manifest of the journal at `journal`.
    pub fn path_of(journal: &Path) -> PathBuf {
        journal.join(MANIFEST_FILE)
    }

    /// Reads the manifest of `journal`; `Ok(None)` when there is none (not an imported journal).
    pub fn read(journal: &Path) -> Result<Option<Manifest>, DbnError> {
        let path = Self::path_of(journal);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Ok(None),
            Err(e) => return Err(DbnError::io(&path, e)),
        };
        let m: Manifest = serde_json::from_slice(&text)
            .map_err(|e| DbnError::Invalid(format!("{}: {e}", path.display())))?;
        if m.format != MANIFEST_FORMAT {
            return Err(DbnError::Invalid(format!(
                "{}: manifest format {} (this build reads {MANIFEST_FORMAT})",
                path.display(),
                m.format
            )));
        }
        Ok(Some(m))
    }

    /// Writes the manifest (temporary file, then rename).
    pub fn write(&self, journal: &Path) -> Result<(), DbnError> {
        let path = Self::path_of(journal);
        let tmp = journal.join(format!("{MANIFEST_FILE}.tmp"));
        let text = serde_json::to_vec_pretty(self).map_err(|e| DbnError::Invalid(e.to_string()))?;
        std::fs::write(&tmp, text).map_err(|e| DbnError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| DbnError::io(&path, e))
    }
}
