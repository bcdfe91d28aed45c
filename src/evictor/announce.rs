//! The events of what a check removed without a stream: one JSON message per removed member
//! (or per key and step, for `event_shape = "batch"`), published on the sweep's channel right
//! after the eviction that removed them. With a stream, the eviction script publishes them
//! itself (`evict::stream`); only the metrics and logs are done here.
//!
//! Events go out in pipelines of at most [`CHUNK_BYTES`]: memory does not grow with the ids'
//! size times the batch, and Redis hands subscribers a chunk at a time (a subscriber more than
//! 32 MB behind is disconnected under Redis's default limits).

use presence_sweeper_config::EventShape;
use presence_sweeper_redis::evict::transaction::Evicted;
use presence_sweeper_redis::{Error, Node, Packed, SendPacked, all_ok};
use presence_sweeper_rules::check::Counts;
use presence_sweeper_rules::event::{Event, Leaves, Roster, Step};

use super::{CheckCtx, Evictor};

/// About the most bytes of PUBLISH commands sent in one pipeline: some 800 events of a usual
/// size, or four of the largest. One sweep of 500 zombies with 16 KiB ids peaked at 34.9 MB RSS
/// with 256 KiB chunks and 38.9 MB with 1 MiB ones (`python3 benches/badday.py --stages
/// long-ids`).
const CHUNK_BYTES: usize = 256 << 10;

/// The longest eviction lag the histogram is told of: a day. A member whose window closed
/// longer ago than that was not late by the sweeper's doing (it checks every key within
/// seconds of starting): its score was written by hand (the README's "try it by hand" zombie
/// has score 1) or by an app with a broken clock, and a lag of decades would only wreck the
/// histogram's sum. Such members are still evicted, counted and announced.
pub(crate) const MAX_LAG: f64 = 86_400.0;

/// How late an eviction at `now` (Redis's clock) was for a member last seen at `last_seen`, in a
/// sweep of `ttl` seconds; infinite (not observed) when that says nothing of the sweeper: a
/// score before 1970 (`-inf`) or a lag over [`MAX_LAG`].
pub(super) fn lag(now: f64, last_seen: f64, ttl: f64) -> f64 {
    let lag = now - (last_seen + ttl);
    if last_seen > 0.0 && lag <= MAX_LAG {
        lag
    } else {
        f64::INFINITY
    }
}

/// What one eviction call removed from one key: the transaction and the script report the same.
pub(super) struct Removal<'a> {
    pub(super) key: &'a [u8],
    /// Removed members and their scores, in the score unit.
    pub(super) removed: &'a [(Vec<u8>, f64)],
    /// Members left, most recently seen first, at most the roster limit.
    pub(super) roster: &'a Roster,
    /// How many members are left.
    pub(super) card: u64,
    /// The eviction instant on Redis's clock, in Unix seconds.
    pub(super) now: f64,
}

/// Outbox waiting to be published, already encoded as PUBLISH (or SPUBLISH) commands.
#[derive(Default)]
pub(super) struct Outbox {
    batch: Packed,
    /// The channel and the payload of the event being encoded, reused from one to the next.
    channel: Vec<u8>,
    payload: Vec<u8>,
    /// The first failure to publish: the events after it are counted as lost, not sent.
    failed: Option<Error>,
}

impl<'a> Removal<'a> {
    /// What a transaction removed from `key`, which has `card` members left.
    pub(super) fn of(key: &'a [u8], evicted: &'a Evicted, card: u64, now: f64) -> Self {
        Self {
            key,
            removed: &evicted.removed,
            roster: &evicted.roster,
            card,
            now,
        }
    }
}

impl Evictor {
    /// PUBLISH, or SPUBLISH with `redis.sharded_pubsub`.
    pub(super) fn publish_command(&self) -> &'static str {
        if self.sharded_pubsub {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// Queues one event per removed member, publishing whenever [`CHUNK_BYTES`] are queued.
    pub(super) async fn announce(
        &self,
        r: &Removal<'_>,
        events: &mut Outbox,
        node: &mut Node,
        ctx: CheckCtx<'_>,
        counts: &mut Counts,
    ) {
        let Removal {
            key,
            removed,
            roster,
            card,
            now,
        } = *r;
        if removed.is_empty() {
            return;
        }
        let conversation_id = self.config.pattern.conversation_id(key).unwrap_or(key);
        self.config
            .channel
            .render_into(key, conversation_id, &mut events.channel);
        // Only the call whose removal emptied the set sees it empty: said once per emptying.
        let vacated = card == 0;
        let mut leaves = Leaves::default();
        for (i, (member, score)) in removed.iter().enumerate() {
            let last_seen = self.evicted(ctx, conversation_id, member, *score, now);
            if self.config.event_shape == EventShape::Batch {
                leaves.push(member, last_seen);
                continue;
            }
            let event = Event {
                conversation_id,
                user_id: member,
                last_seen,
                timestamp: now,
                roster,
                roster_count: card,
                vacated: vacated && i + 1 == removed.len(),
            };
            self.encoder.encode_into(&event, None, &mut events.payload);
            if self.queue(events, ctx, counts) {
                self.flush(events, node, ctx, counts).await;
            }
        }
        if leaves.is_empty() {
            return;
        }
        let step = Step {
            conversation_id,
            leaves: &leaves,
            timestamp: now,
            roster,
            roster_count: card,
            vacated,
        };
        let splits = self.encoder.batch_splits(&step);
        let mut from = 0;
        for (i, &to) in splits.iter().enumerate() {
            let last = i + 1 == splits.len();
            self.encoder
                .batch_into(&step, (from, to), last, None, &mut events.payload);
            if self.queue(events, ctx, counts) {
                self.flush(events, node, ctx, counts).await;
            }
            from = to;
        }
    }

    /// One removed member of `conversation_id`, scored `score`, removed at `now`: its lag
    /// observed and a debug line (ids redacted). Returns its `last_seen`, in seconds.
    pub(super) fn evicted(
        &self,
        ctx: CheckCtx<'_>,
        conversation_id: &[u8],
        member: &[u8],
        score: f64,
        now: f64,
    ) -> f64 {
        let last_seen = self.config.score_unit.to_seconds(score);
        let ttl = self.config.ttl.as_secs_f64();
        ctx.observer.member_evicted(lag(now, last_seen, ttl));
        tracing::debug!(
            sweep = %self.config.name,
            conversation_id = %presence_sweeper_rules::redact::Id(conversation_id),
            user_id = %presence_sweeper_rules::redact::Id(member),
            last_seen,
            "evicted"
        );
        last_seen
    }

    /// Queues the event in `events.payload`; after a failure it only counts it (events are
    /// messages: a batch event is one). Whether [`CHUNK_BYTES`] are queued: time to flush.
    ///
    /// Not async, and the flush boxed: a future built for every event, holding the publish's,
    /// was moved (copied) whole each time, 2 % of the sweeper's own instructions per evicting
    /// key (`benches/bench.py --stages instructions`).
    fn queue(&self, events: &mut Outbox, ctx: CheckCtx<'_>, counts: &mut Counts) -> bool {
        if events.failed.is_some() {
            counts.events_failed += 1;
            ctx.observer.events_failed(1);
            return false;
        }
        let command = self.publish_command().as_bytes();
        events
            .batch
            .command(&[command, &events.channel, &events.payload]);
        events.batch.byte_len() >= CHUNK_BYTES
    }

    /// Publishes what is queued. Returns the first failure to publish of these events.
    pub(super) async fn flush(
        &self,
        events: &mut Outbox,
        node: &mut Node,
        ctx: CheckCtx<'_>,
        counts: &mut Counts,
    ) {
        let batch = std::mem::take(&mut events.batch);
        if batch.is_empty() || events.failed.is_some() {
            return;
        }
        if let Err(e) = Box::pin(self.publish(node, ctx, batch, counts)).await {
            events.failed = Some(e);
        }
    }

    /// The first failure to publish, once everything was flushed.
    pub(super) fn outcome(events: Outbox) -> Result<(), Error> {
        match events.failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Publishes `batch`; a failure is counted as events lost (the members are gone).
    ///
    /// Over the node's own connection, right behind the eviction: in a cluster a PUBLISH reaches
    /// the subscribers of every node whichever node takes it. A sharded message must reach the
    /// owner of its channel's slot, so there each SPUBLISH goes over its owner's connection.
    async fn publish(
        &self,
        node: &mut Node,
        ctx: CheckCtx<'_>,
        batch: Packed,
        counts: &mut Counts,
    ) -> Result<(), Error> {
        let n = batch.len() as u64;
        let replies = if self.sharded_pubsub && node.needs_slot_groups() {
            // SPUBLISH's channel is its second argument.
            ctx.store.send_by_slot(batch, 1).await
        } else {
            // The eviction's reply may have come late, on a connection that retired meanwhile,
            // or another check's timeout retired it: the members are gone either way, so their
            // events go out on one that works. The check's own node stays as it is: nothing
            // new is evicted through it once its connection retired.
            if node.is_broken() {
                ctx.store.rewire(node).await.send_packed(batch).await
            } else {
                node.send_packed(batch).await
            }
        };
        let result = replies.and_then(all_ok).map(drop);
        match result {
            Ok(()) => {
                counts.events_published += n;
                ctx.observer.published(n);
                Ok(())
            }
            Err(e) if presence_sweeper_redis::is_reply_lost(&e) => {
                tracing::warn!(
                    sweep = %self.config.name,
                    events = n,
                    error = %e,
                    "members were evicted and their events sent, but Redis did not confirm them"
                );
                counts.events_unconfirmed += n;
                ctx.observer.events_unconfirmed(n);
                Err(e.into())
            }
            Err(e) => {
                tracing::error!(
                    sweep = %self.config.name,
                    events = n,
                    error = %e,
                    "members were evicted but their events could not be published"
                );
                counts.events_failed += n;
                ctx.observer.events_failed(n);
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod lag_tests {
    use super::{MAX_LAG, lag};

    #[test]
    fn only_lags_the_sweeper_could_have_caused_are_observed() {
        let now = 1_800_000_000.0;
        assert_eq!(lag(now, now - 50.0, 45.0), 5.0);
        // Early (Redis's clock against a score from an app's): observed, clamped later.
        assert_eq!(lag(now, now - 40.0, 45.0), -5.0);
        assert_eq!(lag(now, now - 45.0 - MAX_LAG, 45.0), MAX_LAG);
        assert_eq!(lag(now, now - 46.0 - MAX_LAG, 45.0), f64::INFINITY);
        // The zombie added by hand with score 1, and scores before 1970.
        assert_eq!(lag(now, 1.0, 45.0), f64::INFINITY);
        assert_eq!(lag(now, -1.0, 45.0), f64::INFINITY);
        assert_eq!(lag(now, f64::NEG_INFINITY, 45.0), f64::INFINITY);
    }
}
