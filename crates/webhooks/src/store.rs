//! An endpoint's delivery state in Redis (`keys`): claiming due streams with a lease, renewing
//! and releasing claims, reading entries, moving a stream's cursor, and on a cluster finding
//! the slots whose due sets hold anything. Every call is bounded: in time
//! (`redis.command_timeout`) and in what it reads (COUNT, LIMIT).

use std::collections::BTreeMap;
use std::time::Duration;

use presence_sweeper_redis::{Packed, Store};
use presence_sweeper_rules::slot::SLOTS;
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
    endpoint: String,
    /// Whether due sets are kept per hash slot (a cluster).
    per_slot: bool,
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
            per_slot: store.is_cluster(),
            store,
            endpoint: endpoint.to_owned(),
            state_prefix: keys::state_prefix(endpoint),
            owner,
            lease,
            timeout,
            claim: redis::Script::new(include_str!("claim.lua")),
            renew: redis::Script::new(include_str!("renew.lua")),
            advance: redis::Script::new(include_str!("advance.lua")),
        }
    }

    /// Whether due sets are kept per hash slot: then [`DeliveryStore::claim`] takes a slot,
    /// and [`DeliveryStore::discover`] finds the slots to claim from.
    pub fn per_slot(&self) -> bool {
        self.per_slot
    }

    /// The due set of `in_slot` (ignored outside a cluster).
    fn due(&self, in_slot: Option<u16>) -> String {
        keys::due_key(&self.endpoint, in_slot.filter(|_| self.per_slot))
    }

    /// The due set `stream` is marked in.
    fn due_of(&self, stream: &[u8]) -> String {
        self.due(Some(keys::slot_of(stream)))
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

    /// Claims up to `want` due streams of the due set of `in_slot` (the only one outside a
    /// cluster), looking at no more than `window` of them.
    pub async fn claim(
        &self,
        in_slot: Option<u16>,
        want: usize,
        window: usize,
    ) -> Result<Claims, StoreError> {
        let mut con = self.store.connection();
        let mut call = self.claim.key(self.due(in_slot));
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
    /// clock and, per stream, whether it is still held. On a cluster, one call per slot: a slot
    /// whose call failed counts as still held (its workers go on, and learn at their next move
    /// if another replica took the stream over), and the first failure is returned beside.
    pub async fn renew(
        &self,
        streams: &[&[u8]],
        release: bool,
    ) -> (u64, Vec<bool>, Option<StoreError>) {
        let mut by_slot: BTreeMap<Option<u16>, Vec<usize>> = BTreeMap::new();
        for (i, s) in streams.iter().enumerate() {
            let at = self.per_slot.then(|| keys::slot_of(s));
            by_slot.entry(at).or_default().push(i);
        }
        let mut held = vec![true; streams.len()];
        let mut now = 0;
        let mut failed = None;
        for (in_slot, at) in by_slot {
            let mut con = self.store.connection();
            // The due set is named only to route the call to the slot's primary.
            let mut call = self.renew.key(self.due(in_slot));
            call.arg(&self.state_prefix)
                .arg(&self.owner)
                .arg(if release { 0 } else { self.lease_ms() });
            for &i in &at {
                call.arg(streams[i]);
            }
            match self
                .bounded(call.invoke_async::<(u64, Vec<u8>)>(&mut con))
                .await
            {
                Ok((clock, these)) => {
                    now = now.max(clock);
                    for (i, h) in at.into_iter().zip(these) {
                        held[i] = h == 1;
                    }
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        (now, held, failed)
    }

    /// On a cluster, the slots whose due sets hold streams, leaving out those of `known`: one
    /// `EXISTS` per slot, pipelined to each slot's primary (16,384 in all, split among them).
    /// A primary that fails hides only its own slots: the others' come back beside the
    /// failure.
    pub async fn discover(&self, known: &[u16]) -> (Vec<u16>, Option<StoreError>) {
        let mut batch = Packed::with_capacity(usize::from(SLOTS) * 48);
        let mut asked = Vec::with_capacity(usize::from(SLOTS));
        for s in (0..SLOTS).filter(|s| !known.contains(s)) {
            batch.command(&[b"EXISTS", self.due(Some(s)).as_bytes()]);
            asked.push(s);
        }
        let (replies, failed) = self.store.send_by_slot_partly(batch, 1).await;
        let found = asked
            .into_iter()
            .zip(replies)
            .filter(|(_, r)| matches!(r, Some(presence_sweeper_redis::Value::Int(n)) if *n > 0))
            .map(|(s, _)| s)
            .collect();
        (found, failed.map(StoreError::from))
    }

    /// The slots of `among` whose due sets are on the primary of `slot`'s, `slot` among them.
    pub fn same_primary(&self, slot: u16, among: impl IntoIterator<Item = u16>) -> Vec<u16> {
        self.store.same_primary(slot, among)
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
        let mut call = self.advance.key(self.due_of(stream));
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
