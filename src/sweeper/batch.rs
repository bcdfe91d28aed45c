//! One batch of keys from one primary: count the zombies of every key, evict the keys with a few
//! in transactions and those with many through the bounded script, and account for all of it.

use std::collections::HashMap;

use redis::cluster_routing::Slot;

use super::announce::{Events, Removal};
use super::{BatchCounts, PassCtx, PassObserver, Sweeper};
use crate::Error;
use crate::discover::FIRST_PAGE_SHARE;
use crate::events::EventEncoder;
use crate::evict::{self, Clock, Count, Cutoff, Evicted, KeyReply, Params, precheck};
use crate::store::{Conn, Node};

/// The keys of one transaction and what it did: the eviction instant and, per key, what was
/// removed.
type Outcome<'k> = (Vec<&'k [u8]>, Result<(f64, Vec<Option<Evicted>>), Error>);

impl Sweeper {
    /// Sweeps one batch. Returns what was done even when a step fails, so evictions are always
    /// counted. Once the pass is cancelled no new call starts.
    pub(super) async fn sweep_batch(
        &self,
        mut node: Node,
        keys: Vec<Vec<u8>>,
        page_time: f64,
        ctx: PassCtx<'_>,
    ) -> (BatchCounts, Option<Error>) {
        let mut counts = BatchCounts::default();
        let result = self
            .sweep_batch_inner(&mut node, keys, page_time, ctx, &mut counts)
            .await;
        (counts, result.err())
    }

    async fn sweep_batch_inner(
        &self,
        node: &mut Node,
        keys: Vec<Vec<u8>>,
        page_time: f64,
        ctx: PassCtx<'_>,
        counts: &mut BatchCounts,
    ) -> Result<(), Error> {
        let PassCtx {
            routed,
            opts,
            observer,
            cancel,
        } = ctx;
        let fixed_now = match opts.clock {
            Clock::Fixed(t) => Some(t),
            Clock::Redis => None,
        };
        let cutoff = Cutoff::new(
            fixed_now.unwrap_or(page_time),
            self.sweep.ttl,
            self.sweep.score_unit,
        );
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let stale_counts = read_counts(node, routed, &refs, Count::Stale(&cutoff)).await?;
        observer.progress();
        if opts.dry_run {
            return self.dry_run(node, &refs, stale_counts, ctx, counts).await;
        }
        let budget = self.evict.max_members_per_call as u64;
        let mut clean: Vec<&[u8]> = Vec::new();
        // Transactions of at most `budget` zombies each; keys with more go to the script.
        let mut transactions: Vec<Vec<&[u8]>> = Vec::new();
        let mut in_last = 0;
        let mut big = Vec::new();
        for (key, stale) in refs.iter().zip(stale_counts) {
            match stale {
                None => {}
                Some(0) => clean.push(key),
                Some(stale) if stale > budget => big.push(key.to_vec()),
                Some(stale) => {
                    if transactions.is_empty() || in_last + stale > budget {
                        transactions.push(Vec::new());
                        in_last = 0;
                    }
                    in_last += stale;
                    transactions.last_mut().expect("pushed above").push(key);
                }
            }
        }
        let mut transactions = transactions.into_iter();
        // The clean keys' sizes and the first transactions go out together: one round trip.
        let first = transactions.next().unwrap_or_default();
        let mut card_node = node.clone();
        let (cards, outcomes) = tokio::join!(
            read_counts(&mut card_node, routed, &clean, Count::Members),
            evict_keys(node, &first, &cutoff, fixed_now)
        );
        // Whatever a transaction removed is announced first, even if another read failed.
        let mut failure = self.finish_outcomes(node, outcomes, ctx, counts).await;
        match cards {
            Ok(cards) => {
                for card in cards.into_iter().flatten().filter(|&c| c > 0) {
                    counts.keys += 1;
                    counts.members += card;
                    observer.key_swept(card);
                }
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
        for keys in transactions {
            // On shutdown no new call starts; what the calls before removed was announced.
            if failure.is_some() || cancel.is_cancelled() {
                break;
            }
            let outcomes = evict_keys(node, &keys, &cutoff, fixed_now).await;
            failure = self.finish_outcomes(node, outcomes, ctx, counts).await;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if !big.is_empty() && !cancel.is_cancelled() {
            self.sweep_big(node, big, ctx, counts).await?;
        }
        Ok(())
    }

    /// Counts and announces the transactions that went through; returns the first failure.
    async fn finish_outcomes(
        &self,
        node: &mut Node,
        outcomes: Vec<Outcome<'_>>,
        ctx: PassCtx<'_>,
        counts: &mut BatchCounts,
    ) -> Option<Error> {
        let mut failure = None;
        for (group, outcome) in outcomes {
            let result = match outcome {
                Ok(evicted) => {
                    self.finish_transactions(node, &group, evicted, ctx, counts)
                        .await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                failure.get_or_insert(e);
            }
        }
        failure
    }

    /// Counts what a dry run would evict: the zombies per key and what would be left.
    async fn dry_run(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        stale_counts: Vec<Option<u64>>,
        ctx: PassCtx<'_>,
        counts: &mut BatchCounts,
    ) -> Result<(), Error> {
        let PassCtx {
            routed, observer, ..
        } = ctx;
        let (sets, stale): (Vec<&[u8]>, Vec<u64>) = keys
            .iter()
            .zip(stale_counts)
            .filter_map(|(key, stale)| Some((*key, stale?)))
            .unzip();
        let cards = read_counts(node, routed, &sets, Count::Members).await?;
        for (card, stale) in cards.into_iter().zip(stale) {
            let Some(card) = card.filter(|&c| c > 0) else {
                continue;
            };
            let left = card.saturating_sub(stale);
            counts.keys += 1;
            counts.evicted += stale;
            counts.members += left;
            observer.key_swept(left);
        }
        Ok(())
    }

    /// Counts and announces what the transaction of `keys` removed.
    async fn finish_transactions(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        (now, results): (f64, Vec<Option<Evicted>>),
        ctx: PassCtx<'_>,
        counts: &mut BatchCounts,
    ) -> Result<(), Error> {
        let PassCtx {
            routed, observer, ..
        } = ctx;
        observer.progress();
        let mut events = Events::for_removals(
            results
                .iter()
                .flatten()
                .map(|e| (e.removed.len(), e.roster_json.as_slice())),
        );
        let mut uncounted = Vec::new();
        for (key, evicted) in keys.iter().zip(results) {
            let Some(evicted) = evicted else {
                continue;
            };
            match evicted.card {
                Some(card) => self.account(
                    &Removal {
                        key,
                        removed: &evicted.removed,
                        roster_json: &evicted.roster_json,
                        card,
                        now,
                    },
                    &mut events,
                    counts,
                    observer,
                ),
                None => uncounted.push((*key, evicted)),
            }
        }
        if !uncounted.is_empty() {
            // Full rosters: the sets may be bigger, so count them (just after the eviction).
            let keys: Vec<&[u8]> = uncounted.iter().map(|(k, _)| *k).collect();
            let cards = match read_counts(node, routed, &keys, Count::Members).await {
                Ok(cards) => cards,
                Err(e) => {
                    // The members are gone either way: announce them with the count we know
                    // (at least the roster) rather than not at all.
                    tracing::warn!(error = %e, "could not count full rosters; announcing at least the roster size");
                    vec![None; keys.len()]
                }
            };
            for ((key, evicted), card) in uncounted.into_iter().zip(cards) {
                self.account(
                    &Removal {
                        key,
                        removed: &evicted.removed,
                        roster_json: &evicted.roster_json,
                        card: card.unwrap_or(evicted.roster_len as u64),
                        now,
                    },
                    &mut events,
                    counts,
                    observer,
                );
            }
        }
        self.publish(node, routed, events, counts).await
    }

    /// Keys holding more zombies than one call may remove: the bounded script, called again for
    /// keys its budget did not finish. In a cluster each call holds the keys of one slot.
    async fn sweep_big(
        &self,
        node: &mut Node,
        keys: Vec<Vec<u8>>,
        ctx: PassCtx<'_>,
        counts: &mut BatchCounts,
    ) -> Result<(), Error> {
        let PassCtx {
            routed,
            opts,
            observer,
            cancel,
        } = ctx;
        // The first call may remove a sixteenth of the budget and each next one twice as many as
        // the last, like the SCAN pages ([`FIRST_PAGE_SHARE`]): a key this big is often met first
        // thing in a pass, by a Redis that has been idle and runs every command slow for a while.
        let most = self.evict.max_members_per_call;
        let mut params = Params {
            ttl: self.sweep.ttl,
            unit: self.sweep.score_unit,
            budget: (most / FIRST_PAGE_SHARE as usize).max(1),
            clock: opts.clock,
        };
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        for group in slot_groups(&refs, node.needs_slot_groups()) {
            let mut keys: Vec<Vec<u8>> = group.iter().map(|k| k.to_vec()).collect();
            // On shutdown no new call starts; what the calls before removed was announced.
            while !keys.is_empty() && !cancel.is_cancelled() {
                let reply = self.script.call(node, &keys, &params).await?;
                params.budget = (params.budget * 2).min(most);
                observer.progress();
                let mut events = Events::default();
                let mut next = Vec::new();
                for (key, result) in keys.into_iter().zip(reply.keys) {
                    let swept = match result {
                        KeyReply::Swept(s) => s,
                        KeyReply::NotReached => {
                            next.push(key);
                            continue;
                        }
                        KeyReply::WrongType => continue,
                    };
                    let roster_json = EventEncoder::roster_json(&swept.roster);
                    let removal = Removal {
                        key: &key,
                        removed: &swept.removed,
                        roster_json: &roster_json,
                        card: swept.card,
                        now: reply.now,
                    };
                    if swept.more {
                        // Announce what this call removed; the key is counted once finished.
                        self.announce(&removal, &mut events, observer);
                        counts.evicted += swept.removed.len() as u64;
                        next.push(key);
                    } else {
                        self.account(&removal, &mut events, counts, observer);
                    }
                }
                self.publish(node, routed, events, counts).await?;
                keys = next;
            }
        }
        Ok(())
    }

    /// Counts a finished key and queues the events of what was removed from it.
    fn account(
        &self,
        r: &Removal,
        events: &mut Events,
        counts: &mut BatchCounts,
        observer: &dyn PassObserver,
    ) {
        counts.keys += 1;
        counts.members += r.card;
        counts.evicted += r.removed.len() as u64;
        observer.key_swept(r.card);
        self.announce(r, events, observer);
    }
}

/// Evicts `keys` in transactions: one for all of them on a single server; in a cluster one per
/// hash slot, each in its own pipeline, so that a slot that moved redirects only its own
/// transaction (the cluster client resends a whole pipeline to where a MOVED points, which is
/// safe for a transaction refused at queue time, and only for that).
async fn evict_keys<'k>(
    node: &Node,
    keys: &[&'k [u8]],
    cutoff: &Cutoff,
    fixed_now: Option<f64>,
) -> Vec<Outcome<'k>> {
    if keys.is_empty() {
        return Vec::new();
    }
    let groups = slot_groups(keys, node.needs_slot_groups());
    let runs = groups.into_iter().map(|group| {
        let mut node = node.clone();
        async move {
            let outcome =
                evict::evict(&mut node, std::slice::from_ref(&group), cutoff, fixed_now).await;
            (group, outcome)
        }
    });
    futures_util::future::join_all(runs).await
}

/// Zombies (`Count::Stale`) or members (`Count::Members`) per key, read from the node in one
/// pipeline. In a cluster, if a slot moved since SCAN (the cluster client then fails the whole
/// pipeline on the redirect), each key is asked where it lives now instead.
async fn read_counts(
    node: &mut Node,
    routed: &Conn,
    keys: &[&[u8]],
    what: Count<'_>,
) -> Result<Vec<Option<u64>>, Error> {
    match precheck::read(node, keys, what).await {
        Err(e) if node.needs_slot_groups() && e.is_redirect() => {
            let reads = keys.iter().map(|key| {
                let mut con = routed.clone();
                async move {
                    precheck::read(&mut con, &[key], what)
                        .await
                        .map(|v| v.first().copied().flatten())
                }
            });
            futures_util::future::join_all(reads)
                .await
                .into_iter()
                .collect()
        }
        other => other,
    }
}

/// Keys split into the groups one transaction or script call may hold: everything at once on a
/// single server, one hash slot per group in a cluster.
fn slot_groups<'k>(keys: &[&'k [u8]], by_slot: bool) -> Vec<Vec<&'k [u8]>> {
    if !by_slot {
        return vec![keys.to_vec()];
    }
    let mut index: HashMap<Slot, usize> = HashMap::new();
    let mut groups: Vec<Vec<&[u8]>> = Vec::new();
    for key in keys {
        let i = *index.entry(Slot::for_key(key)).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[i].push(key);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_slot_only_in_a_cluster() {
        let keys: Vec<&[u8]> = vec![
            b"presence:{a}:online",
            b"presence:b:online",
            b"presence:{a}:typing",
        ];
        assert_eq!(slot_groups(&keys, false), vec![keys.clone()]);
        let groups = slot_groups(&keys, true);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0], vec![keys[0], keys[2]], "hash tags share a slot");
        assert_eq!(groups[1], vec![keys[1]]);
    }
}
