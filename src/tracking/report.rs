//! What tracking reports, through handles of its own: the process (`serve`) implements them with
//! its metrics, its health state and its readiness; tests implement them to see what was
//! reported. Tracking never names the process's types, as `sweep` reports through its
//! [`Observer`].

use std::sync::Arc;
use std::time::Duration;

use crate::config::SweepConfig;
use crate::error::Trouble;
use crate::store::NodeId;
use crate::sweep::Observer;
use crate::sweep::storm::GuardMetrics;
use crate::sweep::units::UnitAlarm;

/// Everything the engine reports, and the handles it gives its loops.
pub(crate) trait Reports: Send + Sync {
    /// The handles of a sweep, its series created at zero.
    fn sweep(&self, config: &SweepConfig) -> SweepHandles;
    /// A sweep is no longer configured: its series and readiness go.
    fn forget_sweep(&self, name: &str);
    /// Whether the configuration expects keyspace notifications on every primary.
    fn notifications_expected(&self, expected: bool);
    /// The primaries every sweep must have walked to be ready.
    fn primaries(&self, nodes: Vec<NodeId>);
    /// The handle of one primary's loop.
    fn node(&self, node: &NodeId) -> Box<dyn NodeReport>;
    /// A loop that must keep turning, watched until it retires.
    fn watch_loop(&self, name: &str) -> Arc<dyn Beat>;
}

/// What a sweep is given to report with.
pub(crate) struct SweepHandles {
    pub(crate) report: Arc<dyn SweepReport>,
    pub(crate) guard: GuardMetrics,
    pub(crate) units: UnitAlarm,
}

/// Where one sweep's work on every primary reports; its checks report through the
/// [`Observer`] half.
pub(crate) trait SweepReport: Observer {
    /// A walk of `node` covered its keyspace.
    fn walk_succeeded(&self, keys_scanned: u64, duration: Duration);
    /// A walk failed.
    fn walk_failed(&self, keys_scanned: u64, duration: Duration);
    /// A walk was cut short by shutdown (neither a success nor an error).
    fn walk_interrupted(&self, keys_scanned: u64);
    /// Changes `node`'s share of the sweep's gauges.
    fn node_figures(&self, node: &NodeId, figures: &mut dyn FnMut(&mut NodeFigures));
    /// `node` left the topology, or the sweep left it: its share goes.
    fn forget_node(&self, node: &NodeId);
    /// The sweep finished a walk of `node`; whether it is its first since the daemon started.
    fn walked(&self, node: &NodeId) -> bool;
    /// A schedule tick asked for a walk; `overrun` if the walk of an earlier tick still ran.
    fn tick(&self, overrun: bool);
    /// A reconciliation found keys untracked while notifications were in use.
    fn missed_notifications(&self, keys: u64);
    /// Keys checked at their deadlines, and whether the check failed.
    fn deadline_checks(&self, keys: u64, failed: bool);
    /// The sweep's running totals, for the log's summary.
    fn totals(&self) -> Totals;
    /// The time between the sweep's walks now.
    fn interval(&self, interval: Duration);
    /// Whether this replica holds the sweep's lease.
    fn lease(&self, held: bool);
    /// Whether the sweep stands by while another replica holds its lease.
    fn standby(&self, standby: bool);
}

/// Where one primary's loop reports.
pub(crate) trait NodeReport: Send + Sync {
    /// Redis answered again after an outage.
    fn outage(&self);
    /// Whether keyspace notifications are in use on this primary now.
    fn notifications(&self, in_use: bool);
    /// Whether the server refuses `CONFIG`.
    fn config_refused(&self, refused: bool);
    /// Redis refuses the daemon's user a command the checks need (`Some`: what it said), or no
    /// longer does: readiness names it meanwhile.
    fn refused(&self, why: Option<String>);
    /// A failure of Redis, by kind.
    fn failure(&self, trouble: Trouble);
    /// Redis's clock stepped (`direction`: `forward` or `backward`) by `seconds`.
    fn clock_step(&self, direction: &'static str, seconds: f64);
    /// Redis refuses writes (`Some`: why; an episode begins), or takes them again: readiness
    /// names it meanwhile.
    fn writes_refused(&self, why: Option<String>);
    /// The loop stops: this primary's series and refusal go.
    fn forget(&self);
}

/// A loop's turns, as liveness and readiness watch them.
pub(crate) trait Beat: Send + Sync {
    /// The loop turned.
    fn alive(&self);
    /// A walk starts (`true`) or ends: while busy, the loop must show progress.
    fn busy(&self, busy: bool);
    /// The walk in flight moved on.
    fn progress(&self);
    /// The loop ends as asked: it is no longer watched.
    fn retire(&self);
}

/// One primary's share of a sweep's gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct NodeFigures {
    /// Keys found by its last walk.
    pub(crate) keys: u64,
    /// Members of its keys, as of their last checks.
    pub(crate) members: u64,
    /// Keys in its index.
    pub(crate) tracked: u64,
    /// Keys its last walk could not track.
    pub(crate) untracked: u64,
    /// Unix time of its last successful walk; 0 before the first.
    pub(crate) last_success: f64,
}

/// A sweep's running totals, for the periodic summary in the log.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Totals {
    pub(crate) evicted: u64,
    pub(crate) published: u64,
    pub(crate) lost: u64,
    pub(crate) unconfirmed: u64,
    pub(crate) checks: u64,
    pub(crate) walks: u64,
    pub(crate) failed_walks: u64,
    pub(crate) tracked: i64,
    pub(crate) members: i64,
}
