//! The guard of the tools that write synthetic data (`seed`, `simulate`): they only ever run
//! against a Redis on this machine, so a mistyped URL cannot fill a shared or production Redis.

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
    /// A cluster or Sentinel topology; the tools write to one server.
    #[error(
        "refusing to write synthetic data in redis.mode = \"{mode}\": the tools write to one \
         standalone Redis on this machine"
    )]
    NotStandalone {
        /// The configured mode.
        mode: &'static str,
    },
}

/// Accepts `cfg` only if it is one standalone server whose URL names a loopback address,
/// `localhost` or a unix socket.
pub(crate) fn require(cfg: &config::Redis) -> Result<(), NotLoopback> {
    match cfg.mode {
        RedisMode::Standalone => {}
        RedisMode::Cluster => return Err(NotLoopback::NotStandalone { mode: "cluster" }),
        RedisMode::Sentinel => return Err(NotLoopback::NotStandalone { mode: "sentinel" }),
    }
    if is_loopback(&cfg.url) {
        Ok(())
    } else {
        Err(NotLoopback::Remote {
            url: redact_url(&cfg.url),
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
        let msg = require(&cfg).unwrap_err().to_string();
        assert!(msg.contains("redis://u:***@10.1.2.3:6379/0"), "{msg}");
        assert!(!msg.contains("hunter2"));
    }
}
