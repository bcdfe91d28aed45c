//! The optional leases that let several replicas share the work: on one primary, one of them
//! sweeps while the others stand by; on several, each primary's lease goes to one of them
//! ([`SweepLeases`]).
//!
//! A lease is a Redis key holding a random token, set with `SET NX PX`. The holder renews it well
//! before it expires; only the holder may renew or release it (both check the token inside a
//! script, so a replica that lost its lease cannot extend or delete the new holder's). If the
//! holder dies, its lease expires and a standby takes it at its next attempt. Correctness never
//! depends on the lease: eviction is atomic and exactly-once without it. The lease only keeps
//! replicas from doing the same work twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;

use presence_sweeper_redis::{Error, Store};
use presence_sweeper_rules::node::NodeId;
use presence_sweeper_rules::share;

/// Renews the lease if `ARGV[1]` still holds it.
const RENEW: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
/// Deletes the lease if `ARGV[1]` still holds it.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     return redis.call('DEL', KEYS[1]) else return 0 end";

/// One sweep's lease, as seen by this replica.
#[derive(Debug)]
pub(crate) struct Lease {
    key: String,
    token: String,
    ttl: Duration,
    held: AtomicBool,
    renew: redis::Script,
    release: redis::Script,
}

impl Lease {
    /// The lease of `sweep`, stored at `prefix` + `sweep`, lasting `ttl` after each renewal.
    pub(crate) fn new(prefix: &str, sweep: &str, ttl: Duration) -> Self {
        Self {
            key: format!("{prefix}{sweep}"),
            token: uuid::Uuid::new_v4().simple().to_string(),
            ttl,
            held: AtomicBool::new(false),
            renew: redis::Script::new(RENEW),
            release: redis::Script::new(RELEASE),
        }
    }

    /// Whether this replica held the lease at its last attempt.
    pub(crate) fn held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// How often to try: the holder renews three times per ttl; a standby checks ten times per
    /// ttl, so it takes over soon after the lease of a dead holder expires.
    pub(crate) fn attempt_every(&self) -> Duration {
        if self.held() {
            self.ttl / 3
        } else {
            self.ttl / 10
        }
    }

    /// Renews the lease if this replica holds it, else tries to take it. Returns whether this
    /// replica holds it now; on an error it counts as not held.
    pub(crate) async fn try_hold<C>(&self, con: &mut C) -> Result<bool, Error>
    where
        C: ConnectionLike + Send,
    {
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let result = async {
            // Renew first, held or not: after one failed renewal the key may still hold our
            // token, and `SET NX` alone would then wait out our own lease.
            let renewed: i64 = self
                .renew
                .key(&self.key)
                .arg(&self.token)
                .arg(ttl_ms)
                .invoke_async(con)
                .await?;
            if renewed == 1 {
                return Ok(true);
            }
            let acquired: Option<String> = redis::cmd("SET")
                .arg(&self.key)
                .arg(&self.token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query_async(con)
                .await?;
            Ok::<_, redis::RedisError>(acquired.is_some())
        }
        .await;
        let held = matches!(result, Ok(true));
        let was = self.held.swap(held, Ordering::Relaxed);
        if held != was {
            if held {
                tracing::info!(lease = %self.key, "holding the lease: this replica sweeps");
            } else {
                tracing::info!(lease = %self.key, "lease lost or held elsewhere: standing by");
            }
        }
        result.map_err(Error::from)
    }

    /// Gives the lease up (at shutdown, or when the sweep is removed), if this replica holds it,
    /// so a standby can take over at once instead of after the ttl.
    pub(crate) async fn release<C>(&self, con: &mut C)
    where
        C: ConnectionLike + Send,
    {
        if !self.held.swap(false, Ordering::Relaxed) {
            return;
        }
        let released: Result<i64, _> = self
            .release
            .key(&self.key)
            .arg(&self.token)
            .invoke_async(con)
            .await;
        if let Err(e) = released {
            tracing::warn!(lease = %self.key, error = %e, "could not release the lease; it expires on its own");
        }
    }
}

/// Joins (renews this replica in) a sweep's live replicas and returns them: a sorted set of
/// tokens scored by when each membership ends, on Redis's clock; the ended ones go first.
/// Bounded: at most 256 replicas are read.
const JOIN: &str = "local t = redis.call('TIME') \
     local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
     local ttl = tonumber(ARGV[2]) \
     redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) \
     if ttl > 0 then redis.call('ZADD', KEYS[1], now + ttl, ARGV[1]) \
       redis.call('PEXPIRE', KEYS[1], 2 * ttl) \
     else redis.call('ZREM', KEYS[1], ARGV[1]) end \
     return redis.call('ZRANGE', KEYS[1], 0, 255)";

/// Which primaries a sweep runs on in this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holding {
    /// Every primary: no lease, or the one lease of a single primary.
    All,
    /// These (none: it stands by).
    Nodes(BTreeSet<NodeId>),
}

impl Holding {
    /// Whether the sweep runs on `node` here.
    pub(crate) fn covers(&self, node: &NodeId) -> bool {
        match self {
            Self::All => true,
            Self::Nodes(held) => held.contains(node),
        }
    }
}

/// A sweep's leases as this replica sees them. On one primary, today's single lease
/// (`<key_prefix><sweep>`): whichever replica takes it sweeps. On several (a cluster), one lease
/// per primary (`<key_prefix><sweep>:<primary>`), shared out among the live replicas
/// (`<key_prefix><sweep>:replicas`) by [`share::assigned`].
pub(crate) struct SweepLeases {
    sweep: String,
    prefix: String,
    ttl: Duration,
    /// This replica's name among the live replicas.
    token: String,
    single: Lease,
    per_primary: BTreeMap<NodeId, Lease>,
    members: String,
    join: redis::Script,
    joined: bool,
    /// The live replicas as last read, and when.
    last_live: Option<(std::time::Instant, Vec<String>)>,
}

impl SweepLeases {
    /// The leases of `sweep`, under `prefix`, each lasting `ttl` after its renewal.
    pub(crate) fn new(prefix: &str, sweep: &str, ttl: Duration) -> Self {
        Self {
            sweep: sweep.to_owned(),
            prefix: prefix.to_owned(),
            ttl,
            token: uuid::Uuid::new_v4().simple().to_string(),
            single: Lease::new(prefix, sweep, ttl),
            per_primary: BTreeMap::new(),
            members: format!("{prefix}{sweep}:replicas"),
            join: redis::Script::new(JOIN),
            joined: false,
            last_live: None,
        }
    }

    /// How long until the next attempt: the single lease's pace, or with shared leases ten
    /// times per ttl (a joining replica's share, and a dead one's, change hands that soon).
    pub(crate) fn attempt_every(&self) -> Duration {
        if self.per_primary.is_empty() && !self.joined {
            self.single.attempt_every()
        } else {
            self.ttl / 10
        }
    }

    /// Takes, renews or gives up leases for the `primaries` there are now; returns where the
    /// sweep runs here, and the first error met (a lease that failed counts as not held).
    pub(crate) async fn attempt(
        &mut self,
        store: &Store,
        primaries: &[NodeId],
    ) -> (Holding, Option<Error>) {
        let mut con = store.connection();
        if primaries.len() <= 1 {
            self.leave_shared(&mut con).await;
            let error = self.single.try_hold(&mut con).await.err();
            let holding = match self.single.held() {
                true => Holding::All,
                false => Holding::Nodes(BTreeSet::new()),
            };
            return (holding, error);
        }
        self.single.release(&mut con).await;
        let mut error = None;
        // Without an answer, the live set last read (within a ttl) serves; without one, this
        // replica tries for every lease, as if alone: `SET NX` lets one replica have each, and
        // no primary goes unswept while the set cannot be read.
        let live: Vec<String> = match self.membership(&mut con, self.ttl).await {
            Ok(live) => {
                self.last_live = Some((crate::time::now(), live.clone()));
                live
            }
            Err(e) => {
                error = Some(e);
                match &self.last_live {
                    Some((at, live)) if crate::time::now().duration_since(*at) < self.ttl => {
                        live.clone()
                    }
                    _ => Vec::new(),
                }
            }
        };
        self.joined = true;
        let mine = share::assigned(&self.token, &live, primaries, &self.sweep);
        self.per_primary.retain(|node, _| primaries.contains(node));
        for node in primaries {
            let lease = self.per_primary.entry(node.clone()).or_insert_with(|| {
                Lease::new(&self.prefix, &format!("{}:{node}", self.sweep), self.ttl)
            });
            if mine.contains(node) {
                if let Err(e) = lease.try_hold(&mut con).await {
                    error.get_or_insert(e);
                }
            } else {
                lease.release(&mut con).await;
            }
        }
        let held = self
            .per_primary
            .iter()
            .filter(|(_, l)| l.held())
            .map(|(n, _)| n.clone())
            .collect();
        (Holding::Nodes(held), error)
    }

    /// Each primary's lease, and whether this replica holds it.
    pub(crate) fn held(&self, primaries: &[NodeId]) -> Vec<(NodeId, bool)> {
        primaries
            .iter()
            .map(|node| {
                let held = match self.per_primary.get(node) {
                    Some(l) if primaries.len() > 1 => l.held(),
                    _ => self.single.held(),
                };
                (node.clone(), held)
            })
            .collect()
    }

    /// Gives every lease up, and leaves the live replicas (at shutdown, or when the sweep is
    /// removed), so that the others take over at once.
    pub(crate) async fn release(&mut self, store: &Store) {
        let mut con = store.connection();
        self.single.release(&mut con).await;
        self.leave_shared(&mut con).await;
    }

    async fn leave_shared<C: ConnectionLike + Send>(&mut self, con: &mut C) {
        for lease in self.per_primary.values() {
            lease.release(con).await;
        }
        self.per_primary.clear();
        if std::mem::take(&mut self.joined) {
            let _ = self.membership(con, Duration::ZERO).await;
        }
    }

    /// Renews this replica's membership for `ttl` (zero: leaves) and reads the live replicas.
    async fn membership<C: ConnectionLike + Send>(
        &self,
        con: &mut C,
        ttl: Duration,
    ) -> Result<Vec<String>, Error> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        Ok(self
            .join
            .key(&self.members)
            .arg(&self.token)
            .arg(ttl_ms)
            .invoke_async(con)
            .await?)
    }
}
