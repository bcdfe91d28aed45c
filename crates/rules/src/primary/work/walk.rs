//! The walk in flight, from its start to its end: its pages routed to the sweeps, the reads and
//! checks it queued handed out, what they found handed back, and its end told to every sweep
//! it served.

use std::time::Instant;

use super::{Now, Task, Walked, Work, batch_of};
use crate::primary::deadlines;
use crate::primary::tracked::{WalkEnd, WalkWork};
use crate::primary::walks::{Start, Walk, WalkEnding, spread};
use crate::primary::{Io, Job as _};
use crate::scan::{Pace, Page, common_glob};

impl<I: Io> Work<I> {
    /// A walk starts at `now`, serving every sweep here.
    pub(super) fn start_walk(&mut self, now: Instant, start: Start) {
        let glob = common_glob(self.sweeps.iter().map(|t| t.job.pattern()));
        self.sweeps.walk_started();
        self.beat.busy(true);
        let subscription = (self.coord.in_use(), self.coord.generation());
        let epochs = self.sweeps.epochs();
        let spread = spread(now, start.spread_over, self.last_walk_pages);
        let pace = Pace::new(now, self.settings.keys_per_second, spread);
        self.walk = Some(Walk::new(now, start, epochs, pace, subscription));
        self.tasks.push(Task::Scan { glob });
        let page_every = spread.map(|s| s.every);
        tracing::debug!(node = %self.sweeps.node(), kind = ?start.kind, ?page_every, "walk started");
    }

    /// The walk's next SCAN page came: its keys go to the sweeps they fit. `None`: the SCAN is
    /// done; an error fails the walk (it ends once its requests are back).
    pub fn on_page(&mut self, now: Now, page: Option<Result<Page, I::Error>>) {
        let Some(walk) = &mut self.walk else {
            return;
        };
        match page {
            None => {
                walk.scan_done = true;
                self.sweeps.scan_done(&walk.epochs);
            }
            Some(Err(e)) => walk.fail(e),
            Some(Ok(page)) => {
                walk.pace.page(page.keys.len(), now.at);
                let (kind, count_missed) = (walk.kind, walk.count_missed);
                let epochs = walk.epochs.clone();
                self.beat.progress();
                self.coord.on_reply(None, now.at, Some(page.time));
                let now_ms = self.coord.clock().map_or(0, |c| c.ms_at(now.at));
                self.sweeps
                    .route(&page, &epochs, kind, count_missed, now_ms);
            }
        }
        self.finish_walk_if_done(now);
    }

    /// Hands the walk's queued work to checks and reads, while there is room in flight.
    pub(super) fn dispatch_walk_work(&mut self, now: Now) {
        let Some(walk) = &self.walk else {
            return;
        };
        if self.stopping || walk.error.is_some() {
            return;
        }
        let scan_done = walk.scan_done;
        for i in 0..self.sweeps.len() {
            while self.room() {
                let Some(task) = self.walk_task(now.at, i, scan_done) else {
                    break;
                };
                self.request(task);
                if let Some(w) = &mut self.walk {
                    w.future_started();
                }
            }
        }
        self.finish_walk_if_done(now);
    }

    /// The next check or read of keys the walk queued for sweep `i`, if a batch is ready.
    fn walk_task(&mut self, now: Instant, i: usize, scan_done: bool) -> Option<Task<I>> {
        let t = self.sweeps.get_mut(i);
        // Nothing is evicted while Redis's standing is in doubt: the keys wait for its verdict.
        let verdict = self.coord.verdict(now, t.job.ttl().as_secs_f64());
        let epoch = t.epoch;
        Some(
            match t.walk_work(self.settings.batching.batch, scan_done, verdict)? {
                WalkWork::Direct {
                    keys,
                    page_time,
                    verdict,
                } => {
                    let opts = deadlines::walk_opts(verdict, page_time);
                    let batch = batch_of(t, keys.into_iter().collect(), opts);
                    Task::Direct { epoch, batch }
                }
                WalkWork::Verify { ids } => {
                    let keys = ids.iter().map(|id| t.job.pattern().key(id)).collect();
                    Task::Verify { epoch, ids, keys }
                }
                WalkWork::Unseen { ids } => {
                    let keys = ids.iter().map(|id| t.job.pattern().key(id)).collect();
                    Task::Unseen { epoch, ids, keys }
                }
            },
        )
    }

    /// Ends the walk once its pages and requests are done and nothing it queued waits:
    /// every sweep it served is told how, and a failure is the coordinator's.
    pub(super) fn finish_walk_if_done(&mut self, now: Now) {
        if !self
            .walk
            .as_ref()
            .is_some_and(|w| w.over(self.sweeps.queued()))
        {
            return;
        }
        let walk = self.walk.take().expect("checked above");
        if walk.ending(self.stopping) == WalkEnding::Done {
            self.last_walk_pages = Some(walk.pace.pages());
        }
        self.tasks.push(Task::ScanOver);
        self.beat.busy(false);
        let in_use = self.coord.in_use();
        let end = WalkEnd {
            how: walk.ending(self.stopping),
            duration: now.at.saturating_duration_since(walk.started),
            all_noticed: walk.all_noticed(in_use, self.coord.generation()),
            notifications: in_use,
            max_keys: self.settings.max_keys,
            unix_now: now.unix,
        };
        let node = self.sweeps.node().clone();
        for i in 0..self.sweeps.len() {
            let t = self.sweeps.get_mut(i);
            if walk.epochs.contains(&t.epoch) {
                t.walk_ended(&node, end).log(t.job.name(), &node, &end);
            }
        }
        match walk.error {
            Some(e) => self.coord.on_walk_failed(now.at, e),
            None => tracing::debug!(
                node = %node,
                kind = ?walk.kind,
                keys = walk.pace.scanned(),
                duration_ms = end.duration.as_millis() as u64,
                "walk finished"
            ),
        }
    }

    /// A request of the walk in flight came back for the sweep of `epoch`: what it found goes
    /// to that sweep, and a failure fails the walk (it ends once its other requests are back).
    pub fn on_walked(&mut self, now: Now, epoch: u64, walked: Walked<I::Error>) {
        self.landed(false);
        let at = now.at;
        let node = self.sweeps.node().clone();
        let error = match walked {
            Walked::Direct(checked) => {
                if checked.error.is_none() {
                    self.coord.on_reply(None, at, checked.time);
                }
                if let Some(t) = self.sweeps.by_epoch(epoch) {
                    t.direct_checked(&node, checked.counts.members);
                }
                checked.error
            }
            Walked::Verified(_, Err(e)) | Walked::Unseen(_, Err(e)) => Some(e),
            Walked::Verified(ids, Ok(reads)) => {
                self.coord.on_reply(None, at, reads.time);
                if let Some(t) = self.sweeps.by_epoch(epoch) {
                    t.verified(&node, &ids, reads);
                }
                None
            }
            Walked::Unseen(ids, Ok(reads)) => {
                self.coord.on_reply(None, at, reads.time);
                if let Some(t) = self.sweeps.by_epoch(epoch) {
                    let keys = t.unseen_read(&node, &ids, reads);
                    if keys > 0 {
                        tracing::debug!(sweep = %t.job.name(), %node, keys, "forgot keys the walk did not find: they are gone");
                    }
                }
                None
            }
        };
        if let Some(w) = &mut self.walk {
            w.future_done();
            error.into_iter().for_each(|e| w.fail(e));
        }
        self.finish_walk_if_done(now);
    }
}
