//! Endpoint validation before any socket sees the string.
//!
//! libzmq parses a TCP port with `atoi` into a 16-bit field, so `tcp://host:70000` silently becomes port 4464
//! and `tcp://host:-1` or a typo can end up on an ephemeral port. A command that validates its endpoint flags
//! here first fails with a message instead of listening or connecting somewhere nobody asked for.
//!
//! Accepted forms:
//! - `tcp://HOST:PORT` and `tcp://SOURCE;HOST:PORT` (source-interface syntax, e.g. `tcp://eth1:0;10.0.0.1:5556`,
//!   where the source port may be `0`/`*` or omitted). HOST is a name, an IPv4 address, `[IPv6]` or, for a bind,
//!   `*`.
//! - `udp://`, `pgm://`, `epgm://` with the same `[SOURCE;]HOST:PORT` shape.
//! - `ipc://PATH` (at most 107 bytes, what a Unix socket address holds), `inproc://NAME`, `tipc://…`, `vmci://…`:
//!   otherwise passed through (only required to be non-empty).
//!
//! A PORT must be `1..=65535`; `*` or `0` (an ephemeral port) only where binding to one is meant
//! ([`Direction::Bind`]).

use crate::ZmqxError;

/// `sun_path` holds 108 bytes on Linux, one of them the terminating NUL; libzmq fails a longer path only once
/// the socket is bound or connected.
const IPC_PATH_MAX: usize = 107;

/// What the endpoint will be used for: a bind may ask for an ephemeral port, a connect may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `connect`: the port must be concrete.
    Connect,
    /// `bind`: `*` or `0` picks an ephemeral port (the caller prints what was bound).
    Bind,
}

/// Checks `endpoint` for `direction`; see the module documentation for the accepted forms.
pub fn check(endpoint: &str, direction: Direction) -> Result<(), ZmqxError> {
    let bad = |reason: String| {
        Err(ZmqxError::Endpoint {
            endpoint: endpoint.to_owned(),
            reason,
        })
    };
    let Some((transport, rest)) = endpoint.split_once("://") else {
        return bad(match endpoint.rsplit_once(':') {
            // `localhost:5556`: almost certainly TCP with the transport left out.
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                format!("no transport: did you mean tcp://{endpoint}?")
            }
            _ => "expected TRANSPORT://ADDRESS, e.g. tcp://127.0.0.1:5556".into(),
        });
    };
    match transport {
        "ipc" if rest.len() > IPC_PATH_MAX => bad(format!(
            "the ipc path is {} bytes; a Unix socket path holds at most {IPC_PATH_MAX}",
            rest.len()
        )),
        "ipc" | "inproc" | "tipc" | "vmci" => {
            if rest.is_empty() {
                bad(format!("{transport}:// needs an address"))
            } else {
                Ok(())
            }
        }
        "tcp" | "udp" | "pgm" | "epgm" => {
            let (source, address) = match rest.split_once(';') {
                Some((source, address)) => (Some(source), address),
                None => (None, rest),
            };
            if let Some(source) = source {
                if let Err(reason) = check_source(source) {
                    return bad(reason);
                }
            }
            match check_host_port(address, direction) {
                Ok(()) => Ok(()),
                Err(reason) => bad(reason),
            }
        }
        other => bad(format!(
            "unknown transport `{other}` (tcp, ipc, inproc, udp, pgm, epgm)"
        )),
    }
}

/// [`check`] with [`Direction::Connect`].
pub fn check_connect(endpoint: &str) -> Result<(), ZmqxError> {
    check(endpoint, Direction::Connect)
}

/// [`check`] with [`Direction::Bind`].
pub fn check_bind(endpoint: &str) -> Result<(), ZmqxError> {
    check(endpoint, Direction::Bind)
}

/// The source part of `SOURCE;HOST:PORT`: an interface or address, optionally with a port (0/`*` = any).
fn check_source(source: &str) -> Result<(), String> {
    let (host, port) = split_host_port(source);
    check_host(host, "source", true)?;
    match port {
        None | Some("*") | Some("0") => Ok(()),
        Some(port) => parse_port(port).map(|_| ()),
    }
}

fn check_host_port(address: &str, direction: Direction) -> Result<(), String> {
    let (host, port) = split_host_port(address);
    let Some(port) = port else {
        return Err(format!("`{address}` has no port (HOST:PORT)"));
    };
    check_host(host, "host", direction == Direction::Bind)?;
    match port {
        "*" | "0" if direction == Direction::Bind => Ok(()),
        "*" | "0" => Err(format!(
            "port `{port}` means an ephemeral port, which only a bind can use; give a port in 1..=65535"
        )),
        port => parse_port(port).map(|_| ()),
    }
}

/// Splits at the last `:` outside `[…]`, so `[::1]:5556` keeps its IPv6 colons.
fn split_host_port(s: &str) -> (&str, Option<&str>) {
    if let Some(inner) = s.strip_prefix('[') {
        return match inner.split_once(']') {
            Some((_, after)) => match after.strip_prefix(':') {
                Some(port) => (&s[..s.len() - after.len()], Some(port)),
                None => (s, None),
            },
            None => (s, None),
        };
    }
    match s.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (s, None),
    }
}

fn check_host(host: &str, what: &str, wildcard_ok: bool) -> Result<(), String> {
    if host.is_empty() {
        return Err(format!("empty {what}"));
    }
    if host == "*" {
        return if wildcard_ok {
            Ok(())
        } else {
            Err(format!("{what} `*` can only be bound, not connected to"))
        };
    }
    if let Some(inner) = host.strip_prefix('[') {
        let ok = inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
        return if ok {
            Ok(())
        } else {
            Err(format!("{what} `{host}` is not a bracketed IPv6 address"))
        };
    }
    // A name (DNS, interface) or an IPv4 literal; anything else would reach the resolver as garbage.
    let valid = host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '%'));
    if valid {
        Ok(())
    } else {
        Err(format!("{what} `{host}` is not a host name or address"))
    }
}

fn parse_port(port: &str) -> Result<u16, String> {
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port `{port}` is not a number in 1..=65535"));
    }
    match port.parse::<u32>() {
        Ok(n @ 1..=65535) => Ok(n as u16),
        _ => Err(format!("port `{port}` is outside 1..=65535")),
    }
}

#[cfg(test)]
mod tests {
    use super::{check, check_bind, check_connect, Direction};
    use proptest::prelude::*;

    #[test]
    fn accepted() {
        for ep in [
            "tcp://127.0.0.1:5556",
            "tcp://localhost:1",
            "tcp://host.example-1:65535",
            "tcp://[::1]:5556",
            "tcp://eth1:0;10.0.0.1:5556",
            "tcp://eth1;10.0.0.1:5556",
            "tcp://10.0.0.2:*;10.0.0.1:5556",
            "epgm://eth0;239.192.1.1:5555",
            "ipc:///tmp/x.sock",
            "ipc://@abstract",
            "inproc://pipe",
        ] {
            check_connect(ep).unwrap_or_else(|e| panic!("{ep}: {e}"));
            check_bind(ep).unwrap_or_else(|e| panic!("{ep}: {e}"));
        }
        for ep in [
            "tcp://*:5556",
            "tcp://127.0.0.1:*",
            "tcp://127.0.0.1:0",
            "tcp://*:*",
            "tcp://[::]:0",
        ] {
            check_bind(ep).unwrap_or_else(|e| panic!("{ep}: {e}"));
        }
    }

    #[test]
    fn rejected() {
        for ep in [
            "tcp://127.0.0.1:70000",
            "tcp://127.0.0.1:65536",
            "tcp://127.0.0.1:-1",
            "tcp://127.0.0.1:",
            "tcp://127.0.0.1",
            "tcp://:5556",
            "tcp://127.0.0.1:55x",
            "tcp://eth1:0;10.0.0.1:99999",
            "tcp://eth1:99999;10.0.0.1:5556",
            "tcp://[::1:5556",
            "tcp://[zz]:5556",
            "tcp://a b:5556",
            "127.0.0.1:5556",
            "http://127.0.0.1:80",
            "ipc://",
            "inproc://",
            &format!("ipc:///tmp/{}", "a".repeat(200)),
        ] {
            assert!(check_bind(ep).is_err(), "{ep} accepted for bind");
            assert!(check_connect(ep).is_err(), "{ep} accepted for connect");
        }
        for ep in [
            "tcp://127.0.0.1:*",
            "tcp://127.0.0.1:0",
            "tcp://*:5556",
            "tcp://eth1:0;10.0.0.1:0",
        ] {
            assert!(check_connect(ep).is_err(), "{ep} accepted for connect");
        }
    }

    #[test]
    fn message_names_endpoint_and_reason() {
        let err = check_connect("tcp://127.0.0.1:70000")
            .unwrap_err()
            .to_string();
        assert!(err.contains("tcp://127.0.0.1:70000"), "{err}");
        assert!(err.contains("1..=65535"), "{err}");
        let err = check_connect("tcp://127.0.0.1:*").unwrap_err().to_string();
        assert!(err.contains("ephemeral"), "{err}");
    }

    proptest! {
        #[test]
        fn any_port_in_range_is_accepted(port in 1u32..=65535, a in 0u8..=255, b in 0u8..=255) {
            let ep = format!("tcp://10.{a}.{b}.1:{port}");
            prop_assert!(check(&ep, Direction::Connect).is_ok());
            prop_assert!(check(&ep, Direction::Bind).is_ok());
            let via = format!("tcp://eth1:0;10.{a}.{b}.1:{port}");
            prop_assert!(check(&via, Direction::Connect).is_ok());
        }

        #[test]
        fn any_port_out_of_range_is_rejected(port in 65536u64..=u64::MAX) {
            let ep = format!("tcp://127.0.0.1:{port}");
            prop_assert!(check(&ep, Direction::Connect).is_err());
            prop_assert!(check(&ep, Direction::Bind).is_err());
        }

        #[test]
        fn arbitrary_strings_never_panic(s in ".{0,40}") {
            let _ = check(&s, Direction::Connect);
            let _ = check(&s, Direction::Bind);
            let _ = check(&format!("tcp://{s}"), Direction::Bind);
        }

        #[test]
        fn accepted_tcp_ports_round_trip(s in "[0-9*]{0,7}") {
            // Whatever is accepted for a connect is a port libzmq reads back unchanged.
            let ep = format!("tcp://127.0.0.1:{s}");
            if check(&ep, Direction::Connect).is_ok() {
                let n: u32 = s.parse().unwrap();
                prop_assert!((1..=65535).contains(&n));
            }
        }
    }
}
