//! A walk's pages as the rules see them: the keys a SCAN page brought and Redis's clock with
//! them, the one glob that serves every sweep, the pace of the pages and the keys waiting for a
//! batch. Reading the pages is the daemon's.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::pattern::KeyPattern;

/// One SCAN page and Redis's clock when it was read.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// Sorted sets matching the walk's glob; may be empty (SCAN visited slots with no match).
    pub keys: Vec<Vec<u8>>,
    /// Redis `TIME` read in the same pipeline, in Unix seconds: the page's cutoff is computed
    /// from it, so no extra round trip is needed per batch.
    pub time: f64,
}

/// The one glob that matches the keys of every pattern in `patterns`: their longest common
/// literal prefix and suffix around a `*`. With no pattern it is `*`.
pub fn common_glob<'p>(patterns: impl IntoIterator<Item = &'p KeyPattern>) -> String {
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

/// How fast one walk may ask for its pages: `scan.max_keys_per_second`, and for a periodic
/// reconciliation a pace of pages that spreads it over part of its interval. Pages are asked
/// for no faster than either allows since the walk started.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    started: Instant,
    /// Keys per second; `None`: unpaced.
    rate: Option<f64>,
    /// Pages per second; `None`: unpaced.
    pages_rate: Option<f64>,
    scanned: u64,
    pages: u64,
    next_page_at: Option<Instant>,
}

impl Pace {
    pub fn new(
        started: Instant,
        keys_per_second: Option<f64>,
        pages_per_second: Option<f64>,
    ) -> Self {
        let positive = |r: Option<f64>| r.filter(|r| *r > 0.0 && r.is_finite());
        Self {
            started,
            rate: positive(keys_per_second),
            pages_rate: positive(pages_per_second),
            scanned: 0,
            pages: 0,
            next_page_at: None,
        }
    }

    /// A page of `keys` came: the next one waits until the walk is back on pace.
    pub fn page(&mut self, keys: usize) {
        self.scanned += keys as u64;
        self.pages += 1;
        let by_keys = self.rate.map(|rate| self.scanned as f64 / rate);
        let by_pages = self.pages_rate.map(|rate| self.pages as f64 / rate);
        if let Some(due) = by_keys.into_iter().chain(by_pages).reduce(f64::max) {
            self.next_page_at = Some(self.started + Duration::from_secs_f64(due));
        }
    }

    /// The pace of pages no longer holds (a catch-up walk waits for this one).
    pub fn unspread(&mut self) {
        if self.pages_rate.take().is_some() {
            self.next_page_at = self
                .rate
                .map(|rate| self.started + Duration::from_secs_f64(self.scanned as f64 / rate));
        }
    }

    /// Keys the walk's pages held so far.
    pub fn scanned(&self) -> u64 {
        self.scanned
    }

    /// Pages the walk read so far.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// When the next page may be asked for, if the pace holds it back at all.
    pub fn next_page_at(&self) -> Option<Instant> {
        self.next_page_at
    }

    /// Whether a page may be asked for at `at`.
    pub fn ready(&self, at: Instant) -> bool {
        self.next_page_at.is_none_or(|t| t <= at)
    }
}

/// Whether a walk with `waiting` keys queued may ask for another page: at most a few batches of
/// keys wait at once, so memory stays flat however many keys match.
pub fn room_for_page(waiting: usize, batch: usize, depth: usize) -> bool {
    waiting < batch * depth
}

/// Keys a walk found, waiting for a batch, each with Redis's clock when its page was read.
#[derive(Debug, Clone, Default)]
pub struct Queue {
    keys: VecDeque<(Vec<u8>, f64)>,
}

impl Queue {
    pub fn push(&mut self, key: Vec<u8>, time: f64) {
        self.keys.push_back((key, time));
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn clear(&mut self) {
        self.keys.clear();
    }

    /// A full batch, or once the walk's pages are done whatever is left; with the oldest page
    /// time among its keys. A batch spanning two pages judges by the older page's time: a cutoff
    /// a little early only spares members, it never evicts a fresh one.
    pub fn take(&mut self, batch: usize, scan_done: bool) -> Option<(Vec<Vec<u8>>, f64)> {
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

    #[test]
    fn pages_follow_the_rate_since_the_start() {
        let start = crate::testing::now();
        let mut pace = Pace::new(start, Some(100.0), None);
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
        let mut unpaced = Pace::new(start, None, None);
        unpaced.page(1_000_000);
        assert!(unpaced.ready(start));
    }

    #[test]
    fn pages_follow_the_slower_of_the_two_paces() {
        let start = crate::testing::now();
        // 4 pages a second, and 1,000 keys a second.
        let mut pace = Pace::new(start, Some(1_000.0), Some(4.0));
        pace.page(10);
        assert_eq!(
            pace.next_page_at(),
            Some(start + Duration::from_millis(250)),
            "a page of few keys waits for the pages' pace"
        );
        pace.page(990);
        assert_eq!(
            pace.next_page_at(),
            Some(start + Duration::from_secs(1)),
            "a page of many keys waits for the keys' pace"
        );
        assert_eq!(pace.pages(), 2);
        let mut pages_only = Pace::new(start, None, Some(2.0));
        pages_only.page(1_000_000);
        assert_eq!(
            pages_only.next_page_at(),
            Some(start + Duration::from_millis(500))
        );
        assert!(Pace::new(start, None, Some(0.0)).ready(start));
        pace.unspread();
        assert_eq!(
            pace.next_page_at(),
            Some(start + Duration::from_secs(1)),
            "the keys' pace still holds"
        );
        pages_only.unspread();
        assert!(pages_only.ready(start), "nothing holds it back any more");
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
