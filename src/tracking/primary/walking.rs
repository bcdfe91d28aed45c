//! The loop's side of walks: starting one, routing its pages to the sweeps, handing what they
//! queued to checks and reads, and applying what those found. When to walk is `walks`'s call.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use crate::Error;
use crate::evict::read::{KeyRead, Reads};
use crate::store::clock::unix_now;
use crate::store::walk::{self, Page};
use crate::sweep::Checked;
use crate::tracking::index::Track;

use super::Run;
use super::checks;
use super::ops::Done;
use super::walks::{Walk, WalkKind};

impl Run {
    /// Hands the walk's queued work to checks and reads.
    pub(super) fn dispatch_walk_work(&mut self) {
        let Some(walk) = &self.walk else {
            return;
        };
        if self.io.cancel.is_cancelled() || walk.error.is_some() {
            return;
        }
        let scan_done = walk.scan_done;
        for i in 0..self.jobs.len() {
            while self.checks.room(self.in_flight.len()) {
                let Some(future) = self.walk_future(i, scan_done) else {
                    break;
                };
                self.in_flight.push(future);
                if let Some(w) = &mut self.walk {
                    w.future_started();
                }
            }
        }
        self.finish_walk_if_done();
    }

    /// The next check or read of keys the walk queued for sweep `i`, if a batch is ready.
    fn walk_future(&mut self, i: usize, scan_done: bool) -> Option<BoxFuture<'static, Done>> {
        let at = Instant::now();
        let batch = self.checks.batch;
        let ttl = self.jobs[i].job.sweep.config().ttl.as_secs_f64();
        let judge = self.liveness.judge_at(at);
        let held_back = judge.is_some_and(|j| self.liveness.held_back(at, j));
        let spare = self.liveness.spare_until(at, ttl);
        let t = &mut self.jobs[i];
        let epoch = t.epoch;
        // Nothing is evicted while liveness is in doubt (after a failure or a pause): those
        // keys wait for its verdict.
        if let Some(judge) = judge
            && let Some((keys, time)) = t.direct.take(batch, scan_done)
        {
            let opts = checks::walk_opts(time.min(judge), held_back, spare);
            let check = self.io.check(&self.jobs[i], keys, opts);
            return Some(Box::pin(async move {
                Done::Direct {
                    epoch,
                    checked: check.await,
                }
            }));
        }
        let (ids, _) = t.verify.take(batch, scan_done)?;
        let pattern = &t.job.sweep.config().pattern;
        let keys = ids.iter().map(|id| pattern.key(id)).collect();
        Some(self.io.verify(epoch, ids, keys))
    }

    pub(super) fn start_walk(&mut self, kind: WalkKind) {
        if self.jobs.is_empty() || self.io.cancel.is_cancelled() {
            self.walks.nothing_to_walk();
            return;
        }
        let now = Instant::now();
        let start = self.walks.start(now, kind, self.notifications.in_use());
        let glob = walk::common_glob(self.jobs.iter().map(|t| &t.job.sweep.config().pattern));
        let settings = &self.io.settings;
        let pages = walk::pages(self.io.node.clone(), glob, settings.scan.count).boxed();
        let rate = match settings.scan.max_keys_per_second {
            0 => None,
            rate => Some(f64::from(rate)),
        };
        for t in &mut self.jobs {
            t.walk_scanned = 0;
            t.walk_untracked = 0;
            t.walk_direct_members = 0;
        }
        self.loop_health.busy(true);
        let subscription = (self.notifications.in_use(), self.notifications.generation());
        let epochs = self.jobs.iter().map(|t| t.epoch).collect();
        self.walk = Some(Walk::new(now, start, pages, epochs, rate, subscription));
        tracing::debug!(node = %self.id, kind = ?start.kind, "walk started");
    }

    pub(super) fn page(&mut self, page: Option<Result<Page, Error>>) {
        let Some(walk) = &mut self.walk else {
            return;
        };
        match page {
            None => walk.scan_done = true,
            Some(Err(e)) => walk.error = Some(e),
            Some(Ok(page)) => {
                self.loop_health.progress();
                self.replied(Some(page.time));
                self.route_page(page);
            }
        }
        self.finish_walk_if_done();
    }

    /// Hands each key of a page to the sweeps it fits: tracked, queued for a read
    /// (reconciliation) or for a direct check (the index is full).
    fn route_page(&mut self, page: Page) {
        let Some(walk) = &mut self.walk else {
            return;
        };
        walk.pace.page(page.keys.len());
        let (kind, count_missed) = (walk.kind, walk.count_missed);
        let epochs = walk.epochs.clone();
        let now_ms = self.liveness.clock().map_or(0, |c| c.now_ms());
        for key in page.keys {
            for t in self.jobs.iter_mut().filter(|t| epochs.contains(&t.epoch)) {
                let Some(id) = t.job.sweep.config().pattern.conversation_id(&key) else {
                    continue;
                };
                t.walk_scanned += 1;
                if let Some(read) = t.index.needs_reading(id) {
                    if kind == WalkKind::Reconcile && read {
                        t.verify.push(id.to_vec(), page.time);
                    }
                    continue;
                }
                match t.index.track(id, now_ms) {
                    Track::Added => {
                        if count_missed && t.synced {
                            t.job.metrics.missed_notifications(1);
                        }
                    }
                    Track::Known => {}
                    Track::Full => {
                        t.walk_untracked += 1;
                        t.direct.push(key.clone(), page.time);
                    }
                }
            }
        }
    }

    pub(super) fn finish_walk_if_done(&mut self) {
        if !self.walk.as_ref().is_some_and(|w| w.over(self.queued())) {
            return;
        }
        let walk = self.walk.take().expect("checked above");
        self.loop_health.busy(false);
        let duration = walk.started.elapsed();
        let all_noticed =
            walk.all_noticed(self.notifications.in_use(), self.notifications.generation());
        let failed = walk.error.is_some();
        for i in 0..self.jobs.len() {
            if walk.epochs.contains(&self.jobs[i].epoch) {
                self.walk_done_for(i, failed, duration, all_noticed);
            }
        }
        match walk.error {
            Some(e) => {
                self.log_error("a walk failed; it is tried again", &e);
                self.failed(e);
            }
            None => tracing::debug!(
                node = %self.id,
                kind = ?walk.kind,
                keys = walk.pace.scanned(),
                duration_ms = duration.as_millis() as u64,
                "walk finished"
            ),
        }
    }

    /// Sweep `i`'s part of a walk that ended: its figures, and whether it is synced now.
    fn walk_done_for(&mut self, i: usize, failed: bool, duration: Duration, all_noticed: bool) {
        let in_use = self.notifications.in_use();
        let max_keys = self.io.settings.tracking.max_keys;
        let cancelled = self.io.cancel.is_cancelled();
        let t = &mut self.jobs[i];
        t.verify.clear();
        t.direct.clear();
        if cancelled {
            t.job.metrics.walk_interrupted(t.walk_scanned);
            return;
        }
        if failed {
            t.job.metrics.walk_failed(t.walk_scanned, duration);
            return;
        }
        t.job.metrics.walk_succeeded(t.walk_scanned, duration);
        if all_noticed {
            t.index.set_unnoticed(false);
        }
        if t.walk_untracked > 0 && t.untracked == 0 {
            tracing::warn!(
                sweep = %t.job.name(),
                node = %self.id,
                keys = t.walk_untracked,
                max_keys,
                "tracking.max_keys reached: the keys past it are checked by walks on the sweep's schedule"
            );
        }
        t.untracked = t.walk_untracked;
        t.direct_members = t.walk_direct_members;
        t.report_population(&self.id);
        if !t.synced {
            tracing::info!(
                sweep = %t.job.name(),
                node = %self.id,
                keys = t.walk_scanned,
                tracked = t.index.len(),
                notifications = in_use,
                "first walk done: its keys are checked at their deadlines from now on"
            );
        }
        t.synced = true;
        let (scanned, untracked) = (t.walk_scanned, t.walk_untracked);
        let (tracked, members) = (t.index.len() as u64, t.index.members());
        let unix_now = unix_now();
        t.job.metrics.node_figures(&self.id, |f| {
            f.keys = scanned;
            f.untracked = untracked;
            f.tracked = tracked;
            f.members = members;
            f.last_success = unix_now;
        });
        self.health.walked(t.job.name(), &self.id);
    }

    pub(super) fn direct_checked(&mut self, epoch: u64, checked: Checked) {
        self.walk_future_done(None);
        if checked.error.is_none() {
            self.replied(checked.time);
        }
        if let Some(t) = self.jobs.iter_mut().find(|t| t.epoch == epoch) {
            t.walk_direct_members += checked.counts.members;
            t.report_population(&self.id);
        }
        if let Some(e) = checked.error {
            self.walk_future_done(Some(e));
        }
    }

    /// A future of the walk ended (`None`), or failed the walk (`Some`).
    pub(super) fn walk_future_done(&mut self, error: Option<Error>) {
        let Some(w) = &mut self.walk else {
            return;
        };
        match error {
            None => w.future_done(),
            Some(e) => w.fail(e),
        }
    }

    pub(super) fn verified(&mut self, epoch: u64, ids: Vec<Vec<u8>>, reads: Reads) {
        let Some(t) = self.jobs.iter_mut().find(|t| t.epoch == epoch) else {
            return;
        };
        let ttl_ms = t.job.sweep.config().ttl.as_millis() as u64;
        for (id, read) in ids.iter().zip(reads.keys) {
            match read.set() {
                Some(KeyRead {
                    oldest: Some(oldest),
                    ..
                }) => {
                    let oldest = t.job.sweep.config().score_unit.to_seconds(oldest);
                    t.index.due_by(id, checks::deadline_ms(oldest, ttl_ms));
                }
                // Gone since it was tracked (a restart, a DEL nobody told us of).
                _ => t.index.deleted(id),
            }
        }
    }
}
