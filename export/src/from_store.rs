//! A journal or history named by an object store location (`s3://…`) is read from a local copy ([`Mirror`]):
//! which copy each command needs, what it fetched for the summary, and what it could not fetch.

use std::path::Path;

use tickbox_recorder::{TimeZone, When};
use tickbox_units::UnitsError;

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

/// `--from` and `--to` as ns since the epoch, local forms in `tz`. A `+DURATION` or a time of day counts from the
/// first record of the journal (or history) at `path`, read only when one of them needs it; an unreadable or
/// empty journal has none, which is that time's error.
pub fn window_ns(
    path: &Path,
    from: Option<&When>,
    to: Option<&When>,
    tz: &TimeZone,
) -> Result<(Option<u64>, Option<u64>), UnitsError> {
    let resolve = |w: Option<&When>| {
        w.map(|w| {
            let first = w
                .needs_first()
                .then(|| tickbox_recorder::first_capture_ns(path).ok().flatten());
            w.resolve(tz, first.flatten())
        })
        .transpose()
    };
    Ok((resolve(from)?, resolve(to)?))
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

    #[test]
    fn a_window_counts_from_the_first_record_read_only_when_needed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let utc = tickbox_units::parse_zone("UTC").unwrap();
        let at = When::parse("1000").unwrap();
        let after = When::parse("+2s").unwrap();
        // No journal yet: an absolute time needs none, a +DURATION says what it lacks.
        assert_eq!(
            window_ns(&path, Some(&at), None, &utc).unwrap(),
            (Some(1000), None)
        );
        let err = window_ns(&path, None, Some(&after), &utc).unwrap_err();
        assert!(
            err.to_string().contains("needs the journal's first record"),
            "{err}"
        );
        let t0 = 1_767_364_200_000_000_000u64;
        let mut w =
            tickbox_journal::Writer::open(&path, &tickbox_journal::WriterOptions::ring(1 << 20))
                .unwrap();
        let header = tickbox_wire::Header::live(tickbox_wire::Kind::Quote, 7, 1, t0);
        let quote = tickbox_wire::Payload::Quote(tickbox_wire::Quote::default());
        w.append(
            t0,
            &tickbox_wire::encode_to_vec("Q.X", &header, &quote).unwrap(),
        )
        .unwrap();
        w.close().unwrap();
        let (from, to) = window_ns(&path, Some(&at), Some(&after), &utc).unwrap();
        assert_eq!((from, to), (Some(1000), Some(t0 + 2_000_000_000)));
    }
}
