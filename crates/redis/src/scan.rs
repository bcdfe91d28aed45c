//! Walking a primary's keyspace with SCAN, one page at a time, for every sweep at once.
//!
//! SCAN visits every key of the database whatever its `MATCH`, which only filters after the
//! walk, so two sweeps walking separately cost Redis two walks. One walk serves them all: its
//! `MATCH` is what every sweep's pattern has in common (`common_glob`), `TYPE zset` lets Redis
//! skip keys of other types before they reach us, and each key returned goes to the sweeps whose
//! pattern it fits. Only the current page is held, so memory does not grow with the keyspace.

use futures_util::Stream;
use presence_sweeper_rules::scan::Page;

use crate::Error;
use crate::reply::ReplyError;
use crate::{Packed, SendPacked, Value, all_ok};

/// The first page of a walk asks for `count / FIRST_PAGE_SHARE` keys, and each page after it for
/// twice as many as the one before, up to `count`.
///
/// Why: a walk usually starts on a Redis that has been idle since the last one, and on a virtual
/// machine the first command after idle can take many times its usual time (measured on the
/// bench machine: a `SCAN ... COUNT 1000` of 1.7 ms took 11-29 ms after 6 s of idle, the next ones
/// 2-5 ms). Starting small keeps the commands that meet a cold machine short; full pages come
/// from the sixth page on (62, 124, ..., 992, then 1000 for the default `scan.count`).
pub const FIRST_PAGE_SHARE: u32 = 16;

/// The sorted sets matching `glob`, one page per item. Empty pages still come through: they
/// show that the walk moves on. Pages ask for up to `count` keys (SCAN's `COUNT`), the first
/// ones for fewer ([`FIRST_PAGE_SHARE`]).
///
/// SCAN guarantees that a key present for the whole walk is returned at least once; a key may
/// come twice (the second look at it finds nothing to do).
pub fn pages<C>(con: C, glob: String, count: u32) -> impl Stream<Item = Result<Page, Error>>
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
            let (next, keys) = scan_page(page)?;
            let time = crate::reply::time(Some(&time))?;
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

/// A SCAN reply: the next cursor (0 when the walk is over) and the keys of the page.
fn scan_page(page: Value) -> Result<(u64, Vec<Vec<u8>>), ReplyError> {
    let bad = || ReplyError::new("SCAN did not answer a cursor and its keys");
    let Value::Array(page) = page else {
        return Err(bad());
    };
    let [cursor, keys] = <[Value; 2]>::try_from(page).map_err(|_| bad())?;
    let cursor = crate::reply::int(&cursor).ok_or_else(bad)?;
    Ok((cursor, crate::reply::members(keys)?))
}
