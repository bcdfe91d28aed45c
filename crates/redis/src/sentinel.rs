//! Sentinel: the sweeper talks to whichever server the sentinels name as the primary, and looks
//! again when that server stops answering or turns out to be a replica (a READONLY reply, or a
//! `ROLE` that is not `master`): writes never go to a replica. The daemon also asks the
//! sentinels every [`RECHECK`] ([`SentinelBackend::recheck`]): a partition can leave the old
//! primary answering as primary to it while the sentinels, and the apps that follow them, have
//! moved on to another.

use presence_sweeper_config as config;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, IntoConnectionInfo};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::Error;
use crate::client::manager;
use crate::reply;
use crate::resp::Value;
use crate::tls::install_crypto_provider;

/// How often a primary that answers as primary is checked against the sentinels' view. Each
/// check asks the sentinels (`SENTINEL MASTERS`, up to three at once) and opens a short
/// connection to each server they name, to read its `ROLE`: a few connections every 10 s.
const RECHECK: Duration = Duration::from_secs(10);

pub(super) struct SentinelBackend {
    sentinel: Mutex<SentinelClient>,
    current: RwLock<(ConnectionManager, redis::Client)>,
    cfg: config::Redis,
    /// The name of the connection to the primary.
    name: String,
    /// When the sentinels were last asked.
    asked: Mutex<Instant>,
    /// Whether the last re-check reached the sentinels, so that losing them is said once.
    reached: AtomicBool,
}

impl SentinelBackend {
    pub(super) async fn connect(
        cfg: &config::Redis,
        name: &str,
    ) -> Result<Self, redis::RedisError> {
        let mut sentinel = sentinel_client(cfg)?;
        let client = sentinel.async_get_client().await?;
        tracing::info!(primary = %client.get_connection_info().addr(), "Sentinel named the primary");
        let con = manager(client.clone(), cfg, name).await?;
        Ok(Self {
            sentinel: Mutex::new(sentinel),
            current: RwLock::new((con, client)),
            cfg: cfg.clone(),
            name: name.to_owned(),
            asked: Mutex::new(Instant::now()),
            reached: AtomicBool::new(true),
        })
    }

    /// The connection to the primary as last resolved.
    pub(super) fn current(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// The client of the primary as last resolved, for connections of their own.
    pub(super) fn current_client(&self) -> redis::Client {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// Whether `server` (`host:port`) is the primary the store knows now; borrows the client
    /// rather than cloning it, since a primary's loop asks on every turn.
    pub(super) fn is_current(&self, server: &str) -> bool {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current.1.get_connection_info().addr().to_string() == server
    }

    /// Confirms that the current server answers as the primary; looks the primary up again if not.
    pub(super) async fn confirm(&self) -> Result<(), Error> {
        match role(&mut self.current()).await {
            Ok(role) if role == "master" => Ok(()),
            outcome => {
                match &outcome {
                    Ok(role) => {
                        tracing::warn!(role, "the server Sentinel named is no longer the primary")
                    }
                    Err(e) => tracing::warn!(error = %e, "the primary does not answer"),
                }
                self.refresh().await?;
                match role(&mut self.current()).await? {
                    role if role == "master" => Ok(()),
                    role => Err(Error::Redis(redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "Sentinel named a server that is not a primary",
                        role,
                    )))),
                }
            }
        }
    }

    /// After a failed pass: look the primary up again if the failure says it may have moved.
    pub(super) async fn recover(&self, error: &Error) {
        let moved = match error {
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                    // By its code: a refusal on the data path comes with no redis-rs kind.
                    || e.code() == Some("READONLY")
            }
            _ => false,
        };
        if moved && let Err(e) = self.refresh().await {
            tracing::warn!(error = %e, "could not look the primary up again; the next pass retries");
        }
    }

    async fn refresh(&self) -> Result<(), Error> {
        let mut sentinel = self.sentinel.lock().await;
        let client = sentinel.async_get_client().await?;
        self.follow(client).await
    }

    /// At most every [`RECHECK`]: follows the primary the sentinels name if it is another
    /// server than the current one. redis-rs takes the first sentinel, in `redis.sentinels`
    /// order, that names a server answering as primary. A lookup that fails changes nothing:
    /// the sentinels may be out of reach from here while the current primary still answers.
    /// The sentinels stay locked from the lookup to the switch, so that an older answer never
    /// replaces a newer one that [`Self::refresh`] followed meanwhile.
    pub(super) async fn recheck(&self) {
        {
            let mut asked = self.asked.lock().await;
            if asked.elapsed() < RECHECK {
                return;
            }
            *asked = Instant::now();
        }
        let mut sentinel = self.sentinel.lock().await;
        let named = match sentinel.async_get_client().await {
            Ok(client) => client,
            Err(e) => {
                if self.reached.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        error = %e,
                        "cannot ask the sentinels for the primary; staying with the current one"
                    );
                }
                return;
            }
        };
        if !self.reached.swap(true, Ordering::Relaxed) {
            tracing::info!("the sentinels answer again");
        }
        let addr = named.get_connection_info().addr().to_string();
        if self.is_current(&addr) {
            return;
        }
        let current = self
            .current_client()
            .get_connection_info()
            .addr()
            .to_string();
        tracing::warn!(
            current = %current,
            named = %addr,
            "the sentinels name another primary while this one still answers as primary (a \
             partition, or a failover it did not see); following the sentinels"
        );
        if let Err(e) = self.follow(named).await {
            tracing::warn!(error = %e, "could not connect to the primary the sentinels name");
        }
    }

    /// Makes `client`'s server the current primary; called with the sentinels locked.
    async fn follow(&self, client: redis::Client) -> Result<(), Error> {
        let address = client.get_connection_info().addr().to_string();
        let con = manager(client.clone(), &self.cfg, &self.name).await?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (con, client);
        *self.asked.lock().await = Instant::now();
        tracing::info!(primary = %address, "following the primary Sentinel names");
        Ok(())
    }
}

async fn role(con: &mut ConnectionManager) -> Result<String, redis::RedisError> {
    let reply: Value = redis::cmd("ROLE").query_async(con).await?;
    let role = match reply {
        Value::Array(fields) => fields.into_iter().next().and_then(reply::text),
        _ => None,
    };
    Ok(role.unwrap_or_default())
}

fn sentinel_client(cfg: &config::Redis) -> Result<SentinelClient, redis::RedisError> {
    let mut addrs = Vec::with_capacity(cfg.sentinels.len());
    let mut tls = false;
    for url in &cfg.sentinels {
        let info = url.as_str().into_connection_info()?;
        tls |= matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        addrs.push(info.addr().clone());
    }
    let master_name = cfg.master_name.as_deref().unwrap_or_default();
    let mut builder = SentinelClientBuilder::new(addrs, master_name, SentinelServerType::Master)?
        .set_client_to_redis_protocol(redis::ProtocolVersion::RESP2);
    let db = cfg
        .url
        .as_str()
        .into_connection_info()
        .map(|i| i.redis_settings().db())
        .unwrap_or(0);
    builder = builder.set_client_to_redis_db(db);
    if let Some(username) = &cfg.username {
        builder = builder.set_client_to_redis_username(username);
    }
    if let Some(password) = &cfg.password {
        builder = builder.set_client_to_redis_password(password.expose());
    }
    if let Some(password) = &cfg.sentinel_password {
        builder = builder.set_client_to_sentinel_password(password.expose());
    }
    if tls {
        install_crypto_provider();
        builder = builder
            .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure)
            .set_client_to_redis_tls_mode(redis::TlsMode::Secure);
        if cfg.tls.is_custom() {
            builder = builder
                .set_client_to_sentinel_certificates(crate::tls::certificates(&cfg.tls))
                .set_client_to_redis_certificates(crate::tls::certificates(&cfg.tls));
        }
    }
    builder.build()
}
