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
//! Both eviction paths judge staleness against Redis's clock: the script reads `TIME` inside
//! itself; the precheck and the transaction use a cutoff from an instant on Redis's clock read a
//! little earlier, which can only make them spare a member that just became stale (it is taken
//! at its next check), never evict one that heartbeated.

pub(crate) mod preflight;
pub(crate) mod read;
pub(crate) mod script;
pub(crate) mod stream;
pub(crate) mod transaction;

use std::time::Duration;

use crate::config::ScoreUnit;

pub use script::EvictScript;

/// The staleness bound of one check: members scoring below it are zombies.
#[derive(Debug, Clone)]
pub(crate) struct Cutoff {
    /// The bound in the score unit: members scoring below it are zombies.
    pub(crate) bound: f64,
    /// `(` and the bound: an exclusive `ZRANGE`/`ZCOUNT` limit, so a score exactly at the
    /// cutoff stays.
    pub(crate) below: String,
}

impl Cutoff {
    /// The cutoff `ttl` before `now` (Unix seconds) for scores in `unit`.
    pub(crate) fn new(now: f64, ttl: Duration, unit: ScoreUnit) -> Self {
        Self::at(unit.from_seconds(now) - unit.from_duration(ttl))
    }

    /// The cutoff at `bound`, in the score unit.
    pub(crate) fn at(bound: f64) -> Self {
        Self {
            bound,
            below: format!("({bound:?}"),
        }
    }

    /// Whether a member scoring `score` is a zombie.
    pub(crate) fn is_stale(&self, score: f64) -> bool {
        score < self.bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutoff_is_exclusive_and_in_the_score_unit() {
        let c = Cutoff::new(1_764_460_045.5, Duration::from_secs(45), ScoreUnit::Seconds);
        assert_eq!(c.below, "(1764460000.5");
        let c = Cutoff::new(
            1_764_460_045.5,
            Duration::from_secs(45),
            ScoreUnit::Milliseconds,
        );
        assert_eq!(c.below, "(1764460000500.0");
    }
}
