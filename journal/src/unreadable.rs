//! The verdict on a journal whose structure cannot be read at all (a damaged header, a truncated file): what
//! `tickbox journal verify --json` prints instead of a summary.

use std::path::Path;

use serde::Serialize;

use crate::JournalError;

/// `{"error": …, "path": …, "verdict": "corrupt"}`. Fields in name order, as the object has always listed them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unreadable {
    /// Why it cannot be read.
    pub error: String,
    /// The journal.
    pub path: String,
    /// Always `"corrupt"`.
    pub verdict: &'static str,
}

impl Unreadable {
    /// The verdict on `path`, which failed with `error`.
    pub fn new(path: &Path, error: &JournalError) -> Self {
        Unreadable {
            error: error.to_string(),
            path: path.display().to_string(),
            verdict: "corrupt",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_names_the_path_and_the_error() {
        let err = JournalError::Truncated {
            path: "/j/ring".into(),
            actual: 3,
            expected: 4096,
        };
        let v = Unreadable::new(Path::new("/j/ring"), &err);
        assert_eq!(v.verdict, "corrupt");
        assert_eq!(v.path, "/j/ring");
        assert_eq!(v.error, err.to_string());
    }
}
