//! The guard of the tools that write synthetic data (`seed`, `simulate`): they only ever run
//! against a Redis on this machine, so a mistyped URL cannot fill a shared or production Redis.
//! `simulate` also runs against a cluster whose every node is on this machine (the capacity
//! benchmarks need one); `seed` fills one server.

use presence_sweeper_config as config;
use std::net::IpAddr;

use redis::{ConnectionAddr, IntoConnectionInfo};

use presence_sweeper_config::{RedisMode, redact_url};

/// A tool that writes synthetic data was pointed somewhere it must not write.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotLoopback {
    /// A Redis that is not on this machine.
    #[error(
        "refusing to write synthetic data to {url}: only a Redis on this machine is allowed \
         (127.0.0.1, ::1, localhost or a unix socket)"
    )]
    Remote {
        /// The URL, password redacted.
        url: String,
    },
    /// A topology this tool does not write to.
    #[error(
        "refusing to write synthetic data in redis.mode = \"{mode}\": this tool writes to {allowed}"
    )]
    NotStandalone {
        /// The configured mode.
        mode: &'static str,
        /// What the tool writes to.
        allowed: &'static str,
    },
    /// A cluster node that announced an address off this machine.
    #[error(
        "refusing to write synthetic data to the cluster: its node {node} is not on this machine"
    )]
    RemoteNode {
        /// The node's address as the cluster announced it.
        node: String,
    },
}

/// Which topologies a tool writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topologies {
    /// One standalone server (`seed`).
    Standalone,
    /// One standalone server, or a cluster whose every node is on this machine (`simulate`).
    StandaloneOrCluster,
}

/// Accepts `cfg` only if it is a topology of `allowed` whose every URL names a loopback
/// address, `localhost` or a unix socket. A cluster's nodes as it announces them are checked
/// once connected ([`require_node`]).
pub(crate) fn require(cfg: &config::Redis, allowed: Topologies) -> Result<(), NotLoopback> {
    let what = match allowed {
        Topologies::Standalone => "one standalone Redis on this machine",
        Topologies::StandaloneOrCluster => "one standalone Redis or a cluster, all on this machine",
    };
    let refuse = |mode| NotLoopback::NotStandalone {
        mode,
        allowed: what,
    };
    let urls: Vec<&String> = match cfg.mode {
        RedisMode::Standalone => vec![&cfg.url],
        RedisMode::Cluster if allowed == Topologies::StandaloneOrCluster => {
            if cfg.nodes.is_empty() {
                vec![&cfg.url]
            } else {
                cfg.nodes.iter().collect()
            }
        }
        RedisMode::Cluster => return Err(refuse("cluster")),
        RedisMode::Sentinel => return Err(refuse("sentinel")),
    };
    match urls.into_iter().find(|url| !is_loopback(url)) {
        None => Ok(()),
        Some(url) => Err(NotLoopback::Remote {
            url: redact_url(url),
        }),
    }
}

/// Accepts a cluster primary's announced address only if it is on this machine. Only a loopback
/// address or `localhost` is: a node announces no unix socket.
pub(crate) fn require_node(host: &str, port: u16) -> Result<(), NotLoopback> {
    if loopback_host(host) {
        Ok(())
    } else {
        Err(NotLoopback::RemoteNode {
            node: format!("{host}:{port}"),
        })
    }
}

/// Whether `url` reaches Redis on this machine. Names are not resolved: only the literal
/// `localhost` counts, since what another name resolves to can change under our feet.
pub(crate) fn is_loopback(url: &str) -> bool {
    let Ok(info) = url.into_connection_info() else {
        return false;
    };
    match info.addr() {
        ConnectionAddr::Unix(_) => true,
        ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => loopback_host(host),
        _ => false,
    }
}

fn loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") || host.eq_ignore_ascii_case("localhost.") {
        return true;
    }
    host.parse::<IpAddr>()
        .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_machine() {
        for url in [
            "redis://127.0.0.1:6379/0",
            "redis://127.0.0.2:7000",
            "redis://localhost:6379/1",
            "redis://LOCALHOST",
            "redis://[::1]:6380/0",
            "redis://:secret@127.0.0.1:6379/0",
            "unix:///run/redis/redis.sock",
            "redis+unix:///tmp/redis.sock?db=2",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "redis://10.0.0.1:6379/0",
            "redis://redis.internal:6379",
            "redis://localhost.example.com",
            "redis://[2001:db8::1]:6379",
            "redis://192.168.1.5",
            "not a url",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }

    #[test]
    fn cluster_nodes_on_this_machine_only() {
        for host in ["127.0.0.1", "localhost", "::1", "[::1]"] {
            assert!(require_node(host, 7000).is_ok(), "{host}");
        }
        for host in ["10.0.0.1", "redis-0.internal", "2001:db8::1", ""] {
            let e = require_node(host, 7000).unwrap_err().to_string();
            assert!(
                e.contains(&format!("node {host}:7000 is not on this machine")),
                "{e}"
            );
        }
    }

    #[test]
    fn refusal_hides_the_password() {
        let sources = presence_sweeper_config::Sources {
            env: [(
                "PRESENCE_SWEEPER__REDIS__URL".to_string(),
                "redis://u:hunter2@10.1.2.3:6379/0".to_string(),
            )]
            .into(),
            ..Default::default()
        };
        let cfg = presence_sweeper_config::Config::load(&sources)
            .unwrap()
            .redis;
        let msg = require(&cfg, Topologies::Standalone)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("redis://u:***@10.1.2.3:6379/0"), "{msg}");
        assert!(!msg.contains("hunter2"));
    }
}
