//! A journal or history named by an object store location (`s3://…`) is read from a local copy ([`Mirror`]):
//! which copy each command needs, what it fetched for the summary, and what it could not fetch.

use std::path::Path;

use crate::{ExportError, ExportSummary, Location, Mirror, RecordKind};

impl Mirror {
    /// The local copy of `path` when it names an object store location (`s3://…`), holding its small files and
    /// its compressed files' headers and indexes; `None` for a local path.
    pub fn of_path(path: &Path) -> Result<Option<Mirror>, ExportError> {
        let s = path.to_string_lossy();
        if !s.contains("://") {
            return Ok(None);
        }
        match Location::parse(&s)? {
            Location::Store(url) => Mirror::open(&url).map(Some),
            Location::Local(_) => Ok(None),
        }
    }

    /// The copy `journal ls` reads: the cards the store holds, and the first and last frames of the journals it
    /// holds none of (everything, to `verify`).
    pub fn for_listing(path: &Path, verify: bool) -> Result<Option<Mirror>, ExportError> {
        let Some(mut m) = Mirror::of_path(path)? else {
            return Ok(None);
        };
        if verify {
            m.fill_all()?;
        } else {
            m.fill_for_cards()?;
        }
        Ok(Some(m))
    }

    /// What each copy could not fetch of what was read (the store went away during the run), a line each.
    pub fn failures(mirrors: &[Mirror]) -> Vec<String> {
        mirrors.iter().filter_map(Mirror::failure).collect()
    }
}

/// `--kind` names as record kinds; the error names the first unknown one and lists the kinds.
pub fn parse_kinds(names: &[String]) -> Result<Vec<RecordKind>, String> {
    (names.iter())
        .map(|k| {
            RecordKind::parse(k).ok_or_else(|| {
                format!(
                    "--kind {k}: not one of {}",
                    RecordKind::ALL.map(RecordKind::name).join(", ")
                )
            })
        })
        .collect()
}

impl ExportSummary {
    /// The `--json` summary, with what the export fetched of a store's objects (by range: the window's frames,
    /// not whole files) when it read from one.
    pub fn report_json(&self, mirror: Option<&Mirror>) -> serde_json::Result<serde_json::Value> {
        let mut v = serde_json::to_value(self)?;
        if let Some(m) = mirror {
            v["fetched"] = m.fetched_json();
        }
        Ok(v)
    }

    /// The summary as text, with a `source` line for what was fetched from a store.
    pub fn report_text(&self, mirror: Option<&Mirror>) -> String {
        let mut text = self.text();
        if let Some(m) = mirror {
            text.push_str(&format!("source        {}\n", m.fetched()));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_path_needs_no_copy() {
        assert!(Mirror::of_path(Path::new("/data/journal.tbj"))
            .unwrap()
            .is_none());
        assert!(Mirror::for_listing(Path::new("history"), true)
            .unwrap()
            .is_none());
        assert!(Mirror::failures(&[]).is_empty());
    }

    #[test]
    fn kinds_parse_and_an_unknown_one_lists_them_all() {
        let kinds = parse_kinds(&["quote".into(), "trade".into()]).unwrap();
        assert_eq!(kinds, [RecordKind::Quote, RecordKind::Trade]);
        let err = parse_kinds(&["quote".into(), "tick".into()]).unwrap_err();
        assert!(err.starts_with("--kind tick: not one of quote, "), "{err}");
    }
}
