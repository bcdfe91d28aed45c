//! Walking a primary's keyspace with SCAN, one page at a time, for every sweep at once.
//!
//! SCAN visits every key of the database whatever its `MATCH`, which only filters after the
//! walk, so two sweeps walking separately cost Redis two walks. One walk serves them all: its
//! `MATCH` is what every sweep's pattern has in common (`common_glob`), `TYPE zset` lets Redis
//! skip keys of other types before they reach us, and each key returned goes to the sweeps whose
//! pattern it fits. Only the current page is held, so memory does not grow with the keyspace.

use futures_util::Stream;

use crate::Error;
use crate::config::pattern::KeyPattern;
use crate::store::reply::ReplyError;
use crate::store::{Packed, SendPacked, all_ok};

/// One SCAN page and Redis's clock when it was read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Page {
    /// Sorted sets matching the walk's glob; may be empty (SCAN visited slots with no match).
    pub(crate) keys: Vec<Vec<u8>>,
    /// Redis `TIME` read in the same pipeline, in Unix seconds: the page's cutoff is computed
    /// from it, so no extra round trip is needed per batch.
    pub(crate) time: f64,
}

/// The first page of a walk asks for `count / FIRST_PAGE_SHARE` keys, and each page after it for
/// twice as many as the one before, up to `count`.
///
/// Why: a walk usually starts on a Redis that has been idle since the last one, and on a virtual
/// machine the first command after idle can take many times its usual time (measured on the
/// bench machine: a `SCAN ... COUNT 1000` of 1.7 ms took 11-29 ms after 6 s of idle, the next ones
/// 2-5 ms). Starting small keeps the commands that meet a cold machine short; full pages come
/// from the sixth page on (62, 124, ..., 992, then 1000 for the default `scan.count`).
pub const FIRST_PAGE_SHARE: u32 = 16;

/// The one glob that matches the keys of every pattern in `patterns`: their longest common
/// literal prefix and suffix around a `*`. With no pattern it is `*`.
pub(crate) fn common_glob<'p>(patterns: impl IntoIterator<Item = &'p KeyPattern>) -> String {
    let mut iter = patterns.into_iter();
    let Some(first) = iter.next() else {
        return "*".into();
    };
    let (mut prefix, mut suffix) = (first.prefix(), first.suffix());
    for p in iter {
        let common = prefix
            .iter()
            .zip(p.prefix())
            .take_while(|(a, b)| a == b)
            .count();
        prefix = &prefix[..common];
        let common = suffix
            .iter()
            .rev()
            .zip(p.suffix().iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        suffix = &suffix[suffix.len() - common..];
    }
    // Both are cut from valid UTF-8 patterns at byte positions that may split a character only
    // if two patterns differ inside one: keep the glob valid by falling back to whole bytes.
    let mut glob = String::from_utf8_lossy(prefix).into_owned();
    if glob.ends_with('\u{fffd}') {
        glob.clear();
    }
    glob.push('*');
    if let Ok(s) = std::str::from_utf8(suffix) {
        glob.push_str(s);
    }
    glob
}

/// The sorted sets matching `glob`, one page per item. Empty pages still come through: they
/// show that the walk moves on. Pages ask for up to `count` keys (SCAN's `COUNT`), the first
/// ones for fewer ([`FIRST_PAGE_SHARE`]).
///
/// SCAN guarantees that a key present for the whole walk is returned at least once; a key may
/// come twice (the second look at it finds nothing to do).
pub(crate) fn pages<C>(con: C, glob: String, count: u32) -> impl Stream<Item = Result<Page, Error>>
where
    C: SendPacked + Clone + Send + 'static,
{
    let first = (count / FIRST_PAGE_SHARE).max(1);
    futures_util::stream::try_unfold((con, Some(0u64), first), move |(mut con, cursor, asked)| {
        let glob = glob.clone();
        async move {
            let Some(cursor) = cursor else {
                return Ok(None);
            };
            let cursor = cursor.to_string();
            let asked_text = asked.to_string();
            let mut batch = Packed::with_capacity(128 + glob.len());
            batch
                .command(&[
                    b"SCAN",
                    cursor.as_bytes(),
                    b"MATCH",
                    glob.as_bytes(),
                    b"COUNT",
                    asked_text.as_bytes(),
                    b"TYPE",
                    b"zset",
                ])
                .command(&[b"TIME"]);
            let mut replies = all_ok(con.send_packed(batch).await?)?.into_iter();
            let short = || ReplyError::new("SCAN and TIME did not both answer");
            let page = replies.next().ok_or_else(short)?;
            let time = replies.next().ok_or_else(short)?;
            let (next, keys): (u64, Vec<Vec<u8>>) =
                redis::from_redis_value(page).map_err(|e| ReplyError::new(format!("SCAN: {e}")))?;
            let time = crate::store::reply::time(Some(&time))?;
            Ok(Some((
                Page { keys, time },
                (
                    con,
                    (next != 0).then_some(next),
                    asked.saturating_mul(2).min(count),
                ),
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(patterns: &[&str]) -> String {
        let parsed: Vec<KeyPattern> = patterns
            .iter()
            .map(|p| KeyPattern::parse(p).unwrap())
            .collect();
        common_glob(&parsed)
    }

    #[test]
    fn one_glob_for_every_sweep() {
        assert_eq!(glob(&["presence:*:online"]), "presence:*:online");
        assert_eq!(
            glob(&["presence:*:online", "presence:*:typing"]),
            "presence:*"
        );
        assert_eq!(glob(&["presence:*:online", "cursor:*:online"]), "*:online");
        assert_eq!(glob(&["a:*", "b:*"]), "*");
        assert_eq!(glob(&[]), "*");
        // Patterns that differ inside a multi-byte character keep a valid glob.
        assert_eq!(glob(&["é:*", "è:*"]), "*");
    }
}
