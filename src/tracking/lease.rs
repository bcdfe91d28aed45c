//! The optional lease that lets one of several replicas sweep while the others stand by.
//!
//! A lease is a Redis key holding a random token, set with `SET NX PX`. The holder renews it well
//! before it expires; only the holder may renew or release it (both check the token inside a
//! script, so a replica that lost its lease cannot extend or delete the new holder's). If the
//! holder dies, its lease expires and a standby takes it at its next attempt. Correctness never
//! depends on the lease: eviction is atomic and exactly-once without it. The lease only keeps
//! replicas from doing the same work twice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;

use presence_sweeper_redis::Error;

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
