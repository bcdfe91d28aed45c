//! A full pass: every primary's keyspace walked once, and every key of the given sweeps checked
//! and evicted. The `sweep` command runs one; the daemon checks keys at their deadlines instead
//! and walks only to find keys it does not know.
//!
//! One walk per primary serves every sweep of the pass (`walk`); primaries are walked a
//! few at a time, each with its own cursor. Each sweep's keys are cut into batches kept in flight
//! a few at a time, so Redis never waits for the sweeper, and at most a few batches of keys wait
//! at once, so memory does not grow with the keyspace.

pub mod command;

use presence_sweeper_config as config;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use presence_sweeper_redis::{Error, Node, Store, scan};
use presence_sweeper_rules::check::{CheckOpts, Counts, Purpose};
use presence_sweeper_rules::report::Observer;
use presence_sweeper_rules::scan::{Pace, Queue, common_glob, room_for_page};
use tokio_util::sync::CancellationToken;

use crate::evictor::{CheckCtx, Evictor};
use crate::time::now;

/// Primaries of a cluster walked at the same time, each with its own cursor.
pub(crate) const MAX_PARALLEL_NODES: usize = 8;

/// How a pass runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Count what would be evicted; change and publish nothing.
    pub dry_run: bool,
    /// Judge staleness at this instant, in Unix seconds, instead of at Redis's clock as the
    /// walk read it (the `sweep` command never sets it; tests put members exactly on the
    /// boundary with it). Events are still stamped with Redis `TIME`.
    pub judge_at: Option<f64>,
}

impl Options {
    /// A pass on Redis's clock that evicts, or with `dry_run` only counts.
    pub fn new(dry_run: bool) -> Self {
        Self {
            dry_run,
            judge_at: None,
        }
    }

    /// The instant a batch whose keys the walk read at `time` (Redis's clock) is judged at.
    fn judge_at(&self, time: f64) -> f64 {
        self.judge_at.unwrap_or(time)
    }
}

/// What a pass did for one sweep.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Keys of the sweep that SCAN returned.
    pub keys_scanned: u64,
    /// What the checks of those keys did.
    pub counts: Counts,
    /// Wall time of the pass.
    pub duration: Duration,
    /// False if shutdown stopped the pass before it covered the keyspace.
    pub complete: bool,
}

impl Report {
    fn merge(&mut self, other: &Report) {
        self.keys_scanned += other.keys_scanned;
        self.counts.add(&other.counts);
    }
}

/// A pass that failed part way, with what it had done until then.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Incomplete {
    /// The first error.
    pub error: Error,
    /// Work done before (and, for batches already in flight, after) the error, per sweep.
    pub partial: Vec<Report>,
}

/// The settings of a pass besides its sweeps.
#[derive(Debug, Clone)]
pub struct Pass {
    /// `[scan]`.
    pub scan: config::Scan,
    /// `[evict]`.
    pub evict: config::Evict,
}

impl Pass {
    /// A pass with the `[scan]` and `[evict]` settings of `config`.
    pub fn new(config: &presence_sweeper_config::Config) -> Self {
        Self {
            scan: config.scan.clone(),
            evict: config.evict.clone(),
        }
    }

    /// Walks every primary once and checks every key of `sweeps`: one report per sweep, in
    /// order. On `cancel`, no new eviction starts; calls in flight finish and their events are
    /// published. The pass fails if any primary's part of it failed, after all of them ended.
    pub async fn run(
        &self,
        store: &Store,
        sweeps: &[Arc<Evictor>],
        opts: Options,
        observer: &dyn Observer,
        cancel: &CancellationToken,
    ) -> Result<Vec<Report>, Incomplete> {
        let started = now();
        let empty = || vec![Report::default(); sweeps.len()];
        let nodes = store.nodes().await.map_err(|error| Incomplete {
            error,
            partial: empty(),
        })?;
        let ctx = CheckCtx {
            store,
            observer,
            cancel,
            witnesses: &[],
        };
        // `scan.max_keys_per_second` caps the whole pass: each node gets its share.
        let rate = match self.scan.max_keys_per_second {
            0 => None,
            total => Some(f64::from(total) / nodes.len().max(1) as f64),
        };
        let mut parts = futures_util::stream::iter(nodes)
            .map(|node| self.node_pass(node, sweeps, rate, opts, ctx))
            .buffer_unordered(MAX_PARALLEL_NODES);
        let mut reports = empty();
        for r in &mut reports {
            r.complete = true;
        }
        let mut failure = None;
        while let Some((part, complete, error)) = parts.next().await {
            for (report, part) in reports.iter_mut().zip(&part) {
                report.merge(part);
                report.complete &= complete;
            }
            if let Some(e) = error {
                failure.get_or_insert(e);
            }
        }
        for r in &mut reports {
            r.duration = now().saturating_duration_since(started);
        }
        match failure {
            None => Ok(reports),
            Some(error) => {
                for r in &mut reports {
                    r.complete = false;
                }
                Err(Incomplete {
                    error,
                    partial: reports,
                })
            }
        }
    }

    /// One primary's part of a pass: its SCAN pages, each key handed to the sweeps it belongs
    /// to, cut into batches kept in flight a few at a time. Returns what was done per sweep,
    /// whether the walk covered the keyspace, and the first error if any.
    async fn node_pass(
        &self,
        node: Node,
        sweeps: &[Arc<Evictor>],
        rate: Option<f64>,
        opts: Options,
        ctx: CheckCtx<'_>,
    ) -> (Vec<Report>, bool, Option<Error>) {
        let batch_size = self.evict.batch_keys;
        let depth = self.evict.pipeline_depth;
        let glob = common_glob(sweeps.iter().map(|s| &s.config().pattern));
        let mut pages = pin!(scan::pages(node.clone(), glob, self.scan.count));
        // Keys waiting for a batch, per sweep.
        let mut queues: Vec<Queue> = vec![Queue::default(); sweeps.len()];
        let mut in_flight = FuturesUnordered::new();
        let mut reports = vec![Report::default(); sweeps.len()];
        let mut failure: Option<Error> = None;
        let mut scan_done = false;
        let mut stopping = false;
        let mut pace = Pace::new(now(), rate, None);

        loop {
            for (s, queue) in queues.iter_mut().enumerate() {
                while !stopping && in_flight.len() < depth {
                    let Some((batch, time)) = queue.take(batch_size, scan_done) else {
                        break;
                    };
                    let check_opts = CheckOpts {
                        judge_at: opts.judge_at(time),
                        purpose: Purpose::Pass {
                            dry_run: opts.dry_run,
                        },
                        spare_until: None,
                    };
                    let sweep = &sweeps[s];
                    let node = node.clone();
                    in_flight.push(async move {
                        let keys = batch.into_iter().collect();
                        (s, sweep.check(node, keys, &[], check_opts, ctx).await)
                    });
                }
            }
            let waiting: usize = queues.iter().map(Queue::len).sum();
            if in_flight.is_empty() && (stopping || (scan_done && waiting == 0)) {
                break;
            }
            let paced = !pace.ready(now());
            let want_page =
                !stopping && !scan_done && !paced && room_for_page(waiting, batch_size, depth);
            tokio::select! {
                Some((s, checked)) = in_flight.next(), if !in_flight.is_empty() => {
                    reports[s].counts.add(&checked.counts);
                    if let Some(e) = checked.error {
                        stopping = true;
                        failure.get_or_insert(e);
                    }
                }
                page = pages.next(), if want_page => match page {
                    Some(Ok(page)) => {
                        ctx.observer.progress();
                        pace.page(page.keys.len(), now());
                        for key in page.keys {
                            route(sweeps, key, page.time, &mut queues, &mut reports);
                        }
                    }
                    Some(Err(e)) => {
                        stopping = true;
                        failure.get_or_insert(e);
                    }
                    None => scan_done = true,
                },
                () = crate::time::sleep_until(pace.next_page_at().unwrap_or_else(now)),
                    if paced && !stopping && !scan_done => {}
                () = ctx.cancel.cancelled(), if !stopping => stopping = true,
            }
        }
        if let Some(e) = &failure {
            tracing::debug!(node = %node.id(), error = %e, "a primary's part of the pass failed");
        }
        let complete = scan_done && queues.iter().all(Queue::is_empty) && failure.is_none();
        (reports, complete, failure)
    }
}

/// Queues `key` for every sweep whose pattern it fits.
fn route(
    sweeps: &[Arc<Evictor>],
    key: Vec<u8>,
    time: f64,
    queues: &mut [Queue],
    reports: &mut [Report],
) {
    let fits = |s: &Arc<Evictor>| s.config().pattern.conversation_id(&key).is_some();
    let Some(last) = sweeps.iter().rposition(fits) else {
        return;
    };
    for i in (0..last).filter(|&i| fits(&sweeps[i])) {
        reports[i].keys_scanned += 1;
        queues[i].push(key.clone(), time);
    }
    reports[last].keys_scanned += 1;
    queues[last].push(key, time);
}
