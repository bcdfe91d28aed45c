//! What the rules and the checks report, through handles of their own: the daemon implements
//! them with its metrics, its health state and its readiness; tests implement them to see what
//! was reported. The rules never name the daemon's types.

use std::time::Duration;

use crate::node::NodeId;
use crate::trouble::Trouble;

/// Per-key and per-member observations of checks, for metrics and liveness. Ids never reach it.
pub trait Observer: Send + Sync {
    /// A key was checked; `cardinality` members remain in it.
    fn key_checked(&self, cardinality: u64) {
        let _ = cardinality;
    }
    /// Work moved on (a SCAN page or a reply came back); feeds liveness.
    fn progress(&self) {}
    /// A member was evicted `lag_seconds` after its window closed (infinite for a score before
    /// 1970, `-inf`, or a lag over a day: a score written by hand; see `announce::MAX_LAG`).
    fn member_evicted(&self, lag_seconds: f64) {
        let _ = lag_seconds;
    }
    /// The ACL refused a read the checks can do without (`PTTL`).
    fn read_refused(&self) {}
    /// Keys were read whose scores lay ahead of Redis's clock (see `ahead`).
    fn scores_ahead(&self, keys: u64) {
        let _ = keys;
    }
    /// Events were published.
    fn published(&self, events: u64) {
        let _ = events;
    }
    /// Members were removed whose events were not published (never sent, or refused).
    fn events_failed(&self, events: u64) {
        let _ = events;
    }
    /// Members were removed whose events were sent but not confirmed: Redis may or may not
    /// have published them.
    fn events_unconfirmed(&self, events: u64) {
        let _ = events;
    }
    /// Eviction calls of a sweep without a stream got no reply (none within
    /// `redis.eviction_timeout`, or the connection dropped): what they removed, if anything,
    /// was not announced.
    fn evictions_unanswered(&self, calls: u64) {
        let _ = calls;
    }
}

/// An observer that ignores everything.
pub struct NoObserver;
impl Observer for NoObserver {}

/// Where one sweep's work on every primary reports; its checks report through the
/// [`Observer`] half.
pub trait SweepReport: Observer {
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
    /// Each primary's lease of the sweep, and whether this replica holds it; primaries left out
    /// (gone, or the sweep's leases given up) are forgotten.
    fn leases(&self, held: &[(NodeId, bool)]);
    /// The primaries the sweep runs on in this replica (`None`: every one): with leases, those
    /// it holds, and none while it stands by.
    fn runs_on(&self, nodes: Option<&std::collections::BTreeSet<NodeId>>);
}

/// Where one primary's loop reports.
pub trait NodeReport: Send + Sync {
    /// Redis answered again after an outage.
    fn outage(&self);
    /// Whether keyspace notifications are in use on this primary now.
    fn notifications(&self, in_use: bool);
    /// A notice was read from the subscription (a key created in the database; with keyspace
    /// channels, any write of a presence key, heartbeats included).
    fn notice(&self);
    /// The deadline checks the loop may have in flight now (its window changed).
    fn check_window(&self, depth: usize);
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
pub trait Beat: Send + Sync {
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
pub struct NodeFigures {
    /// Keys found by its last walk.
    pub keys: u64,
    /// Members of its keys, as of their last checks or reconciliation reads.
    pub members: u64,
    /// Keys in its index.
    pub tracked: u64,
    /// Keys its last walk could not track.
    pub untracked: u64,
    /// Unix time of its last successful walk; 0 before the first.
    pub last_success: f64,
}

/// A sweep's running totals, for the periodic summary in the log.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub evicted: u64,
    pub published: u64,
    pub lost: u64,
    pub unconfirmed: u64,
    pub checks: u64,
    pub walks: u64,
    pub failed_walks: u64,
    pub tracked: i64,
    pub members: i64,
}
