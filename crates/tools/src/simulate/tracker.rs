//! The simulator's bookkeeping for one sweep: which members it still writes, which it abandoned
//! and when they were last written, and a verdict on every event the sweeper publishes.
//!
//! Pure bookkeeping, no I/O: every instant is a Unix time in seconds on Redis's clock (scores, and
//! the instants events arrived, as Redis's clock read then), so the verdicts never depend on the
//! simulator's own clock.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

/// What the simulator knows about one member.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// Still written: the sweeper must leave it alone.
    Active,
    /// No longer written; `last_seen` is its last score, in `key`. The sweeper owes one event.
    /// `new_key`: it was the first member of a key it left at once.
    Abandoned {
        last_seen: f64,
        new_key: bool,
        key: Arc<[u8]>,
    },
    /// Its event arrived.
    Evicted,
}

/// An abandoned member whose event did not come within the grace.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Overdue {
    /// The user number (the member is `u<user>`).
    pub(crate) user: u64,
    /// Its key.
    pub(crate) key: Arc<[u8]>,
    /// Its last score, in seconds.
    pub(crate) last_seen: f64,
}

/// What became of an overdue member, as Redis and the run's history tell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fate {
    /// Still in Redis past the grace, or gone without an event while one was being listened
    /// for: the sweeper missed it.
    Missed,
    /// Gone with its key's data in a Redis restart or failover after its last heartbeat.
    LostInRestart,
    /// Gone while the event subscription was down: evicted, its event unseen (pub/sub does not
    /// keep messages for a subscriber that is away).
    Unobserved,
    /// Redis could not be asked at the end.
    Unverified,
}

/// The verdict on one event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Judgement {
    /// An abandoned member was announced, `lag` seconds after its window closed.
    Evicted {
        /// `arrival - (last_seen + ttl)`.
        lag: f64,
    },
    /// A member that is still written was announced.
    False,
    /// A member was announced again.
    Duplicate,
    /// A member the simulator never wrote.
    Unknown,
}

/// The members of one sweep, by user number.
#[derive(Debug)]
pub(crate) struct Tracker {
    ttl: f64,
    tokens: HashMap<u64, Token>,
    lags: Vec<f64>,
    new_key_lags: Vec<f64>,
    abandoned: u64,
    false_evictions: u64,
    duplicates: u64,
}

/// What became of the members of one sweep.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Tally {
    /// Members abandoned (users vanished, typing bursts ended).
    pub(crate) abandoned: u64,
    /// Abandoned members announced.
    pub(crate) evictions: u64,
    /// Eviction lag (event arrival minus last score plus ttl); `None` without evictions.
    pub(crate) lag: Option<Lag>,
    /// Events for members still written.
    pub(crate) false_evictions: u64,
    /// Events for members already announced.
    pub(crate) duplicates: u64,
    /// Abandoned members never announced although their last score is older than the grace.
    pub(crate) missed: u64,
    /// Of the evictions, those of members who left a key right after creating it.
    pub(crate) new_key_evictions: u64,
    /// Their lag; `None` without such evictions.
    pub(crate) new_key_lag: Option<Lag>,
    /// Abandoned members not announced yet and still within the grace: no verdict.
    pub(crate) pending: u64,
    /// Overdue members whose keys' data a Redis restart or failover lost.
    pub(crate) lost_in_restart: u64,
    /// Overdue members evicted while the event subscription was down.
    pub(crate) unobserved: u64,
    /// Overdue members Redis could not be asked about at the end.
    pub(crate) unverified: u64,
}

/// Lag percentiles, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Lag {
    /// Median.
    pub(crate) p50: f64,
    /// 99th percentile.
    pub(crate) p99: f64,
    /// Largest.
    pub(crate) max: f64,
}

impl Tracker {
    /// A tracker for a sweep whose window is `ttl` seconds.
    pub(crate) fn new(ttl: f64) -> Self {
        Self {
            ttl,
            tokens: HashMap::new(),
            lags: Vec::new(),
            new_key_lags: Vec::new(),
            abandoned: 0,
            false_evictions: 0,
            duplicates: 0,
        }
    }

    /// `user` is (again) being written.
    pub(crate) fn activate(&mut self, user: u64) {
        self.tokens.insert(user, Token::Active);
    }

    /// `user` is no longer written to `key`; `last_seen` is its last score, in seconds.
    pub(crate) fn abandon(&mut self, user: u64, last_seen: f64, key: Arc<[u8]>) {
        self.abandon_as(user, last_seen, key, false);
    }

    /// [`Tracker::abandon`], for the first member of a key who leaves right after creating it.
    pub(crate) fn abandon_new_key(&mut self, user: u64, last_seen: f64, key: Arc<[u8]>) {
        self.abandon_as(user, last_seen, key, true);
    }

    fn abandon_as(&mut self, user: u64, last_seen: f64, key: Arc<[u8]>, new_key: bool) {
        self.tokens.insert(
            user,
            Token::Abandoned {
                last_seen,
                new_key,
                key,
            },
        );
        self.abandoned += 1;
    }

    /// Whether `user` may be written again without muddling verdicts: never written, or its
    /// last abandonment was announced.
    pub(crate) fn is_idle(&self, user: u64) -> bool {
        matches!(self.tokens.get(&user), None | Some(Token::Evicted))
    }

    /// Judges an event announcing `user` that arrived at `arrival`.
    pub(crate) fn observe(&mut self, user: u64, arrival: f64) -> Judgement {
        let verdict = match self.tokens.get(&user) {
            None => Judgement::Unknown,
            Some(Token::Active) => Judgement::False,
            Some(Token::Evicted) => Judgement::Duplicate,
            Some(Token::Abandoned { last_seen, .. }) => Judgement::Evicted {
                lag: arrival - (*last_seen + self.ttl),
            },
        };
        match verdict {
            Judgement::Evicted { lag } => {
                self.lags.push(lag);
                if let Some(Token::Abandoned { new_key: true, .. }) = self.tokens.get(&user) {
                    self.new_key_lags.push(lag);
                }
                self.tokens.insert(user, Token::Evicted);
            }
            Judgement::False => self.false_evictions += 1,
            Judgement::Duplicate => self.duplicates += 1,
            Judgement::Unknown => {}
        }
        verdict
    }

    /// The abandoned members not announced although their last score is more than `grace`
    /// seconds before `end`.
    pub(crate) fn overdue(&self, end: f64, grace: f64) -> Vec<Overdue> {
        self.tokens
            .iter()
            .filter_map(|(&user, token)| match token {
                Token::Abandoned { last_seen, key, .. } if last_seen + grace < end => {
                    Some(Overdue {
                        user,
                        key: key.clone(),
                        last_seen: *last_seen,
                    })
                }
                _ => None,
            })
            .collect()
    }

    /// The outcome at `end`: an abandoned member not announced is overdue once its last score is
    /// more than `grace` seconds before `end` (and `fate` says what became of it), else pending.
    pub(crate) fn tally(&self, end: f64, grace: f64, fate: impl Fn(&Overdue) -> Fate) -> Tally {
        let (mut missed, mut pending, mut lost, mut unobserved, mut unverified) = (0, 0, 0, 0, 0);
        for (&user, token) in &self.tokens {
            let Token::Abandoned { last_seen, key, .. } = token else {
                continue;
            };
            if last_seen + grace >= end {
                pending += 1;
                continue;
            }
            let overdue = Overdue {
                user,
                key: key.clone(),
                last_seen: *last_seen,
            };
            match fate(&overdue) {
                Fate::Missed => missed += 1,
                Fate::LostInRestart => lost += 1,
                Fate::Unobserved => unobserved += 1,
                Fate::Unverified => unverified += 1,
            }
        }
        Tally {
            lost_in_restart: lost,
            unobserved,
            unverified,
            abandoned: self.abandoned,
            evictions: self.lags.len() as u64,
            lag: lag(&self.lags),
            false_evictions: self.false_evictions,
            duplicates: self.duplicates,
            missed,
            pending,
            new_key_evictions: self.new_key_lags.len() as u64,
            new_key_lag: lag(&self.new_key_lags),
        }
    }
}

/// Nearest-rank percentiles of `lags`.
fn lag(lags: &[f64]) -> Option<Lag> {
    if lags.is_empty() {
        return None;
    }
    let mut sorted = lags.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank =
        |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
    Some(Lag {
        p50: rank(0.50),
        p99: rank(0.99),
        max: sorted[sorted.len() - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let mut t = Tracker::new(2.0);
        t.activate(1);
        t.activate(2);
        t.abandon(2, 100.0, key());
        assert_eq!(t.observe(1, 103.0), Judgement::False);
        assert_eq!(t.observe(2, 102.5), Judgement::Evicted { lag: 0.5 });
        assert_eq!(t.observe(2, 102.6), Judgement::Duplicate);
        assert_eq!(t.observe(3, 102.6), Judgement::Unknown);
        assert!(t.is_idle(2) && t.is_idle(3) && !t.is_idle(1));
        let tally = t.tally(200.0, 3.0, |_| Fate::Missed);
        assert_eq!(tally.abandoned, 1);
        assert_eq!(tally.evictions, 1);
        assert_eq!(tally.false_evictions, 1);
        assert_eq!(tally.duplicates, 1);
        assert_eq!((tally.missed, tally.pending), (0, 0));
        assert_eq!((tally.new_key_evictions, tally.new_key_lag), (0, None));
    }

    #[test]
    fn members_who_leave_a_new_key_are_judged_apart_too() {
        let mut t = Tracker::new(2.0);
        t.abandon(1, 100.0, key());
        t.abandon_new_key(2, 100.0, key());
        t.observe(1, 103.0);
        t.observe(2, 102.25);
        let tally = t.tally(200.0, 3.0, |_| Fate::Missed);
        assert_eq!((tally.evictions, tally.new_key_evictions), (2, 1));
        assert_eq!(tally.new_key_lag.unwrap().max, 0.25);
    }

    #[test]
    fn overdue_only_after_the_grace_and_judged_by_their_fate() {
        let mut t = Tracker::new(2.0);
        t.abandon(1, 100.0, key());
        t.abandon(2, 104.0, key());
        let tally = t.tally(105.0, 3.0, |_| Fate::Missed);
        assert_eq!((tally.missed, tally.pending), (1, 1));
        assert_eq!(tally.lag, None);
        let overdue = t.overdue(105.0, 3.0);
        assert_eq!(overdue.len(), 1);
        assert_eq!((overdue[0].user, overdue[0].last_seen), (1, 100.0));
        for (fate, counts) in [
            (Fate::LostInRestart, (0, 1, 0, 0)),
            (Fate::Unobserved, (0, 0, 1, 0)),
            (Fate::Unverified, (0, 0, 0, 1)),
        ] {
            let t = t.tally(105.0, 3.0, |_| fate);
            assert_eq!(
                (t.missed, t.lost_in_restart, t.unobserved, t.unverified),
                counts
            );
        }
    }

    fn key() -> Arc<[u8]> {
        Arc::from(&b"presence:c:online"[..])
    }

    #[test]
    fn nearest_rank_percentiles() {
        let lags: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let l = lag(&lags).unwrap();
        assert_eq!((l.p50, l.p99, l.max), (50.0, 99.0, 100.0));
        let l = lag(&[0.25]).unwrap();
        assert_eq!((l.p50, l.p99, l.max), (0.25, 0.25, 0.25));
    }
}
