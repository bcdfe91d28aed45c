//! Eviction: reading keys and removing their zombies atomically, on Redis's clock.
//!
//! A batch of keys goes through three steps, cheapest first, because Redis's single thread is the
//! limit of any sweep:
//! - `read`: one pipeline of native reads per key (`ZCOUNT -inf (cutoff`, and where a
//!   deadline index needs it the lowest score and `ZCARD`). Most keys are clean; for them this
//!   is all the work there is.
//! - `transaction`: keys with a few zombies are evicted in one `MULTI`/`EXEC` per batch: read the
//!   stale range with scores, remove that same range, read the roster (and the new lowest score).
//!   Nothing can interleave inside the transaction, so what is read is exactly what is removed.
//!   Native commands cost Redis about half what the same work costs through Lua.
//! - `script` (`evict.lua`): keys with more zombies than one call may remove go to a Lua
//!   script that takes the time itself and removes in bounded chunks, a budget per call.
//! - `stream` (`stream.lua`): a sweep with a stream evicts every key through this script
//!   instead, which also appends each event to the stream and publishes it, in the same atomic
//!   step as the removal.
//!
//! The two scripts are called alike and answer alike: `call` sends either (loading it again
//! where Redis lost it) and reads its reply into [`Reply`], one [`KeyReply`] per key.
//!
//! Both eviction paths judge staleness against Redis's clock: the script reads `TIME` inside
//! itself; the precheck and the transaction use a cutoff from an instant on Redis's clock read a
//! little earlier, which can only make them spare a member that just became stale (it is taken
//! at its next check), never evict one that heartbeated.

mod call;
pub mod preflight;
pub mod read;
pub mod script;
pub mod stream;
pub mod transaction;

pub use call::{KeyReply, Reply};
pub use script::EvictScript;
