//! presence-sweeper: keeps Redis-backed presence honest.
//!
//! Apps keep "who is here" in sorted sets (member = user id, score = last heartbeat). A client
//! that vanishes without saying goodbye stays there forever; this crate finds such zombies and
//! evicts them atomically, on Redis's clock, announcing each eviction exactly once.
//!
//! Map of the crate, one folder per layer; each depends only on the ones above it:
//! - [`config`]: layered configuration (defaults < file < environment < flags), validation, and
//!   `pattern` (key globs and channel templates). [`Error`] (`error`): the error type.
//! - [`store`](Store): the Redis connections (standalone, cluster or Sentinel; the data path's
//!   own pipelined connection per primary over TCP, TLS or a unix socket, `wire`, which
//!   publishes too), with `resp` (the data path's one RESP2 decoder and its reply values),
//!   `packed` (commands encoded once), `slots` (a cluster's slot map, for sharded publishing),
//!   `reply` (what Redis answers: shapes, redirects, refusals, `TIME`), `clock` (Redis's clock
//!   as the daemon follows it), `walk` (SCAN, one walk per primary for every sweep),
//!   `subscriber` (pub/sub, for keyspace notifications and `simulate`, read only as fast as it
//!   is asked), `name` (connection names), `version` (which server answers) and `backoff`.
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
//! - [`stats`]: the `stats` command, a read-only report of each sweep's keyspace.
//! - [`version`]: what this binary was built from (revision and compiler, from `build.rs`).
//!
//! The command line belongs to the binaries, which turn it into these modules' options: the
//! daemon's (`src/main.rs`, `src/cli.rs`) and `presence-sweeper-tools`
//! (`src/bin/presence-sweeper-tools/`: `seed` and `simulate`, which write synthetic data and so
//! are kept out of the daemon's binary). What the tools need beyond the daemon's own items is
//! public for them: [`Store::connect_as`] with [`Opener`], [`Conn`], [`Store::subscriber`] with
//! [`Subscriber`] and [`Push`], [`config::KeyPattern`] and [`config::CONVERSATION_ID`].

pub mod config;
mod error;
mod evict;
pub mod pass;
pub mod serve;
pub mod stats;
mod store;
mod sweep;
mod tracking;
pub mod version;

pub use error::Error;
pub use evict::EvictScript;
pub use store::subscriber::{Push, Subscriber};
pub use store::walk::FIRST_PAGE_SHARE;
pub use store::{Conn, Opener, Store};
pub use sweep::{Counts, NoObserver, Sweep};
