//! One batch of a sweep's keys on one primary: read every key, evict the keys with a few zombies
//! in transactions and those with many through the bounded script, announce what was removed,
//! and report per key what is left (its size and, for a deadline index, its lowest score).
//!
//! Every source of work goes through here: a full pass, a key whose deadline came, a key that
//! reconciliation or a keyspace notification found. A check runs as named steps: classify
//! (pure, `plan`; it also checks the scores against the sweep's `score_unit`, `units`), count,
//! admit (the storm guard), plan (pure) and evict (`apply`).

use tokio_util::sync::CancellationToken;

use presence_sweeper_redis::evict::read::{self, Read};
use presence_sweeper_redis::{Error, Node, Store};
use presence_sweeper_rules::check::{CheckOpts, Checked, Counts, Expiry, Purpose};
use presence_sweeper_rules::keys::Keys;
use presence_sweeper_rules::plan::{self, KeyState, Rules, Triage};
use presence_sweeper_rules::read::{KeyStatus, Probing};
use presence_sweeper_rules::report::Observer;
use presence_sweeper_rules::score::{Cutoff, ScoreUnit};
use presence_sweeper_rules::storm::Admit;
use presence_sweeper_rules::units::Mismatch;

use super::Evictor;

/// The first read of a batch checked for `purpose`: with `newest`, also each key's newest
/// heartbeat for the storm guard; a deadline check's asks each key what `probing` says.
fn first_read<'a>(
    purpose: Purpose,
    cutoff: &'a Cutoff,
    newest: bool,
    probing: &'a [Probing],
) -> Read<'a> {
    match purpose {
        Purpose::Deadline { read_time, .. } => Read::Probe {
            time: read_time,
            newest,
            keys: probing,
        },
        _ if newest => Read::StaleNewest(cutoff),
        _ => Read::Stale(cutoff),
    }
}

/// What a check works with besides its node.
#[derive(Clone, Copy)]
pub(crate) struct CheckCtx<'a> {
    /// For the preflight's connections of its own.
    pub(crate) store: &'a Store,
    pub(crate) observer: &'a dyn Observer,
    /// No new eviction starts once it fires.
    pub(crate) cancel: &'a CancellationToken,
    /// Keys whose newest heartbeat tells whether the sweep went silent, when the storm guard
    /// suspects it: the tracked keys checked most recently and found well.
    pub(crate) witnesses: &'a [Vec<u8>],
}

impl Evictor {
    /// Checks `keys` on `node` (for a deadline check, asking each what `probing` says).
    /// Returns what was done even when a step fails, so evictions are always counted and
    /// announced. Once `ctx.cancel` fires no new eviction starts.
    pub(crate) async fn check(
        &self,
        mut node: Node,
        keys: Keys,
        probing: &[Probing],
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
    ) -> Checked<Error> {
        let mut out = Checked {
            counts: Counts::default(),
            states: vec![KeyState::Unknown; keys.len()],
            time: None,
            expires_in: Vec::new(),
            hold_until: None,
            error: None,
        };
        if let Err(e) = self
            .check_inner(&mut node, &keys, probing, opts, ctx, &mut out)
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
        if opts.purpose.guarded() {
            self.guard.evicted(opts.judge_at, out.counts.evicted);
        }
        out
    }

    /// The steps of a check: read, classify, count, admit, plan, evict.
    async fn check_inner(
        &self,
        node: &mut Node,
        keys: &Keys,
        probing: &[Probing],
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) -> Result<(), Error> {
        let purpose = opts.purpose;
        let judge_at = opts.judge_at;
        let cutoff = Cutoff::new(judge_at, self.config.ttl, self.config.score_unit);
        let refs: Vec<&[u8]> = keys.iter().collect();
        let guarded = purpose.guarded() && self.guard.enabled();
        // Deadline checks are of tracked keys, so witnesses stand by should silence be
        // suspected; a walk's checks may have none, and read every key's newest as before.
        let newest = guarded
            && (!matches!(purpose, Purpose::Deadline { .. })
                || self.guard.wants_heartbeats(judge_at));
        let first = first_read(purpose, &cutoff, newest, probing);
        let reads = read::read(node, &refs, first).await?;
        out.time = reads.time;
        if reads.pttl_refused > 0 {
            self.pttl_refused(ctx.observer);
        }
        if purpose.tracks() {
            out.expires_in = reads
                .keys
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let asked = Probing::of(probing, i).ttl;
                    match k.set().and_then(|k| k.expires_in) {
                        _ if !asked => Expiry::Unread,
                        Some(ms) => Expiry::In(ms.get()),
                        None => Expiry::Never,
                    }
                })
                .collect();
        }
        ctx.observer.progress();
        if purpose.dry_run() {
            return self.dry_run(node, &refs, reads.keys, ctx, out).await;
        }
        if purpose.tracks() {
            // Ids as long as the probe saw bound this check's calls, before they bring any back.
            self.observe_ids(&reads.keys);
        }
        let rules = Rules {
            cutoff: &cutoff,
            unit: self.config.score_unit,
            judge_at,
            held_back: purpose.held_back(),
            tracks: purpose.tracks(),
            count_all: guarded,
            budget: self.budget(),
        };
        let mut triage = plan::classify(reads.keys, &rules);
        let (ahead, lead) = triage.ahead;
        ctx.observer
            .scores_ahead(self.ahead.observe(ahead, lead, judge_at));
        for &(i, state) in &triage.settled {
            self.settle(i, state, out, ctx.observer);
        }
        // A count of zombies alone shows no score: a few stale keys' lowest say what they are.
        let sampled = self
            .sample(
                node,
                &refs,
                &triage.stale,
                &rules,
                purpose.tracks() || guarded,
            )
            .await?;
        if self.units.observe(triage.mismatch.or(sampled), judge_at) {
            // Nothing is removed; the keys whose scores are off are looked at again soon, so
            // that the sweep sees when they are right again.
            for &i in &triage.mismatched {
                out.states[i] = KeyState::Unknown;
            }
            return Ok(());
        }
        self.count(node, &refs, &cutoff, &mut triage, out).await?;
        if let Some(until) = opts.spare_until.filter(|&u| u > judge_at) {
            // Heartbeats still tell the storm guard the apps are well.
            self.heard(triage.newest, judge_at);
            self.hold(&triage, out, ctx.observer);
            out.hold_until = Some(until);
            return Ok(());
        }
        if guarded && let Some(until) = self.admit(node, opts, ctx, &triage).await? {
            self.hold(&triage, out, ctx.observer);
            out.hold_until = Some(until);
            return Ok(());
        }
        let plan = plan::plan(&triage.stale, self.budget(), |z| self.sizing.key_bytes(z));
        self.evict(node, &refs, plan, &triage.clean, &cutoff, opts, ctx, out)
            .await
    }

    /// The ACL refused `PTTL` on this sweep's keys: said once, counted every time.
    fn pttl_refused(&self, observer: &dyn Observer) {
        observer.read_refused();
        if !self
            .pttl_said
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                sweep = %self.config.name,
                "the Redis user may not run PTTL on the sweep's keys: a key that ends by its own TTL is forgotten only at its next check (add +pttl to its ACL)"
            );
        }
    }

    /// Most zombies one transaction may remove now.
    fn budget(&self) -> u64 {
        self.sizing.budget(self.evict.max_members_per_call) as u64
    }

    /// Records what became of key `i`, counting it when members remain.
    #[inline]
    pub(super) fn settle(
        &self,
        i: usize,
        state: KeyState,
        out: &mut Checked<Error>,
        obs: &dyn Observer,
    ) {
        out.states[i] = state;
        if let KeyState::Live { card, .. } = state {
            self.count_clean(card, out, obs);
        }
    }

    /// The count step: the zombies of the stale keys a tracking read could not count.
    async fn count(
        &self,
        node: &mut Node,
        refs: &[&[u8]],
        cutoff: &Cutoff,
        triage: &mut Triage,
        out: &mut Checked<Error>,
    ) -> Result<(), Error> {
        if triage.uncounted.is_empty() {
            return Ok(());
        }
        let uncounted = std::mem::take(&mut triage.uncounted);
        let keys: Vec<&[u8]> = uncounted.iter().map(|&i| refs[i]).collect();
        let counts = read::read(node, &keys, Read::Stale(cutoff)).await?;
        for (i, status) in uncounted.into_iter().zip(counts.keys) {
            match KeyState::of(status) {
                Ok(read) => triage.stale.push((i, read.stale)),
                Err(state) => out.states[i] = state,
            }
        }
        Ok(())
    }

    /// The admit step: asks the storm guard whether the zombies may go, reading a few busy
    /// witnesses first when it suspects the sweep went silent. `Some`: held until then.
    async fn admit(
        &self,
        node: &mut Node,
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
        triage: &Triage,
    ) -> Result<Option<f64>, Error> {
        let now = opts.judge_at;
        let held_back = opts.purpose.held_back();
        self.heard(triage.newest, now);
        let zombies: u64 = triage.stale.iter().map(|&(_, n)| n).sum();
        if zombies > 0
            && !held_back
            && !ctx.witnesses.is_empty()
            && self.guard.suspects_silence(now)
        {
            // Quiet keys came due, but the busy ones may be well: ask them.
            let refs: Vec<&[u8]> = ctx.witnesses.iter().map(Vec::as_slice).collect();
            let heard = read::read(node, &refs, Read::Newest).await?;
            for read in heard.keys.iter().filter_map(|r| r.set()) {
                self.heard(read.newest.unwrap_or(f64::NEG_INFINITY), now);
            }
        }
        Ok(
            match self.guard.admit(now, zombies, triage.members, held_back) {
                Admit::Hold(until) => Some(until),
                Admit::Evict => None,
            },
        )
    }

    /// Nothing is removed: the tracked stale keys are reported as they were read, to be looked
    /// at again when the hold ends; the others wait for the next walk.
    fn hold(&self, triage: &Triage, out: &mut Checked<Error>, obs: &dyn Observer) {
        for (i, _) in &triage.stale {
            if let Some(read) = triage.seen.get(i) {
                self.settle(*i, self.live(read.card, read.oldest), out, obs);
            }
        }
    }

    /// Before the first eviction of a sweep, reads the lowest members of a few stale keys (one
    /// round trip): they say how long the sweep's ids run, so that 16 KiB ids do not make the
    /// first call's reply 8 MB, and whether their scores fit the sweep's `score_unit`.
    ///
    /// A sweep in milliseconds samples again before every eviction whose read showed no
    /// scores: keys that apps write in seconds hold nothing but "zombies" there, and a sample
    /// of the stale keys is where they show. In seconds the wrong unit is milliseconds, whose
    /// scores are never stale, so a sample of stale keys cannot find them; sampling every
    /// batch anyway cost a pass 250 instructions per evicted key (a round trip per batch,
    /// callgrind, `benches/bench.py --stages instructions`).
    async fn sample(
        &self,
        node: &mut Node,
        refs: &[&[u8]],
        stale: &[(usize, u64)],
        rules: &Rules<'_>,
        scores_read: bool,
    ) -> Result<Option<Mismatch>, Error> {
        let resample = !scores_read && self.config.score_unit == ScoreUnit::Milliseconds;
        if (self.sizing.seen() && !resample) || stale.is_empty() {
            return Ok(None);
        }
        let sample: Vec<&[u8]> = stale.iter().take(8).map(|&(i, _)| refs[i]).collect();
        let reads = read::read(node, &sample, Read::Oldest).await?.keys;
        self.observe_ids(&reads);
        Ok(reads
            .iter()
            .filter_map(|r| r.set())
            .find_map(|read| plan::mismatch(&read, rules)))
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
    pub(super) fn live(&self, card: u64, oldest: Option<f64>) -> KeyState {
        KeyState::live(card, oldest, self.config.score_unit)
    }

    fn count_clean(&self, card: u64, out: &mut Checked<Error>, observer: &dyn Observer) {
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
        out: &mut Checked<Error>,
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
}
