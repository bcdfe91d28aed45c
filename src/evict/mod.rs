//! Eviction: deciding which keys hold zombies and removing them atomically.
//!
//! A page of keys goes through three steps, cheapest first, because Redis's single thread is the
//! limit of any sweep:
//! - [`precheck`]: `ZCOUNT -inf (cutoff` for every key, then `ZCARD` for the clean ones. Most
//!   keys are clean; for them this is all the work there is.
//! - [`transaction`]: keys with a few zombies are evicted in one `MULTI`/`EXEC` per batch: read the
//!   stale range with scores, remove that same range, read the roster. Nothing can interleave
//!   inside the transaction, so what is read is exactly what is removed. Native commands cost
//!   Redis about half what the same work costs through Lua.
//! - [`script`] (`evict.lua`): keys with more zombies than one call may remove go to a Lua
//!   script that takes the time itself and removes in bounded chunks, a budget per call.
//!
//! Both eviction paths judge staleness against Redis's clock: the script reads `TIME` inside
//! itself; the precheck and the transaction use a `TIME` read with the SCAN page, a few
//! milliseconds earlier, which can only make them spare a member that just became stale (the
//! next pass takes it), never evict one that heartbeated.

pub mod precheck;
pub mod script;
pub mod transaction;

use std::time::Duration;

use redis::Value;

use crate::config::ScoreUnit;

pub use precheck::Count;
pub use script::{EvictScript, KeyReply, Params, Reply, ReplyError, Swept};
pub use transaction::{Evicted, evict};

/// Most remaining members an event lists; the full count goes beside it.
pub const ROSTER_LIMIT: usize = 100;

/// Where "now" comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    /// Redis `TIME`: the one clock every writer and sweeper agrees on.
    Redis,
    /// A fixed instant in Unix seconds, so tests can put members exactly on the boundary.
    Fixed(f64),
}

/// The staleness bound of one page: members scoring below it are zombies.
#[derive(Debug, Clone)]
pub struct Cutoff {
    /// The instant it was computed from, in Unix seconds.
    pub now: f64,
    /// `(` and the bound in the score unit: an exclusive `ZRANGE`/`ZCOUNT` limit, so a score
    /// exactly at the cutoff stays.
    pub below: String,
}

impl Cutoff {
    /// The cutoff `ttl` before `now` (Unix seconds) for scores in `unit`.
    pub fn new(now: f64, ttl: Duration, unit: ScoreUnit) -> Self {
        let bound = unit.from_seconds(now) - unit.from_duration(ttl);
        Self {
            now,
            below: format!("({bound:?}"),
        }
    }
}

/// Reads a Redis `TIME` reply as Unix seconds.
pub fn parse_time(v: &Value) -> Option<f64> {
    let Value::Array(parts) = v else {
        return None;
    };
    let [secs, micros] = parts.as_slice() else {
        return None;
    };
    Some(int(secs)? as f64 + int(micros)? as f64 / 1e6)
}

pub(crate) fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

pub(crate) fn float(v: &Value) -> Option<f64> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::Double(d) => Some(*d),
        Value::Int(n) => Some(*n as f64),
        _ => None,
    }
}

pub(crate) fn bytes(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    }
}

/// A flat `[member, score, ...]` reply (`WITHSCORES`) as (member, score) pairs.
pub(crate) fn scored(v: Value) -> Result<Vec<(Vec<u8>, f64)>, ReplyError> {
    let Value::Array(flat) = v else {
        return Err(ReplyError::new("members with scores are not an array"));
    };
    if flat.len() % 2 != 0 {
        return Err(ReplyError::new("members with scores have an odd length"));
    }
    let mut pairs = Vec::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(member), Some(score)) = (it.next(), it.next()) {
        let score = float(&score).ok_or_else(|| ReplyError::new("a score is not a number"))?;
        let member = bytes(member).ok_or_else(|| ReplyError::new("a member is not a string"))?;
        pairs.push((member, score));
    }
    Ok(pairs)
}

/// An array reply of members.
pub(crate) fn members(v: Value) -> Result<Vec<Vec<u8>>, ReplyError> {
    let Value::Array(items) = v else {
        return Err(ReplyError::new("members are not an array"));
    };
    items
        .into_iter()
        .map(|m| bytes(m).ok_or_else(|| ReplyError::new("a member is not a string")))
        .collect()
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

    #[test]
    fn time_reply() {
        let v = Value::Array(vec![
            Value::BulkString(b"1764460046".to_vec()),
            Value::BulkString(b"500000".to_vec()),
        ]);
        assert_eq!(parse_time(&v), Some(1_764_460_046.5));
        assert_eq!(parse_time(&Value::Nil), None);
    }
}
