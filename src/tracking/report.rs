//! What the engine reports, through a handle of its own that the process (`serve`) implements
//! with its metrics, its health state and its readiness; tests implement it to see what was
//! reported. The handles it hands its loops and sweeps are the rules' own ([`SweepReport`],
//! [`NodeReport`], [`Beat`]).

use presence_sweeper_config as config;
use std::sync::Arc;

use presence_sweeper_rules::node::NodeId;
use presence_sweeper_rules::report::{Beat, NodeReport, SweepReport};
use presence_sweeper_rules::storm::GuardReport;
use presence_sweeper_rules::units::UnitAlarm;

/// Everything the engine reports, and the handles it gives its loops.
pub(crate) trait Reports: Send + Sync {
    /// The handles of a sweep, its series created at zero.
    fn sweep(&self, config: &config::Sweep) -> SweepHandles;
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
    pub(crate) guard: Arc<dyn GuardReport>,
    pub(crate) units: UnitAlarm,
}
