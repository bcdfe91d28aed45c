//! Tools for people trying or measuring the sweeper, not used by the daemon: `seed` a synthetic
//! keyspace, `stats` (a read-only report), `simulate` (live traffic judging a running sweeper),
//! and `loopback`, which keeps the writing tools on this machine's Redis.

mod loopback;
pub mod seed;
pub mod simulate;
pub mod stats;
