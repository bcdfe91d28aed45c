//! presence-sweeper, the daemon: keeps Redis-backed presence honest.
//!
//! Apps keep "who is here" in sorted sets (member = user id, score = last heartbeat). A client
//! that vanishes without saying goodbye stays there forever; the daemon finds such zombies and
//! evicts them atomically, on Redis's clock, announcing each eviction exactly once.
//!
//! The workspace's crates are its layers, lowest first; each names only those before it, and
//! Cargo keeps it so:
//! - `presence-sweeper-rules`: what to check, when, and what to conclude, with no I/O (no
//!   tokio, redis, hyper or prometheus): what each primary's loop sends next and the
//!   coordinator behind it, Redis's standing and the credit, the notification and walk state
//!   machines, the deadline index, the storm guard, planning, the event encoder.
//! - `presence-sweeper-config`: the configuration, layered and validated.
//! - `presence-sweeper-redis`: the connections, the one RESP reader, the eviction scripts.
//! - this crate: the daemon, which applies the rules to Redis; the binary `presence-sweeper`.
//! - `presence-sweeper-cli`: what the binaries share at their edge (flags, exit codes,
//!   version, manual); `presence-sweeper-tools`: the `demo`, `seed` and `simulate` binary.
//!
//! Map of this crate, lowest first:
//! - `time`: the daemon's one clock (tokio's, so that tests can pause it), as the rules'
//!   instants.
//! - [`evictor`]: a sweep at run time ([`Evictor`]) and the check of a batch of its keys, which
//!   every source of work goes through (`check`: read, classify, admit, plan, evict; `apply`:
//!   transactions and the bounded script; `streamed`: the stream's script; `announce`).
//! - `tracking`: where the daemon's work comes from: `primary` (one primary's loop, applying
//!   what the rules decide, and its I/O: `ops`, `standing_io`, `notifications_io`,
//!   `walks_io`), `keyspace` (the notification subscription), `engine` (every sweep on every
//!   primary, following topology, reloads and leases), `lease`, `schedule`, `pause` (the
//!   watch's timer) and `report` (what the engine reports).
//! - [`pass`]: a full pass of the keyspace; [`pass::command`]: the `sweep` command.
//! - [`serve`]: the process: [`serve::daemon`], `metrics` (the Prometheus registry), `health`
//!   (liveness and readiness), `reports` (tracking's reports into both), [`serve::http`] with
//!   [`serve::web_config`] (TLS and basic auth: `basic_auth`, and `pinned`, the healthcheck's
//!   TLS client), [`serve::systemd`], [`serve::signals`], [`serve::logging`] and
//!   [`serve::StartError`].
//! - [`stats`]: the `stats` command, a read-only report of each sweep's keyspace.
//!
//! The command line belongs to the binary (`src/main.rs`, `src/cli.rs`), which turns it into
//! these modules' options.

pub mod evictor;
pub mod pass;
pub mod serve;
pub mod stats;
mod time;
mod tracking;

pub use evictor::Evictor;
