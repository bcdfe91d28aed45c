//! What the unit tests of one primary's parts share: stand-ins for the I/O side's types,
//! reports that record what they were told, and sweeps shaped as the built-in ones.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Io, Job};
use crate::node::NodeId;
use crate::pattern::KeyPattern;
use crate::report::{Beat, NodeFigures, NodeReport, Observer, SweepReport, Totals};
use crate::score::ScoreUnit;
use crate::storm::{self, StormGuard, Unreported};
use crate::trouble::{Failure, Trouble};

/// The tests' I/O side: subscriptions are numbers, sweeps [`TestJob`]s, errors [`TestError`]s.
pub(crate) struct TestIo;

impl Io for TestIo {
    type Job = TestJob;
    type Subscription = u32;
    type Error = TestError;
}

/// A failure of Redis, of a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TestError(pub(crate) Trouble);

impl std::fmt::Display for TestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a {} failure", self.0.label())
    }
}

impl Failure for TestError {
    fn trouble(&self) -> Trouble {
        self.0
    }
    fn read_only() -> Self {
        Self(Trouble::Other)
    }
}

/// A sweep as the tests run it.
pub(crate) struct TestJob {
    name: String,
    pattern: KeyPattern,
    ttl: Duration,
    guard: StormGuard,
    report: Arc<dyn SweepReport>,
}

impl Job for TestJob {
    fn name(&self) -> &str {
        &self.name
    }
    fn pattern(&self) -> &KeyPattern {
        &self.pattern
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn score_unit(&self) -> ScoreUnit {
        ScoreUnit::Seconds
    }
    fn guard(&self) -> &StormGuard {
        &self.guard
    }
    fn report(&self) -> &Arc<dyn SweepReport> {
        &self.report
    }
}

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
    fn notice(&self) {}
    fn check_window(&self, _: usize) {}
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
    fn leases(&self, _: &[(NodeId, bool)]) {}
    fn runs_on(&self, _: Option<&std::collections::BTreeSet<NodeId>>) {}
}

/// A loop that nobody watches.
pub(super) struct NoBeat;

impl Beat for NoBeat {
    fn alive(&self) {}
    fn busy(&self, _: bool) {}
    fn progress(&self) {}
    fn retire(&self) {}
}

/// A sweep shaped as the built-in `name` (`online`: `presence:*:online`, ttl 45 s; `typing`:
/// 5 s), and its report.
pub(super) fn job(name: &str) -> (Arc<TestJob>, Arc<SweepLog>) {
    let ttl = Duration::from_secs(if name == "typing" { 5 } else { 45 });
    let log = Arc::new(SweepLog {
        first_walk: true.into(),
        ..SweepLog::default()
    });
    let job = Arc::new(TestJob {
        name: name.to_owned(),
        pattern: KeyPattern::parse(&format!("presence:*:{name}")).expect("a pattern"),
        ttl,
        guard: StormGuard::new(&storm::Settings::default(), name, ttl, Arc::new(Unreported)),
        report: log.clone(),
    });
    (job, log)
}

pub(super) fn node() -> NodeId {
    NodeId::new("127.0.0.1:6390")
}

/// A failure of Redis that is neither a refusal nor of the connection.
pub(super) fn failure() -> TestError {
    TestError(Trouble::Other)
}

/// A refusal by the ACL.
pub(super) fn refusal() -> TestError {
    TestError(Trouble::Permission)
}
