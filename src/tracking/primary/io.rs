//! The daemon's side of the rules' [`Io`]: the sweeps, subscriptions and errors that the rules
//! of a primary hold and hand back.

use std::sync::Arc;
use std::time::Duration;

use presence_sweeper_redis::Error;
use presence_sweeper_rules::pattern::KeyPattern;
use presence_sweeper_rules::primary::{self, Io};
use presence_sweeper_rules::report::SweepReport;
use presence_sweeper_rules::score::ScoreUnit;
use presence_sweeper_rules::storm::StormGuard;

use crate::evictor::Evictor;
use presence_sweeper_redis::keyspace::Subscription;

/// The daemon's types for the rules.
pub(crate) struct RedisIo;

impl Io for RedisIo {
    type Job = SweepJob;
    type Subscription = Subscription;
    type Error = Error;
}

/// A sweep as the loops run it, shared by every primary.
pub(crate) struct SweepJob {
    pub(crate) evictor: Arc<Evictor>,
    pub(crate) report: Arc<dyn SweepReport>,
}

impl primary::Job for SweepJob {
    fn name(&self) -> &str {
        &self.evictor.config().name
    }
    fn pattern(&self) -> &KeyPattern {
        &self.evictor.config().pattern
    }
    fn ttl(&self) -> Duration {
        self.evictor.config().ttl
    }
    fn score_unit(&self) -> ScoreUnit {
        self.evictor.config().score_unit
    }
    fn guard(&self) -> &StormGuard {
        self.evictor.guard()
    }
    fn report(&self) -> &Arc<dyn SweepReport> {
        &self.report
    }
}
