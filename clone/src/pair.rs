//! Where a Binary Star pair of Clone servers meet when not told (`tickbox clone-server --primary|--backup`): the
//! primary's state socket on port 5003, the backup's on 5004, each voting to the other on the peer's host.

use tickbox_bstar::{BstarEndpoints, Role};

/// The host of a `tcp://HOST:PORT` base endpoint.
pub fn host_of(base: &str) -> Option<&str> {
    base.strip_prefix("tcp://")?
        .rsplit_once(':')
        .map(|(h, _)| h)
}

/// The state endpoints of `role` whose peer serves at `peer_base`: `state_bind` and `state_peer` when given,
/// else the Guide's ports (primary 5003, backup 5004) on all interfaces and on the peer's host. `None` when
/// `peer_base` is not `tcp://HOST:PORT`.
pub fn state_endpoints(
    role: Role,
    peer_base: &str,
    state_bind: Option<String>,
    state_peer: Option<String>,
) -> Option<BstarEndpoints> {
    let peer_host = host_of(peer_base)?;
    let (my_port, peer_port) = match role {
        Role::Primary => (5003, 5004),
        Role::Backup => (5004, 5003),
    };
    Some(BstarEndpoints {
        // Loopback unless told: a pair on two hosts names its state endpoint (`--state-bind tcp://*:5003`).
        state_bind: state_bind.unwrap_or_else(|| format!("tcp://127.0.0.1:{my_port}")),
        state_peer: state_peer.unwrap_or_else(|| format!("tcp://{peer_host}:{peer_port}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_side_binds_its_port_and_votes_to_the_peers() {
        let p = state_endpoints(Role::Primary, "tcp://10.0.0.2:5556", None, None).unwrap();
        assert_eq!(p.state_bind, "tcp://127.0.0.1:5003");
        assert_eq!(p.state_peer, "tcp://10.0.0.2:5004");
        let b = state_endpoints(Role::Backup, "tcp://host-a:5556", None, None).unwrap();
        assert_eq!(b.state_bind, "tcp://127.0.0.1:5004");
        assert_eq!(b.state_peer, "tcp://host-a:5003");
    }

    #[test]
    fn given_endpoints_win_and_a_bad_base_is_refused() {
        let p = state_endpoints(
            Role::Primary,
            "tcp://h:1",
            Some("tcp://*:7000".into()),
            Some("tcp://h:7001".into()),
        )
        .unwrap();
        assert_eq!(
            (p.state_bind.as_str(), p.state_peer.as_str()),
            ("tcp://*:7000", "tcp://h:7001")
        );
        assert!(state_endpoints(Role::Primary, "ipc:///tmp/x", None, None).is_none());
        assert_eq!(host_of("tcp://a:b:1"), Some("a:b"));
    }
}
