//! What the unit tests of one primary's parts share: reports that record what they were told,
//! and sweeps built from the built-in configuration.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{Config, Sources};
use crate::error::Trouble;
use crate::store::NodeId;
use crate::sweep::{Observer, Sweep};
use crate::tracking::report::{Beat, NodeFigures, NodeReport, SweepReport, Totals};

use super::tracked::Job;

/// What a report was told, one line per call.
#[derive(Clone, Default)]
pub(super) struct Said(Arc<Mutex<Vec<String>>>);

impl Said {
    fn push(&self, line: impl Into<String>) {
        self.0.lock().unwrap().push(line.into());
    }

    /// Everything said so far, emptied.
    pub(super) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl NodeReport for Said {
    fn outage(&self) {
        self.push("outage");
    }
    fn notifications(&self, in_use: bool) {
        self.push(format!("notifications {in_use}"));
    }
    fn config_refused(&self, refused: bool) {
        self.push(format!("config_refused {refused}"));
    }
    fn refused(&self, why: Option<String>) {
        self.push(format!("refused {}", why.is_some()));
    }
    fn failure(&self, trouble: Trouble) {
        self.push(format!("failure {}", trouble.label()));
    }
    fn forget(&self) {
        self.push("forget");
    }
    fn clock_step(&self, direction: &'static str, seconds: f64) {
        self.push(format!("step {direction} {seconds:.0}"));
    }
    fn writes_refused(&self, why: Option<String>) {
        self.push(format!("writes refused {}", why.is_some()));
    }
}

/// A sweep's report that keeps its node figures and records the rest.
#[derive(Default)]
pub(super) struct SweepLog {
    pub(super) said: Said,
    pub(super) figures: Mutex<NodeFigures>,
    /// What `walked` answers: whether the walk is the sweep's first of the node.
    pub(super) first_walk: std::sync::atomic::AtomicBool,
}

impl Observer for SweepLog {}

impl SweepReport for SweepLog {
    fn walk_succeeded(&self, keys: u64, _: Duration) {
        self.said.push(format!("walk ok {keys}"));
    }
    fn walk_failed(&self, keys: u64, _: Duration) {
        self.said.push(format!("walk failed {keys}"));
    }
    fn walk_interrupted(&self, keys: u64) {
        self.said.push(format!("walk interrupted {keys}"));
    }
    fn node_figures(&self, _: &NodeId, figures: &mut dyn FnMut(&mut NodeFigures)) {
        figures(&mut self.figures.lock().unwrap());
    }
    fn forget_node(&self, _: &NodeId) {
        self.said.push("forget");
    }
    fn walked(&self, _: &NodeId) -> bool {
        self.first_walk
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }
    fn tick(&self, overrun: bool) {
        self.said.push(format!("tick {overrun}"));
    }
    fn missed_notifications(&self, keys: u64) {
        self.said.push(format!("missed {keys}"));
    }
    fn deadline_checks(&self, keys: u64, failed: bool) {
        self.said.push(format!("checks {keys} {failed}"));
    }
    fn totals(&self) -> Totals {
        Totals::default()
    }
    fn interval(&self, _: Duration) {}
    fn lease(&self, _: bool) {}
    fn standby(&self, _: bool) {}
}

/// A loop that nobody watches.
pub(super) struct NoBeat;

impl Beat for NoBeat {
    fn alive(&self) {}
    fn busy(&self, _: bool) {}
    fn progress(&self) {}
    fn retire(&self) {}
}

/// The built-in sweep `name` (`online`: `presence:*:online`, ttl 45 s; `typing`: 5 s), and
/// its report.
pub(super) fn job(name: &str) -> (Arc<Job>, Arc<SweepLog>) {
    let config = Config::load(&Sources::default()).expect("the built-in configuration");
    let sweep = config.sweep(name).expect("a built-in sweep");
    let log = Arc::new(SweepLog {
        first_walk: true.into(),
        ..SweepLog::default()
    });
    let job = Arc::new(Job {
        sweep: Arc::new(Sweep::new(sweep, &config)),
        report: log.clone(),
    });
    (job, log)
}

pub(super) fn node() -> NodeId {
    NodeId::new("127.0.0.1:6390")
}

/// A failure of Redis that is neither a refusal nor of the connection.
pub(super) fn failure() -> crate::Error {
    crate::store::reply::ReplyError::new("test").into()
}

/// A refusal by the ACL.
pub(super) fn refusal() -> crate::Error {
    crate::Error::Permission {
        command: "ZADD".into(),
        target: "presence:c1:online".into(),
        detail: "no permissions".into(),
    }
}
