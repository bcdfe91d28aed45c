//! presence-sweeper: keeps Redis-backed presence honest.
//!
//! Apps keep "who is here" in sorted sets (member = user id, score = last heartbeat). A client
//! that vanishes without saying goodbye stays there forever; this crate finds such zombies and
//! evicts them atomically, on Redis's clock, announcing each eviction exactly once.
//!
//! Map of the crate (public modules are linked; the others are named as in the source):
//! - [`config`]: layered configuration (defaults < file < environment < flags) and validation;
//!   `pattern`: key globs and channel templates; `schedule`: when sweeps walk.
//! - `reply`: what Redis answers (reply shapes, redirect codes, refusals, `TIME`), below
//!   everything else; `clock`: Redis's clock as the daemon follows it.
//! - [`Store`] (`store`): the Redis connections (standalone, cluster or Sentinel, and the data
//!   path's own pipelined connection per primary, over TCP, TLS or a unix socket); `walk`: SCAN,
//!   one walk per primary for every sweep.
//! - `evict`: the reads, the eviction transactions and the bounded script (`evict.lua`);
//!   `preflight`: proving the Redis user may do all that, before anything is evicted.
//! - [`Sweep`] (`sweep`): one sweep at run time, and the check of a batch of its keys (read,
//!   evict, announce): the one evictor every source of work goes through; `events`: the payload;
//!   `storm`: the storm guard every eviction asks first.
//! - Where work comes from: `index`, each key's deadline; `keyspace`: notifications of new keys;
//!   `primary`: one primary's loop joining both with walks; `engine`: every sweep on every
//!   primary, following the topology, reloads and leases (`lease`); [`daemon`]: the process
//!   around it; [`pass`] and [`oneshot`]: a full pass, the `sweep` command.
//! - Tools: [`seed`] (+ `seed.lua`): a synthetic keyspace, fast; [`stats`]: a read-only report of
//!   the keyspace; [`simulate`] (+ `heartbeat.lua`; `worker`s write the traffic, a `tracker`
//!   judges every event): live traffic that measures a running sweeper; `loopback`: keeps the
//!   writing tools on this machine's Redis.
//! - `metrics`: the Prometheus registry; `health`: liveness and readiness; [`http`]: the server
//!   for both; [`systemd`]: systemd readiness and watchdog.
//! - [`logging`], [`signals`]: process plumbing; [`Error`] (`error`): the error type. The
//!   command line belongs to the binary (`src/cli.rs`), which turns it into these modules'
//!   options.

mod clock;
pub mod config;
pub mod daemon;
mod engine;
mod error;
mod events;
mod evict;
mod health;
pub mod http;
mod index;
mod keyspace;
mod lease;
pub mod logging;
mod loopback;
mod metrics;
pub mod oneshot;
pub mod pass;
mod pattern;
mod preflight;
mod primary;
mod reply;
mod schedule;
pub mod seed;
pub mod signals;
pub mod simulate;
pub mod stats;
mod store;
mod storm;
mod sweep;
pub mod systemd;
mod walk;

pub use error::Error;
pub use evict::{Clock, EvictScript};
pub use store::Store;
pub use sweep::{Counts, NoObserver, Sweep};
pub use walk::FIRST_PAGE_SHARE;
