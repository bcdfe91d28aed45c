//! redis-rs's clients and connections as the configuration asks for them: one server's client
//! (the configured credentials and certificates, replies always RESP2), the self-reconnecting
//! shared connection, and a cluster's connection. The store and the Sentinel backend both
//! build theirs here.

use presence_sweeper_config as config;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::name;
use crate::tls::{self, install_crypto_provider};

/// A client for one server at `url`, with the configured credentials and certificates.
pub(crate) fn client(cfg: &config::Redis, url: &str) -> Result<Client, redis::RedisError> {
    client_from_info(cfg, url.into_connection_info()?)
}

/// [`client`] for an address already parsed; the configured credentials win over its own.
pub(crate) fn client_from_info(
    cfg: &config::Redis,
    info: ConnectionInfo,
) -> Result<Client, redis::RedisError> {
    // Replies are parsed as RESP2 (`WITHSCORES` as a flat list): a `?protocol=resp3` in the URL
    // is overridden rather than allowed to change their shape.
    let mut settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP2);
    if let Some(username) = &cfg.username {
        settings = settings.set_username(username);
    }
    if let Some(password) = &cfg.password {
        settings = settings.set_password(password.expose());
    }
    let info = info.set_redis_settings(settings);
    if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
        install_crypto_provider();
        if cfg.tls.is_custom() {
            return Client::build_with_tls(info, tls::certificates(&cfg.tls));
        }
    }
    Client::open(info)
}

fn manager_config(cfg: &config::Redis) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(cfg.connect_timeout))
        .set_response_timeout(Some(cfg.command_timeout))
        // Retries here only apply to reconnecting an established manager; a failed command
        // fails its pass, and the next pass tries again.
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(100))
        .set_max_delay(Duration::from_secs(1))
}

/// The shared connection, named `name` (until it reconnects: `Store::ping` names it again).
pub(crate) async fn manager(
    client: Client,
    cfg: &config::Redis,
    name: &str,
) -> Result<ConnectionManager, redis::RedisError> {
    let mut con = ConnectionManager::new_with_config(client, manager_config(cfg)).await?;
    let _ = name::set(&mut con, name).await;
    Ok(con)
}

pub(crate) async fn cluster(
    cfg: &config::Redis,
) -> Result<redis::cluster_async::ClusterConnection, redis::RedisError> {
    let mut tls = false;
    let mut seeds = Vec::with_capacity(cfg.nodes.len());
    for url in &cfg.nodes {
        let info = url.as_str().into_connection_info()?;
        tls |= matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        seeds.push(info);
    }
    // The overall timeout bounds a request's retries too: a request to a primary that just died
    // fails its pass instead of waiting for the failover.
    // No retries: the cluster client would resend a request whose connection dropped, and a
    // pipeline that already ran would then publish its events twice, or a transaction that
    // already removed members would run again and report nothing. A MOVED answer means nothing
    // ran: the pass reads the key again where it lives, or leaves it to the next pass.
    let mut builder = ClusterClientBuilder::new(seeds)
        .connection_timeout(cfg.connect_timeout)
        .response_timeout(cfg.command_timeout)
        .overall_response_timeout(Some(cfg.command_timeout))
        .use_protocol(redis::ProtocolVersion::RESP2)
        .retries(0);
    if let Some(username) = &cfg.username {
        builder = builder.username(username);
    }
    if let Some(password) = &cfg.password {
        builder = builder.password(password.expose());
    }
    if tls {
        install_crypto_provider();
        builder = builder.tls(redis::TlsMode::Secure);
        if cfg.tls.is_custom() {
            builder = builder.certs(tls::certificates(&cfg.tls));
        }
    }
    builder.build()?.get_async_connection().await
}
