//! Discovery: the keys of a sweep, streamed one SCAN page at a time.
//!
//! Only the current page is ever held, so memory does not grow with the keyspace. `TYPE zset`
//! lets Redis skip keys of other types under the same pattern before they reach us.

use futures_util::Stream;
use redis::aio::ConnectionLike;

use crate::Error;

/// The keys matching `glob` that are sorted sets, one SCAN page per item. Pages may be empty
/// (SCAN visited slots with no match); they still show that the pass moves on.
///
/// SCAN guarantees that a key present for the whole scan is returned at least once; a key may
/// come twice (the second sweep of it finds nothing to do).
pub fn pages<C>(con: C, glob: String, count: u32) -> impl Stream<Item = Result<Vec<Vec<u8>>, Error>>
where
    C: ConnectionLike + Clone + Send + 'static,
{
    futures_util::stream::try_unfold((con, Some(0u64)), move |(mut con, cursor)| {
        let glob = glob.clone();
        async move {
            let Some(cursor) = cursor else {
                return Ok(None);
            };
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&glob)
                .arg("COUNT")
                .arg(count)
                .arg("TYPE")
                .arg("zset")
                .query_async(&mut con)
                .await?;
            Ok(Some((keys, (con, (next != 0).then_some(next)))))
        }
    })
}
