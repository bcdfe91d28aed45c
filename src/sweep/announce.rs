//! The events of what a check removed: one JSON message per removed member, published on the
//! sweep's channel right after the eviction that removed it.

use super::{Counts, Observer, Sweep};
use crate::Error;
use crate::events::Event;
use crate::store::{Conn, Node, Packed, SendPacked, all_ok};

/// What one eviction call removed from one key: the transaction and the script report the same.
pub(super) struct Removal<'a> {
    pub(super) key: &'a [u8],
    /// Removed members and their scores, in the score unit.
    pub(super) removed: &'a [(Vec<u8>, f64)],
    /// Members left, most recently seen first, at most the roster limit, as a JSON array.
    pub(super) roster_json: &'a [u8],
    /// How many members are left.
    pub(super) card: u64,
    /// The eviction instant on Redis's clock, in Unix seconds.
    pub(super) now: f64,
}

/// Events waiting to be published, already encoded as PUBLISH (or SPUBLISH) commands.
#[derive(Default)]
pub(super) struct Events {
    batch: Packed,
    /// The channel and the payload of the event being encoded, reused from one to the next.
    channel: Vec<u8>,
    payload: Vec<u8>,
}

impl Events {
    /// Room for the events of these removals, so the batch is not copied as it grows.
    pub(super) fn for_removals<'r>(removals: impl Iterator<Item = (usize, &'r [u8])>) -> Self {
        let bytes = removals
            .map(|(removed, roster_json)| removed * (EVENT_SIZE + roster_json.len()))
            .sum();
        Self {
            batch: Packed::with_capacity(bytes),
            ..Self::default()
        }
    }
}

/// The bytes of one event and its PUBLISH command, beside its roster: the fixed fields, the ids
/// and the channel, generously.
const EVENT_SIZE: usize = 400;

impl Sweep {
    /// PUBLISH, or SPUBLISH with `redis.sharded_pubsub`.
    pub(super) fn publish_command(&self) -> &'static str {
        if self.sharded_pubsub {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// Queues one event per removed member.
    pub(super) fn announce(&self, r: &Removal, events: &mut Events, observer: &dyn Observer) {
        let Removal {
            key,
            removed,
            roster_json,
            card,
            now,
        } = *r;
        if removed.is_empty() {
            return;
        }
        let conversation_id = self.config.pattern.conversation_id(key).unwrap_or(key);
        self.config
            .channel
            .render_into(conversation_id, &mut events.channel);
        let ttl = self.config.ttl.as_secs_f64();
        let command = self.publish_command().as_bytes();
        // Room for every event of the key at once: growing the batch would copy it again.
        let event_size = EVENT_SIZE + 2 * conversation_id.len() + roster_json.len();
        events
            .batch
            .reserve(removed.len() * (event_size + events.channel.len()));
        for (member, score) in removed {
            let last_seen = self.config.score_unit.to_seconds(*score);
            observer.member_evicted(now - (last_seen + ttl));
            tracing::debug!(
                sweep = %self.config.name,
                conversation_id = %String::from_utf8_lossy(conversation_id),
                user_id = %String::from_utf8_lossy(member),
                last_seen,
                "evicted"
            );
            let event = Event {
                conversation_id,
                user_id: member,
                last_seen,
                timestamp: now,
                roster_json,
                roster_count: card,
            };
            self.encoder.encode_into(&event, &mut events.payload);
            events
                .batch
                .command(&[command, &events.channel, &events.payload]);
        }
    }

    /// Publishes queued events; a failure is counted as events lost (the members are gone).
    ///
    /// In a cluster a PUBLISH reaches the subscribers of every node whichever node takes it, so
    /// it goes to any live one; a sharded message must reach the owner of its channel's slot, so
    /// each SPUBLISH is routed on its own.
    pub(super) async fn publish(
        &self,
        node: &mut Node,
        routed: &Conn,
        events: Events,
        counts: &mut Counts,
        observer: &dyn Observer,
    ) -> Result<(), Error> {
        if events.batch.is_empty() {
            return Ok(());
        }
        let n = events.batch.len() as u64;
        let result: Result<(), redis::RedisError> =
            if self.sharded_pubsub && node.needs_slot_groups() {
                let sends = events.batch.commands().into_iter().map(|args| {
                    let mut con = routed.clone();
                    let mut cmd = redis::Cmd::new();
                    for arg in &args {
                        cmd.arg(*arg);
                    }
                    let channel = args.get(1).copied().unwrap_or_default();
                    async move { con.query_for_key(cmd, channel).await.map(drop) }
                });
                futures_util::future::join_all(sends)
                    .await
                    .into_iter()
                    .collect()
            } else {
                let replies = if node.needs_slot_groups() {
                    // Any live node will do, and the one the keys came from may just have died
                    // (its transaction was redirected to the promoted replica).
                    routed.clone().send_packed(events.batch).await
                } else {
                    node.send_packed(events.batch).await
                };
                replies.and_then(all_ok).map(drop)
            };
        match result {
            Ok(()) => {
                counts.events_published += n;
                observer.published(n);
                Ok(())
            }
            Err(e) => {
                tracing::error!(
                    sweep = %self.config.name,
                    events = n,
                    error = %e,
                    "members were evicted but their events could not be published"
                );
                counts.events_failed += n;
                observer.events_failed(n);
                Err(e.into())
            }
        }
    }
}
