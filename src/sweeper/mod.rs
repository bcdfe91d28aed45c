//! One pass of one sweep: discover keys, evict zombies in bounded calls kept in flight a few at
//! a time, and announce every member actually removed.
//!
//! - this module: the pass over every primary, and the loop over one primary's SCAN pages;
//! - [`batch`]: what happens to one batch of keys (precheck, transactions, script);
//! - [`announce`]: the events of what was removed, and publishing them.
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

mod announce;
mod batch;

use std::collections::{HashMap, VecDeque};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::{Config, EvictConfig, ScanConfig, SweepConfig};
use crate::discover;
use crate::events::EventEncoder;
use crate::evict::{Clock, EvictScript};
use crate::preflight;
use crate::store::{Conn, Node, Store};

/// Primaries of a cluster scanned at the same time, each with its own cursor.
pub const MAX_PARALLEL_NODES: usize = 8;

/// How long a node's successful preflight stands: ACLs rarely change, and a pass that fails
/// forgets it at once.
const PREFLIGHT_VALID: Duration = Duration::from_secs(60);

/// What every step of one pass shares.
#[derive(Clone, Copy)]
struct PassCtx<'a> {
    /// The store's own connection: in a cluster it follows keys whose slot moved, and publishes.
    routed: &'a Conn,
    opts: PassOptions,
    observer: &'a dyn PassObserver,
    /// No new call starts once it fires.
    cancel: &'a CancellationToken,
}

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

    fn merge(&mut self, other: &PassReport) {
        self.keys_scanned += other.keys_scanned;
        self.keys += other.keys;
        self.members += other.members;
        self.evicted += other.evicted;
        self.events_published += other.events_published;
        self.events_failed += other.events_failed;
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
    sharded_pubsub: bool,
    /// When each node (by address; "" for a single server) last passed its preflight.
    checked: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Sweeper {
    /// A sweeper for `sweep` with the scan, evict and publishing settings of `config`.
    pub fn new(sweep: &SweepConfig, config: &Config) -> Self {
        Self::with_settings(
            sweep,
            &config.scan,
            &config.evict,
            config.redis.sharded_pubsub,
        )
    }

    /// A sweeper for `sweep` with explicit settings.
    pub fn with_settings(
        sweep: &SweepConfig,
        scan: &ScanConfig,
        evict: &EvictConfig,
        sharded_pubsub: bool,
    ) -> Self {
        Self {
            encoder: EventEncoder::new(&sweep.event, &sweep.name),
            sweep: sweep.clone(),
            script: EvictScript::new(),
            scan: scan.clone(),
            evict: evict.clone(),
            sharded_pubsub,
            checked: Arc::default(),
        }
    }

    /// The sweep's configuration.
    pub fn config(&self) -> &SweepConfig {
        &self.sweep
    }

    /// Sweeps the whole keyspace once: every primary, each with its own SCAN cursor, a few at a
    /// time. On `cancel`, no new eviction starts; calls in flight finish and their events are
    /// published. The pass fails if any primary's part of it failed, after all of them ended.
    pub async fn pass(
        &self,
        store: &Store,
        opts: PassOptions,
        observer: &dyn PassObserver,
        cancel: &CancellationToken,
    ) -> Result<PassReport, PassError> {
        let started = Instant::now();
        let nodes = store.nodes().await.map_err(|error| PassError {
            error,
            partial: PassReport::default(),
        })?;
        let routed = store.connection();
        let ctx = PassCtx {
            routed: &routed,
            opts,
            observer,
            cancel,
        };
        // `scan.max_keys_per_second` caps the whole pass: each node gets its share.
        let rate = match self.scan.max_keys_per_second {
            0 => None,
            total => Some(f64::from(total) / nodes.len().max(1) as f64),
        };
        let mut parts = futures_util::stream::iter(nodes)
            .map(|node| self.node_pass(store, node, rate, ctx))
            .buffer_unordered(MAX_PARALLEL_NODES);
        let mut report = PassReport {
            complete: true,
            ..PassReport::default()
        };
        let mut failure = None;
        while let Some((part, error)) = parts.next().await {
            report.merge(&part);
            report.complete &= part.complete;
            if let Some(e) = error {
                failure.get_or_insert(e);
            }
        }
        report.duration = started.elapsed();
        match failure {
            None => Ok(report),
            Some(error) => {
                report.complete = false;
                Err(PassError {
                    error,
                    partial: report,
                })
            }
        }
    }

    /// One primary's part of a pass: its SCAN pages, cut into batches kept in flight a few at a
    /// time. Returns what was done, and the first error if any.
    async fn node_pass(
        &self,
        store: &Store,
        node: Node,
        rate: Option<f64>,
        ctx: PassCtx<'_>,
    ) -> (PassReport, Option<Error>) {
        let started = Instant::now();
        let batch_size = self.evict.batch_keys;
        let depth = self.evict.pipeline_depth;
        let mut pages = pin!(discover::pages(
            node.clone(),
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
        let label = node.address().unwrap_or_default();
        let recently = |at: &Instant| at.elapsed() < PREFLIGHT_VALID;
        let mut checked = ctx.opts.dry_run
            || self
                .checked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&label)
                .is_some_and(recently);
        // With `scan.max_keys_per_second`, the next SCAN waits until the pass is back on pace.
        let mut next_page_at: Option<tokio::time::Instant> = None;

        loop {
            if !checked && let Some((key, _)) = queue.front() {
                // Before the first eviction on this node: may this user do all a pass does?
                checked = true;
                let key = key.clone();
                if let Err(e) = self.preflight(store, &node, &key).await {
                    stopping = true;
                    failure.get_or_insert(e);
                }
            }
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
                in_flight.push(self.sweep_batch(node.clone(), batch, time, ctx));
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
                        ctx.observer.progress();
                        report.keys_scanned += page.keys.len() as u64;
                        queue.extend(page.keys.into_iter().map(|k| (k, page.time)));
                        if let Some(rate) = rate {
                            let due = report.keys_scanned as f64 / rate;
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
                () = ctx.cancel.cancelled(), if !stopping => stopping = true,
            }
        }
        if let Some(e) = &failure {
            // Check the permissions again next time: the failure may be a changed ACL.
            self.checked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&label);
            if let Some(address) = node.address() {
                tracing::debug!(node = %address, error = %e, "a primary's part of the pass failed");
            }
        }
        report.duration = started.elapsed();
        report.complete = scan_done && queue.is_empty() && failure.is_none();
        (report, failure)
    }

    /// The permission preflight of a node, on connections of its own; remembered when it passes.
    async fn preflight(&self, store: &Store, node: &Node, key: &[u8]) -> Result<(), Error> {
        let channel = self
            .sweep
            .channel
            .render(self.sweep.pattern.conversation_id(key).unwrap_or(key));
        // A sharded publish in a cluster goes to the channel's own shard: probe it there.
        let routed_publish = self.sharded_pubsub && node.needs_slot_groups();
        let publish = (!routed_publish).then(|| self.publish_command());
        let mut con = store.dedicated(node).await?;
        preflight::check(&mut con, key, &channel, publish, &self.script).await?;
        if routed_publish {
            let mut con = store.dedicated_for_key(&channel).await?;
            preflight::check_sharded_publish(&mut con, &channel).await?;
        }
        self.checked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node.address().unwrap_or_default(), Instant::now());
        Ok(())
    }
}
