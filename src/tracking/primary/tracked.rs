//! A sweep as one primary's loop runs it: its deadline index and what the walk in flight
//! queued for it.

use std::sync::Arc;

use tokio::time::Instant;

use crate::serve::health::LoopHealth;
use crate::serve::metrics::SweepMetrics;
use crate::store::NodeId;
use crate::store::walk::Queue;
use crate::sweep::Observer;
use crate::tracking::index::{Capacity, Index};
use crate::tracking::keyspace;

use super::Job;

/// A sweep on this primary.
pub(crate) struct Tracked {
    pub(crate) job: Arc<Job>,
    /// Tells this sweep's futures from those of a sweep it replaced.
    pub(crate) epoch: u64,
    pub(crate) index: Index,
    pub(crate) observer: Arc<dyn Observer>,
    /// The keyspace-notification channel pattern of its keys.
    pub(crate) channel: String,
    /// A walk covering this sweep finished since it was added.
    pub(crate) synced: bool,
    /// Keys the last walk could not track (the index is full).
    pub(crate) untracked: u64,
    /// Keys of this sweep the walk in flight found so far, and could not track.
    pub(crate) walk_scanned: u64,
    pub(crate) walk_untracked: u64,
    /// Work the walk in flight queued: ids to reconcile, and keys to check directly (they could
    /// not be tracked).
    pub(crate) verify: Queue,
    pub(crate) direct: Queue,
    /// Once the walk's SCAN is done: the index slot from which keys it did not see are read
    /// (and forgotten if gone), until the end of the index.
    pub(crate) unseen_from: Option<usize>,
    /// Members of the keys walks check directly (untracked): at the last walk's end, and so
    /// far in the walk in flight. The storm guard counts them with the index's.
    pub(crate) direct_members: u64,
    pub(crate) walk_direct_members: u64,
    /// This sweep's last schedule tick that asked for a walk.
    pub(crate) last_tick: Option<Instant>,
}

impl Tracked {
    pub(crate) fn new(
        job: Arc<Job>,
        epoch: u64,
        db: i64,
        capacity: Arc<Capacity>,
        health: Arc<LoopHealth>,
    ) -> Self {
        let observer: Arc<dyn Observer> = Arc::new(LoopObserver {
            metrics: job.metrics.clone(),
            health,
        });
        Self {
            channel: format!(
                "{}{}",
                keyspace::channel_prefix(db),
                job.sweep.config().pattern.glob()
            ),
            job,
            epoch,
            index: Index::new(capacity),
            observer,
            synced: false,
            untracked: 0,
            walk_scanned: 0,
            walk_untracked: 0,
            verify: Queue::default(),
            direct: Queue::default(),
            unseen_from: None,
            direct_members: 0,
            walk_direct_members: 0,
            last_tick: None,
        }
    }

    /// Keys queued by the walk in flight, waiting for a check or a read (and one while keys
    /// it did not see are left to read).
    pub(crate) fn queued(&self) -> usize {
        self.verify.len() + self.direct.len() + usize::from(self.unseen_from.is_some())
    }

    /// Publishes what the index holds now (`tracked_keys`, `members`) and tells the storm
    /// guard: after every change of the index's size, so that the gauges follow the keyspace.
    pub(crate) fn index_changed(&self, node: &NodeId) {
        let (tracked, members) = (self.index.len() as u64, self.index.members());
        self.report_population(node);
        self.job.metrics.node_figures(node, |f| {
            f.tracked = tracked;
            f.members = members;
        });
    }

    /// Tells the storm guard how many members this sweep has here: the tracked keys' as of
    /// their checks, and the untracked keys' as of the walks that checked them.
    pub(crate) fn report_population(&self, node: &NodeId) {
        let direct = self.direct_members.max(self.walk_direct_members);
        self.job
            .sweep
            .guard()
            .population(node, self.index.members() + direct);
    }
}

/// What checks on this primary report to: the sweep's metrics, and the loop's liveness.
struct LoopObserver {
    metrics: SweepMetrics,
    health: Arc<LoopHealth>,
}

impl Observer for LoopObserver {
    fn key_checked(&self, cardinality: u64) {
        self.metrics.key_checked(cardinality);
    }
    fn progress(&self) {
        self.health.progress();
    }
    fn member_evicted(&self, lag_seconds: f64) {
        self.metrics.member_evicted(lag_seconds);
    }
    fn published(&self, events: u64) {
        self.metrics.published(events);
    }
    fn events_failed(&self, events: u64) {
        self.metrics.events_failed(events);
    }
    fn events_unconfirmed(&self, events: u64) {
        self.metrics.events_unconfirmed(events);
    }
}
