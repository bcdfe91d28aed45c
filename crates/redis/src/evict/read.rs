//! The precheck: what each key of a batch holds, with one pipeline of native reads. It changes
//! nothing.
//!
//! A full pass asks only `ZCOUNT -inf (cutoff` of every key, then `ZCARD` of the clean ones (the
//! metrics need their size; a key with zombies learns its size from its eviction), so that each
//! key costs Redis one cheap command besides its eviction. A deadline check needs the lowest
//! score of a key (its next deadline, and whether it holds zombies at all), its size and when
//! the key itself expires (a key TTL ends with no notification unless the server publishes
//! `expired` events): `ZRANGE key 0 0 WITHSCORES`, `ZCARD` and `PTTL`, with a `TIME` in front
//! when the caller's view of Redis's clock wants refreshing.

use std::num::NonZeroU64;

use presence_sweeper_rules::read::{KeyRead, KeyStatus, Reads};
use presence_sweeper_rules::score::Cutoff;

use crate::Error;
use crate::reply::{ReplyError, int, is_moved, refusal, single_score};
use crate::{Packed, SendPacked, Value};

/// What [`read`] asks of each key.
#[derive(Debug, Clone, Copy)]
pub enum Read<'c> {
    /// `ZCOUNT -inf (cutoff`: the zombies.
    Stale(&'c Cutoff),
    /// `ZCOUNT -inf (cutoff` and `ZRANGE key -1 -1 WITHSCORES`: the zombies and the newest
    /// heartbeat, for the storm guard of a walk that checks keys it does not track.
    StaleNewest(&'c Cutoff),
    /// `ZRANGE key -1 -1 WITHSCORES`: the newest heartbeat alone (a storm guard's witness).
    Newest,
    /// `ZCARD`, `ZCOUNT -inf (cutoff` and `ZRANGE key 0 0 WITHSCORES`: what `stats` reports.
    Summary(&'c Cutoff),
    /// `ZCARD`: the members.
    Members,
    /// `ZRANGE key 0 0 WITHSCORES`, `ZCARD` and `PTTL`: all a deadline needs.
    Probe {
        /// `TIME` first.
        time: bool,
        /// `ZRANGE key -1 -1 WITHSCORES` too: the newest heartbeat, for the storm guard.
        newest: bool,
    },
    /// `ZRANGE key 0 0 WITHSCORES` and `ZCARD`: the lowest score and the members
    /// (reconciliation of a tracked key: its roster may have changed since its check).
    Oldest,
}

impl Read<'_> {
    fn commands(self) -> usize {
        match self {
            Self::Probe { newest: false, .. } => 3,
            Self::Probe { newest: true, .. } => 4,
            Self::StaleNewest(_) | Self::Oldest => 2,
            Self::Summary(_) => 3,
            _ => 1,
        }
    }

    /// The name of the `i`th command sent per key.
    fn command(self, i: usize) -> &'static str {
        match (self, i) {
            (Self::Stale(_), _) | (Self::StaleNewest(_), 0) | (Self::Summary(_), 1) => "ZCOUNT",
            (Self::Probe { .. }, 2) => "PTTL",
            (Self::Members, _) | (Self::Probe { .. } | Self::Oldest, 1) | (Self::Summary(_), 0) => {
                "ZCARD"
            }
            (
                Self::Probe { .. }
                | Self::Oldest
                | Self::StaleNewest(_)
                | Self::Newest
                | Self::Summary(_),
                _,
            ) => "ZRANGE",
        }
    }
}

/// Reads `what` of every key in one pipeline. In a cluster each key answers for itself: one
/// whose slot moved reads as [`KeyStatus::Moved`]; a slot that cannot serve now (`TRYAGAIN`,
/// `CLUSTERDOWN`) fails the read.
pub async fn read<C>(con: &mut C, keys: &[&[u8]], what: Read<'_>) -> Result<Reads, Error>
where
    C: SendPacked + Send,
{
    if keys.is_empty() {
        return Ok(Reads {
            keys: Vec::new(),
            time: None,
            pttl_refused: 0,
        });
    }
    let timed = matches!(what, Read::Probe { time: true, .. });
    let size: usize = keys.iter().map(|k| what.commands() * (k.len() + 64)).sum();
    let mut batch = Packed::with_capacity(size + 16);
    if timed {
        batch.command(&[b"TIME"]);
    }
    for key in keys {
        match what {
            Read::Stale(cutoff) => {
                batch.command(&[b"ZCOUNT", key, b"-inf", cutoff.below.as_bytes()]);
            }
            Read::StaleNewest(cutoff) => {
                batch
                    .command(&[b"ZCOUNT", key, b"-inf", cutoff.below.as_bytes()])
                    .command(&[b"ZRANGE", key, b"-1", b"-1", b"WITHSCORES"]);
            }
            Read::Newest => {
                batch.command(&[b"ZRANGE", key, b"-1", b"-1", b"WITHSCORES"]);
            }
            Read::Summary(cutoff) => {
                batch
                    .command(&[b"ZCARD", key])
                    .command(&[b"ZCOUNT", key, b"-inf", cutoff.below.as_bytes()])
                    .command(&[b"ZRANGE", key, b"0", b"0", b"WITHSCORES"]);
            }
            Read::Members => {
                batch.command(&[b"ZCARD", key]);
            }
            Read::Probe { newest, .. } => {
                batch
                    .command(&[b"ZRANGE", key, b"0", b"0", b"WITHSCORES"])
                    .command(&[b"ZCARD", key])
                    .command(&[b"PTTL", key]);
                if newest {
                    batch.command(&[b"ZRANGE", key, b"-1", b"-1", b"WITHSCORES"]);
                }
            }
            Read::Oldest => {
                batch
                    .command(&[b"ZRANGE", key, b"0", b"0", b"WITHSCORES"])
                    .command(&[b"ZCARD", key]);
            }
        }
    }
    let expected = batch.len();
    let replies = con.send_packed(batch).await?;
    if replies.len() != expected {
        return Err(
            ReplyError::new(format!("{} replies for {expected} commands", replies.len())).into(),
        );
    }
    // Each key's replies are read in place (moving them out cost 10 instructions a key), in
    // a loop: collecting into a `Result` cost 100 more (callgrind).
    let (time, replies) = match timed {
        true => (Some(crate::reply::time(replies.first())?), &replies[1..]),
        false => (None, &replies[..]),
    };
    let mut out = Vec::with_capacity(keys.len());
    let mut pttl_refused = 0;
    for (key, replies) in keys.iter().zip(replies.chunks_exact(what.commands())) {
        out.push(key_read(key, replies, what, &mut pttl_refused)?);
    }
    Ok(Reads {
        keys: out,
        time,
        pttl_refused,
    })
}

/// The length of the member of a `ZRANGE … WITHSCORES` reply of one.
fn id_bytes(v: &Value) -> usize {
    match v {
        Value::Array(pair) => match pair.first() {
            Some(Value::BulkString(id)) => id.len(),
            _ => 0,
        },
        _ => 0,
    }
}

/// What a refused read names as its target; a sweep names its keys' pattern instead.
pub const KEY_TARGET: &str = "a key it checks";

/// One key's replies; a refused `PTTL` counts in `pttl_refused`.
fn key_read(
    key: &[u8],
    replies: &[Value],
    what: Read<'_>,
    pttl_refused: &mut u32,
) -> Result<KeyStatus, Error> {
    for (i, reply) in replies.iter().enumerate() {
        match reply {
            // `PTTL` came with the gauges that follow key expiry, after the README's ACL had
            // been deployed: without it a key is only forgotten later (its next check, or a
            // reconciliation), so a user who may not run it still sweeps; the check says so.
            Value::ServerError(e) if e.code() == "NOPERM" && what.command(i) == "PTTL" => {
                *pttl_refused += 1;
            }
            Value::ServerError(e) if e.code() == "WRONGTYPE" => return Ok(KeyStatus::NotZset),
            Value::ServerError(e) if is_moved(e.code()) => return Ok(KeyStatus::Moved),
            Value::ServerError(e) if e.code() == "NOPERM" => {
                tracing::debug!(key = %presence_sweeper_rules::redact::Id(key), "the ACL refused a read of this key");
                return Err(Error::Permission {
                    command: what.command(i).into(),
                    // Not the key: error logs and /readyz show this, and it holds an id.
                    target: KEY_TARGET.into(),
                    detail: refusal(reply).unwrap_or_default(),
                });
            }
            Value::ServerError(e) => return Err(redis::RedisError::from(e.clone()).into()),
            _ => {}
        }
    }
    let count = |v: &Value| int(v).ok_or_else(|| ReplyError::new("a count is not an integer"));
    let mut read = KeyRead::default();
    match (what, replies) {
        (Read::Stale(_), [stale]) => read.stale = count(stale)?,
        (Read::StaleNewest(_), [stale, newest]) => {
            read.stale = count(stale)?;
            read.newest = single_score(newest)?;
            read.id_bytes = id_bytes(newest);
        }
        (Read::Newest, [newest]) => read.newest = single_score(newest)?,
        (Read::Summary(_), [card, stale, oldest]) => {
            read.card = count(card)?;
            read.stale = count(stale)?;
            read.oldest = single_score(oldest)?;
        }
        (Read::Members, [card]) => read.card = count(card)?,
        (Read::Oldest, [oldest, card]) => {
            read.oldest = single_score(oldest)?;
            read.id_bytes = id_bytes(oldest);
            read.card = count(card)?;
        }
        (Read::Probe { .. }, [oldest, card, pttl, newest @ ..]) => {
            read.oldest = single_score(oldest)?;
            read.id_bytes = id_bytes(oldest);
            read.card = count(card)?;
            // -1 (no TTL), -2 (no key) and a refusal all read as no expiry; 0 (expiring now)
            // as 1 ms.
            read.expires_in = int(pttl).and_then(|ms| NonZeroU64::new(ms.max(1)));
            if let [newest] = newest {
                read.newest = single_score(newest)?;
                read.id_bytes = read.id_bytes.max(id_bytes(newest));
            }
        }
        _ => return Err(ReplyError::new("a read without its replies").into()),
    }
    Ok(KeyStatus::Set(read))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(pttl: i64) -> KeyRead {
        let oldest = Value::Array(vec![
            Value::BulkString(b"u1".to_vec()),
            Value::BulkString(b"1764460000.5".to_vec()),
        ]);
        let replies = [oldest, Value::Int(3), Value::Int(pttl)];
        let what = Read::Probe {
            time: false,
            newest: false,
        };
        key_read(b"k", &replies, what, &mut 0)
            .unwrap()
            .set()
            .unwrap()
    }

    #[test]
    fn a_probe_reads_the_lowest_score_the_size_and_when_the_key_expires() {
        let read = probe(1500);
        assert_eq!(read.oldest, Some(1_764_460_000.5));
        assert_eq!((read.card, read.id_bytes), (3, 2));
        assert_eq!(read.expires_in.map(NonZeroU64::get), Some(1500));
        assert_eq!(probe(-1).expires_in, None, "no TTL");
        assert_eq!(probe(-2).expires_in, None, "no key");
        assert_eq!(
            probe(0).expires_in.map(NonZeroU64::get),
            Some(1),
            "expiring now is looked at again at once"
        );
    }

    /// At 72 bytes, building one called `memset` (see [`KeyRead::expires_in`]).
    #[test]
    fn a_read_stays_within_64_bytes() {
        assert!(size_of::<KeyRead>() <= 64, "{}", size_of::<KeyRead>());
    }
}
