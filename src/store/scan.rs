//! Walking a primary's keyspace with SCAN, one page at a time, for every sweep at once.
//!
//! SCAN visits every key of the database whatever its `MATCH`, which only filters after the
//! walk, so two sweeps walking separately cost Redis two walks. One walk serves them all: its
//! `MATCH` is what every sweep's pattern has in common (`common_glob`), `TYPE zset` lets Redis
//! skip keys of other types before they reach us, and each key returned goes to the sweeps whose
//! pattern it fits. Only the current page is held, so memory does not grow with the keyspace.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::Stream;
use tokio::time::Instant;

use crate::Error;
use crate::config::pattern::KeyPattern;
use crate::store::reply::ReplyError;
use crate::store::{Packed, SendPacked, Value, all_ok};

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
            let (next, keys) = scan_page(page)?;
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

/// A SCAN reply: the next cursor (0 when the walk is over) and the keys of the page.
fn scan_page(page: Value) -> Result<(u64, Vec<Vec<u8>>), ReplyError> {
    let bad = || ReplyError::new("SCAN did not answer a cursor and its keys");
    let Value::Array(page) = page else {
        return Err(bad());
    };
    let [cursor, keys] = <[Value; 2]>::try_from(page).map_err(|_| bad())?;
    let cursor = crate::store::reply::int(&cursor).ok_or_else(bad)?;
    Ok((cursor, crate::store::reply::members(keys)?))
}

/// `scan.max_keys_per_second` for one walk: pages are asked for no faster than the rate allows
/// since the walk started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    started: Instant,
    /// Keys per second; `None`: unpaced.
    rate: Option<f64>,
    scanned: u64,
    next_page_at: Option<Instant>,
}

impl Pace {
    pub(crate) fn new(started: Instant, keys_per_second: Option<f64>) -> Self {
        Self {
            started,
            rate: keys_per_second.filter(|r| *r > 0.0),
            scanned: 0,
            next_page_at: None,
        }
    }

    /// A page of `keys` came: the next one waits until the walk is back on pace.
    pub(crate) fn page(&mut self, keys: usize) {
        self.scanned += keys as u64;
        if let Some(rate) = self.rate {
            let due = self.scanned as f64 / rate;
            self.next_page_at = Some(self.started + Duration::from_secs_f64(due));
        }
    }

    /// Keys the walk's pages held so far.
    pub(crate) fn scanned(&self) -> u64 {
        self.scanned
    }

    /// When the next page may be asked for, if the pace holds it back at all.
    pub(crate) fn next_page_at(&self) -> Option<Instant> {
        self.next_page_at
    }

    /// Whether a page may be asked for at `now`.
    pub(crate) fn ready(&self, now: Instant) -> bool {
        self.next_page_at.is_none_or(|t| t <= now)
    }
}

/// Whether a walk with `waiting` keys queued may ask for another page: at most a few batches of
/// keys wait at once, so memory stays flat however many keys match.
pub(crate) fn room_for_page(waiting: usize, batch: usize, depth: usize) -> bool {
    waiting < batch * depth
}

/// Keys a walk found, waiting for a batch, each with Redis's clock when its page was read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queue {
    keys: VecDeque<(Vec<u8>, f64)>,
}

impl Queue {
    pub(crate) fn push(&mut self, key: Vec<u8>, time: f64) {
        self.keys.push_back((key, time));
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.keys.clear();
    }

    /// A full batch, or once the walk's pages are done whatever is left; with the oldest page
    /// time among its keys. A batch spanning two pages judges by the older page's time: a cutoff
    /// a little early only spares members, it never evicts a fresh one.
    pub(crate) fn take(&mut self, batch: usize, scan_done: bool) -> Option<(Vec<Vec<u8>>, f64)> {
        if self.keys.is_empty() || (self.keys.len() < batch && !scan_done) {
            return None;
        }
        let n = batch.min(self.keys.len());
        let mut time = f64::INFINITY;
        let keys = self
            .keys
            .drain(..n)
            .map(|(key, t)| {
                time = time.min(t);
                key
            })
            .collect();
        Some((keys, time))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pages_follow_the_rate_since_the_start() {
        let start = Instant::now();
        let mut pace = Pace::new(start, Some(100.0));
        assert!(pace.ready(start), "the first page is not held back");
        pace.page(50);
        assert_eq!(
            pace.next_page_at(),
            Some(start + Duration::from_millis(500))
        );
        assert!(!pace.ready(start + Duration::from_millis(499)));
        pace.page(50);
        assert_eq!(pace.next_page_at(), Some(start + Duration::from_secs(1)));
        assert_eq!(pace.scanned(), 100);
        let mut unpaced = Pace::new(start, None);
        unpaced.page(1_000_000);
        assert!(unpaced.ready(start));
    }

    #[test]
    fn batches_are_full_until_the_walk_ends_and_judge_by_the_oldest_page() {
        let mut q = Queue::default();
        q.push(b"a".to_vec(), 20.0);
        q.push(b"b".to_vec(), 10.0);
        q.push(b"c".to_vec(), 30.0);
        assert_eq!(q.take(4, false), None, "not full, walk not done");
        assert_eq!(
            q.take(2, false),
            Some((vec![b"a".to_vec(), b"b".to_vec()], 10.0))
        );
        assert_eq!(q.take(2, false), None);
        assert_eq!(q.take(2, true), Some((vec![b"c".to_vec()], 30.0)));
        assert!(q.is_empty());
        assert!(room_for_page(7, 4, 2) && !room_for_page(8, 4, 2));
    }

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
