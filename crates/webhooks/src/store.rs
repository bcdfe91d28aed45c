//! An endpoint's delivery state in Redis (`keys`): claiming due streams with a lease, renewing
//! and releasing claims, reading entries, and moving a stream's cursor. Every call is bounded:
//! in time (`redis.command_timeout`) and in what it reads (COUNT, LIMIT).

use std::time::Duration;

use presence_sweeper_redis::Store;
use redis::Value;

use crate::entry::EntryId;
use crate::keys;

/// Why a call to Redis failed; the daemon retries.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis refused the call or the connection failed.
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis answered something the call does not expect.
    #[error("Redis answered unexpectedly: {0}")]
    Reply(#[from] redis::ParsingError),
    /// No answer within `redis.command_timeout`.
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
}

/// A stream claimed by this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The stream's key.
    pub stream: Vec<u8>,
    /// The last entry done, if any: deliveries go on after it.
    pub cursor: Option<EntryId>,
    /// Else where deliveries start: the due set's score (ms), when the stream was marked due.
    pub since_ms: u64,
}

/// What a claim call saw, besides the claims.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    /// Redis's clock, ms.
    pub now_ms: u64,
    /// Streams in the due set (the backlog, in streams).
    pub due: u64,
    /// When the oldest undelivered entry of any due stream was appended, ms.
    pub oldest_ms: Option<u64>,
    /// What this call claimed.
    pub claimed: Vec<Claimed>,
}

/// What a cursor's move found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advanced {
    /// Another replica holds the stream now: stop, writing nothing.
    Lost,
    /// Entries wait after the cursor.
    More,
    /// Nothing waits: the stream left the due set.
    Settled,
}

/// One endpoint's state in Redis, reached through the daemon's store.
#[derive(Clone)]
pub struct DeliveryStore {
    store: Store,
    due: String,
    state_prefix: String,
    owner: String,
    lease: Duration,
    timeout: Duration,
    claim: redis::Script,
    renew: redis::Script,
    advance: redis::Script,
}

impl DeliveryStore {
    /// The state of `endpoint`, claimed as `owner` for `lease` at a time.
    pub fn new(
        store: Store,
        endpoint: &str,
        owner: String,
        lease: Duration,
        timeout: Duration,
    ) -> Self {
        Self {
            store,
            due: keys::due_key(endpoint),
            state_prefix: keys::state_prefix(endpoint),
            owner,
            lease,
            timeout,
            claim: redis::Script::new(include_str!("claim.lua")),
            renew: redis::Script::new(include_str!("renew.lua")),
            advance: redis::Script::new(include_str!("advance.lua")),
        }
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))?
            .map_err(StoreError::from)
    }

    fn lease_ms(&self) -> u64 {
        self.lease.as_millis().max(1) as u64
    }

    /// Claims up to `want` due streams, looking at no more than `window` of them.
    pub async fn claim(&self, want: usize, window: usize) -> Result<Claims, StoreError> {
        let mut con = self.store.connection();
        let mut call = self.claim.key(&self.due);
        call.arg(&self.state_prefix)
            .arg(&self.owner)
            .arg(self.lease_ms())
            .arg(want)
            .arg(window.max(1));
        let reply: (u64, u64, Option<String>, Vec<Value>) =
            self.bounded(call.invoke_async(&mut con)).await?;
        let (now_ms, due, oldest, flat) = reply;
        let mut claimed = Vec::with_capacity(flat.len() / 3);
        for triple in flat.chunks_exact(3) {
            let stream: Vec<u8> = redis::from_redis_value_ref(&triple[0])?;
            let cursor: String = redis::from_redis_value_ref(&triple[1])?;
            let score: String = redis::from_redis_value_ref(&triple[2])?;
            claimed.push(Claimed {
                stream,
                cursor: EntryId::parse(&cursor),
                since_ms: score_ms(&score),
            });
        }
        Ok(Claims {
            now_ms,
            due,
            oldest_ms: oldest.as_deref().map(score_ms),
            claimed,
        })
    }

    /// Renews this replica's claims on `streams` (`release`: gives them up); returns Redis's
    /// clock and, per stream, whether it is still held.
    pub async fn renew(
        &self,
        streams: &[&[u8]],
        release: bool,
    ) -> Result<(u64, Vec<bool>), StoreError> {
        let mut con = self.store.connection();
        let mut call = self.renew.prepare_invoke();
        call.arg(&self.state_prefix)
            .arg(&self.owner)
            .arg(if release { 0 } else { self.lease_ms() });
        for s in streams {
            call.arg(*s);
        }
        let (now, held): (u64, Vec<u8>) = self.bounded(call.invoke_async(&mut con)).await?;
        Ok((now, held.into_iter().map(|h| h == 1).collect()))
    }

    /// Up to `count` entries of `stream` after `cursor` (else from `since_ms` on), as
    /// (id, `event` field).
    pub async fn read(
        &self,
        stream: &[u8],
        cursor: Option<EntryId>,
        since_ms: u64,
        count: usize,
    ) -> Result<Vec<(String, Option<Vec<u8>>)>, StoreError> {
        let mut con = self.store.connection();
        let start = match cursor {
            Some(c) => format!("({c}"),
            None => format!("{since_ms}-0"),
        };
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(stream).arg(start).arg("+").arg("COUNT").arg(count);
        let entries: Vec<(String, Vec<Vec<u8>>)> = self.bounded(cmd.query_async(&mut con)).await?;
        Ok(entries
            .into_iter()
            .map(|(id, fields)| {
                let event = fields
                    .chunks_exact(2)
                    .find(|kv| kv[0] == b"event")
                    .map(|kv| kv[1].clone());
                (id, event)
            })
            .collect())
    }

    /// Records `cursor` as the last entry of `stream` done.
    pub async fn advance(&self, stream: &[u8], cursor: EntryId) -> Result<Advanced, StoreError> {
        let mut con = self.store.connection();
        let mut state = self.state_prefix.as_bytes().to_vec();
        state.extend_from_slice(stream);
        let mut call = self.advance.key(&self.due);
        call.key(state)
            .key(stream)
            .arg(&self.owner)
            .arg(cursor.to_string())
            .arg(self.lease_ms());
        let n: u8 = self.bounded(call.invoke_async(&mut con)).await?;
        Ok(match n {
            0 => Advanced::Lost,
            1 => Advanced::More,
            _ => Advanced::Settled,
        })
    }
}

/// A due set's score as whole ms (Redis may write it as a float).
fn score_ms(score: &str) -> u64 {
    score.parse::<f64>().map_or(0, |s| s.max(0.0) as u64)
}
