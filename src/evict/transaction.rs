//! The fast eviction path: one `MULTI`/`EXEC` for the keys of a batch that hold a few zombies.
//!
//! Per key, inside the transaction: `ZRANGE key -inf (cutoff BYSCORE WITHSCORES` (the zombies and
//! their last heartbeats), `ZREMRANGEBYSCORE key -inf (cutoff` (exactly those, since nothing runs
//! in between), and `ZRANGE key 0 99 REV` (the roster, which also gives the count when it holds
//! fewer than 100). `TIME` first gives the eviction instant.
//! The range is not LIMITed: only keys whose precheck counted at most `evict.max_members_per_call`
//! zombies come here; bigger ones go to the bounded script.

use redis::Value;
use redis::aio::ConnectionLike;

use super::{Cutoff, ROSTER_LIMIT, bytes, float, int, parse_time};
use crate::Error;
use crate::evict::ReplyError;

/// What the transaction did to one key.
#[derive(Debug, Default)]
pub struct Evicted {
    /// Removed members and their scores, in the score unit.
    pub removed: Vec<(Vec<u8>, f64)>,
    /// Up to [`ROSTER_LIMIT`] remaining members, most recently seen first.
    pub roster: Vec<Vec<u8>>,
    /// Members left in the set; `None` if the roster is full, so it may not be the whole set and
    /// the caller must count the members with `ZCARD`.
    pub card: Option<u64>,
}

/// Evicts the zombies of `keys` in one transaction. Returns the eviction instant (Unix seconds,
/// from `TIME` inside the transaction unless `fixed_now` is given) and, per key, what was
/// removed, or `None` if the key changed type meanwhile.
pub async fn evict<C>(
    con: &mut C,
    keys: &[&[u8]],
    cutoff: &Cutoff,
    fixed_now: Option<f64>,
) -> Result<(f64, Vec<Option<Evicted>>), Error>
where
    C: ConnectionLike + Send,
{
    let mut pipe = redis::pipe();
    pipe.atomic().ignore_errors();
    pipe.cmd("TIME");
    for key in keys {
        pipe.cmd("ZRANGE")
            .arg(*key)
            .arg("-inf")
            .arg(cutoff.below.as_str())
            .arg("BYSCORE")
            .arg("WITHSCORES");
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(*key)
            .arg("-inf")
            .arg(cutoff.below.as_str());
        pipe.cmd("ZRANGE")
            .arg(*key)
            .arg(0)
            .arg(ROSTER_LIMIT - 1)
            .arg("REV");
    }
    let replies: Vec<Value> = pipe.query_async(con).await?;
    let mut replies = replies.into_iter();
    let time = replies
        .next()
        .ok_or_else(|| ReplyError::new("empty transaction reply"))?;
    let now = match fixed_now {
        Some(now) => now,
        None => parse_time(&time).ok_or_else(|| ReplyError::new("TIME is not a time"))?,
    };
    let mut out = Vec::with_capacity(keys.len());
    for _ in keys {
        let (Some(range), Some(removed), Some(roster)) =
            (replies.next(), replies.next(), replies.next())
        else {
            return Err(ReplyError::new("short transaction reply").into());
        };
        out.push(parse_key(range, removed, roster)?);
    }
    Ok((now, out))
}

fn parse_key(range: Value, removed_count: Value, roster: Value) -> Result<Option<Evicted>, Error> {
    if [&range, &removed_count, &roster]
        .iter()
        .any(|v| matches!(v, Value::ServerError(_)))
    {
        return Ok(None);
    }
    let err = |what: &str| -> Error { ReplyError::new(what).into() };
    let Value::Array(flat) = range else {
        return Err(err("stale range is not an array"));
    };
    let mut removed = Vec::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(member), Some(score)) = (it.next(), it.next()) {
        let score = float(&score).ok_or_else(|| err("score is not a number"))?;
        removed.push((
            bytes(member).ok_or_else(|| err("member is not a string"))?,
            score,
        ));
    }
    if int(&removed_count) != Some(removed.len() as u64) {
        return Err(err(
            "removed count differs from the range read in the same transaction",
        ));
    }
    let Value::Array(roster) = roster else {
        return Err(err("roster is not an array"));
    };
    let roster = roster
        .into_iter()
        .map(|m| bytes(m).ok_or_else(|| err("roster member is not a string")))
        .collect::<Result<Vec<_>, _>>()?;
    // A roster shorter than the limit is the whole set: its length is the count.
    let card = (roster.len() < ROSTER_LIMIT).then_some(roster.len() as u64);
    Ok(Some(Evicted {
        removed,
        roster,
        card,
    }))
}
