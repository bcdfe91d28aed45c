//! Connections as the rest of the crate sees them: one type whatever the topology ([`Conn`]),
//! and a primary of the data path with its own connection ([`Node`]), which takes
//! [`Packed`] batches.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use std::sync::Arc;

use presence_sweeper_rules::node::NodeId;

use crate::packed::{Packed, SendPacked};
use crate::resp;
use crate::wire::{self, Wait, Wire};

/// Why a node has no connection before the store gave it one.
const NOT_YET: &str = "not connected yet";

/// A handle on Redis: a self-reconnecting connection to one server, or a cluster connection that
/// routes each command by its key's slot and follows MOVED/ASK redirections. Clones share the
/// underlying connections.
#[derive(Clone)]
pub enum Conn {
    /// One server (standalone, or the current Sentinel primary).
    Direct(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Direct(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Direct(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Direct(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// One primary of the data path. Everything about the keys a node's SCAN returned goes to that
/// same node over its own connection (a `Wire`): in a cluster that is where they live (a key
/// that moved meanwhile answers MOVED and is left to its new primary), and one node may serve
/// commands on many slots in one pipeline, which the cluster's own routing would refuse.
///
/// A node whose wire could not connect answers every command with an error saying so; the next
/// look at the topology tries to connect again.
#[derive(Clone)]
pub struct Node {
    id: NodeId,
    /// The server's address now (behind Sentinel it changes with a failover).
    server: String,
    address: Option<(String, u16)>,
    db: i64,
    /// Its connection, or why it has none.
    wire: Result<Wire, Arc<str>>,
}

impl Node {
    /// The only node of a standalone or Sentinel topology, its keys in database `db`.
    pub fn direct(id: NodeId, server: String, db: i64) -> Self {
        Self {
            id,
            server,
            address: None,
            db,
            wire: Err(NOT_YET.into()),
        }
    }

    /// A cluster primary.
    pub fn cluster_primary(host: String, port: u16) -> Self {
        Self {
            id: NodeId::new(format!("{host}:{port}")),
            server: format!("{host}:{port}"),
            address: Some((host, port)),
            db: 0,
            wire: Err(NOT_YET.into()),
        }
    }

    /// The primary's identity.
    pub fn id(&self) -> &NodeId {
        &self.id
    }

    /// The server's address now.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The database its keys live in (always 0 in a cluster).
    pub fn db(&self) -> i64 {
        self.db
    }

    /// Whether its data-path connection failed or never connected: the store opens a new one
    /// ([`Store::node`]).
    ///
    /// [`Store::node`]: super::Store::node
    pub fn is_broken(&self) -> bool {
        self.wire.as_ref().map_or(true, Wire::is_closed)
    }

    /// The node's own connection, or the error that says it has none.
    pub(super) fn wire(&self) -> redis::RedisResult<&Wire> {
        self.wire
            .as_ref()
            .map_err(|why| wire::no_connection(&self.server, why))
    }

    /// Sends this node's commands over `wire`, which must reach the same server (or fails
    /// them, saying why it has none).
    pub(super) fn with_wire(mut self, wire: Result<Wire, Arc<str>>) -> Self {
        self.wire = wire;
        self
    }

    /// Whether keys must be grouped by hash slot for transactions and scripts.
    pub fn needs_slot_groups(&self) -> bool {
        self.address.is_some()
    }

    /// Host and port of a cluster primary; `None` for a single server.
    pub fn host_port(&self) -> Option<(&str, u16)> {
        self.address.as_ref().map(|(h, p)| (h.as_str(), *p))
    }
}

impl SendPacked for Node {
    fn send_packed(&mut self, batch: Packed) -> RedisFuture<'_, Vec<resp::Value>> {
        self.send_with(batch, Wait::Reply)
    }

    fn send_packed_raw(&mut self, batch: Packed) -> RedisFuture<'_, Vec<u8>> {
        self.send_raw_with(batch, Wait::Reply)
    }
}

impl Node {
    /// Sends `batch` and returns one reply per command, waiting for them as `wait` says: an
    /// eviction's beyond `redis.command_timeout` ([`Wait::Outcome`]), since Redis may run it
    /// late.
    pub fn send_with(&mut self, batch: Packed, wait: Wait) -> RedisFuture<'_, Vec<resp::Value>> {
        let n = batch.len();
        let wire = self.wire().cloned();
        Box::pin(async move {
            if n == 0 {
                return Ok(Vec::new());
            }
            wire?.send(batch.into_bytes(), n, wait).await
        })
    }

    /// As [`Node::send_with`], with the replies as RESP bytes, to read with
    /// [`Reader`](resp::Reader) without building values.
    pub fn send_raw_with(&mut self, batch: Packed, wait: Wait) -> RedisFuture<'_, Vec<u8>> {
        let n = batch.len();
        let wire = self.wire().cloned();
        Box::pin(async move { wire?.send_raw(batch.into_bytes(), n, wait).await })
    }
}
