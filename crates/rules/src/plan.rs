//! The pure steps of a check: what each key's read says (classify) and how the keys holding
//! zombies are split into eviction calls (plan). No I/O here, so the rules are unit-tested.

use std::collections::HashMap;

use crate::ahead;
use crate::read::{KeyRead, KeyStatus};
use crate::score::{Cutoff, ScoreUnit};
use crate::sizing::CALL_BYTES;
use crate::units::{self, Mismatch};

/// What a check learned about one key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyState {
    /// Not checked to the end (a refused transaction, a failure, shutdown): look again soon.
    Unknown,
    /// The key is gone, empty, or no longer a sorted set.
    Gone,
    /// In a cluster, the key's slot is served by another primary now.
    Moved,
    /// Members remain: `card` of them, the oldest scoring `oldest` (in Unix seconds, when it
    /// was read).
    Live { card: u64, oldest: Option<f64> },
}

impl KeyState {
    /// The one reading of a key's read status: the read when the key is a sorted set here,
    /// else what became of the key.
    pub fn of(status: KeyStatus) -> Result<KeyRead, KeyState> {
        match status {
            KeyStatus::Set(read) => Ok(read),
            KeyStatus::NotZset => Err(KeyState::Gone),
            KeyStatus::Moved => Err(KeyState::Moved),
        }
    }

    /// What is left of a key of `card` members whose lowest score is `oldest` (score unit).
    pub fn live(card: u64, oldest: Option<f64>, unit: ScoreUnit) -> KeyState {
        match card {
            0 => KeyState::Gone,
            card => KeyState::Live {
                card,
                oldest: oldest.map(|s| unit.to_seconds(s)),
            },
        }
    }
}

/// What classify needs to know of the check.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'c> {
    pub cutoff: &'c Cutoff,
    pub unit: ScoreUnit,
    /// The instant judged at (Redis's clock, Unix seconds), for the score-unit check.
    pub judge_at: f64,
    /// `judge_at` may be far behind Redis's clock: a score ahead of it proves nothing.
    pub held_back: bool,
    /// The read was a tracking probe (each key's lowest score), not a count of zombies.
    pub tracks: bool,
    /// Every stale tracked key is counted: the storm guard must know how many would go.
    pub count_all: bool,
    /// Most zombies one transaction may remove.
    pub budget: u64,
}

/// Every key of a batch sorted by its read.
#[derive(Debug, Default, PartialEq)]
pub struct Triage {
    /// Keys the read decided: gone, moved, or tracked with nothing stale.
    pub settled: Vec<(usize, KeyState)>,
    /// Untracked keys without zombies, whose size is still to be read.
    pub clean: Vec<usize>,
    /// Keys holding zombies, with how many (at most).
    pub stale: Vec<(usize, u64)>,
    /// Tracked keys holding zombies, not yet counted.
    pub uncounted: Vec<usize>,
    /// What the probe saw of each stale tracked key, should nothing be evicted from it.
    pub seen: HashMap<usize, KeyRead>,
    /// The newest heartbeat read (score unit), or `-inf`.
    pub newest: f64,
    /// Keys whose scores lie ahead of Redis's clock, and the largest lead (seconds).
    pub ahead: (u64, f64),
    /// Members of the keys read: at least this many are the sweep's, even before their checks
    /// are counted in its population (a backlog found by the first walk).
    pub members: u64,
    /// The first score read that says the sweep's `score_unit` is wrong, if any.
    pub mismatch: Option<Mismatch>,
    /// The keys whose scores say so.
    pub mismatched: Vec<usize>,
}

/// Sorts every key by its read.
pub fn classify(reads: Vec<KeyStatus>, rules: &Rules<'_>) -> Triage {
    let mut t = Triage {
        newest: f64::NEG_INFINITY,
        ..Triage::default()
    };
    for (i, status) in reads.into_iter().enumerate() {
        let read = match KeyState::of(status) {
            Ok(read) => read,
            Err(state) => {
                t.settled.push((i, state));
                continue;
            }
        };
        t.newest = t.newest.max(read.newest.unwrap_or(f64::NEG_INFINITY));
        t.members += read.card;
        if !rules.held_back
            && let Some(lead) = ahead::lead(
                read.oldest.map(|s| rules.unit.to_seconds(s)),
                read.newest.map(|s| rules.unit.to_seconds(s)),
                rules.judge_at,
            )
        {
            t.ahead = (t.ahead.0 + 1, t.ahead.1.max(lead));
        }
        if let Some(m) = mismatch(&read, rules) {
            t.mismatch.get_or_insert(m);
            t.mismatched.push(i);
        }
        if !rules.tracks {
            match read.stale {
                0 => t.clean.push(i),
                n => t.stale.push((i, n)),
            }
            continue;
        }
        match read.oldest {
            Some(score) if rules.cutoff.is_stale(score) => {
                t.seen.insert(i, read);
                // Only its lowest score is known: a key too big for a transaction, or one the
                // storm guard must weigh, is counted first.
                if rules.count_all || read.card > rules.budget {
                    t.uncounted.push(i);
                } else {
                    t.stale.push((i, read.card));
                }
            }
            oldest => t
                .settled
                .push((i, KeyState::live(read.card, oldest, rules.unit))),
        }
    }
    t
}

/// What the scores a read brought say of the sweep's `score_unit`.
pub fn mismatch(read: &KeyRead, rules: &Rules<'_>) -> Option<Mismatch> {
    let ahead_of = (!rules.held_back).then_some(rules.judge_at);
    let check = |s| units::mismatch(s, rules.unit, rules.judge_at, ahead_of);
    read.oldest
        .and_then(check)
        .or_else(|| read.newest.and_then(check))
}

/// The most keys one transaction or stream call holds. Each key costs Redis its roster's read
/// besides its zombies, so a call of many keys of one zombie each runs long although its
/// budget of members is far from spent: this keeps a call's time what it was when a batch
/// held 100 keys, whatever `evict.batch_keys` says.
pub const CALL_KEYS: usize = 100;

/// The keys holding zombies, split into eviction calls.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Transactions, each of at most a budget of zombies, [`CALL_KEYS`] keys and about
    /// [`CALL_BYTES`].
    pub transactions: Vec<Vec<usize>>,
    /// Keys with more zombies than one call may remove: the bounded script's.
    pub big: Vec<usize>,
}

impl Plan {
    /// The first key anything will be removed from.
    pub fn first_key(&self) -> Option<usize> {
        self.transactions
            .first()
            .and_then(|g| g.first())
            .or(self.big.first())
            .copied()
    }
}

/// Splits `stale` (key, zombies) into transactions of at most `budget` zombies, [`CALL_KEYS`]
/// keys and about [`CALL_BYTES`] of reply each (`key_bytes`: what a key with that many zombies brings back);
/// a key with more zombies than `budget` goes to the script.
pub fn plan(stale: &[(usize, u64)], budget: u64, key_bytes: impl Fn(u64) -> usize) -> Plan {
    let mut plan = Plan::default();
    let (mut in_last, mut bytes_last) = (0, 0);
    for &(i, zombies) in stale {
        if zombies > budget {
            plan.big.push(i);
            continue;
        }
        let bytes = key_bytes(zombies);
        if plan.transactions.is_empty()
            || in_last + zombies > budget
            || bytes_last + bytes > CALL_BYTES
            || plan
                .transactions
                .last()
                .is_some_and(|t| t.len() >= CALL_KEYS)
        {
            plan.transactions.push(Vec::new());
            (in_last, bytes_last) = (0, 0);
        }
        in_last += zombies;
        bytes_last += bytes;
        plan.transactions.last_mut().expect("pushed above").push(i);
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: f64 = 1_764_460_000.0;

    fn set(stale: u64, card: u64, oldest: Option<f64>) -> KeyStatus {
        KeyStatus::Set(KeyRead {
            stale,
            card,
            oldest,
            ..KeyRead::default()
        })
    }

    fn rules(cutoff: &Cutoff, tracks: bool, count_all: bool) -> Rules<'_> {
        Rules {
            cutoff,
            unit: ScoreUnit::Seconds,
            judge_at: NOW,
            held_back: false,
            tracks,
            count_all,
            budget: 10,
        }
    }

    #[test]
    fn a_key_that_is_no_sorted_set_or_moved_is_settled_by_its_read() {
        let cutoff = Cutoff::at(NOW - 30.0);
        let reads = vec![KeyStatus::NotZset, KeyStatus::Moved, set(0, 0, None)];
        let t = classify(reads, &rules(&cutoff, true, false));
        assert_eq!(
            t.settled,
            vec![
                (0, KeyState::Gone),
                (1, KeyState::Moved),
                (2, KeyState::Gone)
            ],
            "an empty set is gone too"
        );
    }

    #[test]
    fn a_full_pass_sorts_keys_by_their_zombie_count() {
        let cutoff = Cutoff::at(NOW - 30.0);
        let t = classify(
            vec![set(0, 0, None), set(3, 0, None)],
            &rules(&cutoff, false, false),
        );
        assert_eq!((t.clean, t.stale), (vec![0], vec![(1, 3)]));
        assert!(t.settled.is_empty() && t.mismatch.is_none());
    }

    #[test]
    fn a_tracked_key_is_stale_by_its_lowest_score_and_counted_only_when_needed() {
        let cutoff = Cutoff::at(NOW - 30.0);
        let old = Some(NOW - 40.0);
        let reads = || vec![set(0, 5, Some(NOW - 5.0)), set(0, 4, old), set(0, 50, old)];
        let t = classify(reads(), &rules(&cutoff, true, false));
        assert_eq!(
            t.settled,
            vec![(
                0,
                KeyState::Live {
                    card: 5,
                    oldest: Some(NOW - 5.0)
                }
            )]
        );
        // At most its size in zombies fits a transaction; a bigger key is counted first.
        assert_eq!((t.stale, t.uncounted), (vec![(1, 4)], vec![2]));
        assert_eq!((t.members, t.seen.len()), (59, 2));
        let guarded = classify(reads(), &rules(&cutoff, true, true));
        assert_eq!(guarded.uncounted, vec![1, 2], "the guard weighs them all");
    }

    #[test]
    fn a_score_exactly_at_the_cutoff_stays() {
        let cutoff = Cutoff::at(NOW - 30.0);
        let t = classify(
            vec![set(0, 1, Some(NOW - 30.0))],
            &rules(&cutoff, true, false),
        );
        assert!(t.stale.is_empty() && t.uncounted.is_empty());
    }

    #[test]
    fn milliseconds_convert_to_seconds_for_the_index() {
        let state = KeyState::live(2, Some(NOW * 1000.0), ScoreUnit::Milliseconds);
        assert_eq!(
            state,
            KeyState::Live {
                card: 2,
                oldest: Some(NOW)
            }
        );
    }

    #[test]
    fn transactions_hold_at_most_a_budget_and_big_keys_go_to_the_script() {
        let stale = [(0, 4), (1, 5), (2, 11), (3, 2), (4, 10)];
        let p = plan(&stale, 10, |_| 1);
        assert_eq!(p.transactions, vec![vec![0, 1], vec![3], vec![4]]);
        assert_eq!(p.big, vec![2]);
        assert_eq!(p.first_key(), Some(0));
    }

    #[test]
    fn transactions_are_cut_by_reply_bytes_too() {
        let p = plan(&[(0, 1), (1, 1), (2, 1)], 100, |_| CALL_BYTES / 2);
        assert_eq!(p.transactions, vec![vec![0, 1], vec![2]]);
        let only_big = plan(&[(7, 50)], 10, |_| 1);
        assert_eq!(only_big.first_key(), Some(7), "the script's key first");
        assert_eq!(plan(&[], 10, |_| 1).first_key(), None);
    }

    #[test]
    fn transactions_are_cut_by_keys_too() {
        let stale: Vec<(usize, u64)> = (0..CALL_KEYS * 2 + 1).map(|i| (i, 1)).collect();
        let p = plan(&stale, 1_000, |_| 1);
        let sizes: Vec<usize> = p.transactions.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![CALL_KEYS, CALL_KEYS, 1]);
        assert_eq!(
            p.transactions.concat(),
            (0..CALL_KEYS * 2 + 1).collect::<Vec<_>>()
        );
    }

    #[test]
    fn scores_a_thousand_times_off_flag_their_keys() {
        let cutoff = Cutoff::at(NOW * 1000.0 - 30_000.0);
        let ms = Rules {
            unit: ScoreUnit::Milliseconds,
            ..rules(&cutoff, true, false)
        };
        // Apps writing seconds to a sweep in milliseconds: every heartbeat looks stale.
        let reads = vec![set(0, 3, Some(NOW * 1000.0)), set(0, 3, Some(NOW - 1.0))];
        let t = classify(reads, &ms);
        assert_eq!(t.mismatch, Some(Mismatch::Smaller));
        assert_eq!(t.mismatched, vec![1]);
        // And the other way round: no key is ever stale, the read says why.
        let cutoff = Cutoff::at(NOW - 30.0);
        let t = classify(
            vec![set(0, 3, Some(NOW * 1000.0))],
            &rules(&cutoff, true, false),
        );
        assert_eq!((t.mismatch, t.mismatched), (Some(Mismatch::Ahead), vec![0]));
    }

    #[test]
    fn a_pinned_member_is_no_mismatch() {
        let cutoff = Cutoff::at(NOW - 30.0);
        let read = KeyStatus::Set(KeyRead {
            card: 2,
            oldest: Some(NOW - 1.0),
            newest: Some(f64::INFINITY),
            ..KeyRead::default()
        });
        let t = classify(vec![read], &rules(&cutoff, true, false));
        assert_eq!(t.mismatch, None);
    }
}
