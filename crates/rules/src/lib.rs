//! presence-sweeper's rules: what to check, when, and what to conclude, with no I/O.
//!
//! Everything here decides from what it is told (replies, failures, pages, notices) and the
//! instant it is told at, and returns what to do; the daemon does the I/O and applies it. This
//! crate names no tokio, redis, hyper or prometheus, and reads no clock (its `clippy.toml`
//! refuses `Instant::now`), so every rule is unit-tested on instants the tests choose.
//!
//! Map of the crate, vocabulary first:
//! - [`pattern`]: key patterns (`presence:*:online`) and channel templates; [`slot`]: Redis
//!   Cluster's hash slots; [`node`]: a primary's name; [`score`]: the score unit and the
//!   staleness cutoff; [`trouble`]: what a failure means ([`trouble::Failure`] is the I/O's
//!   error as the rules see it); [`redact`]: ids as a log line shows them.
//! - [`clock`]: Redis's clock as followed from its `TIME` readings; [`backoff`]: retry waits.
//! - [`event`]: the JSON leave event, byte for byte as published.
//! - [`keys`]: a batch's keys in one buffer; [`read`]: what a read of a key found; [`check`]:
//!   a check's options and outcome; [`plan`]: classifying the reads and splitting zombies into
//!   eviction calls, with [`sizing`] (how big a call may be), [`units`] (the score-unit check)
//!   and [`ahead`] (scores ahead of Redis's clock); [`storm`]: the storm guard.
//! - [`index`]: the deadline index; [`scan`]: a walk's pages and queues; [`keyspace`]: what a
//!   keyspace notification says; [`pause`]: pauses of the daemon itself.
//! - [`primary`]: one primary's parts: the coordinator, Redis's standing, the subscription,
//!   walks, deadlines and each sweep's index, and [`primary::work`], what its loop sends next.
//! - [`share`]: which primaries a replica takes the leases of, when replicas share them.
//! - [`report`]: the handles the rules and checks report through (the daemon implements them);
//!   [`summary`]: the log's periodic account.

pub mod ahead;
pub mod backoff;
pub mod check;
pub mod clock;
pub mod event;
pub mod index;
pub mod keys;
pub mod keyspace;
pub mod node;
pub mod pattern;
pub mod pause;
pub mod plan;
pub mod primary;
pub mod read;
pub mod redact;
pub mod report;
pub mod scan;
pub mod score;
pub mod share;
pub mod sizing;
pub mod slot;
pub mod storm;
pub mod summary;
#[cfg(test)]
mod testing;
pub mod trouble;
pub mod units;
