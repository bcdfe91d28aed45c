//! One batch of a sweep's keys on one primary: read every key, evict the keys with a few zombies
//! in transactions and those with many through the bounded script, announce what was removed,
//! and report per key what is left (its size and, for a deadline index, its lowest score).
//!
//! Every source of work goes through here: a full pass, a key whose deadline came, a key that
//! reconciliation or a keyspace notification found.

use std::collections::HashMap;

use redis::cluster_routing::Slot;
use tokio_util::sync::CancellationToken;

use super::announce::{Events, Removal};
use super::sizing::CALL_BYTES;
use super::{Counts, Observer, Sweep};
use crate::Error;
use crate::evict::read::{self, KeyRead, KeyStatus, Read};
use crate::evict::script::{KeyReply, Params};
use crate::evict::transaction::{self, TxKey};
use crate::evict::{Clock, Cutoff};
use crate::store::walk::FIRST_PAGE_SHARE;
use crate::store::{Conn, Node, Store};
use crate::sweep::events::Roster;
use crate::sweep::storm::Admit;

/// How one check runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckOpts {
    /// The instant staleness is judged at, on Redis's clock, in Unix seconds: read from Redis a
    /// moment before, never ahead of it.
    pub(crate) now: f64,
    /// Tests: judge and stamp events at this instant instead of Redis `TIME`.
    pub(crate) fixed: Option<f64>,
    /// Count what would be evicted; change and publish nothing.
    pub(crate) dry_run: bool,
    /// Read each key's lowest remaining score, for a deadline index.
    pub(crate) track: bool,
    /// With `track`: read Redis's clock too (the caller's reading is getting old).
    pub(crate) read_time: bool,
    /// Ask the sweep's storm guard before evicting, and feed it.
    pub(crate) guarded: bool,
    /// `now` is held back behind Redis's clock (Redis is not answering, or an outage's credit
    /// runs): the apps could not write meanwhile, so the storm guard reads no silence into it
    /// and starts no hold.
    pub(crate) held_back: bool,
}

/// What a check works with besides its node.
#[derive(Clone, Copy)]
pub(crate) struct CheckCtx<'a> {
    /// For the preflight's connections of its own.
    pub(crate) store: &'a Store,
    /// The store's routed connection: in a cluster it follows keys whose slot moved, and
    /// publishes.
    pub(crate) routed: &'a Conn,
    pub(crate) observer: &'a dyn Observer,
    /// No new eviction starts once it fires.
    pub(crate) cancel: &'a CancellationToken,
    /// Keys whose newest heartbeat tells whether the sweep went silent, when the storm guard
    /// suspects it: the tracked keys checked most recently and found well.
    pub(crate) witnesses: &'a [Vec<u8>],
}

/// What a check learned about one key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum KeyState {
    /// Not checked to the end (a refused transaction, a failure, shutdown): look again soon.
    Unknown,
    /// The key is gone, empty, or no longer a sorted set.
    Gone,
    /// In a cluster, the key's slot is served by another primary now.
    Moved,
    /// Members remain: `card` of them, the oldest scoring `oldest` (in Unix seconds, when it
    /// was read).
    Live { card: u64, oldest: Option<f64> },
}

/// The outcome of one check.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) counts: Counts,
    /// One per key, in the order given.
    pub(crate) states: Vec<KeyState>,
    /// Redis's clock at the read, when the read asked for it (a tracking check does).
    pub(crate) time: Option<f64>,
    /// The storm guard held this check's evictions until then (Redis's clock, Unix seconds):
    /// its stale keys are reported `Live` and should be looked at again at that instant.
    pub(crate) hold_until: Option<f64>,
    /// The first failure; what was done before it is counted and announced all the same.
    pub(crate) error: Option<Error>,
}

/// The keys of one transaction (as indices into the batch) and what it did.
type Outcome = (Vec<usize>, Result<(f64, Vec<TxKey>), Error>);

impl Sweep {
    /// Checks `keys` on `node`. Returns what was done even when a step fails, so evictions are
    /// always counted and announced. Once `ctx.cancel` fires no new eviction starts.
    pub(crate) async fn check(
        &self,
        mut node: Node,
        keys: Vec<Vec<u8>>,
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
    ) -> Checked {
        let mut out = Checked {
            counts: Counts::default(),
            states: vec![KeyState::Unknown; keys.len()],
            time: None,
            hold_until: None,
            error: None,
        };
        if let Err(e) = self
            .check_inner(&mut node, &keys, opts, ctx, &mut out)
            .await
        {
            // Check the permissions again next time: the failure may be a changed ACL.
            self.forget_preflight(&node);
            out.error = Some(match e {
                Error::Permission {
                    command,
                    target,
                    detail,
                } if target == read::KEY_TARGET => Error::Permission {
                    command,
                    target: format!("the keys {}", self.config.pattern.glob()),
                    detail,
                },
                e => e,
            });
        }
        if opts.guarded {
            self.guard.evicted(opts.now, out.counts.evicted);
        }
        out
    }

    async fn check_inner(
        &self,
        node: &mut Node,
        keys: &[Vec<u8>],
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
        out: &mut Checked,
    ) -> Result<(), Error> {
        let cutoff = Cutoff::new(
            opts.fixed.unwrap_or(opts.now),
            self.config.ttl,
            self.config.score_unit,
        );
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let guarded = opts.guarded && self.guard.enabled() && !opts.dry_run;
        let what = match (opts.track, guarded) {
            (true, _) => Read::Probe {
                time: opts.read_time,
                newest: guarded,
            },
            (false, true) => Read::StaleNewest(&cutoff),
            (false, false) => Read::Stale(&cutoff),
        };
        let reads = read::read(node, &refs, what).await?;
        out.time = reads.time;
        ctx.observer.progress();
        if opts.dry_run {
            return self.dry_run(node, &refs, reads.keys, ctx, out).await;
        }
        // Clean keys whose size is still to be read (a full pass reads it only for them).
        let mut clean: Vec<usize> = Vec::new();
        // Keys holding zombies, with how many (at most): transactions of at most `budget` zombies
        // each take them; keys with more go to the script.
        let mut stale: Vec<(usize, u64)> = Vec::new();
        // A tracking read knows a key holds zombies from its lowest score, not how many: a key
        // bigger than a transaction's budget has them counted first (and every stale key, when
        // the storm guard must know how many would go).
        let mut uncounted: Vec<usize> = Vec::new();
        // What a tracking read saw of each stale key, should the guard hold its eviction.
        let mut seen: HashMap<usize, KeyRead> = HashMap::new();
        let mut newest = f64::NEG_INFINITY;
        // Members of the keys read: at least this many are the sweep's, even before their
        // checks are counted in its population (a backlog found by the first walk).
        let mut members = 0;
        if opts.track {
            // Ids as long as the probe saw bound this check's calls, before they bring any back.
            self.observe_ids(&reads.keys);
        }
        let budget = self.sizing.budget(self.evict.max_members_per_call) as u64;
        for (i, read) in reads.keys.into_iter().enumerate() {
            let read = match read {
                KeyStatus::NotZset => {
                    out.states[i] = KeyState::Gone;
                    continue;
                }
                KeyStatus::Moved => {
                    out.states[i] = KeyState::Moved;
                    continue;
                }
                KeyStatus::Set(read) => read,
            };
            newest = newest.max(read.newest.unwrap_or(f64::NEG_INFINITY));
            members += read.card;
            if opts.track {
                let KeyRead { card, oldest, .. } = read;
                match oldest {
                    Some(score) if cutoff.is_stale(score) => {
                        seen.insert(i, read);
                        if guarded || card > budget {
                            uncounted.push(i);
                        } else {
                            stale.push((i, card));
                        }
                    }
                    _ => {
                        out.states[i] = self.live(card, oldest);
                        self.count_clean(card, out, ctx.observer);
                    }
                }
            } else if read.stale == 0 {
                clean.push(i);
            } else {
                stale.push((i, read.stale));
            }
        }
        if !uncounted.is_empty() {
            let keys: Vec<&[u8]> = uncounted.iter().map(|&i| refs[i]).collect();
            let counts = read::read(node, &keys, Read::Stale(&cutoff)).await?;
            for (i, read) in uncounted.into_iter().zip(counts.keys) {
                match read {
                    KeyStatus::Set(read) => stale.push((i, read.stale)),
                    KeyStatus::NotZset => out.states[i] = KeyState::Gone,
                    KeyStatus::Moved => out.states[i] = KeyState::Moved,
                }
            }
        }
        if guarded {
            self.heard(newest, opts.now);
            let zombies: u64 = stale.iter().map(|&(_, n)| n).sum();
            if zombies > 0
                && !opts.held_back
                && !ctx.witnesses.is_empty()
                && self.guard.suspects_silence(opts.now)
            {
                // Quiet keys came due, but the busy ones may be well: ask them.
                let refs: Vec<&[u8]> = ctx.witnesses.iter().map(Vec::as_slice).collect();
                let heard = read::read(node, &refs, Read::Newest).await?;
                for read in heard.keys.iter().filter_map(|r| r.set()) {
                    self.heard(read.newest.unwrap_or(f64::NEG_INFINITY), opts.now);
                }
            }
            if let Admit::Hold(until) = self.guard.admit(opts.now, zombies, members, opts.held_back)
            {
                // Nothing is removed: tracked keys are looked at again when the hold ends, the
                // others at the next walk.
                for (i, _) in stale {
                    if let Some(read) = seen.get(&i) {
                        out.states[i] = self.live(read.card, read.oldest);
                        self.count_clean(read.card, out, ctx.observer);
                    }
                }
                out.hold_until = Some(until);
                return Ok(());
            }
        }
        // A full pass reads no ids before it evicts: before its first eviction, the lowest
        // members of a few stale keys say how long this sweep's ids run (one round trip, once),
        // so that 16 KiB ids do not make the first call's reply 8 MB.
        let budget = if self.sizing.seen() || stale.is_empty() {
            budget
        } else {
            let sample: Vec<&[u8]> = stale.iter().take(8).map(|&(i, _)| refs[i]).collect();
            self.observe_ids(&read::read(node, &sample, Read::Oldest).await?.keys);
            self.sizing.budget(self.evict.max_members_per_call) as u64
        };
        // Each transaction call removes at most `budget` members and brings back about
        // `CALL_BYTES` at most.
        let mut transactions: Vec<Vec<usize>> = Vec::new();
        let (mut in_last, mut bytes_last) = (0, 0);
        let mut big: Vec<usize> = Vec::new();
        for (i, zombies) in stale {
            if zombies > budget {
                big.push(i);
                continue;
            }
            let bytes = self.sizing.key_bytes(zombies);
            if transactions.is_empty()
                || in_last + zombies > budget
                || bytes_last + bytes > CALL_BYTES
            {
                transactions.push(Vec::new());
                (in_last, bytes_last) = (0, 0);
            }
            in_last += zombies;
            bytes_last += bytes;
            transactions.last_mut().expect("pushed above").push(i);
        }
        let first_zombie = transactions.first().and_then(|g| g.first()).or(big.first());
        if let Some(&i) = first_zombie {
            // Before anything is removed: may this user do all a check does?
            self.preflight(ctx.store, node, refs[i]).await?;
        }
        let mut transactions = transactions.into_iter();
        // The clean keys' sizes and the first transactions go out together: one round trip.
        let first = transactions.next().unwrap_or_default();
        let mut card_node = node.clone();
        let clean_refs: Vec<&[u8]> = clean.iter().map(|&i| refs[i]).collect();
        let (cards, outcomes) = tokio::join!(
            read::read(&mut card_node, &clean_refs, Read::Members),
            self.evict_keys(node, &refs, &first, &cutoff, opts)
        );
        // Whatever a transaction removed is announced first, even if another read failed.
        let mut failure = self.finish_outcomes(node, &refs, outcomes, ctx, out).await;
        match cards {
            Ok(cards) => {
                for (i, read) in clean.into_iter().zip(cards.keys) {
                    match read {
                        KeyStatus::Set(read) => {
                            out.states[i] = self.live(read.card, None);
                            self.count_clean(read.card, out, ctx.observer);
                        }
                        KeyStatus::NotZset => out.states[i] = KeyState::Gone,
                        KeyStatus::Moved => out.states[i] = KeyState::Moved,
                    }
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
            let outcomes = self.evict_keys(node, &refs, &group, &cutoff, opts).await;
            failure = self.finish_outcomes(node, &refs, outcomes, ctx, out).await;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if !big.is_empty() && !ctx.cancel.is_cancelled() {
            self.sweep_big(node, &refs, big, opts, ctx, out).await?;
        }
        Ok(())
    }

    /// Tells the storm guard of a heartbeat scored `newest` (score unit), if any, read at
    /// `now`: a score ahead of Redis's clock (an app's clock ahead) counts as now, not later.
    fn heard(&self, newest: f64, now: f64) {
        if newest.is_finite() {
            self.guard
                .heartbeat(self.config.score_unit.to_seconds(newest).min(now));
        }
    }

    /// Teaches the sizing the ids that `reads` brought back.
    fn observe_ids(&self, reads: &[KeyStatus]) {
        let (mut n, mut bytes, mut longest) = (0, 0, 0);
        for read in reads.iter().filter_map(|r| r.set()) {
            n += usize::from(read.id_bytes > 0);
            bytes += read.id_bytes;
            longest = longest.max(read.id_bytes);
        }
        self.sizing.observe(n, bytes, longest);
    }

    /// What is left of a key of `card` members whose lowest score is `oldest` (score unit).
    fn live(&self, card: u64, oldest: Option<f64>) -> KeyState {
        match card {
            0 => KeyState::Gone,
            card => KeyState::Live {
                card,
                oldest: oldest.map(|s| self.config.score_unit.to_seconds(s)),
            },
        }
    }

    fn count_clean(&self, card: u64, out: &mut Checked, observer: &dyn Observer) {
        if card > 0 {
            out.counts.keys += 1;
            out.counts.members += card;
            observer.key_checked(card);
        }
    }

    /// Counts what a dry run would evict: the zombies per key and what would be left.
    async fn dry_run(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        reads: Vec<KeyStatus>,
        ctx: CheckCtx<'_>,
        out: &mut Checked,
    ) -> Result<(), Error> {
        let (sets, stale): (Vec<&[u8]>, Vec<u64>) = keys
            .iter()
            .zip(reads)
            .filter_map(|(key, read)| Some((*key, read.set()?.stale)))
            .unzip();
        let cards = read::read(node, &sets, Read::Members).await?;
        for (read, stale) in cards.keys.into_iter().zip(stale) {
            let Some(card) = read.set().map(|r| r.card).filter(|&c| c > 0) else {
                continue;
            };
            let left = card.saturating_sub(stale);
            out.counts.keys += 1;
            out.counts.evicted += stale;
            out.counts.members += left;
            ctx.observer.key_checked(left);
        }
        Ok(())
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
    ) -> Vec<Outcome> {
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
                    opts.fixed,
                    opts.track,
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
        outcomes: Vec<Outcome>,
        ctx: CheckCtx<'_>,
        out: &mut Checked,
    ) -> Option<Error> {
        let mut failure = None;
        for (group, outcome) in outcomes {
            let result = match outcome {
                Ok(evicted) => {
                    self.finish_transaction(node, keys, &group, evicted, ctx, out)
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

    /// Counts and announces what the transaction of `group` removed.
    async fn finish_transaction(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        group: &[usize],
        (now, results): (f64, Vec<TxKey>),
        ctx: CheckCtx<'_>,
        out: &mut Checked,
    ) -> Result<(), Error> {
        ctx.observer.progress();
        let mut events = Events::default();
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
            // Full rosters: the sets may be bigger, so count them (just after the eviction).
            let refs: Vec<&[u8]> = uncounted.iter().map(|(i, _)| keys[*i]).collect();
            let cards = match read::read(node, &refs, Read::Members).await {
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
        events: &mut Events,
        node: &mut Node,
        ctx: CheckCtx<'_>,
        out: &mut Checked,
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

    /// Keys holding more zombies than one call may remove: the bounded script, called again for
    /// keys its budget did not finish. In a cluster each call holds the keys of one slot.
    async fn sweep_big(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        big: Vec<usize>,
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
        out: &mut Checked,
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
            clock: opts.fixed.map_or(Clock::Redis, Clock::Fixed),
            // Judged at the caller's instant, as the transactions are: after an outage that is
            // its start, so big keys get the outage's credit too.
            judge_by: Some(opts.now),
        };
        for group in slot_groups(keys, &big, node.needs_slot_groups()) {
            let mut pending: Vec<usize> = group;
            // On shutdown no new call starts; what the calls before removed was announced.
            while !pending.is_empty() && !ctx.cancel.is_cancelled() {
                let call_keys: Vec<Vec<u8>> = pending.iter().map(|&i| keys[i].to_vec()).collect();
                let reply = self.script.call(node, &call_keys, &params).await?;
                params.budget = (params.budget * 2).min(most);
                ctx.observer.progress();
                let mut events = Events::default();
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
fn slot_groups(keys: &[&[u8]], group: &[usize], by_slot: bool) -> Vec<Vec<usize>> {
    if !by_slot {
        return vec![group.to_vec()];
    }
    let mut index: HashMap<Slot, usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &i in group {
        let g = *index.entry(Slot::for_key(keys[i])).or_insert_with(|| {
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
