//! How big a sweep's calls may be, from the size of the ids it meets.
//!
//! A call's reply holds its zombies and, per key, a roster: with ids of a few bytes the member
//! budget alone bounds it, but with 16 KiB ids 500 zombies and a 100-member roster are 10 MB
//! that Redis builds and the sweeper buffers, parses and copies. So the sweep remembers how long
//! its ids run and sizes calls to about [`CALL_BYTES`], and reads no more of a roster than an
//! event of `events.max_bytes` can carry.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::event::ROSTER_LIMIT;

/// About the most bytes of members one eviction call brings back.
pub const CALL_BYTES: usize = 4 << 20;

/// What a member costs in a reply besides its bytes: RESP framing, a score, the copy's header.
const OVERHEAD: usize = 48;

/// What is assumed before any id was seen: short ids, the common case.
const FIRST_GUESS: usize = 32;

/// A sweep's view of its ids' length, learnt from what its calls return.
#[derive(Debug)]
pub struct Sizing {
    /// The mean length, rising at once and falling slowly over recent calls: sizes rosters.
    mean: AtomicUsize,
    /// The longest recently seen, decaying by an eighth per call once longer ones stop
    /// coming: bounds calls, so that one odd long id does not make them huge.
    longest: AtomicUsize,
    /// The longest event published.
    max_event: usize,
    /// Whether any call has shown ids yet.
    seen: AtomicBool,
}

impl Sizing {
    pub fn new(max_event: usize) -> Self {
        Self {
            mean: AtomicUsize::new(FIRST_GUESS),
            longest: AtomicUsize::new(FIRST_GUESS),
            max_event,
            seen: AtomicBool::new(false),
        }
    }

    /// Learns from the ids one call returned: `count` of them, `bytes` in all, the longest
    /// `longest` bytes long.
    pub fn observe(&self, count: usize, bytes: usize, longest: usize) {
        if count == 0 {
            return;
        }
        self.seen.store(true, Ordering::Relaxed);
        let mean = bytes / count;
        // Races between checks lose an observation at worst: this is an estimate.
        // Up at once, so that long ids bound the very next call; down slowly.
        let old = self.mean.load(Ordering::Relaxed);
        self.mean
            .store(mean.max((old * 3 + mean).div_ceil(4)), Ordering::Relaxed);
        let old = self.longest.load(Ordering::Relaxed);
        self.longest
            .store(longest.max(old - old / 8), Ordering::Relaxed);
    }

    /// Whether any ids were seen yet: until then the sizes are a guess.
    pub fn seen(&self) -> bool {
        self.seen.load(Ordering::Relaxed)
    }

    /// Most members one call may remove: `most`, or fewer when ids are long.
    pub fn budget(&self, most: usize) -> usize {
        self.budget_within(CALL_BYTES, most)
    }

    /// Most members one call that brings back about `bytes` at most may remove: `most`, or
    /// fewer when ids are long.
    pub fn budget_within(&self, bytes: usize, most: usize) -> usize {
        (bytes / self.member_bytes()).clamp(1, most.max(1))
    }

    /// How many remaining members to read for a roster: as many as an event can carry, up to
    /// [`ROSTER_LIMIT`].
    pub fn roster(&self) -> usize {
        let mean = self.mean.load(Ordering::Relaxed).max(1) + 3;
        (self.max_event / mean).clamp(1, ROSTER_LIMIT)
    }

    /// About how many bytes evicting `zombies` from one key brings back, its roster included.
    pub fn key_bytes(&self, zombies: u64) -> usize {
        (zombies as usize + self.roster()) * self.member_bytes()
    }

    fn member_bytes(&self) -> usize {
        self.longest.load(Ordering::Relaxed) + OVERHEAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_ids_keep_the_configured_limits() {
        let s = Sizing::new(65536);
        s.observe(500, 500 * 12, 20);
        assert_eq!(s.budget(500), 500);
        assert_eq!(s.roster(), ROSTER_LIMIT);
    }

    #[test]
    fn long_ids_shrink_calls_and_rosters_and_recover() {
        let s = Sizing::new(65536);
        s.observe(600, 600 * 16384, 16384);
        assert_eq!(s.budget(500), CALL_BYTES / (16384 + OVERHEAD));
        assert!(
            s.key_bytes(1) <= 2 * 65536 + 16384 * 2,
            "{}",
            s.key_bytes(1)
        );
        // The roster fits an event about.
        assert!(s.roster() * 16384 <= 65536 + 16384, "{}", s.roster());
        for _ in 0..200 {
            s.observe(100, 100 * 10, 10);
        }
        assert_eq!(s.budget(500), 500);
        assert_eq!(s.roster(), ROSTER_LIMIT);
    }
}
