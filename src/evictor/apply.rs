//! The evict step of a check: carries out a [`Plan`](super::plan::Plan) with transactions and
//! the bounded script, then counts and announces what each call removed.

use std::collections::HashMap;

use presence_sweeper_redis::evict::KeyReply;
use presence_sweeper_redis::evict::read::{self, Read};
use presence_sweeper_redis::evict::script::Params;
use presence_sweeper_redis::evict::transaction::{self, TxKey};
use presence_sweeper_redis::scan::FIRST_PAGE_SHARE;
use presence_sweeper_redis::{Error, Node};
use presence_sweeper_rules::check::{CheckOpts, Checked, Counts};
use presence_sweeper_rules::event::Roster;
use presence_sweeper_rules::plan::{KeyState, Plan};
use presence_sweeper_rules::score::Cutoff;

use super::Evictor;
use super::announce::{Outbox, Removal};
use super::check::CheckCtx;

/// The keys of one transaction (as indices into the batch) and what it did.
pub(super) type Applied = (Vec<usize>, Result<(f64, Vec<TxKey>), Error>);

impl Evictor {
    /// The evict step: proves the permissions before the first removal, reads the clean keys'
    /// sizes alongside the first transactions (one round trip), then runs the other
    /// transactions and the script. What any call removed is counted and announced, even when
    /// a later step fails.
    #[expect(
        clippy::too_many_arguments,
        reason = "the steps' shared state, passed as it is"
    )]
    pub(super) async fn evict(
        &self,
        node: &mut Node,
        refs: &[&[u8]],
        plan: Plan,
        clean: &[usize],
        cutoff: &Cutoff,
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) -> Result<(), Error> {
        if let Some(i) = plan.first_key() {
            // Before anything is removed: may this user do all a check does?
            self.preflight(ctx.store, node, refs[i]).await?;
        }
        if self.config.stream.is_some() {
            return self
                .evict_streamed(node, refs, plan, clean, opts, ctx, out)
                .await;
        }
        let mut transactions = plan.transactions.into_iter();
        let first = transactions.next().unwrap_or_default();
        let mut card_node = node.clone();
        let clean_refs: Vec<&[u8]> = clean.iter().map(|&i| refs[i]).collect();
        let (cards, outcomes) = tokio::join!(
            read::read(&mut card_node, &clean_refs, Read::Members),
            self.evict_keys(node, refs, &first, cutoff, opts)
        );
        // Whatever a transaction removed is announced first, even if another read failed.
        let mut failure = self.finish_outcomes(node, refs, outcomes, ctx, out).await;
        match cards {
            Ok(cards) => {
                for (&i, status) in clean.iter().zip(cards.keys) {
                    let state = match KeyState::of(status) {
                        Ok(read) => self.live(read.card, None),
                        Err(state) => state,
                    };
                    self.settle(i, state, out, ctx.observer);
                }
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
        for group in transactions {
            // On shutdown no new call starts; what the calls before removed was announced.
            if failure.is_some() || ctx.cancel.is_cancelled() {
                break;
            }
            let outcomes = self.evict_keys(node, refs, &group, cutoff, opts).await;
            failure = self.finish_outcomes(node, refs, outcomes, ctx, out).await;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if !plan.big.is_empty() && !ctx.cancel.is_cancelled() {
            self.sweep_big(node, refs, plan.big, opts, ctx, out).await?;
        }
        Ok(())
    }

    /// The evict step of a sweep with a stream: the clean keys' sizes are read alongside the
    /// first calls of the stream script, which takes every stale key.
    #[expect(
        clippy::too_many_arguments,
        reason = "the steps' shared state, passed as it is"
    )]
    async fn evict_streamed(
        &self,
        node: &mut Node,
        refs: &[&[u8]],
        plan: Plan,
        clean: &[usize],
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) -> Result<(), Error> {
        let mut card_node = node.clone();
        let clean_refs: Vec<&[u8]> = clean.iter().map(|&i| refs[i]).collect();
        let first = self.evict.max_members_per_call / FIRST_PAGE_SHARE as usize;
        let mut streamed = Checked {
            counts: Counts::default(),
            states: std::mem::take(&mut out.states),
            time: None,
            expires_in: Vec::new(),
            hold_until: None,
            error: None,
        };
        let (cards, result) = tokio::join!(
            read::read(&mut card_node, &clean_refs, Read::Members),
            self.sweep_streams(
                node,
                refs,
                plan.transactions,
                plan.big,
                first,
                opts,
                ctx,
                &mut streamed
            )
        );
        out.states = streamed.states;
        out.counts.add(&streamed.counts);
        // What the script removed is counted even if reading the sizes failed.
        let cards = match cards {
            Ok(cards) => cards,
            Err(e) => return result.and(Err(e)),
        };
        for (&i, status) in clean.iter().zip(cards.keys) {
            let state = match KeyState::of(status) {
                Ok(read) => self.live(read.card, None),
                Err(state) => state,
            };
            self.settle(i, state, out, ctx.observer);
        }
        result
    }

    /// Evicts the keys `group` (indices into `keys`) in transactions: one for all of them on a
    /// single server; in a cluster one per hash slot, each in its own pipeline, so that a slot
    /// that moved redirects only its own transaction (the cluster client resends a whole
    /// pipeline to where a MOVED points, which is safe for a transaction refused at queue time,
    /// and only for that).
    async fn evict_keys(
        &self,
        node: &Node,
        keys: &[&[u8]],
        group: &[usize],
        cutoff: &Cutoff,
        opts: CheckOpts,
    ) -> Vec<Applied> {
        if group.is_empty() {
            return Vec::new();
        }
        let groups = slot_groups(keys, group, node.needs_slot_groups());
        let runs = groups.into_iter().map(|group| {
            let mut node = node.clone();
            async move {
                let refs: Vec<&[u8]> = group.iter().map(|&i| keys[i]).collect();
                let outcome = transaction::evict(
                    &mut node,
                    std::slice::from_ref(&refs),
                    cutoff,
                    opts.purpose.tracks(),
                    self.sizing.roster(),
                )
                .await;
                (group, outcome)
            }
        });
        futures_util::future::join_all(runs).await
    }

    /// Counts and announces the transactions that went through; returns the first failure.
    async fn finish_outcomes(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        outcomes: Vec<Applied>,
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) -> Option<Error> {
        let mut failure = None;
        for (group, outcome) in outcomes {
            let result = match outcome {
                Ok(evicted) => {
                    self.finish_transaction(node, keys, &group, evicted, ctx, out)
                        .await
                }
                Err(e) => Err(self.unanswered(e, ctx)),
            };
            if let Err(e) = result {
                failure.get_or_insert(e);
            }
        }
        failure
    }

    /// Counts and announces what the transaction of `group` removed.
    async fn finish_transaction(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        group: &[usize],
        (now, results): (f64, Vec<TxKey>),
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) -> Result<(), Error> {
        ctx.observer.progress();
        let mut events = Outbox::default();
        let mut uncounted = Vec::new();
        for (&i, result) in group.iter().zip(results) {
            let evicted = match result {
                TxKey::Done(evicted) => evicted,
                TxKey::NotZset => {
                    out.states[i] = KeyState::Gone;
                    continue;
                }
                TxKey::Moved => {
                    out.states[i] = KeyState::Moved;
                    continue;
                }
            };
            match evicted.card {
                Some(card) => {
                    let removal = Removal::of(keys[i], &evicted, card, now);
                    self.count_removal(&removal, true, &mut events, node, ctx, out)
                        .await;
                    out.states[i] = self.live(card, evicted.oldest);
                }
                None => uncounted.push((i, evicted)),
            }
        }
        if !uncounted.is_empty() {
            // Full rosters: the sets may be bigger, so count them (just after the eviction), on
            // a connection that works even if the eviction's reply came late.
            let mut counting = ctx.store.rewire(node).await;
            let refs: Vec<&[u8]> = uncounted.iter().map(|(i, _)| keys[*i]).collect();
            let cards = match read::read(&mut counting, &refs, Read::Members).await {
                Ok(reads) => reads
                    .keys
                    .into_iter()
                    .map(|r| r.set().map(|r| r.card))
                    .collect(),
                Err(e) => {
                    // The members are gone either way: announce them with the count we know
                    // (at least the roster) rather than not at all.
                    tracing::warn!(error = %e, "could not count full rosters; announcing at least the roster size");
                    vec![None; refs.len()]
                }
            };
            for ((i, evicted), card) in uncounted.into_iter().zip(cards) {
                let card = card.unwrap_or(evicted.roster.len() as u64);
                let removal = Removal::of(keys[i], &evicted, card, now);
                self.count_removal(&removal, true, &mut events, node, ctx, out)
                    .await;
                out.states[i] = self.live(card, evicted.oldest);
            }
        }
        self.flush(&mut events, node, ctx, &mut out.counts).await;
        Self::outcome(events)
    }

    /// Counts a removal (the key too if it is `finished`) and announces it.
    async fn count_removal(
        &self,
        r: &Removal<'_>,
        finished: bool,
        events: &mut Outbox,
        node: &mut Node,
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) {
        if finished {
            out.counts.keys += 1;
            out.counts.members += r.card;
            ctx.observer.key_checked(r.card);
        }
        out.counts.evicted += r.removed.len() as u64;
        let ids = r.removed.iter().map(|(m, _)| m.len());
        self.sizing.observe(
            r.removed.len() + r.roster.len(),
            ids.clone().sum::<usize>() + r.roster.json_len(),
            ids.max().unwrap_or(0).max(r.roster.longest()),
        );
        self.announce(r, events, node, ctx, &mut out.counts).await;
    }

    /// An eviction call failed with `e`. If its reply was lost (none within
    /// `redis.eviction_timeout`, or the connection dropped), Redis may have removed members
    /// whose events can never be sent: said and counted. Returns `e`.
    fn unanswered(&self, e: Error, ctx: CheckCtx<'_>) -> Error {
        if let Error::Redis(cause) = &e
            && presence_sweeper_redis::is_reply_lost(cause)
        {
            ctx.observer.evictions_unanswered(1);
            tracing::error!(
                sweep = %self.config.name,
                error = %e,
                "an eviction got no reply: members it may have removed are not announced (redis.eviction_timeout)"
            );
        }
        e
    }

    /// Keys holding more zombies than one call may remove: the bounded script, called again for
    /// keys its budget did not finish. In a cluster each call holds the keys of one slot.
    async fn sweep_big(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        big: Vec<usize>,
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) -> Result<(), Error> {
        // The first call may remove a sixteenth of the budget and each next one twice as many as
        // the last, like the SCAN pages ([`FIRST_PAGE_SHARE`]): a key this big is often met first
        // thing in a pass, by a Redis that has been idle and runs every command slow for a while.
        let most = self.sizing.budget(self.evict.max_members_per_call);
        let mut params = Params {
            ttl: self.config.ttl,
            unit: self.config.score_unit,
            budget: (most / FIRST_PAGE_SHARE as usize).max(1),
            roster: self.sizing.roster(),
            // Judged at the caller's instant, as the transactions are: after an outage that is
            // its start, so big keys get the outage's credit too.
            judge_by: Some(opts.judge_at),
        };
        for group in slot_groups(keys, &big, node.needs_slot_groups()) {
            let mut pending: Vec<usize> = group;
            // On shutdown no new call starts; what the calls before removed was announced.
            while !pending.is_empty() && !ctx.cancel.is_cancelled() {
                let call_keys: Vec<Vec<u8>> = pending.iter().map(|&i| keys[i].to_vec()).collect();
                let reply = self
                    .script
                    .call(node, &call_keys, &params)
                    .await
                    .map_err(|e| self.unanswered(e, ctx))?;
                params.budget = (params.budget * 2).min(most);
                ctx.observer.progress();
                let mut events = Outbox::default();
                let mut next = Vec::new();
                for (i, result) in pending.into_iter().zip(reply.keys) {
                    let swept = match result {
                        KeyReply::Swept(s) => s,
                        KeyReply::NotReached => {
                            next.push(i);
                            continue;
                        }
                        KeyReply::WrongType => {
                            out.states[i] = KeyState::Gone;
                            continue;
                        }
                    };
                    let roster = Roster::of(&swept.roster);
                    let removal = Removal {
                        key: keys[i],
                        removed: &swept.removed,
                        roster: &roster,
                        card: swept.card,
                        now: reply.now,
                    };
                    // A key the budget did not finish is counted once finished.
                    self.count_removal(&removal, !swept.more, &mut events, node, ctx, out)
                        .await;
                    if swept.more {
                        next.push(i);
                    } else {
                        out.states[i] = self.live(swept.card, swept.oldest);
                    }
                }
                self.flush(&mut events, node, ctx, &mut out.counts).await;
                Self::outcome(events)?;
                pending = next;
            }
        }
        Ok(())
    }
}

/// The indices `group` of `keys` split into the groups one transaction or script call may hold:
/// everything at once on a single server, one hash slot per group in a cluster.
pub(super) fn slot_groups(keys: &[&[u8]], group: &[usize], by_slot: bool) -> Vec<Vec<usize>> {
    if !by_slot {
        return vec![group.to_vec()];
    }
    let mut index: HashMap<u16, usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &i in group {
        let g = *index
            .entry(presence_sweeper_rules::slot::slot(keys[i]))
            .or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
        groups[g].push(i);
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
        assert_eq!(slot_groups(&keys, &[0, 1, 2], false), vec![vec![0, 1, 2]]);
        let groups = slot_groups(&keys, &[0, 1, 2], true);
        assert_eq!(groups, vec![vec![0, 2], vec![1]], "hash tags share a slot");
    }
}
