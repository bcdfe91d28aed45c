//! One pass of one sweep: discover keys, evict zombies in bounded script calls kept in flight a
//! few at a time, and announce every member actually removed.
//!
//! The daemon publishes the events from the script's reply instead of the script publishing them.
//! Why: ids that are not valid UTF-8 cannot be encoded as JSON in Lua (cjson passes the bytes
//! through); encoding JSON in Lua costs Redis's single thread several times what PUBLISH of a
//! ready payload does; and in a cluster a script may only touch its own slot, which a
//! `{conversation_id}` channel need not hash to. Exactly-once holds either way: only the call whose
//! ZREMRANGEBYRANK removed a member gets it back, so only that sweeper announces it. The cost is
//! a window between the reply and the PUBLISH in which a crash loses events, never duplicates them.
//! Redis pub/sub is at-most-once to subscribers anyway, and every event carries the roster, so
//! consumers already resynchronise from the next one.

use std::collections::VecDeque;
use std::pin::pin;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::ConnectionLike;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::{Config, EvictConfig, ScanConfig, SweepConfig};
use crate::discover;
use crate::events::{Event, EventEncoder};
use crate::evict::{self, Clock, Cutoff, EvictScript, KeyReply, Params};
use crate::store::Store;

/// How a pass runs.
#[derive(Debug, Clone, Copy)]
pub struct PassOptions {
    /// Count what would be evicted; change and publish nothing.
    pub dry_run: bool,
    /// Where "now" comes from.
    pub clock: Clock,
}

impl Default for PassOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            clock: Clock::Redis,
        }
    }
}

/// Per-key and per-member observations of a pass, for metrics. Ids never reach it.
pub trait PassObserver: Send + Sync {
    /// A key was swept; `cardinality` members remain in it.
    fn key_swept(&self, cardinality: u64) {
        let _ = cardinality;
    }
    /// The pass moved on (a SCAN page or a script call came back); feeds liveness.
    fn progress(&self) {}
    /// A member was evicted `lag_seconds` after its window closed.
    fn member_evicted(&self, lag_seconds: f64) {
        let _ = lag_seconds;
    }
}

/// An observer that ignores everything.
pub struct NoObserver;
impl PassObserver for NoObserver {}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassReport {
    /// Keys SCAN returned.
    pub keys_scanned: u64,
    /// Sorted sets swept (keys that changed type meanwhile are not counted).
    pub keys: u64,
    /// Members left in those sets.
    pub members: u64,
    /// Members removed (on a dry run: that would have been).
    pub evicted: u64,
    /// Events published.
    pub events_published: u64,
    /// Members removed whose events could not be published (Redis failed in between).
    pub events_failed: u64,
    /// Wall time of the pass.
    pub duration: Duration,
    /// False if shutdown stopped the pass before it covered the keyspace.
    pub complete: bool,
}

impl PassReport {
    fn add(&mut self, c: &BatchCounts) {
        self.keys += c.keys;
        self.members += c.members;
        self.evicted += c.evicted;
        self.events_published += c.events_published;
        self.events_failed += c.events_failed;
    }
}

/// A pass that failed part way, with what it had done until then.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct PassError {
    /// The first error.
    pub error: Error,
    /// Work done before (and, for batches already in flight, after) the error.
    pub partial: PassReport,
}

#[derive(Debug, Default)]
struct BatchCounts {
    keys: u64,
    members: u64,
    evicted: u64,
    events_published: u64,
    events_failed: u64,
}

/// Runs the passes of one sweep.
#[derive(Debug, Clone)]
pub struct Sweeper {
    sweep: SweepConfig,
    encoder: EventEncoder,
    script: EvictScript,
    scan: ScanConfig,
    evict: EvictConfig,
}

impl Sweeper {
    /// A sweeper for `sweep` with the scan and evict settings of `config`.
    pub fn new(sweep: &SweepConfig, config: &Config) -> Self {
        Self::with_settings(sweep, &config.scan, &config.evict)
    }

    /// A sweeper for `sweep` with explicit scan and evict settings.
    pub fn with_settings(sweep: &SweepConfig, scan: &ScanConfig, evict: &EvictConfig) -> Self {
        Self {
            encoder: EventEncoder::new(&sweep.event, &sweep.name),
            sweep: sweep.clone(),
            script: EvictScript::new(),
            scan: scan.clone(),
            evict: evict.clone(),
        }
    }

    /// The sweep's configuration.
    pub fn config(&self) -> &SweepConfig {
        &self.sweep
    }

    /// Sweeps the whole keyspace once. On `cancel`, no new script call starts; calls in flight
    /// finish and their events are published.
    pub async fn pass(
        &self,
        store: &Store,
        opts: PassOptions,
        observer: &dyn PassObserver,
        cancel: &CancellationToken,
    ) -> Result<PassReport, PassError> {
        let started = Instant::now();
        let con = store.connection();
        let batch_size = self.evict.batch_keys;
        let depth = self.evict.pipeline_depth;
        let mut pages = pin!(discover::pages(
            con.clone(),
            self.sweep.pattern.glob().to_owned(),
            self.scan.count
        ));
        // Keys waiting for a batch, each with the Redis time of the page it came in.
        let mut queue: VecDeque<(Vec<u8>, f64)> = VecDeque::new();
        let mut in_flight = FuturesUnordered::new();
        let mut report = PassReport::default();
        let mut failure: Option<Error> = None;
        let mut scan_done = false;
        let mut stopping = false;
        // With `scan.max_keys_per_second`, the next SCAN waits until the pass is back on pace.
        let mut next_page_at: Option<tokio::time::Instant> = None;

        loop {
            while !stopping
                && in_flight.len() < depth
                && (queue.len() >= batch_size || (scan_done && !queue.is_empty()))
            {
                let n = batch_size.min(queue.len());
                // A batch spanning two pages judges by the older page's time: a cutoff a
                // little early only spares members, it never evicts a fresh one.
                let mut time = f64::INFINITY;
                let batch: Vec<Vec<u8>> = queue
                    .drain(..n)
                    .map(|(key, t)| {
                        time = time.min(t);
                        key
                    })
                    .collect();
                in_flight.push(self.sweep_batch(con.clone(), batch, time, opts, observer));
            }
            if in_flight.is_empty() && (stopping || (scan_done && queue.is_empty())) {
                break;
            }
            // Keep at most a few batches of keys waiting: memory stays flat however many
            // keys match.
            let paced = next_page_at.is_some_and(|t| t > tokio::time::Instant::now());
            let want_page = !stopping && !scan_done && !paced && queue.len() < batch_size * depth;
            tokio::select! {
                Some((counts, error)) = in_flight.next(), if !in_flight.is_empty() => {
                    report.add(&counts);
                    if let Some(e) = error {
                        stopping = true;
                        failure.get_or_insert(e);
                    }
                }
                page = pages.next(), if want_page => match page {
                    Some(Ok(page)) => {
                        observer.progress();
                        report.keys_scanned += page.keys.len() as u64;
                        queue.extend(page.keys.into_iter().map(|k| (k, page.time)));
                        if self.scan.max_keys_per_second > 0 {
                            let due = report.keys_scanned as f64
                                / f64::from(self.scan.max_keys_per_second);
                            next_page_at = Some(
                                tokio::time::Instant::from_std(started)
                                    + Duration::from_secs_f64(due),
                            );
                        }
                    }
                    Some(Err(e)) => {
                        stopping = true;
                        failure.get_or_insert(e);
                    }
                    None => scan_done = true,
                },
                () = tokio::time::sleep_until(next_page_at.unwrap_or_else(tokio::time::Instant::now)),
                    if paced && !stopping && !scan_done => {}
                () = cancel.cancelled(), if !stopping => stopping = true,
            }
        }

        report.duration = started.elapsed();
        report.complete = scan_done && queue.is_empty() && failure.is_none();
        match failure {
            None => Ok(report),
            Some(error) => Err(PassError {
                error,
                partial: report,
            }),
        }
    }

    /// Sweeps one batch: precheck every key, evict the few-zombie keys in transactions and the
    /// many-zombie keys with the script. Returns what was done even when a step fails, so
    /// evictions are always counted.
    async fn sweep_batch<C>(
        &self,
        mut con: C,
        keys: Vec<Vec<u8>>,
        page_time: f64,
        opts: PassOptions,
        observer: &dyn PassObserver,
    ) -> (BatchCounts, Option<Error>)
    where
        C: ConnectionLike + Clone + Send,
    {
        let mut counts = BatchCounts::default();
        let result = self
            .sweep_batch_inner(&mut con, keys, page_time, opts, observer, &mut counts)
            .await;
        (counts, result.err())
    }

    async fn sweep_batch_inner<C>(
        &self,
        con: &mut C,
        keys: Vec<Vec<u8>>,
        page_time: f64,
        opts: PassOptions,
        observer: &dyn PassObserver,
        counts: &mut BatchCounts,
    ) -> Result<(), Error>
    where
        C: ConnectionLike + Clone + Send,
    {
        let fixed_now = match opts.clock {
            Clock::Fixed(t) => Some(t),
            Clock::Redis => None,
        };
        let cutoff = Cutoff::new(
            fixed_now.unwrap_or(page_time),
            self.sweep.ttl,
            self.sweep.score_unit,
        );
        let stale_counts = evict::count_stale(con, &keys, &cutoff).await?;
        observer.progress();
        if opts.dry_run {
            return self
                .dry_run(con, &keys, stale_counts, observer, counts)
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
        let mut transactions = transactions.into_iter();
        // The clean keys' sizes and the first transaction go out together: one round trip.
        let first = transactions.next();
        let mut card_con = con.clone();
        let (cards, evicted) = tokio::join!(evict::cardinalities(&mut card_con, &clean), async {
            match &first {
                Some(keys) => Some(evict::evict(con, keys, &cutoff, fixed_now).await),
                None => None,
            }
        });
        for card in cards?.into_iter().flatten().filter(|&c| c > 0) {
            counts.keys += 1;
            counts.members += card;
            observer.key_swept(card);
        }
        if let (Some(keys), Some(evicted)) = (first, evicted) {
            self.finish_transaction(con, &keys, evicted?, observer, counts)
                .await?;
        }
        for keys in transactions {
            let evicted = evict::evict(con, &keys, &cutoff, fixed_now).await?;
            self.finish_transaction(con, &keys, evicted, observer, counts)
                .await?;
        }
        if !big.is_empty() {
            self.sweep_big(con, big, opts, observer, counts).await?;
        }
        Ok(())
    }

    /// Counts what a dry run would evict: the zombies per key and what would be left.
    async fn dry_run<C>(
        &self,
        con: &mut C,
        keys: &[Vec<u8>],
        stale_counts: Vec<Option<u64>>,
        observer: &dyn PassObserver,
        counts: &mut BatchCounts,
    ) -> Result<(), Error>
    where
        C: ConnectionLike + Send,
    {
        let (sets, stale): (Vec<&[u8]>, Vec<u64>) = keys
            .iter()
            .zip(stale_counts)
            .filter_map(|(key, stale)| Some((key.as_slice(), stale?)))
            .unzip();
        let cards = evict::cardinalities(con, &sets).await?;
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

    /// Counts and announces what one transaction removed.
    async fn finish_transaction<C>(
        &self,
        con: &mut C,
        keys: &[&[u8]],
        (now, results): (f64, Vec<Option<evict::Evicted>>),
        observer: &dyn PassObserver,
        counts: &mut BatchCounts,
    ) -> Result<(), Error>
    where
        C: ConnectionLike + Send,
    {
        observer.progress();
        let mut events = redis::pipe();
        let mut uncounted = Vec::new();
        for (key, evicted) in keys.iter().zip(results) {
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
            let cards = evict::cardinalities(con, &keys).await?;
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
        self.publish(con, events, counts).await
    }

    /// Keys holding more zombies than one call may remove: the bounded script, called again for
    /// keys its budget did not finish.
    async fn sweep_big<C>(
        &self,
        con: &mut C,
        mut keys: Vec<Vec<u8>>,
        opts: PassOptions,
        observer: &dyn PassObserver,
        counts: &mut BatchCounts,
    ) -> Result<(), Error>
    where
        C: ConnectionLike + Send,
    {
        let params = Params {
            ttl: self.sweep.ttl,
            unit: self.sweep.score_unit,
            budget: self.evict.max_members_per_call,
            clock: opts.clock,
        };
        while !keys.is_empty() {
            let reply = self.script.call(con, &keys, &params).await?;
            observer.progress();
            let mut events = redis::pipe();
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
                    // Announce what this call removed; the key is counted once it is finished.
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
            self.publish(con, events, counts).await?;
            keys = next;
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
        events: &mut redis::Pipeline,
        counts: &mut BatchCounts,
        observer: &dyn PassObserver,
    ) {
        counts.keys += 1;
        counts.members += card;
        counts.evicted += removed.len() as u64;
        observer.key_swept(card);
        self.announce(key, removed, roster, card, now, events, observer);
    }

    /// PUBLISHes queued events; a failure is counted as events lost (the members are gone).
    async fn publish<C>(
        &self,
        con: &mut C,
        events: redis::Pipeline,
        counts: &mut BatchCounts,
    ) -> Result<(), Error>
    where
        C: ConnectionLike + Send,
    {
        if events.is_empty() {
            return Ok(());
        }
        let n = events.len() as u64;
        match events.query_async::<()>(con).await {
            Ok(()) => {
                counts.events_published += n;
                Ok(())
            }
            Err(e) => {
                tracing::error!(
                    sweep = %self.sweep.name,
                    events = n,
                    error = %e,
                    "members were evicted but their events could not be published"
                );
                counts.events_failed += n;
                Err(e.into())
            }
        }
    }

    /// Queues one event per removed member.
    #[allow(clippy::too_many_arguments)]
    fn announce(
        &self,
        key: &[u8],
        removed: &[(Vec<u8>, f64)],
        roster: &[Vec<u8>],
        card: u64,
        now: f64,
        events: &mut redis::Pipeline,
        observer: &dyn PassObserver,
    ) {
        if removed.is_empty() {
            return;
        }
        let conversation_id = self.sweep.pattern.conversation_id(key).unwrap_or(key);
        let channel = self.sweep.channel.render(conversation_id);
        let roster_json = EventEncoder::roster_json(roster);
        let ttl = self.sweep.ttl.as_secs_f64();
        for (member, score) in removed {
            let last_seen = self.sweep.score_unit.to_seconds(*score);
            observer.member_evicted(now - (last_seen + ttl));
            tracing::debug!(
                sweep = %self.sweep.name,
                conversation_id = %String::from_utf8_lossy(conversation_id),
                user_id = %String::from_utf8_lossy(member),
                last_seen,
                "evicted"
            );
            let payload = self.encoder.encode(&Event {
                conversation_id,
                user_id: member,
                last_seen,
                timestamp: now,
                roster_json: &roster_json,
                roster_count: card,
            });
            events.cmd("PUBLISH").arg(&channel).arg(payload).ignore();
        }
    }
}
