//! `[metrics]` and the address grammar of `--metrics`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

use serde::{Deserialize, Serialize};

use crate::MetricsError;

/// `[metrics]`: where every long-running command serves `/metrics`. A command's `--metrics ADDR` wins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `PORT` (loopback), `HOST:PORT` or `[IPv6]:PORT`; port 0 takes a free one (the command prints the address).
    /// Empty: no endpoint. Anything but loopback lets the network read the counters: `tune check` warns about it.
    pub bind: String,
}

/// `bind` as a socket address: `9100` and `:9100` are `127.0.0.1:9100`; a host name is resolved (its first
/// address).
pub fn resolve_bind(bind: &str) -> Result<SocketAddr, MetricsError> {
    let err = |why: &str| MetricsError::Address {
        bind: bind.to_owned(),
        why: why.to_owned(),
    };
    let text = bind.trim();
    let text = text.strip_prefix("http://").unwrap_or(text);
    let text = text.strip_suffix("/metrics").unwrap_or(text);
    if text.is_empty() {
        return Err(err("empty"));
    }
    let port_only = text.strip_prefix(':').unwrap_or(text);
    if port_only.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 = port_only.parse().map_err(|_| err("port out of range"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = text.rsplit_once(':').ok_or_else(|| err("no port"))?;
    if host.is_empty() || host.contains(['/', ' ']) {
        return Err(err("not a host"));
    }
    let _: u16 = port.parse().map_err(|_| err("bad port"))?;
    text.to_socket_addrs()
        .map_err(|e| err(&e.to_string()))?
        .next()
        .ok_or_else(|| err("resolves to no address"))
}

/// Whether `bind` stays on this host (a loopback address). An address that does not resolve counts as not
/// loopback: a check should warn about what it cannot vouch for.
pub fn is_loopback(bind: &str) -> bool {
    resolve_bind(bind).is_ok_and(|addr| addr.ip().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_alone_is_loopback() {
        assert_eq!(resolve_bind("9100").unwrap().to_string(), "127.0.0.1:9100");
        assert_eq!(resolve_bind(":0").unwrap().to_string(), "127.0.0.1:0");
        assert_eq!(
            resolve_bind("0.0.0.0:9100").unwrap().to_string(),
            "0.0.0.0:9100"
        );
        assert_eq!(resolve_bind("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert!(resolve_bind("localhost:9100").unwrap().ip().is_loopback());
        assert!(is_loopback("9100") && is_loopback("[::1]:1"));
        assert!(!is_loopback("0.0.0.0:9100") && !is_loopback("10.1.2.3:9100"));
        assert!(!is_loopback("nonsense"));
    }

    #[test]
    fn bad_addresses_say_why() {
        for bad in ["", "70000", "host:", "a b:1", "tcp://x:1"] {
            let err = resolve_bind(bad).unwrap_err().to_string();
            assert!(err.contains("metrics address"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_section_defaults_to_no_endpoint_and_rejects_unknown_keys() {
        let c: MetricsConfig = toml::from_str("").unwrap();
        assert_eq!(c.bind, "");
        assert!(toml::from_str::<MetricsConfig>("bnd = \"1\"").is_err());
    }
}
