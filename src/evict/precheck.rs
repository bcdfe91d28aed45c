//! The precheck: which keys hold zombies, and how big the clean ones are, with pipelines of
//! native commands. It changes nothing.
//!
//! It runs in two steps so that each key costs Redis one cheap command besides its eviction:
//! `ZCOUNT -inf (cutoff` for every key, then `ZCARD` only for the clean ones (the metrics need
//! their size; a key with zombies learns its size from its eviction).

use redis::Value;

use super::{Cutoff, ReplyError, int};
use crate::Error;
use crate::store::{Packed, SendPacked};

/// Members below `cutoff` in each key: `Some(0)` for a clean (or vanished) key, `None` for a key
/// that is no longer a sorted set.
pub async fn count_stale<C>(
    con: &mut C,
    keys: &[&[u8]],
    cutoff: &Cutoff,
) -> Result<Vec<Option<u64>>, Error>
where
    C: SendPacked + Send,
{
    let size: usize = keys.iter().map(|k| k.len() + cutoff.below.len() + 48).sum();
    let mut batch = Packed::with_capacity(size);
    for key in keys {
        batch.command(&[b"ZCOUNT", key, b"-inf", cutoff.below.as_bytes()]);
    }
    counts(con, batch).await
}

/// Members in each key: `Some(0)` for a vanished key, `None` for one that is no longer a sorted
/// set.
pub async fn cardinalities<C>(con: &mut C, keys: &[&[u8]]) -> Result<Vec<Option<u64>>, Error>
where
    C: SendPacked + Send,
{
    let mut batch = Packed::with_capacity(keys.iter().map(|k| k.len() + 32).sum());
    for key in keys {
        batch.command(&[b"ZCARD", key]);
    }
    counts(con, batch).await
}

async fn counts<C>(con: &mut C, batch: Packed) -> Result<Vec<Option<u64>>, Error>
where
    C: SendPacked + Send,
{
    let n = batch.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    let replies = con.send_packed(batch).await?;
    if replies.len() != n {
        return Err(ReplyError::new(format!("{} replies for {n} keys", replies.len())).into());
    }
    replies
        .into_iter()
        .map(|v| match v {
            // A slot that moved fails the whole read, as the cluster client's own routing
            // would: the caller asks each key where it lives now.
            Value::ServerError(e)
                if matches!(e.code(), "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN") =>
            {
                Err(redis::RedisError::from(e).into())
            }
            Value::ServerError(_) => Ok(None),
            v => Ok(int(&v)),
        })
        .collect()
}

/// What [`read`] asks of each key.
#[derive(Debug, Clone, Copy)]
pub enum Count<'c> {
    /// [`count_stale`] against this cutoff.
    Stale(&'c Cutoff),
    /// [`cardinalities`].
    Members,
}

/// [`count_stale`] or [`cardinalities`], as `what` says.
pub async fn read<C>(
    con: &mut C,
    keys: &[&[u8]],
    what: Count<'_>,
) -> Result<Vec<Option<u64>>, Error>
where
    C: SendPacked + Send,
{
    match what {
        Count::Stale(cutoff) => count_stale(con, keys, cutoff).await,
        Count::Members => cardinalities(con, keys).await,
    }
}
