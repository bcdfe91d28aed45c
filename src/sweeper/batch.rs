//! One batch of keys from one primary: count the zombies of every key, evict the keys with a few
//! in transactions and those with many through the bounded script, and account for all of it.

use std::collections::HashMap;

use redis::cluster_routing::Slot;

use super::announce::Events;
use super::{BatchCounts, PassObserver, PassOptions, Sweeper};
use crate::Error;
use crate::evict::{self, Clock, Cutoff, Evicted, KeyReply, Params};
use crate::store::{Conn, Node};

impl Sweeper {
    /// Sweeps one batch. Returns what was done even when a step fails, so evictions are always
    /// counted.
    pub(super) async fn sweep_batch(
        &self,
        mut node: Node,
        routed: &Conn,
        keys: Vec<Vec<u8>>,
        page_time: f64,
        opts: PassOptions,
        observer: &dyn PassObserver,
    ) -> (BatchCounts, Option<Error>) {
        let mut counts = BatchCounts::default();
        let result = self
            .sweep_batch_inner(
                &mut node,
                routed,
                keys,
                page_time,
                opts,
                observer,
                &mut counts,
            )
            .await;
        (counts, result.err())
    }

    #[allow(clippy::too_many_arguments)]
    async fn sweep_batch_inner(
        &self,
        node: &mut Node,
        routed: &Conn,
        keys: Vec<Vec<u8>>,
        page_time: f64,
        opts: PassOptions,
        observer: &dyn PassObserver,
        counts: &mut BatchCounts,
    ) -> Result<(), Error> {
        let fixed_now = match opts.clock {
            Clock::Fixed(t) => Some(t),
            Clock::Redis => None,
        };
        let cutoff = Cutoff::new(
            fixed_now.unwrap_or(page_time),
            self.sweep.ttl,
            self.sweep.score_unit,
        );
        let stale_counts = evict::count_stale(node, &keys, &cutoff).await?;
        observer.progress();
        if opts.dry_run {
            return self
                .dry_run(node, &keys, stale_counts, observer, counts)
                .await;
        }
        let budget = self.evict.max_members_per_call as u64;
        let mut clean: Vec<&[u8]> = Vec::new();
        // Transactions of at most `budget` zombies each; keys with more go to the script.
        let mut transactions: Vec<Vec<&[u8]>> = Vec::new();
        let mut in_last = 0;
        let mut big = Vec::new();
        for (key, stale) in keys.iter().zip(stale_counts) {
            match stale {
                None => {}
                Some(0) => clean.push(key),
                Some(stale) if stale > budget => big.push(key.clone()),
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
        let grouped = node.needs_slot_groups();
        let mut transactions = transactions.into_iter();
        // The clean keys' sizes and the first transaction go out together: one round trip.
        let first = transactions.next();
        let mut card_node = node.clone();
        let (cards, evicted) = tokio::join!(evict::cardinalities(&mut card_node, &clean), async {
            match &first {
                Some(keys) => {
                    let groups = slot_groups(keys, grouped);
                    Some(
                        evict::evict(node, &groups, &cutoff, fixed_now)
                            .await
                            .map(|r| (groups, r)),
                    )
                }
                None => None,
            }
        });
        for card in cards?.into_iter().flatten().filter(|&c| c > 0) {
            counts.keys += 1;
            counts.members += card;
            observer.key_swept(card);
        }
        if let Some(evicted) = evicted {
            let (groups, evicted) = evicted?;
            self.finish_transactions(node, routed, &groups, evicted, observer, counts)
                .await?;
        }
        for keys in transactions {
            let groups = slot_groups(&keys, grouped);
            let evicted = evict::evict(node, &groups, &cutoff, fixed_now).await?;
            self.finish_transactions(node, routed, &groups, evicted, observer, counts)
                .await?;
        }
        if !big.is_empty() {
            self.sweep_big(node, routed, big, opts, observer, counts)
                .await?;
        }
        Ok(())
    }

    /// Counts what a dry run would evict: the zombies per key and what would be left.
    async fn dry_run(
        &self,
        node: &mut Node,
        keys: &[Vec<u8>],
        stale_counts: Vec<Option<u64>>,
        observer: &dyn PassObserver,
        counts: &mut BatchCounts,
    ) -> Result<(), Error> {
        let (sets, stale): (Vec<&[u8]>, Vec<u64>) = keys
            .iter()
            .zip(stale_counts)
            .filter_map(|(key, stale)| Some((key.as_slice(), stale?)))
            .unzip();
        let cards = evict::cardinalities(node, &sets).await?;
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

    /// Counts and announces what the transactions of `groups` removed.
    async fn finish_transactions(
        &self,
        node: &mut Node,
        routed: &Conn,
        groups: &[Vec<&[u8]>],
        (now, results): (f64, Vec<Option<Evicted>>),
        observer: &dyn PassObserver,
        counts: &mut BatchCounts,
    ) -> Result<(), Error> {
        observer.progress();
        let mut events = Events::default();
        let mut uncounted = Vec::new();
        for (key, evicted) in groups.iter().flatten().zip(results) {
            let Some(evicted) = evicted else {
                continue;
            };
            match evicted.card {
                Some(card) => self.account(
                    key,
                    &evicted.removed,
                    &evicted.roster,
                    card,
                    now,
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
            let cards = evict::cardinalities(node, &keys).await?;
            for ((key, evicted), card) in uncounted.into_iter().zip(cards) {
                self.account(
                    key,
                    &evicted.removed,
                    &evicted.roster,
                    card.unwrap_or(evicted.roster.len() as u64),
                    now,
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
        routed: &Conn,
        keys: Vec<Vec<u8>>,
        opts: PassOptions,
        observer: &dyn PassObserver,
        counts: &mut BatchCounts,
    ) -> Result<(), Error> {
        let params = Params {
            ttl: self.sweep.ttl,
            unit: self.sweep.score_unit,
            budget: self.evict.max_members_per_call,
            clock: opts.clock,
        };
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        for group in slot_groups(&refs, node.needs_slot_groups()) {
            let mut keys: Vec<Vec<u8>> = group.iter().map(|k| k.to_vec()).collect();
            while !keys.is_empty() {
                let reply = self.script.call(node, &keys, &params).await?;
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
                    if swept.more {
                        // Announce what this call removed; the key is counted once finished.
                        self.announce(
                            &key,
                            &swept.removed,
                            &swept.roster,
                            swept.card,
                            reply.now,
                            &mut events,
                            observer,
                        );
                        counts.evicted += swept.removed.len() as u64;
                        next.push(key);
                    } else {
                        self.account(
                            &key,
                            &swept.removed,
                            &swept.roster,
                            swept.card,
                            reply.now,
                            &mut events,
                            counts,
                            observer,
                        );
                    }
                }
                self.publish(node, routed, events, counts).await?;
                keys = next;
            }
        }
        Ok(())
    }

    /// Counts a finished key and queues the events of what was removed from it.
    #[allow(clippy::too_many_arguments)]
    fn account(
        &self,
        key: &[u8],
        removed: &[(Vec<u8>, f64)],
        roster: &[Vec<u8>],
        card: u64,
        now: f64,
        events: &mut Events,
        counts: &mut BatchCounts,
        observer: &dyn PassObserver,
    ) {
        counts.keys += 1;
        counts.members += card;
        counts.evicted += removed.len() as u64;
        observer.key_swept(card);
        self.announce(key, removed, roster, card, now, events, observer);
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
