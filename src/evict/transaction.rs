//! The fast eviction path: `MULTI`/`EXEC` transactions for the keys of a batch that hold a few
//! zombies.
//!
//! Per key, inside the transaction: `ZRANGE key -inf (cutoff BYSCORE WITHSCORES` (the zombies and
//! their last heartbeats), `ZREMRANGEBYSCORE key -inf (cutoff` (exactly those, since nothing runs
//! in between), `ZRANGE key -100 -1` (the roster, which also gives the count when it holds fewer
//! than 100; fewer are read when the ids are long, see `sweep::sizing`), and for a deadline index `ZRANGE key 0 0 WITHSCORES` (the lowest remaining score:
//! the key's next deadline). `TIME` first gives the eviction instant.
//!
//! The roster is read oldest first and reversed here, because walking a small set forwards costs
//! Redis's single thread, which every other client waits on, less than walking it backwards
//! (`REV`). The highest 100 ranks, reversed, are exactly what `ZRANGE key 0 99 REV` answers.
//!
//! The range is not LIMITed: only keys whose precheck counted at most `evict.max_members_per_call`
//! zombies come here; bigger ones go to the bounded script.

use super::Cutoff;
use crate::Error;
use crate::store::reply::{ReplyError, is_moved, number, time_from_parts};
use crate::store::resp::{Item, Reader};
use crate::store::{Node, Packed};
use crate::sweep::events::ROSTER_LIMIT;
use crate::sweep::events::Roster;

/// What became of one key of a transaction.
#[derive(Debug)]
pub(crate) enum TxKey {
    /// It went through.
    Done(Evicted),
    /// The key is no longer a sorted set.
    NotZset,
    /// In a cluster, its slot is served by another primary now: nothing ran.
    Moved,
}

/// What the transaction did to one key.
#[derive(Debug)]
pub(crate) struct Evicted {
    /// Removed members and their scores, in the score unit.
    pub removed: Vec<(Vec<u8>, f64)>,
    /// Up to the asked number of remaining members (at most [`ROSTER_LIMIT`]), most recently seen first.
    pub roster: Roster,
    /// Members left in the set; `None` if the roster is full, so it may not be the whole set and
    /// the caller must count the members with `ZCARD`.
    pub card: Option<u64>,
    /// The lowest remaining score, in the score unit, when it was asked for and any member is
    /// left.
    pub oldest: Option<f64>,
}

/// Evicts the zombies of `groups` of keys, one `MULTI`/`EXEC` per group, all in one pipeline.
/// A group is the whole batch on a single server; in a cluster it is the keys of one hash slot,
/// since a transaction may not span slots. Returns the eviction instant (Unix seconds, from a
/// `TIME` just before the transactions) and, per key in group order, what was removed (a key
/// whose slot moved in a cluster is found on its new node by that node's walk).
/// With `oldest`, each key's lowest remaining score is read too.
pub(crate) async fn evict(
    con: &mut Node,
    groups: &[Vec<&[u8]>],
    cutoff: &Cutoff,
    oldest: bool,
    roster: usize,
) -> Result<(f64, Vec<TxKey>), Error> {
    let roster_first = format!("-{roster}");
    let below = cutoff.below.as_bytes();
    let keys: usize = groups.iter().map(Vec::len).sum();
    let per_key = if oldest { 4 } else { 3 };
    // Three or four commands per key, each naming it; two carry the cutoff. Generous, so that the
    // batch is never copied as it grows: 170 bytes of fixed words, up to 10 of framing per
    // argument.
    let size: usize = groups
        .iter()
        .flatten()
        .map(|k| per_key * (k.len() + 10) + 2 * (below.len() + 10) + 176)
        .sum();
    let mut batch = Packed::with_capacity(64 + 32 * groups.len() + size);
    batch.command(&[b"TIME"]);
    for keys in groups {
        batch.command(&[b"MULTI"]);
        for key in keys {
            batch
                .command(&[b"ZRANGE", key, b"-inf", below, b"BYSCORE", b"WITHSCORES"])
                .command(&[b"ZREMRANGEBYSCORE", key, b"-inf", below])
                .command(&[b"ZRANGE", key, roster_first.as_bytes(), b"-1"]);
            if oldest {
                batch.command(&[b"ZRANGE", key, b"0", b"0", b"WITHSCORES"]);
            }
        }
        batch.command(&[b"EXEC"]);
    }
    // The replies are read in place: a roster's members go straight into its JSON.
    let raw = con.send_packed_raw(batch).await?;
    let mut r = Reader::new(&raw);
    let now = read_time(&mut r)?;
    let mut out = Vec::with_capacity(keys);
    // The roster arrives oldest first; its members wait here to be written newest first.
    let mut ascending = Vec::with_capacity(ROSTER_LIMIT);
    for keys in groups {
        // MULTI, one QUEUED (or a refusal) per command, then EXEC's array (or EXECABORT).
        if let Item::Error(e) = r.item()? {
            return Err(multi_refused(&mut r, keys.len(), per_key, e));
        }
        let mut refusal = None;
        for _ in 0..keys.len() * per_key {
            match r.item()? {
                Item::Error(e) => {
                    refusal.get_or_insert(e);
                }
                item => r.skip_rest(&item)?,
            }
        }
        if let Some(e) = refusal
            && !is_moved(e.code())
        {
            // READONLY (a replica), NOPERM, OOM, a slot that cannot serve now: nothing was
            // removed, and the check must say why rather than skip the keys.
            return Err(redis::RedisError::from(e).into());
        }
        match r.item()? {
            Item::Array(n) if n == keys.len() * per_key => {
                for _ in 0..keys.len() {
                    out.push(match read_key(&mut r, &mut ascending, oldest, roster)? {
                        Some(evicted) => TxKey::Done(evicted),
                        None => TxKey::NotZset,
                    });
                }
            }
            Item::Error(e) => {
                tracing::debug!(error = %e.details().unwrap_or(e.code()), keys = keys.len(), "transaction refused: its slot moved");
                out.extend(keys.iter().map(|_| TxKey::Moved));
            }
            _ => return Err(ReplyError::new("EXEC did not answer an array").into()),
        }
    }
    Ok((now, out))
}

/// MULTI itself was refused (an ACL changed since the preflight), so the commands after it ran
/// one by one and EXEC failed. Whatever they removed cannot be announced exactly (nothing held the
/// read and the removal together): count it and say so, rather than report that nothing happened.
fn multi_refused(
    r: &mut Reader<'_>,
    keys: usize,
    per_key: usize,
    refusal: redis::ServerError,
) -> Error {
    let mut removed = 0;
    let mut read = || -> redis::RedisResult<()> {
        for _ in 0..keys {
            r.skip()?;
            match r.item()? {
                Item::Int(n) => removed += n,
                other => r.skip_rest(&other)?,
            }
            for _ in 2..per_key {
                r.skip()?;
            }
        }
        r.skip()
    };
    let _ = read();
    if removed > 0 {
        return ReplyError::new(format!(
            "MULTI was refused ({}), so the transaction's commands ran one by one: {removed} members were removed outside a transaction and cannot be announced",
            refusal.details().unwrap_or(refusal.code())
        ))
        .into();
    }
    redis::RedisError::from(refusal).into()
}

/// `TIME` as Unix seconds.
fn read_time(r: &mut Reader<'_>) -> Result<f64, Error> {
    let bad = crate::store::reply::not_a_time;
    if r.item()? != Item::Array(2) {
        return Err(bad().into());
    }
    let mut part = || -> Result<f64, Error> {
        match r.item()? {
            Item::Bulk(b) => Ok(number(b).ok_or_else(bad)?),
            _ => Err(bad().into()),
        }
    };
    let (secs, micros) = (part()?, part()?);
    Ok(time_from_parts(secs, micros))
}

/// One key's replies inside EXEC: the zombies with their scores, how many were removed, the
/// roster, and with `with_oldest` the lowest remaining member. `None` if the key was refused (it
/// changed type). `ascending` is scratch space for the roster's members, kept between keys.
fn read_key<'a>(
    r: &mut Reader<'a>,
    ascending: &mut Vec<&'a [u8]>,
    with_oldest: bool,
    roster_limit: usize,
) -> Result<Option<Evicted>, Error> {
    let mut failed = false;
    let removed = match r.item()? {
        Item::Array(n) if n % 2 == 0 => {
            let mut pairs = Vec::with_capacity(n / 2);
            for _ in 0..n / 2 {
                let (Item::Bulk(member), Item::Bulk(score)) = (r.item()?, r.item()?) else {
                    return Err(ReplyError::new("members with scores are not strings").into());
                };
                let score =
                    number(score).ok_or_else(|| ReplyError::new("a score is not a number"))?;
                pairs.push((member.to_vec(), score));
            }
            pairs
        }
        Item::Error(_) => {
            failed = true;
            Vec::new()
        }
        _ => return Err(ReplyError::new("members with scores are not an even array").into()),
    };
    let removed_count = match r.item()? {
        Item::Int(n) => n,
        Item::Error(_) => {
            failed = true;
            0
        }
        _ => return Err(ReplyError::new("the removed count is not an integer").into()),
    };
    let roster = match r.item()? {
        Item::Array(n) => {
            ascending.clear();
            for _ in 0..n {
                match r.item()? {
                    Item::Bulk(member) => ascending.push(member),
                    _ => return Err(ReplyError::new("a member is not a string").into()),
                }
            }
            let mut roster = Roster::with_capacity(ascending.iter().map(|m| m.len() + 3).sum());
            for member in ascending.iter().rev() {
                roster.push(member);
            }
            roster
        }
        Item::Error(_) => {
            failed = true;
            Roster::with_capacity(0)
        }
        _ => return Err(ReplyError::new("the roster is not an array").into()),
    };
    let oldest = match with_oldest {
        false => None,
        true => match r.item()? {
            Item::Array(0) => None,
            Item::Array(2) => {
                r.skip()?;
                match r.item()? {
                    Item::Bulk(score) => Some(
                        number(score).ok_or_else(|| ReplyError::new("a score is not a number"))?,
                    ),
                    _ => return Err(ReplyError::new("a score is not a string").into()),
                }
            }
            Item::Error(_) => {
                failed = true;
                None
            }
            _ => return Err(ReplyError::new("the lowest member is not a pair").into()),
        },
    };
    if failed {
        // Removed but not read: those members could not be announced. Say so loudly rather
        // than count the key as refused.
        if removed_count > 0 {
            return Err(ReplyError::new(format!(
                "{removed_count} members were removed but the transaction's reads failed, so they cannot be announced"
            ))
            .into());
        }
        return Ok(None);
    }
    if usize::try_from(removed_count).ok() != Some(removed.len()) {
        return Err(ReplyError::new(
            "removed count differs from the range read in the same transaction",
        )
        .into());
    }
    // A roster shorter than the limit is the whole set: its length is the count.
    let card = (roster.len() < roster_limit).then_some(roster.len() as u64);
    Ok(Some(Evicted {
        removed,
        roster,
        card,
        oldest,
    }))
}
