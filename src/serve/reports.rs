//! Where tracking's reports go in the daemon: its Prometheus metrics and its health state (what
//! `/readyz` and `/healthz` say). Tracking only knows the handles ([`Reports`]).

use presence_sweeper_config as config;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};

use presence_sweeper_rules::node::NodeId;
use presence_sweeper_rules::report::{
    Beat, NodeFigures, NodeReport, Observer, SweepReport, Totals,
};
use presence_sweeper_rules::trouble::Trouble;
use presence_sweeper_rules::units::UnitAlarm;

use crate::serve::health::{Health, LoopHealth};
use crate::serve::metrics::{Metrics, SweepMetrics};
use crate::tracking::report::{Reports, SweepHandles};

/// The daemon's metrics and health, as tracking reports to them.
pub(crate) struct DaemonReports {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) health: Arc<Health>,
}

impl Reports for DaemonReports {
    fn sweep(&self, config: &config::Sweep) -> SweepHandles {
        let metrics = self.metrics.sweep(config);
        self.health.sweep(&config.name);
        let (health, name) = (self.health.clone(), config.name.clone());
        let gauge = metrics.score_unit_mismatch();
        let units = UnitAlarm(Arc::new(move |why: Option<String>| {
            gauge.set(i64::from(why.is_some()));
            health.set_misconfigured(&name, why);
        }));
        let guard = metrics.guard();
        let report = Arc::new(SweepHandle {
            leases: Mutex::default(),
            name: config.name.clone(),
            all: self.metrics.clone(),
            health: self.health.clone(),
            metrics,
        });
        SweepHandles {
            report,
            guard,
            units,
        }
    }

    fn forget_sweep(&self, name: &str) {
        self.metrics.forget_sweep(name);
        self.health.forget_sweep(name);
    }

    fn notifications_expected(&self, expected: bool) {
        self.metrics.set_notifications_expected(expected);
    }

    fn primaries(&self, nodes: Vec<NodeId>) {
        self.health.set_nodes(nodes);
    }

    fn node(&self, node: &NodeId) -> Box<dyn NodeReport> {
        Box::new(NodeHandle {
            notifications: self.metrics.notifications_gauge(node),
            notices: self.metrics.notices_counter(node),
            check_window: self.metrics.check_window_gauge(node),
            config_refused: self.metrics.config_refused_gauge(node),
            outages: self.metrics.start_node(node),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            node: node.clone(),
        })
    }

    fn watch_loop(&self, name: &str) -> Arc<dyn Beat> {
        Arc::new(self.health.register_loop(name))
    }
}

/// One sweep's series and readiness.
struct SweepHandle {
    name: String,
    metrics: SweepMetrics,
    /// The primaries whose lease series this sweep has (only sweeps with leases have them:
    /// created at their first attempt).
    leases: Mutex<Vec<NodeId>>,
    all: Arc<Metrics>,
    health: Arc<Health>,
}

impl Observer for SweepHandle {
    fn key_checked(&self, cardinality: u64) {
        self.metrics.key_checked(cardinality);
    }
    fn member_evicted(&self, lag_seconds: f64) {
        self.metrics.member_evicted(lag_seconds);
    }
    fn published(&self, events: u64) {
        self.metrics.published(events);
    }
    fn scores_ahead(&self, keys: u64) {
        self.metrics.scores_ahead(keys);
    }
    fn read_refused(&self) {
        self.all.redis_failure(Trouble::Permission);
    }
    fn events_failed(&self, events: u64) {
        self.metrics.events_failed(events);
    }
    fn events_unconfirmed(&self, events: u64) {
        self.metrics.events_unconfirmed(events);
    }
    fn evictions_unanswered(&self, calls: u64) {
        self.metrics.evictions_unanswered(calls);
    }
}

impl SweepReport for SweepHandle {
    fn walk_succeeded(&self, keys_scanned: u64, duration: Duration) {
        self.metrics.walk_succeeded(keys_scanned, duration);
    }
    fn walk_failed(&self, keys_scanned: u64, duration: Duration) {
        self.metrics.walk_failed(keys_scanned, duration);
    }
    fn walk_interrupted(&self, keys_scanned: u64) {
        self.metrics.walk_interrupted(keys_scanned);
    }
    fn node_figures(&self, node: &NodeId, figures: &mut dyn FnMut(&mut NodeFigures)) {
        self.metrics.node_figures(node, figures);
    }
    fn forget_node(&self, node: &NodeId) {
        self.metrics.forget_node(node);
    }
    fn walked(&self, node: &NodeId) -> bool {
        self.health.walked(&self.name, node)
    }
    fn tick(&self, overrun: bool) {
        self.metrics.tick(overrun);
    }
    fn missed_notifications(&self, keys: u64) {
        self.metrics.missed_notifications(keys);
    }
    fn deadline_checks(&self, keys: u64, failed: bool) {
        self.metrics.deadline_checks(keys, failed);
    }
    fn totals(&self) -> Totals {
        self.metrics.totals()
    }
    fn interval(&self, interval: Duration) {
        self.all.set_interval(&self.name, interval);
    }
    fn leases(&self, held: &[(NodeId, bool)]) {
        let mut labelled = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        for gone in labelled
            .iter()
            .filter(|n| !held.iter().any(|(h, _)| h == *n))
        {
            self.all.forget_lease(&self.name, gone);
        }
        for (node, is_held) in held {
            self.all.set_lease(&self.name, node, *is_held);
        }
        *labelled = held.iter().map(|(n, _)| n.clone()).collect();
    }
    fn runs_on(&self, nodes: Option<&BTreeSet<NodeId>>) {
        self.health.runs_on(&self.name, nodes.cloned());
    }
}

/// One primary's series and readiness.
struct NodeHandle {
    node: NodeId,
    notifications: IntGauge,
    notices: IntCounter,
    check_window: IntGauge,
    config_refused: IntGauge,
    outages: IntCounter,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

impl NodeReport for NodeHandle {
    fn outage(&self) {
        self.outages.inc();
    }
    fn notifications(&self, in_use: bool) {
        self.notifications.set(i64::from(in_use));
    }
    fn notice(&self) {
        self.notices.inc();
    }
    fn check_window(&self, depth: usize) {
        self.check_window
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }
    fn config_refused(&self, refused: bool) {
        self.config_refused.set(i64::from(refused));
    }
    fn refused(&self, why: Option<String>) {
        self.health.set_refused(&self.node, why);
    }
    fn failure(&self, trouble: Trouble) {
        self.metrics.redis_failure(trouble);
    }
    fn clock_step(&self, direction: &'static str, _seconds: f64) {
        self.metrics.clock_step(&self.node, direction);
    }
    fn writes_refused(&self, why: Option<String>) {
        self.metrics.writes_refused(&self.node, why.is_some());
        self.health.set_writes_refused(&self.node, why);
    }
    fn forget(&self) {
        self.metrics.forget_node(&self.node);
        self.health.set_refused(&self.node, None);
        self.health.set_writes_refused(&self.node, None);
    }
}

impl Beat for LoopHealth {
    fn alive(&self) {
        LoopHealth::alive(self);
    }
    fn busy(&self, busy: bool) {
        LoopHealth::busy(self, busy);
    }
    fn progress(&self) {
        LoopHealth::progress(self);
    }
    fn retire(&self) {
        LoopHealth::retire(self);
    }
}
