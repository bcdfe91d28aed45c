//! The fast eviction path: `MULTI`/`EXEC` transactions for the keys of a batch that hold a few
//! zombies.
//!
//! Per key, inside the transaction: `ZRANGE key -inf (cutoff BYSCORE WITHSCORES` (the zombies and
//! their last heartbeats), `ZREMRANGEBYSCORE key -inf (cutoff` (exactly those, since nothing runs
//! in between), and `ZRANGE key 0 99 REV` (the roster, which also gives the count when it holds
//! fewer than 100). `TIME` first gives the eviction instant.
//! The range is not LIMITed: only keys whose precheck counted at most `evict.max_members_per_call`
//! zombies come here; bigger ones go to the bounded script.

use redis::Value;

use super::{Cutoff, ROSTER_LIMIT, int, members, parse_time, scored};
use crate::Error;
use crate::evict::ReplyError;
use crate::store::{Packed, SendPacked};

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

/// Evicts the zombies of `groups` of keys, one `MULTI`/`EXEC` per group, all in one pipeline.
/// A group is the whole batch on a single server; in a cluster it is the keys of one hash slot,
/// since a transaction may not span slots. Returns the eviction instant (Unix seconds, from a
/// `TIME` just before the transactions unless `fixed_now` is given) and, per key in group order,
/// what was removed, or `None` if the key's group was refused (the key changed type, or in a
/// cluster its slot moved: the next pass finds it on its new node).
pub async fn evict<C>(
    con: &mut C,
    groups: &[Vec<&[u8]>],
    cutoff: &Cutoff,
    fixed_now: Option<f64>,
) -> Result<(f64, Vec<Option<Evicted>>), Error>
where
    C: SendPacked + Send,
{
    let roster_last = (ROSTER_LIMIT - 1).to_string();
    let below = cutoff.below.as_bytes();
    let keys: usize = groups.iter().map(Vec::len).sum();
    let mut batch = Packed::with_capacity(64 + keys * 192);
    batch.command(&[b"TIME"]);
    for keys in groups {
        batch.command(&[b"MULTI"]);
        for key in keys {
            batch
                .command(&[b"ZRANGE", key, b"-inf", below, b"BYSCORE", b"WITHSCORES"])
                .command(&[b"ZREMRANGEBYSCORE", key, b"-inf", below])
                .command(&[b"ZRANGE", key, b"0", roster_last.as_bytes(), b"REV"]);
        }
        batch.command(&[b"EXEC"]);
    }
    let replies = con.send_packed(batch).await?;
    let mut replies = replies.into_iter();
    let short = || -> Error { ReplyError::new("short transaction reply").into() };
    let time = replies.next().ok_or_else(short)?;
    let now = match fixed_now {
        Some(now) => now,
        None => parse_time(&time).ok_or_else(|| ReplyError::new("TIME is not a time"))?,
    };
    let mut out = Vec::with_capacity(groups.iter().map(Vec::len).sum());
    for keys in groups {
        // MULTI, one QUEUED (or a refusal) per command, then EXEC's array (or EXECABORT).
        let mut refusal = None;
        for _ in 0..1 + keys.len() * 3 {
            if let Value::ServerError(e) = replies.next().ok_or_else(short)? {
                refusal.get_or_insert(e);
            }
        }
        if let Some(e) = refusal
            && !matches!(e.code(), "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN")
        {
            // READONLY (a replica), NOPERM, OOM...: nothing was removed, and the pass must say
            // why rather than skip the keys.
            return Err(redis::RedisError::from(e).into());
        }
        match replies.next().ok_or_else(short)? {
            Value::Array(results) if results.len() == keys.len() * 3 => {
                let mut results = results.into_iter();
                while let (Some(range), Some(removed), Some(roster)) =
                    (results.next(), results.next(), results.next())
                {
                    out.push(parse_key(range, removed, roster)?);
                }
            }
            Value::ServerError(e) => {
                tracing::debug!(error = %e.details().unwrap_or(e.code()), keys = keys.len(), "transaction refused; its keys wait for the next pass");
                out.extend(keys.iter().map(|_| None));
            }
            _ => return Err(ReplyError::new("EXEC did not answer an array").into()),
        }
    }
    Ok((now, out))
}

fn parse_key(range: Value, removed_count: Value, roster: Value) -> Result<Option<Evicted>, Error> {
    if [&range, &removed_count, &roster]
        .iter()
        .any(|v| matches!(v, Value::ServerError(_)))
    {
        // Removed but not read: those members could not be announced. Say so loudly rather
        // than count the key as refused.
        if let Some(n) = int(&removed_count).filter(|&n| n > 0) {
            return Err(ReplyError::new(format!(
                "{n} members were removed but the transaction's reads failed, so they cannot be announced"
            ))
            .into());
        }
        return Ok(None);
    }
    let removed = scored(range)?;
    if int(&removed_count) != Some(removed.len() as u64) {
        return Err(ReplyError::new(
            "removed count differs from the range read in the same transaction",
        )
        .into());
    }
    let roster = members(roster)?;
    // A roster shorter than the limit is the whole set: its length is the count.
    let card = (roster.len() < ROSTER_LIMIT).then_some(roster.len() as u64);
    Ok(Some(Evicted {
        removed,
        roster,
        card,
    }))
}
