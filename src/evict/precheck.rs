//! The precheck: which keys hold zombies, and how big the clean ones are, with pipelines of
//! native commands. It changes nothing.
//!
//! It runs in two steps so that each key costs Redis one cheap command besides its eviction:
//! `ZCOUNT -inf (cutoff` for every key, then `ZCARD` only for the clean ones (the metrics need
//! their size; a key with zombies learns its size from its eviction).

use redis::Value;
use redis::aio::ConnectionLike;

use super::{Cutoff, ReplyError, int};
use crate::Error;

/// Members below `cutoff` in each key: `Some(0)` for a clean (or vanished) key, `None` for a key
/// that is no longer a sorted set.
pub async fn count_stale<C>(
    con: &mut C,
    keys: &[&[u8]],
    cutoff: &Cutoff,
) -> Result<Vec<Option<u64>>, Error>
where
    C: ConnectionLike + Send,
{
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for key in keys {
        pipe.cmd("ZCOUNT")
            .arg(*key)
            .arg("-inf")
            .arg(cutoff.below.as_str());
    }
    counts(con, pipe, keys.len()).await
}

/// Members in each key: `Some(0)` for a vanished key, `None` for one that is no longer a sorted
/// set.
pub async fn cardinalities<C>(con: &mut C, keys: &[&[u8]]) -> Result<Vec<Option<u64>>, Error>
where
    C: ConnectionLike + Send,
{
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for key in keys {
        pipe.cmd("ZCARD").arg(*key);
    }
    counts(con, pipe, keys.len()).await
}

async fn counts<C>(con: &mut C, pipe: redis::Pipeline, n: usize) -> Result<Vec<Option<u64>>, Error>
where
    C: ConnectionLike + Send,
{
    if n == 0 {
        return Ok(Vec::new());
    }
    let replies: Vec<Value> = pipe.query_async(con).await?;
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
    C: ConnectionLike + Send,
{
    match what {
        Count::Stale(cutoff) => count_stale(con, keys, cutoff).await,
        Count::Members => cardinalities(con, keys).await,
    }
}
