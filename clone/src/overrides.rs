//! What `tickbox clone-server`'s flags say, merged over the `[clone]` section into the server's options: the
//! flags win, and the connection cap becomes part of the server's `[security]` handle.

use std::path::PathBuf;

use tickbox_bstar::Role;
use tickbox_units::{override_with, ByteSize, HumanDuration};

use crate::pair::state_endpoints;
use crate::{CloneConfig, CloneError, HaOptions, ServerBind, ServerEndpoints, ServerOptions};

/// `tickbox clone-server`'s flags; `None` keeps the config file's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerOverrides {
    /// Interface the three sockets bind on.
    pub interface: String,
    /// Base port P (P, P+1, P+2); 0 picks a free triple.
    pub port: u16,
    /// `--primary` / `--backup`: one half of a Binary Star pair; `None` for a stand-alone server.
    pub role: Option<Role>,
    /// The peer server's base endpoint `tcp://HOST:P` (required with a role).
    pub peer: Option<String>,
    /// Where our Binary Star state PUB binds (else the Guide's port on loopback).
    pub state_bind: Option<String>,
    /// The peer's state PUB (else the Guide's port on the peer's host).
    pub state_peer: Option<String>,
    /// Where the map persists.
    pub data_dir: Option<PathBuf>,
    /// [`ServerConfig::hugz`](crate::ServerConfig::hugz).
    pub hugz: Option<HumanDuration>,
    /// The Binary Star heartbeat (`[clone.bstar] heartbeat`).
    pub heartbeat: Option<HumanDuration>,
    /// [`ServerConfig::max_connections`](crate::ServerConfig); also caps `[security]`'s `clone` role.
    pub max_connections: Option<u64>,
    /// [`ServerConfig::max_keys`](crate::ServerConfig).
    pub max_keys: Option<usize>,
    /// [`ServerConfig::max_value_len`](crate::ServerConfig).
    pub max_value_len: Option<usize>,
    /// [`ServerConfig::max_bytes`](crate::ServerConfig).
    pub max_bytes: Option<u64>,
}

impl ServerOverrides {
    /// The server's options: these flags over `config`. The server's sockets are capped (`max_connections`), so
    /// its `[security]` handle counts and refuses connections past the cap. Fails on a peer that is not
    /// `tcp://HOST:PORT`.
    pub fn options(self, config: &CloneConfig) -> Result<ServerOptions, CloneError> {
        let mut server = config.server.clone();
        override_with(&mut server.hugz, self.hugz);
        override_with(&mut server.max_keys, self.max_keys);
        override_with(&mut server.max_connections, self.max_connections);
        server.security = (server.security).cap_connections(&["clone"], server.max_connections);
        override_with(&mut server.max_value_len, self.max_value_len);
        override_with(&mut server.max_bytes, self.max_bytes.map(ByteSize));
        let mut bstar = config.bstar.clone();
        override_with(&mut bstar.heartbeat, self.heartbeat);
        let ha = match self.role {
            None => None,
            Some(role) => {
                let peer_base = self.peer.unwrap_or_default();
                let peer = ServerEndpoints::from_base(&peer_base)?;
                let state = state_endpoints(role, &peer_base, self.state_bind, self.state_peer)
                    .ok_or(CloneError::BadEndpoint(peer_base))?;
                Some(HaOptions {
                    role,
                    state,
                    peer,
                    bstar,
                })
            }
        };
        Ok(ServerOptions {
            bind: ServerBind::Base {
                interface: self.interface,
                port: self.port,
            },
            ha,
            config: server,
            data_dir: self.data_dir,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn flags_win_over_the_config_and_the_rest_is_kept() {
        let mut config = CloneConfig::default();
        config.server.max_keys = 10;
        config.server.max_value_len = 20;
        let flags = ServerOverrides {
            interface: "127.0.0.1".into(),
            port: 0,
            max_keys: Some(3),
            hugz: Some(HumanDuration(Duration::from_millis(250))),
            max_bytes: Some(4096),
            ..Default::default()
        };
        let o = flags.options(&config).unwrap();
        assert_eq!(o.config.max_keys, 3);
        assert_eq!(o.config.max_value_len, 20, "no flag: the config's value");
        assert_eq!(o.config.hugz.0, Duration::from_millis(250));
        assert_eq!(o.config.max_bytes, ByteSize(4096));
        assert!(o.ha.is_none());
        assert!(matches!(o.bind, ServerBind::Base { port: 0, .. }));
    }

    #[test]
    fn a_role_makes_a_pair_with_the_peers_endpoints_and_the_flags_heartbeat() {
        let flags = ServerOverrides {
            role: Some(Role::Backup),
            peer: Some("tcp://10.0.0.2:5556".into()),
            heartbeat: Some(HumanDuration(Duration::from_millis(300))),
            ..Default::default()
        };
        let ha = flags.options(&CloneConfig::default()).unwrap().ha.unwrap();
        assert_eq!(ha.role, Role::Backup);
        assert_eq!(ha.peer.publisher, "tcp://10.0.0.2:5557");
        assert_eq!(ha.state.state_peer, "tcp://10.0.0.2:5003");
        assert_eq!(ha.bstar.heartbeat.0, Duration::from_millis(300));
        let bad = ServerOverrides {
            role: Some(Role::Primary),
            peer: Some("10.0.0.2:5556".into()),
            ..Default::default()
        };
        assert!(matches!(
            bad.options(&CloneConfig::default()),
            Err(CloneError::BadEndpoint(p)) if p == "10.0.0.2:5556"
        ));
    }

    #[test]
    fn a_connection_cap_reaches_the_security_handle() {
        let flags = ServerOverrides {
            max_connections: Some(2),
            ..Default::default()
        };
        let o = flags.options(&CloneConfig::default()).unwrap();
        assert_eq!(o.config.max_connections, 2);
        let caps = o
            .config
            .security
            .connections()
            .expect("a capped handle counts");
        assert_eq!(caps["clone"].max_connections, 2);
    }
}
