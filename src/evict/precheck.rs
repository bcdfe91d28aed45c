//! The precheck: how many members each key holds and how many of them are stale, in one
//! pipeline of native commands. It changes nothing.

use redis::Value;
use redis::aio::ConnectionLike;

use super::{Cutoff, int};
use crate::Error;

/// What the precheck found for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyCheck {
    /// A sorted set with `card` members, `stale` of them below the cutoff.
    Set {
        /// Members.
        card: u64,
        /// Members below the cutoff.
        stale: u64,
    },
    /// Gone since SCAN saw it (expired or deleted).
    Gone,
    /// No longer a sorted set; it is left alone.
    WrongType,
}

/// Checks `keys` against `cutoff`: `ZCARD` and `ZCOUNT -inf (cutoff` per key, pipelined.
pub async fn precheck<C>(
    con: &mut C,
    keys: &[Vec<u8>],
    cutoff: &Cutoff,
) -> Result<Vec<KeyCheck>, Error>
where
    C: ConnectionLike + Send,
{
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for key in keys {
        pipe.cmd("ZCARD").arg(key.as_slice());
        pipe.cmd("ZCOUNT")
            .arg(key.as_slice())
            .arg("-inf")
            .arg(cutoff.below.as_str());
    }
    let replies: Vec<Value> = pipe.query_async(con).await?;
    if replies.len() != keys.len() * 2 {
        return Err(super::ReplyError::new(format!(
            "{} precheck replies for {} keys",
            replies.len(),
            keys.len()
        ))
        .into());
    }
    Ok(replies
        .chunks_exact(2)
        .map(|pair| match (&pair[0], &pair[1]) {
            (Value::ServerError(_), _) | (_, Value::ServerError(_)) => KeyCheck::WrongType,
            (card, stale) => match (int(card), int(stale)) {
                (Some(0), _) => KeyCheck::Gone,
                (Some(card), Some(stale)) => KeyCheck::Set { card, stale },
                _ => KeyCheck::WrongType,
            },
        })
        .collect())
}
