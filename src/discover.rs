//! Discovery: the keys of a sweep, streamed one SCAN page at a time.
//!
//! Only the current page is ever held, so memory does not grow with the keyspace. `TYPE zset`
//! lets Redis skip keys of other types under the same pattern before they reach us.

use futures_util::Stream;

use crate::Error;
use crate::evict::{ReplyError, parse_time};
use crate::store::{Packed, SendPacked, all_ok};

/// One SCAN page and Redis's clock when it was read.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// Matching sorted sets; may be empty (SCAN visited slots with no match).
    pub keys: Vec<Vec<u8>>,
    /// Redis `TIME` read in the same pipeline, in Unix seconds: the page's cutoff is computed
    /// from it, so no extra round trip is needed per batch.
    pub time: f64,
}

/// The first page of a pass asks for `count / FIRST_PAGE_SHARE` keys, and each page after it for
/// twice as many as the one before, up to `count`.
///
/// Why: a pass usually starts on a Redis that has been idle since the last one, and on a virtual
/// machine the first command after idle can take many times its usual time (measured on the
/// bench machine: a `SCAN ... COUNT 1000` of 1.7 ms took 11-29 ms after 6 s of idle, the next ones
/// 2-5 ms). Starting small keeps the commands that meet a cold machine short; full pages come
/// from the sixth page on (62, 124, ..., 992, then 1000 for the default `scan.count`).
pub const FIRST_PAGE_SHARE: u32 = 16;

/// The keys matching `glob` that are sorted sets, one page per item. Empty pages still come
/// through: they show that the pass moves on. Pages ask for up to `count` keys (SCAN's `COUNT`),
/// the first ones for fewer ([`FIRST_PAGE_SHARE`]).
///
/// SCAN guarantees that a key present for the whole scan is returned at least once; a key may
/// come twice (the second sweep of it finds nothing to do).
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
            let (next, keys): (u64, Vec<Vec<u8>>) =
                redis::from_redis_value(page).map_err(|e| ReplyError::new(format!("SCAN: {e}")))?;
            let time = parse_time(&time).ok_or_else(|| ReplyError::new("TIME is not a time"))?;
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
