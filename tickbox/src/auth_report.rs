//! Adds the ZAP handler's decisions to the `--json` summaries that are still built in the binary (`feed`,
//! `replay`); the lines themselves are `tickbox_auth::report`'s.

use tickbox_auth::Security;

/// The summary line, when anything is checked (`tickbox_auth::report`).
pub(crate) fn line(security: &Security) -> Option<String> {
    security.summary_line()
}

/// Adds `"auth": {...}` to a summary object, when anything is checked.
pub(crate) fn add_to_json(summary: &mut serde_json::Value, security: &Security) {
    if let (Some(auth), Some(object)) = (security.summary(), summary.as_object_mut()) {
        object.insert(
            "auth".into(),
            serde_json::to_value(auth).unwrap_or(serde_json::Value::Null),
        );
    }
}
