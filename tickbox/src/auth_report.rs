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

/// `connections: lvc.downstream 3 open (peak 5, max 4), 2 refused over the cap; ...` when a connection cap is set
/// (`max_connections`).
pub(crate) fn connections_line(security: &Security) -> Option<String> {
    let roles = security.connections()?;
    let parts: Vec<String> = roles
        .iter()
        .map(|(role, c)| {
            format!(
                "{role} {} open (peak {}, max {}), {} refused over the cap",
                c.connections, c.peak_connections, c.max_connections, c.refused_over_cap
            )
        })
        .collect();
    Some(format!("connections: {}", parts.join("; ")))
}

/// Adds `"connections": {role: {...}}` to a summary object, when a connection cap is set.
pub(crate) fn add_connections_to_json(summary: &mut serde_json::Value, security: &Security) {
    if let (Some(roles), Some(object)) = (security.connections(), summary.as_object_mut()) {
        object.insert(
            "connections".into(),
            serde_json::to_value(roles).unwrap_or(serde_json::Value::Null),
        );
    }
}
