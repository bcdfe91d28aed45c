//! [`Store`]: the connection to Redis, whatever its topology: one server, a Redis Cluster, or a
//! primary behind Sentinel. Shared by every sweep; reconnects on its own after restarts and
//! failovers.

use presence_sweeper_config as config;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, ConnectionAddr, IntoConnectionInfo};

use presence_sweeper_config::RedisMode;
use presence_sweeper_rules::node::NodeId;

use crate::Error;
use crate::client::{client, client_from_info, cluster, manager};
use crate::conn::{Conn, Node};
use crate::name::{self, Opener, Role};
use crate::reply;
use crate::resp::Value;
use crate::sentinel::SentinelBackend;
use crate::slots::SlotMap;
use crate::subscriber::Subscriber;
use crate::tls;
use crate::wire::{Target, Wire};

/// A connection to Redis. Clones share it, so concurrent commands from several sweeps are
/// pipelined on the same sockets.
#[derive(Clone)]
pub struct Store {
    backend: Arc<Backend>,
    cfg: Arc<config::Redis>,
    /// The data path's connections, by server address; replaced when one fails.
    wires: Arc<Mutex<HashMap<String, Wire>>>,
    /// In a cluster, which primary served which slot when the topology was last read.
    pub(crate) slots: Arc<Mutex<Arc<SlotMap>>>,
    /// How the data path reaches TLS servers, where the configuration has any.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// Whose connections these are, for their names.
    opener: Opener,
    /// Whether the shared connection is named again at each ping (it may have reconnected,
    /// unnamed): until Redis refuses `CLIENT SETNAME`.
    renaming: Arc<AtomicBool>,
}

enum Backend {
    Standalone(ConnectionManager, Box<Client>),
    Sentinel(Box<SentinelBackend>),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Store {
    /// Connects once, as the daemon: one attempt, bounded by `redis.connect_timeout`.
    pub async fn connect(cfg: &config::Redis) -> Result<Self, Error> {
        Self::connect_as(cfg, Opener::Daemon).await
    }

    /// Connects once, as the daemon does, naming the connections after `opener` (a tool names
    /// them after itself, so that `CLIENT LIST` tells its connections from the daemon's).
    pub async fn connect_as(cfg: &config::Redis, opener: Opener) -> Result<Self, Error> {
        let control = opener.name(Role::Control);
        let attempt = async {
            let backend = match cfg.mode {
                RedisMode::Standalone => {
                    let client = client(cfg, &cfg.url)?;
                    let con = manager(client.clone(), cfg, &control).await?;
                    Backend::Standalone(con, Box::new(client))
                }
                RedisMode::Sentinel => {
                    Backend::Sentinel(Box::new(SentinelBackend::connect(cfg, &control).await?))
                }
                RedisMode::Cluster => {
                    let mut con = cluster(cfg).await?;
                    let _ = name::set(&mut con, &control).await;
                    Backend::Cluster(con)
                }
            };
            let tls = uses_tls(cfg)
                .then(|| tls::client_config(&cfg.tls))
                .transpose()?;
            let store = Self {
                backend: Arc::new(backend),
                cfg: Arc::new(cfg.clone()),
                wires: Arc::default(),
                slots: Arc::default(),
                tls,
                opener,
                renaming: Arc::new(AtomicBool::new(true)),
            };
            store.require_version().await?;
            store.ping_once().await?;
            Ok::<_, redis::RedisError>(store)
        };
        let limit = cfg
            .connect_timeout
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(1));
        tokio::time::timeout(limit, attempt)
            .await
            .unwrap_or_else(|_| Err(timed_out("connect timed out")))
            .map_err(|cause| connect_error(cfg, cause))
    }

    /// A handle for commands that are not tied to a pass's node (PING, leases, sharded
    /// publishing): routed by key in a cluster, to the current primary behind Sentinel.
    pub fn connection(&self) -> Conn {
        match &*self.backend {
            Backend::Standalone(c, _) => Conn::Direct(c.clone()),
            Backend::Sentinel(s) => Conn::Direct(s.current()),
            Backend::Cluster(c) => Conn::Cluster(c.clone()),
        }
    }

    /// Whether Redis is a cluster: keys one call touches must share a hash slot.
    pub fn is_cluster(&self) -> bool {
        matches!(&*self.backend, Backend::Cluster(_))
    }

    /// The primaries a pass scans, each with its own SCAN cursor: the one server, or every
    /// primary of the cluster as its own topology reports them now (so a pass after a failover
    /// or a resharding scans the new layout).
    ///
    /// Each node comes with its data-path `Wire` (over TCP, TLS or a unix socket): the one of
    /// the last pass while it lives, a new one otherwise.
    pub async fn nodes(&self) -> Result<Vec<Node>, Error> {
        let nodes: Vec<(Node, Client)> = match &*self.backend {
            Backend::Standalone(_, client) => {
                let server = client.get_connection_info().addr().to_string();
                let db = client.get_connection_info().redis_settings().db();
                let node = Node::direct(NodeId::new(server.clone()), server, db);
                vec![(node, (**client).clone())]
            }
            Backend::Sentinel(s) => {
                let id = NodeId::new(format!(
                    "sentinel:{}",
                    self.cfg.master_name.as_deref().unwrap_or_default()
                ));
                let client = s.current_client();
                let server = client.get_connection_info().addr().to_string();
                let db = client.get_connection_info().redis_settings().db();
                vec![(Node::direct(id, server, db), client)]
            }
            Backend::Cluster(c) => {
                let mut con = c.clone();
                let slots = con
                    .route_command(
                        redis::cmd("CLUSTER").arg("SLOTS").to_owned(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                    )
                    .await?;
                let map = SlotMap::from_reply(&slots.into());
                let mut nodes = Vec::new();
                for (host, port) in map.primaries() {
                    let client = self.node_client(&host, port)?;
                    nodes.push((Node::cluster_primary(host, port), client));
                }
                *self.slots.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(map);
                nodes
            }
        };
        let targets: Vec<Result<Target, String>> = nodes
            .iter()
            .map(|(_, client)| Target::from_info(client.get_connection_info(), self.tls.as_ref()))
            .collect();
        let wires = targets.iter().map(|target| async move {
            match target {
                Ok(target) => self.wire(target).await,
                Err(why) => Err(Arc::from(why.as_str())),
            }
        });
        let wires = futures_util::future::join_all(wires).await;
        let live: Vec<String> = targets.iter().flatten().map(Target::to_string).collect();
        // Servers no longer in the topology (a failed-over primary) lose their wire.
        self.wires
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|address, _| live.contains(address));
        Ok(nodes
            .into_iter()
            .zip(wires)
            .map(|((node, _), wire)| node.with_wire(wire))
            .collect())
    }

    /// The data-path connection to `target`, or why it cannot connect: the node's commands then
    /// fail, saying so, and the loop looks at the topology again.
    pub(crate) async fn wire(&self, target: &Target) -> Result<Wire, Arc<str>> {
        let address = target.to_string();
        let cached = self
            .wires
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&address)
            .filter(|w| !w.is_closed())
            .cloned();
        if let Some(wire) = cached {
            return Ok(wire);
        }
        let name = self.opener.name(Role::Data);
        let cfg = &self.cfg;
        let (connect, command) = (cfg.connect_timeout, cfg.command_timeout);
        match Wire::connect(target, &name, connect, command, cfg.eviction_timeout).await {
            Ok(wire) => {
                self.wires
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(address, wire.clone());
                Ok(wire)
            }
            Err(e) => {
                tracing::debug!(node = %address, error = %e, "cannot open a data-path connection");
                Err(Arc::from(e.to_string()))
            }
        }
    }

    /// One round trip that proves Redis can take the sweeper's writes. Behind Sentinel it also
    /// checks that the server is still the primary, and follows a failover when it is not.
    pub async fn ping(&self) -> Result<(), Error> {
        self.rename().await;
        match &*self.backend {
            Backend::Sentinel(s) => s.confirm().await,
            _ => self.ping_once().await.map_err(Error::from),
        }
    }

    /// Behind Sentinel, at most every 10 s: follows the primary the sentinels name when it is
    /// not the current one, although the current one still answers as primary (a partition).
    /// Elsewhere nothing.
    pub async fn recheck_primary(&self) {
        if let Backend::Sentinel(s) = &*self.backend {
            s.recheck().await;
        }
    }

    /// A connection of its own to `node`, that no other request can share: for a `MULTI` that
    /// must contain exactly what its caller sends.
    pub async fn dedicated(&self, node: &Node) -> Result<MultiplexedConnection, Error> {
        let client = self.client_for(node)?;
        Ok(self.open(client).await?)
    }

    /// A pub/sub connection of its own to `node` (a subscribed connection carries nothing
    /// else), within `redis.connect_timeout`: read only as fast as its reader takes messages
    /// (keyspace notifications, or `simulate`'s events).
    pub async fn subscriber(&self, node: &Node) -> Result<Subscriber, Error> {
        let client = self.client_for(node)?;
        let target =
            Target::from_info(client.get_connection_info(), self.tls.as_ref()).map_err(|why| {
                Error::Redis(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "a subscriber cannot reach",
                    why,
                )))
            })?;
        let name = self.opener.name(Role::Notify);
        Ok(Subscriber::connect(&target, &name, self.cfg.connect_timeout).await?)
    }

    /// Names the shared connection again (a connection manager that reconnected, a cluster
    /// node that joined, comes back unnamed), unless Redis refused it once.
    async fn rename(&self) {
        if !self.renaming.load(Ordering::Relaxed) {
            return;
        }
        let name = self.opener.name(Role::Control);
        if let Err(e) = name::set(&mut self.connection(), &name).await
            && e.code() == Some("NOPERM")
        {
            self.renaming.store(false, Ordering::Relaxed);
        }
    }

    /// `node` with a data-path connection that works, if its own has failed or retired (an
    /// eviction's reply came late on it, or a request of another check timed out on it): the
    /// store's current connection to the same server, or a new one. For what follows up on
    /// work already done (the events of members removed), never for new work, which waits for
    /// the loop's verdict. `node` as it is when its connection works, when its server is no
    /// longer a primary as far as the store knows (behind Sentinel, a failover the store
    /// followed; in a cluster, one its last look at the topology did not list), or when no
    /// connection can be opened: its commands then fail as never sent.
    pub async fn rewire(&self, node: &Node) -> Node {
        if !node.is_broken() || !self.still_primary(node) {
            return node.clone();
        }
        // `still_primary` made sure the client is for the node's own server.
        let target = self
            .client_for(node)
            .ok()
            .and_then(|c| Target::from_info(c.get_connection_info(), self.tls.as_ref()).ok());
        match target {
            Some(target) => match self.wire(&target).await {
                Ok(wire) => node.clone().with_wire(Ok(wire)),
                Err(_) => node.clone(),
            },
            None => node.clone(),
        }
    }

    /// Whether `node`'s server is a primary as the store last saw the topology.
    fn still_primary(&self, node: &Node) -> bool {
        match (&*self.backend, node.host_port()) {
            (Backend::Cluster(_), Some((host, port))) => self
                .slots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .primaries()
                .iter()
                .any(|(h, p)| h == host && *p == port),
            _ => !self.moved(node),
        }
    }

    /// The primary `id` as the topology is now, with a data-path connection that works if one
    /// can be opened; `None` if it is no longer a primary.
    pub async fn node(&self, id: &NodeId) -> Result<Option<Node>, Error> {
        Ok(self.nodes().await?.into_iter().find(|n| n.id() == id))
    }

    /// Whether `node`'s server is no longer the one the store knows as its primary: behind
    /// Sentinel, the store follows a failover (its probe asks every few seconds), and a node
    /// taken before then is out of date even if nothing it sent has failed yet.
    pub fn moved(&self, node: &Node) -> bool {
        match &*self.backend {
            Backend::Sentinel(s) => !s.is_current(node.server()),
            _ => false,
        }
    }

    /// A client for `node`'s server, with the configured credentials.
    fn client_for(&self, node: &Node) -> Result<Client, Error> {
        Ok(match (&*self.backend, node.host_port()) {
            (Backend::Standalone(_, client), _) => (**client).clone(),
            (Backend::Sentinel(s), _) => s.current_client(),
            (Backend::Cluster(_), Some((host, port))) => self.node_client(host, port)?,
            (Backend::Cluster(_), None) => {
                return Err(Error::Redis(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "a cluster node without an address",
                ))));
            }
        })
    }

    /// A connection of its own to the primary owning `key`'s slot (the one server outside a
    /// cluster).
    pub async fn dedicated_for_key(&self, key: &[u8]) -> Result<MultiplexedConnection, Error> {
        let Backend::Cluster(c) = &*self.backend else {
            let node = self.nodes().await?.remove(0);
            return self.dedicated(&node).await;
        };
        let slot = presence_sweeper_rules::slot::slot(key);
        let slots = c
            .clone()
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").to_owned(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await?;
        let map = SlotMap::from_reply(&slots.into());
        let (host, port) = map.owner(slot).cloned().ok_or_else(|| {
            Error::Redis(redis::RedisError::from((
                redis::ErrorKind::Client,
                "no primary serves the slot",
                slot.to_string(),
            )))
        })?;
        let client = self.node_client(&host, port)?;
        Ok(self.open(client).await?)
    }

    /// A client for one cluster node, reached as the seeds are: over TLS if they are, and with
    /// the seeds' credentials when the configuration gives none of its own.
    pub(crate) fn node_client(&self, host: &str, port: u16) -> Result<Client, redis::RedisError> {
        let seed = self
            .cfg
            .nodes
            .first()
            .map(|url| url.as_str().into_connection_info())
            .transpose()?;
        let tls = seed
            .as_ref()
            .is_some_and(|s| matches!(s.addr(), ConnectionAddr::TcpTls { .. }));
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let scheme = if tls { "rediss" } else { "redis" };
        let mut info = format!("{scheme}://{host}:{port}").into_connection_info()?;
        if let Some(seed) = seed {
            let from_seed = seed.redis_settings();
            let mut settings = info.redis_settings().clone();
            if let Some(username) = from_seed.username() {
                settings = settings.set_username(username);
            }
            if let Some(password) = from_seed.password() {
                settings = settings.set_password(password);
            }
            info = info.set_redis_settings(settings);
        }
        client_from_info(&self.cfg, info)
    }

    async fn open(&self, client: Client) -> Result<MultiplexedConnection, redis::RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.cfg.connect_timeout))
            .set_response_timeout(Some(self.cfg.command_timeout));
        let mut con = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let _ = name::set(&mut con, &self.opener.name(Role::Setup)).await;
        Ok(con)
    }

    /// Refuses servers older than Redis 6.2, which lack `ZRANGE ... BYSCORE` (Valkey is judged by
    /// its own version, not the `redis_version` it reports). Best effort: a user the ACL refuses
    /// `INFO` is let through (a transaction whose reads fail after its removal succeeded still
    /// stops the pass loudly).
    async fn require_version(&self) -> Result<(), redis::RedisError> {
        let mut con = self.connection();
        let info: Value = match redis::cmd("INFO").arg("server").query_async(&mut con).await {
            Ok(info) => info,
            Err(e) if e.code() == Some("NOPERM") => return Ok(()),
            Err(e) => return Err(e),
        };
        // In a cluster INFO goes to every primary and answers a map of their replies, which
        // comes as an array of each primary's address and its text.
        let texts: Vec<String> = match info {
            Value::Array(nodes) => nodes
                .into_iter()
                .skip(1)
                .step_by(2)
                .filter_map(reply::text)
                .collect(),
            v => reply::text(v).into_iter().collect(),
        };
        for text in texts {
            let server = crate::version::ServerVersion::from_info(&text);
            if !server.is_supported() {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "presence-sweeper needs Redis 6.2 or later (or Valkey); this server is",
                    server.to_string(),
                )));
            }
        }
        Ok(())
    }

    async fn ping_once(&self) -> Result<(), redis::RedisError> {
        let mut con = self.connection();
        redis::cmd("PING").query_async::<()>(&mut con).await
    }

    /// Reacts to a failed pass: behind Sentinel, a READONLY reply or a lost connection means the
    /// primary may have moved, so look it up again. Elsewhere the connections heal themselves.
    pub async fn recover(&self, error: &Error) {
        if let Backend::Sentinel(s) = &*self.backend {
            s.recover(error).await;
        }
    }
}

/// Why connecting failed, in one line: a server that answered gibberish is named as such.
fn connect_error(cfg: &config::Redis, cause: redis::RedisError) -> Error {
    if !answered_but_not_as_redis(&cause) {
        return Error::Connect {
            url: cfg.describe(),
            cause,
        };
    }
    let address = match cfg.mode {
        RedisMode::Standalone => cfg
            .url
            .as_str()
            .into_connection_info()
            .map(|info| info.addr().to_string())
            .unwrap_or_else(|_| cfg.describe()),
        _ => cfg.describe(),
    };
    Error::NotRedis { address }
}

/// Whether the server's bytes were not RESP (redis-rs's parser, or the data path's reader,
/// gave up on them), or were RESP of a shape no Redis sends to the greeting.
fn answered_but_not_as_redis(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
    ) || e.kind() == redis::ErrorKind::Io
        && std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData)
}

fn timed_out(what: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}

/// Whether any server the configuration names is reached over TLS.
fn uses_tls(cfg: &config::Redis) -> bool {
    std::iter::once(&cfg.url)
        .chain(&cfg.nodes)
        .chain(&cfg.sentinels)
        .any(|url| url.starts_with("rediss://"))
}
