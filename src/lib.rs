//! presence-sweeper: keeps Redis-backed presence honest.
//!
//! Apps keep "who is here" in sorted sets (member = user id, score = last heartbeat). A client
//! that vanishes without saying goodbye stays there forever; this crate finds such zombies and
//! evicts them atomically, on Redis's clock, announcing each eviction exactly once.
//!
//! Map of the crate, one folder per layer; each depends only on the ones above it:
//! - [`config`]: layered configuration (defaults < file < environment < flags), validation,
//!   `pattern` (key globs and channel templates) and `schedule` (when a sweep walks).
//!   [`Error`] (`error`): the error type.
//! - [`store`](Store): the Redis connections (standalone, cluster or Sentinel; the data path's
//!   own pipelined connection per primary over TCP, TLS or a unix socket), with `reply` (what
//!   Redis answers: shapes, redirects, refusals, `TIME`), `clock` (Redis's clock as the daemon
//!   follows it), `walk` (SCAN, one walk per primary for every sweep), `subscriber` (the
//!   keyspace subscriber that reads only as fast as it is asked), `name` (connection names),
//!   `version` (which server answers) and `backoff`.
//! - `evict`: `read` (the native reads of a batch), `transaction` and `script` (`evict.lua`),
//!   the two atomic evictions, and `preflight` (proving the Redis user may do all that).
//! - [`sweep`](Sweep): one sweep at run time and the check of a batch of its keys (read, evict,
//!   announce): the one evictor every source of work goes through; `events` (the payload) and
//!   `storm` (the storm guard every eviction asks first).
//! - `tracking`: where the daemon's work comes from: `index` (each key's deadline), `keyspace`
//!   (notifications of new keys), `primary` (one primary's loop joining both with walks),
//!   `engine` (every sweep on every primary, following topology, reloads and leases), `lease`,
//!   `schedule` and `summary` (the log's account of the work). `primary`'s parts own their
//!   state and do no I/O: `liveness` (Redis's clock, outages, resets and the credit, read from
//!   a `canary`), `notifications` (the subscription), `checks` and `walks`; the loop applies
//!   what they decide (`ops` holds its I/O).
//! - [`pass`]: a full pass of the keyspace; [`pass::command`]: the `sweep` command.
//! - `serve`: the process: [`serve::daemon`], `metrics` (the Prometheus registry), `health`
//!   (liveness and readiness), [`serve::http`] with [`serve::web_config`] (TLS and basic
//!   auth: `basic_auth`, and `pinned`, the healthcheck's TLS client), [`serve::systemd`],
//!   [`serve::signals`] and [`serve::logging`].
//! - [`tools`]: [`tools::seed`], [`tools::stats`] and [`tools::simulate`], for people trying
//!   or measuring the sweeper; the daemon never calls them.
//! - [`version`]: what this binary was built from (revision and compiler, from `build.rs`).
//!
//! The command line belongs to the binary (`src/cli.rs`), which turns it into these modules'
//! options.

pub mod config;
mod error;
mod evict;
pub mod pass;
pub mod serve;
mod store;
mod sweep;
pub mod tools;
mod tracking;
pub mod version;

pub use error::Error;
pub use evict::{Clock, EvictScript};
pub use store::Store;
pub use store::walk::FIRST_PAGE_SHARE;
pub use sweep::{Counts, NoObserver, Sweep};
