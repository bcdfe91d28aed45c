//! The connection to Redis: built from the configuration, shared by every sweep, reconnecting on
//! its own after Redis restarts.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, IntoConnectionInfo};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::{RedisConfig, redact_url};

/// Cap of the wait between two connection attempts at start.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A multiplexed, self-reconnecting connection. Clones share the connection, so concurrent
/// commands from several sweeps are pipelined on one socket.
#[derive(Clone)]
pub struct Store {
    con: ConnectionManager,
}

impl Store {
    /// Connects once: one attempt, bounded by `redis.connect_timeout`.
    pub async fn connect(cfg: &RedisConfig) -> Result<Self, Error> {
        Self::try_connect(cfg)
            .await
            .map_err(|source| Error::Connect {
                url: redact_url(&cfg.url),
                source,
            })
    }

    async fn try_connect(cfg: &RedisConfig) -> Result<Self, redis::RedisError> {
        let client = client(cfg)?;
        let manager_cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.connect_timeout))
            .set_response_timeout(Some(cfg.command_timeout))
            // Retries here only apply to reconnecting an established manager; a failed command
            // fails its pass, and the next pass tries again.
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(1));
        let con = tokio::time::timeout(
            cfg.connect_timeout + Duration::from_secs(1),
            ConnectionManager::new_with_config(client, manager_cfg),
        )
        .await
        .map_err(|_| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timed out",
            ))
        })??;
        let mut probe = con.clone();
        redis::cmd("PING").query_async::<()>(&mut probe).await?;
        Ok(Self { con })
    }

    /// Connects, retrying with a capped exponential backoff until Redis answers or `cancel`
    /// fires (then `None`). Every failed attempt is logged and reported to `on_failure` with the
    /// wait before the next one.
    pub async fn connect_with_retry(
        cfg: &RedisConfig,
        cancel: &CancellationToken,
        on_failure: impl Fn(&Error, Duration),
    ) -> Option<Self> {
        let mut delay = Duration::from_millis(200);
        let mut attempt = 1u32;
        loop {
            match Self::connect(cfg).await {
                Ok(store) => {
                    if attempt > 1 {
                        tracing::info!(attempt, "connected to Redis");
                    }
                    return Some(store);
                }
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        attempt,
                        retry_in_ms = delay.as_millis() as u64,
                        "Redis is not reachable yet; retrying"
                    );
                    on_failure(&e, delay);
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(MAX_BACKOFF);
            attempt += 1;
        }
    }

    /// A handle on the shared connection.
    pub fn connection(&self) -> ConnectionManager {
        self.con.clone()
    }

    /// One PING round trip.
    pub async fn ping(&self) -> Result<(), Error> {
        let mut con = self.con.clone();
        redis::cmd("PING").query_async::<()>(&mut con).await?;
        Ok(())
    }
}

/// A dedicated pub/sub connection (a subscribed connection cannot carry other commands), with
/// the configured password, bounded by `redis.connect_timeout`.
pub async fn subscriber(cfg: &RedisConfig) -> Result<redis::aio::PubSub, Error> {
    let attempt = async { client(cfg)?.get_async_pubsub().await };
    tokio::time::timeout(cfg.connect_timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timed out",
            )))
        })
        .map_err(|source| Error::Connect {
            url: redact_url(&cfg.url),
            source,
        })
}

fn client(cfg: &RedisConfig) -> Result<Client, redis::RedisError> {
    let mut info = cfg.url.as_str().into_connection_info()?;
    let mut settings = info.redis_settings().clone();
    if let Some(password) = &cfg.password {
        settings = settings.set_password(password.expose());
    }
    info = info.set_redis_settings(settings);
    Client::open(info)
}
