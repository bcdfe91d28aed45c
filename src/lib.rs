//! presence-sweeper: keeps Redis-backed presence honest.
//!
//! Apps keep "who is here" in sorted sets (member = user id, score = last heartbeat). A client
//! that vanishes without saying goodbye stays there forever; this crate finds such zombies and
//! evicts them atomically, on Redis's clock, announcing each eviction exactly once.
//!
//! Map of the crate, one folder per layer, lowest first. Each layer names only itself and the
//! layers before it (`tests/layers.rs` fails on any module that names a later one); what a
//! lower layer must tell a higher one goes through handles of its own that the higher one
//! implements (`sweep`'s `Observer`, `tracking`'s `report`).
//! - [`config`]: layered configuration (defaults < file < environment < flags), validation,
//!   `pattern` (key globs and channel templates), `schedule` (when a sweep walks), `secret`
//!   and `redact` (what reaches no log as it is).
//! - `error`: [`Error`], the data path's error type (what Redis's answers can make).
//! - [`version`]: what this binary was built from (revision and compiler, from `build.rs`).
//! - [`manual`]: every binary's man pages and shell completions, generated from its command line.
//! - `events`: the JSON leave event: its payload, the roster, ids that are not UTF-8.
//! - [`store`](Store): the Redis connections (standalone, cluster or Sentinel; the data path's
//!   own pipelined connection per primary over TCP, TLS or a unix socket, `wire`, which
//!   publishes too), with `resp` (the data path's one RESP2 decoder and its reply values),
//!   `packed` (commands encoded once), `slots` (a cluster's slot map, for sharded publishing),
//!   `reply` (what Redis answers: shapes, redirects, refusals, `TIME`), `clock` (Redis's clock
//!   as the daemon follows it), `scan` (SCAN pages, one walk per primary for every sweep),
//!   `subscriber` (pub/sub, for keyspace notifications and `simulate`, read only as fast as it
//!   is asked), `name` (connection names), `version` (which server answers) and `backoff`.
//! - `evict`: `read` (the native reads of a batch), `transaction` and `script` (`evict.lua`),
//!   the two atomic evictions, `stream` (`stream.lua`: the eviction of a sweep with a stream,
//!   which appends and publishes each event in the same step), and `preflight` (proving the
//!   Redis user may do all that).
//! - [`sweep`](Sweep): one sweep at run time and the check of a batch of its keys (`plan`:
//!   classify and split; `apply`: evict; `streamed`: evict through the stream script;
//!   `announce`): the one evictor every source of work goes
//!   through; `storm`, the storm guard every eviction asks first; `units`, the score-unit check.
//! - `tracking`: where the daemon's work comes from: `index` (each key's deadline), `keyspace`
//!   (notifications of new keys), `primary` (one primary's loop), `engine` (every sweep on every
//!   primary, following topology, reloads and leases), `lease`, `schedule`, `summary` (the log's
//!   account of the work) and `report` (what it reports). In `primary` the parts decide and do
//!   no I/O: `coordinator` (the rules between them: failures, lost subscriptions, when to walk,
//!   nothing evicted while liveness is in doubt), `liveness` (Redis's clock, outages, resets,
//!   the credit), `notifications` (the subscription), `walks`, `deadlines` and `tracked` (each
//!   sweep's index); their I/O sits beside them (`ops`, `liveness_io`, `notifications_io`,
//!   `walks_io`) and the loop in `primary/mod.rs` only selects events and applies actions.
//! - [`pass`]: a full pass of the keyspace; [`pass::command`]: the `sweep` command.
//! - `serve`: the process: [`serve::daemon`], `metrics` (the Prometheus registry), `health`
//!   (liveness and readiness), `reports` (tracking's reports into both), [`serve::http`] with
//!   [`serve::web_config`] (TLS and basic auth: `basic_auth`, and `pinned`, the healthcheck's
//!   TLS client), [`serve::systemd`], [`serve::signals`], [`serve::logging`] and
//!   [`serve::StartError`].
//! - [`stats`]: the `stats` command, a read-only report of each sweep's keyspace.
//!
//! The command line belongs to the binaries, which turn it into these modules' options: the
//! daemon's (`src/main.rs`, `src/cli.rs`) and `presence-sweeper-tools`
//! (`src/bin/presence-sweeper-tools/`: `seed` and `simulate`, which write synthetic data and so
//! are kept out of the daemon's binary). What the tools need beyond the daemon's own items is
//! public for them: [`Store::connect_as`] with [`Opener`], [`Conn`], [`Store::subscriber`] with
//! [`Subscriber`] and [`Push`], [`config::KeyPattern`] and [`config::CONVERSATION_ID`].

pub mod config;
mod error;
mod events;
mod evict;
pub mod manual;
pub mod pass;
pub mod serve;
pub mod stats;
mod store;
mod sweep;
mod tracking;
pub mod version;

pub use error::Error;
#[cfg(feature = "test-hooks")]
pub use events::hooks as event_hooks;
pub use evict::EvictScript;
pub use store::scan::FIRST_PAGE_SHARE;
pub use store::subscriber::{Push, Subscriber};
pub use store::{Conn, Opener, Store};
pub use sweep::{Counts, NoObserver, Sweep};
