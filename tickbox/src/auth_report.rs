//! How the ZAP handler's decisions show in each command's summary, `--json` and live line. Without `[security]`
//! every output stays exactly as it was.

use tickbox_auth::Security;

/// The summary line (`auth: 3 accepted, 1 refused (last: 10.0.0.9 on lvc.upstream, key not allowed)`), when
/// anything is checked.
pub(crate) fn line(security: &Security) -> Option<String> {
    security.summary().map(|s| s.line())
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

/// `, auth refused N (last PEER)` for a live line, when anything is checked.
pub(crate) fn live_suffix(security: &Security) -> String {
    match security.summary() {
        Some(s) => match &s.last_refused {
            Some(last) if !last.address.is_empty() => {
                format!(", auth_refused {} (last {})", s.auth_refused, last.address)
            }
            _ => format!(", auth_refused {}", s.auth_refused),
        },
        None => String::new(),
    }
}
