//! One sweep's series: what its checks and walks report, resolved once per sweep so that
//! recording never looks labels up.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use presence_sweeper_rules::node::NodeId;
use presence_sweeper_rules::report::{NodeFigures, Observer, Totals};
use presence_sweeper_rules::storm::GuardReport;

/// The storm guard's series of one sweep: 1 while it holds, and the holds it started.
#[derive(Debug, Clone)]
pub(crate) struct GuardMetrics {
    pub(super) holding: prometheus::IntGauge,
    pub(super) holds: prometheus::IntCounter,
}

impl GuardReport for GuardMetrics {
    fn holding(&self, holding: bool) {
        self.holding.set(i64::from(holding));
    }
    fn hold_started(&self) {
        self.holds.inc();
    }
}

/// One sweep's series, resolved once so recording never looks labels up.
#[derive(Clone)]
pub(crate) struct SweepMetrics {
    pub(super) success: prometheus::IntCounter,
    pub(super) error: prometheus::IntCounter,
    pub(super) overruns: prometheus::IntCounter,
    pub(super) ticks: prometheus::IntCounter,
    pub(super) duration: prometheus::Histogram,
    pub(super) last_success: prometheus::Gauge,
    pub(super) keys_scanned: prometheus::IntCounter,
    pub(super) keys: prometheus::IntGauge,
    pub(super) members: prometheus::IntGauge,
    pub(super) tracked: prometheus::IntGauge,
    pub(super) untracked: prometheus::IntGauge,
    pub(super) missed: prometheus::IntCounter,
    pub(super) checks: prometheus::IntCounter,
    pub(super) check_errors: prometheus::IntCounter,
    pub(super) cardinality: prometheus::Histogram,
    pub(super) evicted: prometheus::IntCounter,
    pub(super) published: prometheus::IntCounter,
    pub(super) lost: prometheus::IntCounter,
    pub(super) unconfirmed: prometheus::IntCounter,
    pub(super) unanswered: prometheus::IntCounter,
    pub(super) lag: prometheus::Histogram,
    /// What each primary contributes to the sweep's gauges.
    pub(super) nodes: Arc<Mutex<BTreeMap<NodeId, NodeFigures>>>,
    pub(super) guard: GuardMetrics,
    pub(super) score_unit_mismatch: prometheus::IntGauge,
    pub(super) scores_ahead: prometheus::IntCounter,
}

impl SweepMetrics {
    /// The storm guard's series.
    pub(crate) fn guard(&self) -> Arc<dyn GuardReport> {
        Arc::new(self.guard.clone())
    }

    /// 1 while the sweep's `score_unit` looks wrong.
    pub(crate) fn score_unit_mismatch(&self) -> prometheus::IntGauge {
        self.score_unit_mismatch.clone()
    }

    /// The sweep's totals so far.
    pub(crate) fn totals(&self) -> Totals {
        Totals {
            evicted: self.evicted.get(),
            published: self.published.get(),
            lost: self.lost.get(),
            unconfirmed: self.unconfirmed.get(),
            checks: self.checks.get(),
            walks: self.success.get(),
            failed_walks: self.error.get(),
            tracked: self.tracked.get(),
            members: self.members.get(),
        }
    }

    /// Records a walk of one primary that covered its keyspace. Evictions and events were
    /// counted as they happened.
    pub(crate) fn walk_succeeded(&self, keys_scanned: u64, duration: Duration) {
        self.keys_scanned.inc_by(keys_scanned);
        self.duration.observe(duration.as_secs_f64());
        self.success.inc();
    }

    /// Records a failed walk.
    pub(crate) fn walk_failed(&self, keys_scanned: u64, duration: Duration) {
        self.keys_scanned.inc_by(keys_scanned);
        self.duration.observe(duration.as_secs_f64());
        self.error.inc();
    }

    /// Records a walk cut short by shutdown (neither a success nor an error).
    pub(crate) fn walk_interrupted(&self, keys_scanned: u64) {
        self.keys_scanned.inc_by(keys_scanned);
    }

    /// Sets `node`'s share of the gauges (changes only what changed).
    pub(crate) fn node_figures(&self, node: &NodeId, figures: impl FnOnce(&mut NodeFigures)) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        figures(nodes.entry(node.clone()).or_default());
        self.publish_figures(&nodes);
    }

    /// Drops `node`'s share (it left the topology, or the sweep left it).
    pub(crate) fn forget_node(&self, node: &NodeId) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.remove(node);
        self.publish_figures(&nodes);
    }

    fn publish_figures(&self, nodes: &BTreeMap<NodeId, NodeFigures>) {
        let sum = |f: fn(&NodeFigures) -> u64| nodes.values().map(f).sum::<u64>() as i64;
        self.keys.set(sum(|n| n.keys));
        self.members.set(sum(|n| n.members));
        self.tracked.set(sum(|n| n.tracked));
        self.untracked.set(sum(|n| n.untracked));
        // The oldest primary's: a primary that has not walked yet holds the gauge at 0.
        let oldest = nodes
            .values()
            .map(|n| n.last_success)
            .fold(f64::INFINITY, f64::min);
        self.last_success
            .set(if oldest.is_finite() { oldest } else { 0.0 });
    }

    /// Counts a schedule tick that asked for a walk, and whether it was skipped because the
    /// walk of an earlier tick was still running.
    pub(crate) fn tick(&self, overrun: bool) {
        self.ticks.inc();
        if overrun {
            self.overruns.inc();
        }
    }

    /// Counts keys a reconciliation walk found untracked while notifications were in use.
    pub(crate) fn missed_notifications(&self, keys: u64) {
        self.missed.inc_by(keys);
    }

    /// Counts keys checked for the index, and failed checks.
    pub(crate) fn deadline_checks(&self, keys: u64, failed: bool) {
        self.checks.inc_by(keys);
        if failed {
            self.check_errors.inc_by(keys);
        }
    }
}

impl Observer for SweepMetrics {
    fn key_checked(&self, cardinality: u64) {
        self.cardinality.observe(cardinality as f64);
    }

    fn member_evicted(&self, lag_seconds: f64) {
        self.evicted.inc();
        // A score of -inf, or one written by hand, says nothing of how late its eviction was.
        if lag_seconds.is_finite() {
            self.lag.observe(lag_seconds.max(0.0));
        }
    }

    fn published(&self, events: u64) {
        self.published.inc_by(events);
    }

    fn scores_ahead(&self, keys: u64) {
        self.scores_ahead.inc_by(keys);
    }

    fn events_failed(&self, events: u64) {
        self.lost.inc_by(events);
    }

    fn events_unconfirmed(&self, events: u64) {
        self.unconfirmed.inc_by(events);
    }

    fn evictions_unanswered(&self, calls: u64) {
        self.unanswered.inc_by(calls);
    }
}
