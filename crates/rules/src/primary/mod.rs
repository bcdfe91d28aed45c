//! One primary's parts, each deciding from events and the time passed in, with no I/O:
//! `coordinator` (the rules that tie the others together), `standing` (Redis's standing:
//! its clock, outages, resets, refused writes and the credit, read from the `canary`),
//! `notifications` (the subscription), `walks` (when to walk, and the walk in flight),
//! `deadlines` (when a key is due, batching) and `sweeps` / `tracked` (each sweep's index and
//! the walk's queues). [`work`] ties them into what goes out next; the daemon's loop selects
//! events, hands them to it, and applies the tasks that come back.
//!
//! The parts hold the I/O side's own things (a sweep, a subscription, an error) without looking
//! into them: [`Io`] names their types, so the rules are tested with stand-ins.

pub mod canary;
pub mod coordinator;
pub mod deadlines;
pub mod notifications;
pub mod standing;
pub mod sweeps;
#[cfg(test)]
mod testing;
pub mod tracked;
pub mod walks;
pub mod work;

use std::sync::Arc;
use std::time::Duration;

use crate::pattern::KeyPattern;
use crate::report::SweepReport;
use crate::score::ScoreUnit;
use crate::storm::StormGuard;
use crate::trouble::Failure;

/// The I/O side's types, which the rules of one primary's loop hold and hand back but never
/// look into.
pub trait Io: 'static {
    /// A sweep as the loops run it.
    type Job: Job;
    /// A keyspace-notification subscription.
    type Subscription: Send;
    /// What a call to Redis fails with.
    type Error: Failure;
}

/// What the rules need of a sweep: its keys, its window, its storm guard and where it reports.
pub trait Job: Send + Sync + 'static {
    /// The sweep's name (`[sweeps.<name>]`).
    fn name(&self) -> &str;
    /// `sweeps.<name>.match`.
    fn pattern(&self) -> &KeyPattern;
    /// `sweeps.<name>.ttl`.
    fn ttl(&self) -> Duration;
    /// `sweeps.<name>.score_unit`.
    fn score_unit(&self) -> ScoreUnit;
    /// The sweep's storm guard, shared by every primary.
    fn guard(&self) -> &StormGuard;
    /// Where the sweep's work on every primary reports.
    fn report(&self) -> &Arc<dyn SweepReport>;
}
