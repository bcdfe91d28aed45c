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

/// The keys matching `glob` that are sorted sets, one page per item. Empty pages still come
/// through: they show that the pass moves on.
///
/// SCAN guarantees that a key present for the whole scan is returned at least once; a key may
/// come twice (the second sweep of it finds nothing to do).
pub fn pages<C>(con: C, glob: String, count: u32) -> impl Stream<Item = Result<Page, Error>>
where
    C: SendPacked + Clone + Send + 'static,
{
    let count = count.to_string();
    futures_util::stream::try_unfold((con, Some(0u64)), move |(mut con, cursor)| {
        let glob = glob.clone();
        let count = count.clone();
        async move {
            let Some(cursor) = cursor else {
                return Ok(None);
            };
            let cursor = cursor.to_string();
            let mut batch = Packed::with_capacity(128 + glob.len());
            batch
                .command(&[
                    b"SCAN",
                    cursor.as_bytes(),
                    b"MATCH",
                    glob.as_bytes(),
                    b"COUNT",
                    count.as_bytes(),
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
                (con, (next != 0).then_some(next)),
            )))
        }
    })
}
