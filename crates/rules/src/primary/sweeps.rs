//! The sweeps one primary's loop runs: which ones (they follow reloads and leases), and what
//! comes back (a page, a notice, a check) handed to the one it concerns. No I/O.

use std::sync::Arc;
use std::time::Instant;

use super::tracked::{Tick, Tracked};
use super::walks::WalkKind;
use super::{Io, Job};
use crate::index::Capacity;
use crate::keyspace::{NEW_KEY, Notice};
use crate::node::NodeId;
use crate::report::Beat;
use crate::scan::Page;

/// Keys per sweep checked at once after a backward step of Redis's clock: enough to report
/// scores it left in Redis's future, not a burst of the whole index.
const RECHECK: usize = 1000;

/// The sweeps running on one primary.
pub struct Sweeps<I: Io> {
    node: NodeId,
    db: i64,
    capacity: Arc<Capacity>,
    beat: Arc<dyn Beat>,
    list: Vec<Tracked<I>>,
    next_epoch: u64,
}

impl<I: Io> Sweeps<I> {
    pub fn new(node: NodeId, db: i64, capacity: Arc<Capacity>, beat: Arc<dyn Beat>) -> Self {
        Self {
            node,
            db,
            capacity,
            beat,
            list: Vec::new(),
            next_epoch: 0,
        }
    }

    /// Makes the sweeps here match `jobs`: unchanged ones keep their index; new and changed ones
    /// start empty (a walk finds their keys); the others leave. Returns whether any came or
    /// went.
    pub fn set(&mut self, jobs: Vec<Arc<I::Job>>) -> bool {
        let mut kept = Vec::with_capacity(jobs.len());
        let mut old = std::mem::take(&mut self.list);
        let mut added = false;
        for job in jobs {
            match old.iter().position(|t| Arc::ptr_eq(&t.job, &job)) {
                Some(i) => kept.push(old.swap_remove(i)),
                None => {
                    added = true;
                    self.next_epoch += 1;
                    kept.push(Tracked::new(
                        job,
                        self.next_epoch,
                        self.db,
                        self.capacity.clone(),
                        self.beat.clone(),
                    ));
                }
            }
        }
        for t in &old {
            t.forget(&self.node);
        }
        self.list = kept;
        added || !old.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn node(&self) -> &NodeId {
        &self.node
    }

    pub fn iter(&self) -> impl Iterator<Item = &Tracked<I>> {
        self.list.iter()
    }

    pub fn get_mut(&mut self, i: usize) -> &mut Tracked<I> {
        &mut self.list[i]
    }

    /// The sweep of `epoch`, if it still runs here (futures outlive a sweep replaced).
    pub fn by_epoch(&mut self, epoch: u64) -> Option<&mut Tracked<I>> {
        self.list.iter_mut().find(|t| t.epoch == epoch)
    }

    /// Every sweep's epoch: those a walk starting now serves.
    pub fn epochs(&self) -> Vec<u64> {
        self.list.iter().map(|t| t.epoch).collect()
    }

    /// The keyspace-notification patterns to subscribe to.
    pub fn channels(&self) -> Vec<String> {
        self.list.iter().map(|t| t.channel.clone()).collect()
    }

    /// Keys queued by the walk in flight, waiting for a check or a read.
    pub fn queued(&self) -> usize {
        self.list.iter().map(Tracked::queued).sum()
    }

    /// The earliest deadline of any tracked key (ms, Redis's clock).
    pub fn next_due(&self) -> Option<u64> {
        self.list.iter().filter_map(|t| t.index.next_due()).min()
    }

    /// When (ms, Redis's clock) the next batch of `batch` keys of any sweep is checked.
    pub fn next_ripe(&self, batch: usize) -> Option<u64> {
        self.list.iter().filter_map(|t| t.ripe_at(batch)).min()
    }

    /// Writes may have gone unnoticed: the next reconciliation reads every key.
    pub fn set_unnoticed(&mut self) {
        for t in &mut self.list {
            t.index.set_unnoticed(true);
        }
    }

    /// Up to `RECHECK` keys of each sweep, those with the latest deadlines, are checked at
    /// `now_ms` (Redis's clock stepped back).
    pub fn recheck_latest(&mut self, now_ms: u64) {
        for t in &mut self.list {
            t.index.recheck_latest(RECHECK, now_ms);
        }
    }

    /// Redis's clock reads `now`: a storm guard's hold whose time is up ends, even if no check
    /// asks the guard.
    pub fn holding(&self, now: f64) {
        for t in &self.list {
            t.job.guard().holding(now);
        }
    }

    /// A schedule tick of the sweep `name` at `now` (see [`Tracked::tick`]).
    pub fn tick(
        &mut self,
        name: &str,
        now: Instant,
        notifications: bool,
        walk: Option<Instant>,
    ) -> Tick {
        match self.list.iter_mut().find(|t| t.job.name() == name) {
            Some(t) => t.tick(now, notifications, walk),
            None => Tick::Skip,
        }
    }

    /// A walk starts, serving every sweep here.
    pub fn walk_started(&mut self) {
        for t in &mut self.list {
            t.walk_started();
        }
    }

    /// The walk's SCAN is done, for the sweeps of `epochs`.
    pub fn scan_done(&mut self, epochs: &[u64]) {
        for t in self.list.iter_mut().filter(|t| epochs.contains(&t.epoch)) {
            t.scan_done();
        }
    }

    /// Hands each key of a page to the sweeps of `epochs` it fits.
    pub fn route(
        &mut self,
        page: &Page,
        epochs: &[u64],
        kind: WalkKind,
        count_missed: bool,
        now_ms: u64,
    ) {
        for key in &page.keys {
            for t in self.list.iter_mut().filter(|t| epochs.contains(&t.epoch)) {
                let Some(id) = t.job.pattern().conversation_id(key) else {
                    continue;
                };
                t.found(key, id, page.time, kind, count_missed, now_ms);
            }
        }
    }

    /// A keyspace notice at Redis's `now` (seconds, if its clock was read). Returns the sweep
    /// whose index filled up with it, if one did for the first time.
    /// A new key ([`NEW_KEY`]) goes to every sweep whose `match` it fits.
    pub fn notice(&mut self, n: &Notice, now: Option<f64>) -> Option<String> {
        let mut filled = None;
        let node = &self.node;
        for t in self
            .list
            .iter_mut()
            .filter(|t| n.pattern == NEW_KEY || t.channel.as_bytes() == n.pattern)
        {
            let Some(id) = t.job.pattern().conversation_id(&n.key) else {
                continue;
            };
            if t.notice(node, id, n.change, now) && filled.is_none() {
                filled = Some(t.job.name().to_owned());
            }
        }
        filled
    }

    /// The loop ends, or its sweeps leave: every sweep's share of the figures goes.
    pub fn forget(&self) {
        for t in &self.list {
            t.forget(&self.node);
        }
    }
}
