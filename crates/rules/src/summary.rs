//! The log's account of each sweep's work at info level: a summary line a minute after start
//! (so an operator sees at once that the daemon works), then every five minutes; and a line as
//! soon as a sweep evicts a large burst. What every check and walk did is at debug level.
//!
//! Decisions only: the engine passes the time and the sweeps' totals in, and logs what it is
//! told.

use std::collections::BTreeMap;
use std::time::Duration;

use std::time::Instant;

use crate::report::Totals;

/// When the first summary comes, after start.
pub const FIRST_SUMMARY: Duration = Duration::from_secs(60);
/// How often summaries come after the first.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(300);
/// A large burst: this many evictions by one sweep within [`BURST_WINDOW`]. Far more than the
/// zombies a healthy app leaves behind in a minute, about what a crashed app server or a
/// network split leaves (the storm guard's concern, which holds bigger fractions).
pub const BURST_EVICTIONS: u64 = 1_000;
/// The window a burst is counted in; one line per sweep and window at most.
pub const BURST_WINDOW: Duration = Duration::from_secs(60);

/// The summaries' schedule, and the sweeps' totals at the last one and in the burst window.
pub struct Summary {
    next: Instant,
    last: Instant,
    summarized: BTreeMap<String, Totals>,
    windows: BTreeMap<String, Window>,
}

/// One sweep's evictions in the current burst window.
struct Window {
    start: Instant,
    evicted_at_start: u64,
    said: bool,
}

impl Summary {
    /// The summaries of a daemon that starts at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            next: now + FIRST_SUMMARY,
            last: now,
            summarized: BTreeMap::new(),
            windows: BTreeMap::new(),
        }
    }

    /// If a summary is due at `now`, the time it covers (and the next one is scheduled).
    pub fn due(&mut self, now: Instant) -> Option<Duration> {
        if now < self.next {
            return None;
        }
        let covered = now - self.last;
        self.last = now;
        self.next = now + SUMMARY_EVERY;
        Some(covered)
    }

    /// What sweep `name` did since its last summary (everything, at the first), given its
    /// totals now.
    pub fn since_last(&mut self, name: &str, now: Totals) -> Totals {
        let was = self
            .summarized
            .insert(name.to_owned(), now)
            .unwrap_or_default();
        Totals {
            evicted: now.evicted.saturating_sub(was.evicted),
            published: now.published.saturating_sub(was.published),
            lost: now.lost.saturating_sub(was.lost),
            unconfirmed: now.unconfirmed.saturating_sub(was.unconfirmed),
            checks: now.checks.saturating_sub(was.checks),
            walks: now.walks.saturating_sub(was.walks),
            failed_walks: now.failed_walks.saturating_sub(was.failed_walks),
            ..now
        }
    }

    /// If sweep `name`, `evicted` members so far, just reached a large burst: how many it
    /// evicted and over how long. Said once per window.
    pub fn burst(&mut self, name: &str, evicted: u64, now: Instant) -> Option<(u64, Duration)> {
        let window = self.windows.entry(name.to_owned()).or_insert(Window {
            start: now,
            evicted_at_start: evicted,
            said: false,
        });
        if now - window.start >= BURST_WINDOW || evicted < window.evicted_at_start {
            *window = Window {
                start: now,
                evicted_at_start: evicted,
                said: false,
            };
        }
        let burst = evicted - window.evicted_at_start;
        if window.said || burst < BURST_EVICTIONS {
            return None;
        }
        window.said = true;
        Some((burst, now - window.start))
    }

    /// Forgets sweeps that no longer run.
    pub fn retain(&mut self, running: impl Fn(&str) -> bool) {
        self.summarized.retain(|name, _| running(name));
        self.windows.retain(|name, _| running(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(evicted: u64) -> Totals {
        Totals {
            evicted,
            ..Totals::default()
        }
    }

    #[test]
    fn the_first_summary_comes_a_minute_after_start_then_every_five() {
        let start = crate::testing::now();
        let mut s = Summary::new(start);
        assert_eq!(s.due(start + Duration::from_secs(59)), None);
        assert_eq!(s.due(start + FIRST_SUMMARY), Some(FIRST_SUMMARY));
        assert_eq!(s.due(start + Duration::from_secs(61)), None);
        let second = start + FIRST_SUMMARY + SUMMARY_EVERY;
        assert_eq!(s.due(second - Duration::from_secs(1)), None);
        assert_eq!(s.due(second), Some(SUMMARY_EVERY));
    }

    #[test]
    fn a_summary_counts_what_happened_since_the_last() {
        let mut s = Summary::new(crate::testing::now());
        assert_eq!(s.since_last("typing", totals(5)).evicted, 5);
        assert_eq!(s.since_last("typing", totals(12)).evicted, 7);
        assert_eq!(s.since_last("online", totals(3)).evicted, 3);
    }

    #[test]
    fn a_large_burst_is_said_once_per_window() {
        let start = crate::testing::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut s = Summary::new(start);
        assert_eq!(s.burst("typing", 100, at(0)), None);
        assert_eq!(s.burst("typing", 1_099, at(10)), None);
        assert_eq!(
            s.burst("typing", 1_100, at(20)),
            Some((1_000, Duration::from_secs(20)))
        );
        // Once per window, however many more.
        assert_eq!(s.burst("typing", 5_000, at(30)), None);
        // A new window counts from its own start: 999 more is no burst.
        assert_eq!(s.burst("typing", 5_000, at(60)), None);
        assert_eq!(s.burst("typing", 5_999, at(70)), None);
        // The steady trickle of a healthy app never is.
        let mut s = Summary::new(start);
        for second in 0..600 {
            assert_eq!(s.burst("online", second * 15, at(second)), None);
        }
    }
}
