//! presence-sweeper's Redis: the connections, whatever the topology (one server, a Redis
//! Cluster, or a primary behind Sentinel), the one RESP reader, and the eviction scripts.
//!
//! - [`store`](Store): the connection every sweep shares; it reconnects on its own after
//!   restarts and failovers. [`conn`]: [`Conn`], the control path's connection (redis-rs), and
//!   [`Node`], a primary of the data path. `client` builds redis-rs's clients and connections
//!   from the configuration; `sentinel` follows the primary across failovers; `tls` builds the
//!   client's TLS; `name` names connections (`CLIENT SETNAME`); `version` says which server
//!   answers and whether it is new enough.
//! - The data path: [`wire`], its own pipelined connection to each primary (publishing
//!   included), [`packed`] (commands encoded once as RESP), [`resp`] (the one RESP2 decoder:
//!   replies framed, read in place, or as [`Value`]s, error replies included; [`Value`] is
//!   also what the control path's redis-rs replies are read as), [`reply`] (what Redis
//!   answers: shapes, redirects, refusals, `TIME`), `slots` (a cluster's slot map) and
//!   `sharded` (publishing to the primary of each channel's slot), [`scan`] (SCAN pages),
//!   [`subscriber`] (the notification path's own pub/sub connection, bounded in memory) and
//!   [`keyspace`] (the subscription to keyspace notifications over it, and the server's
//!   `notify-keyspace-events`).
//! - [`evict`]: the reads of a batch, and the two atomic evictions: transactions and the
//!   bounded script, and the stream's script.
//! - [`Error`]: what talking to Redis can fail with.

mod client;
pub mod conn;
mod error;
pub mod evict;
pub mod keyspace;
mod name;
pub mod packed;
pub mod reply;
pub mod resp;
pub mod scan;
mod sentinel;
mod sharded;
mod slots;
mod store;
pub mod subscriber;
mod tls;
mod version;
pub mod wire;

pub use conn::{Conn, Node};
pub use error::{Error, ReplyError, refusal_reason};
pub use name::Opener;
pub use packed::{Packed, SendPacked};
pub use reply::all_ok;
pub use resp::{ServerError, Value};
pub use store::Store;
pub use wire::{Wait, is_reply_lost};
