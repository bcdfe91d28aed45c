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

/// How fast one walk may ask for its pages: no faster than `scan.max_keys_per_second` allows
/// since the walk started, and, for a walk nothing waits for, at its [`Spread`]'s pace.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    started: Instant,
    /// Keys per second; `None`: unpaced.
    rate: Option<f64>,
    spread: Option<Spread>,
    scanned: u64,
    pages: u64,
    by_keys: Option<Instant>,
    by_pages: Option<Instant>,
}

/// A pace of pages for a walk that nothing waits for (a periodic reconciliation): one page per
/// `every`, until `until`, past which it goes at full speed. A walk held back (no room in
/// flight, slow replies, a pause of the daemon) makes up at most a second of pages at
/// once: its backlog never comes as one burst on a Redis that is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spread {
    pub every: Duration,
    pub until: Instant,
}

/// How far behind its pace a spread walk may be, and catch up at full speed.
const MAX_BEHIND: Duration = Duration::from_secs(1);

impl Pace {
    pub fn new(started: Instant, keys_per_second: Option<f64>, spread: Option<Spread>) -> Self {
        Self {
            started,
            rate: keys_per_second.filter(|r| *r > 0.0 && r.is_finite()),
            spread: spread.filter(|s| !s.every.is_zero()),
            scanned: 0,
            pages: 0,
            by_keys: None,
            by_pages: None,
        }
    }

    /// A page of `keys` came at `at`: the next one waits until the walk is back on pace.
    pub fn page(&mut self, keys: usize, at: Instant) {
        self.scanned += keys as u64;
        self.pages += 1;
        if let Some(rate) = self.rate {
            let due = self.scanned as f64 / rate;
            self.by_keys = Some(self.started + Duration::from_secs_f64(due));
        }
        if let Some(spread) = self.spread {
            if at >= spread.until {
                // Past its time (the keyspace grew since the walk before): full speed.
                self.unspread();
            } else {
                let floor = at.checked_sub(MAX_BEHIND).unwrap_or(at);
                let from = self.by_pages.unwrap_or(self.started).max(floor);
                self.by_pages = Some((from + spread.every).min(spread.until));
            }
        }
    }

    /// The spread no longer holds (a catch-up walk, or a sweep's scheduled walk, waits for
    /// this one); `scan.max_keys_per_second` still does.
    pub fn unspread(&mut self) {
        self.spread = None;
        self.by_pages = None;
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
        self.by_keys.max(self.by_pages)
    }

    /// Whether a page may be asked for at `at`.
    pub fn ready(&self, at: Instant) -> bool {
        self.next_page_at().is_none_or(|t| t <= at)
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
        pace.page(50, start);
        assert_eq!(
            pace.next_page_at(),
            Some(start + Duration::from_millis(500))
        );
        assert!(!pace.ready(start + Duration::from_millis(499)));
        pace.page(50, start + Duration::from_millis(500));
        assert_eq!(pace.next_page_at(), Some(start + Duration::from_secs(1)));
        assert_eq!(pace.scanned(), 100);
        let mut unpaced = Pace::new(start, None, None);
        unpaced.page(1_000_000, start);
        assert!(unpaced.ready(start));
    }

    #[test]
    fn a_spread_walk_follows_the_slower_pace_within_its_time() {
        let start = crate::testing::now();
        let ms = Duration::from_millis;
        let spread = Spread {
            every: ms(250),
            until: start + Duration::from_secs(10),
        };
        // 4 pages a second, and 1,000 keys a second.
        let mut pace = Pace::new(start, Some(1_000.0), Some(spread));
        pace.page(10, start);
        assert_eq!(
            pace.next_page_at(),
            Some(start + ms(250)),
            "a page of few keys waits for the pages' pace"
        );
        pace.page(990, start + ms(250));
        assert_eq!(
            pace.next_page_at(),
            Some(start + Duration::from_secs(1)),
            "a page of many keys waits for the keys' pace"
        );
        assert_eq!(pace.pages(), 2);
        pace.unspread();
        assert_eq!(
            pace.next_page_at(),
            Some(start + Duration::from_secs(1)),
            "the keys' pace still holds"
        );
        let mut pages_only = Pace::new(start, None, Some(spread));
        pages_only.page(1_000_000, start);
        assert_eq!(pages_only.next_page_at(), Some(start + ms(250)));
        pages_only.unspread();
        assert!(pages_only.ready(start), "nothing holds it back any more");
    }

    #[test]
    fn a_spread_walk_held_back_makes_up_a_second_at_most_and_ends_in_its_time() {
        let start = crate::testing::now();
        let ms = Duration::from_millis;
        let spread = Spread {
            every: ms(100),
            until: start + Duration::from_secs(10),
        };
        let mut pace = Pace::new(start, None, Some(spread));
        pace.page(1, start);
        // Held back for 5 s: ten pages at once, not fifty.
        let late = start + Duration::from_secs(5);
        pace.page(1, late);
        assert_eq!(pace.next_page_at(), Some(late - ms(900)));
        let mut at = late;
        let mut at_once = 0;
        while pace.ready(at) {
            pace.page(1, at);
            at_once += 1;
        }
        assert_eq!(at_once, 10, "a second of pages");
        assert_eq!(pace.next_page_at(), Some(late + ms(100)));
        // Its time is up: the rest at full speed.
        at = start + Duration::from_secs(10);
        pace.page(1, at);
        assert!(pace.ready(at));
        assert_eq!(pace.next_page_at(), None);
        assert!(
            Pace::new(
                start,
                None,
                Some(Spread {
                    every: Duration::ZERO,
                    until: at
                })
            )
            .ready(start)
        );
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
