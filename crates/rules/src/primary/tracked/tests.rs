//! A sweep's part of one primary's loop, with no Redis: checks, pages, notices and reads come
//! back as values, and the index and the reports show what they changed.

use std::sync::Arc;

use super::*;
use crate::check::{Checked, Counts};
use crate::index::{Capacity, Ticket};
use crate::keyspace::{Change, Notice};
use crate::plan::KeyState;
use crate::primary::sweeps::Sweeps;
use crate::primary::testing::{NoBeat, SweepLog, TestError, TestIo, job, node};
use crate::read::{KeyRead, KeyStatus, Reads};
use crate::trouble::Trouble;

/// Redis's clock, in milliseconds, as the tests' checks read it.
const NOW: u64 = 1_764_460_000_000;
const NOW_S: f64 = 1_764_460_000.0;
const TTL_MS: u64 = 45_000;

fn tracked(capacity: usize) -> (Tracked<TestIo>, Arc<SweepLog>) {
    let (job, log) = job("online");
    (
        Tracked::new(job, 1, 0, Capacity::new(capacity), Arc::new(NoBeat)),
        log,
    )
}

fn key(id: &str) -> Vec<u8> {
    format!("presence:{id}:online").into_bytes()
}

fn checked(states: Vec<KeyState>) -> Checked<TestError> {
    Checked {
        counts: Counts::default(),
        states,
        time: Some(NOW_S),
        expires_in: Vec::new(),
        hold_until: None,
        error: None,
    }
}

fn live(oldest_s: f64) -> KeyState {
    KeyState::Live {
        card: 2,
        oldest: Some(oldest_s),
    }
}

/// Takes every due key (by `by`): their tickets, and the conversation ids of their keys.
fn take(t: &mut Tracked<TestIo>, by: u64) -> (Vec<Ticket>, Vec<Vec<u8>>) {
    let due = t.take_due(by, 100);
    (due.tickets, due.keys.iter().map(<[u8]>::to_vec).collect())
}

/// A sweep whose first walk ended, having found `ids`.
fn synced(ids: &[&str]) -> (Tracked<TestIo>, Arc<SweepLog>) {
    let (mut t, log) = tracked(100);
    t.walk_started();
    for id in ids {
        t.found(
            &key(id),
            id.as_bytes(),
            NOW_S,
            WalkKind::Reconcile,
            false,
            NOW,
        );
    }
    t.scan_done();
    end(&mut t, WalkEnding::Done);
    log.said.take();
    (t, log)
}

fn end(t: &mut Tracked<TestIo>, how: WalkEnding) -> Ended {
    let end = WalkEnd {
        how,
        duration: Duration::from_millis(5),
        all_noticed: false,
        notifications: false,
        max_keys: 100,
        unix_now: NOW_S,
    };
    // What the walk left queued goes first, as the loop's reads would take it.
    while t.walk_work(100, true, None).is_some() {}
    t.walk_ended(&node(), end)
}

#[test]
fn a_key_found_by_a_walk_is_tracked_and_due_at_once() {
    let (t, log) = synced(&["c1", "c2"]);
    assert_eq!(t.index.len(), 2);
    assert_eq!(
        t.index.next_due(),
        Some(NOW),
        "read at once for its deadline"
    );
    assert_eq!(log.figures.lock().unwrap().keys, 2);
}

#[test]
fn the_first_walk_is_said_once_and_makes_the_sweep_synced() {
    let (mut t, log) = tracked(100);
    t.walk_started();
    t.found(&key("c1"), b"c1", NOW_S, WalkKind::Reconcile, false, NOW);
    t.scan_done();
    let ended = end(&mut t, WalkEnding::Done);
    assert_eq!(ended.first, Some((1, 1)));
    assert_eq!(log.said.take(), ["walk ok 1"]);
    t.walk_started();
    let ended = end(&mut t, WalkEnding::Done);
    assert_eq!(ended, Ended::default(), "said once");
}

#[test]
fn a_failed_or_interrupted_walk_syncs_nothing() {
    let (mut t, log) = tracked(100);
    t.walk_started();
    t.found(&key("c1"), b"c1", NOW_S, WalkKind::Reconcile, false, NOW);
    assert_eq!(end(&mut t, WalkEnding::Failed), Ended::default());
    assert_eq!(end(&mut t, WalkEnding::Cancelled), Ended::default());
    assert_eq!(log.said.take(), ["walk failed 1", "walk interrupted 1"]);
    assert_eq!(
        t.tick(crate::testing::now(), true, None),
        Tick::Walk,
        "not synced: ticks still walk"
    );
}

#[test]
fn with_notifications_a_synced_sweep_skips_its_ticks() {
    let (mut t, log) = synced(&["c1"]);
    let now = crate::testing::now();
    assert_eq!(t.tick(now, true, None), Tick::Skip);
    assert_eq!(t.tick(now, false, None), Tick::Walk);
    assert_eq!(log.said.take(), ["tick false"]);
}

#[test]
fn a_tick_during_a_walk_is_late_only_if_the_walk_began_before_the_last_tick() {
    let (mut t, log) = tracked(100);
    let t0 = crate::testing::now();
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(t.tick(t0, false, None), Tick::Walk);
    assert_eq!(
        t.tick(t1, false, Some(t0 + Duration::from_millis(10))),
        Tick::Running { overrun: false },
        "another sweep's walk since this one's tick serves it"
    );
    let t2 = t1 + Duration::from_secs(1);
    assert_eq!(
        t.tick(t2, false, Some(t0 + Duration::from_millis(10))),
        Tick::Running { overrun: true }
    );
    assert_eq!(log.said.take(), ["tick false", "tick false", "tick true"]);
}

#[test]
fn a_checked_key_is_looked_at_again_at_its_deadline() {
    let (mut t, log) = synced(&["c1"]);
    let (tickets, keys) = take(&mut t, NOW);
    assert_eq!(keys, [key("c1")]);
    t.checked(
        &node(),
        tickets,
        &checked(vec![live(NOW_S - 5.0)]),
        NOW,
        None,
        false,
    );
    assert_eq!(t.index.next_due(), Some(NOW - 5_000 + TTL_MS));
    assert_eq!(t.index.members(), 2);
    assert_eq!(log.figures.lock().unwrap().members, 2);
    assert_eq!(log.said.take(), ["checks 1 false"]);
}

#[test]
fn a_key_found_gone_is_forgotten_and_one_not_read_is_tried_again() {
    let (mut t, _) = synced(&["c1", "c2"]);
    let (tickets, _) = take(&mut t, NOW);
    let states = vec![KeyState::Gone, KeyState::Unknown];
    t.checked(&node(), tickets, &checked(states), NOW, None, false);
    assert_eq!(t.index.len(), 1);
    assert_eq!(t.index.next_due(), Some(NOW + 1_000), "a retry after RETRY");
}

#[test]
fn members_a_credit_spares_come_due_when_it_ends() {
    let (mut t, _) = synced(&["c1"]);
    let (tickets, _) = take(&mut t, NOW);
    let overdue = live(NOW_S - 60.0);
    let credit_until = Some(NOW_S + 30.0);
    t.checked(
        &node(),
        tickets,
        &checked(vec![overdue]),
        NOW,
        credit_until,
        false,
    );
    assert_eq!(t.index.next_due(), Some(NOW + 30_000 + 3));
}

#[test]
fn a_failed_check_is_counted_as_such() {
    let (mut t, log) = synced(&["c1"]);
    let (tickets, _) = take(&mut t, NOW);
    let mut c = checked(vec![KeyState::Unknown]);
    c.error = Some(TestError(Trouble::Other));
    t.checked(&node(), tickets, &c, NOW, None, false);
    assert_eq!(log.said.take(), ["checks 1 true"]);
}

#[test]
fn a_noticed_write_tracks_a_new_key_due_a_ttl_from_now() {
    let (mut t, _) = synced(&[]);
    assert!(!t.notice(&node(), b"c9", Change::Written, Some(NOW_S)));
    assert_eq!(t.index.next_due(), Some(NOW), "a new key is read at once");
    let (tickets, _) = take(&mut t, NOW);
    t.checked(
        &node(),
        tickets,
        &checked(vec![live(NOW_S)]),
        NOW,
        None,
        false,
    );
    assert!(!t.notice(&node(), b"c9", Change::Written, Some(NOW_S)));
    assert_eq!(t.index.next_due(), Some(NOW + TTL_MS));
    t.notice(&node(), b"c9", Change::Deleted, Some(NOW_S));
    assert_eq!(t.index.len(), 0);
}

#[test]
fn a_full_index_is_said_once_and_leaves_new_keys_to_scheduled_walks() {
    let (mut t, log) = tracked(1);
    assert!(!t.notice(&node(), b"c1", Change::Written, Some(NOW_S)));
    assert!(
        t.notice(&node(), b"c2", Change::Written, Some(NOW_S)),
        "full"
    );
    assert!(
        !t.notice(&node(), b"c3", Change::Written, Some(NOW_S)),
        "said once"
    );
    assert_eq!(log.figures.lock().unwrap().untracked, 1);
}

#[test]
fn a_walk_checks_directly_what_the_index_cannot_take_but_only_with_a_verdict() {
    let (mut t, _) = tracked(1);
    t.walk_started();
    t.found(&key("c1"), b"c1", NOW_S, WalkKind::Discover, false, NOW);
    t.found(
        &key("c2"),
        b"c2",
        NOW_S - 1.0,
        WalkKind::Discover,
        false,
        NOW,
    );
    assert_eq!(t.queued(), 1);
    assert!(
        t.walk_work(10, true, None).is_none(),
        "nothing judged in doubt"
    );
    let verdict = Verdict {
        judge_at: NOW_S,
        held_back: false,
        spare_until: None,
    };
    match t.walk_work(10, true, Some(verdict)) {
        Some(WalkWork::Direct {
            keys, page_time, ..
        }) => {
            assert_eq!(keys, [key("c2")]);
            assert_eq!(page_time, NOW_S - 1.0);
        }
        _ => panic!("a direct check"),
    }
    t.direct_checked(&node(), 7);
    let ended = end(&mut t, WalkEnding::Done);
    assert_eq!(ended.untracked, Some(1), "the index filled up");
}

#[test]
fn a_reconciliation_reads_keys_written_since_their_checks_then_what_it_did_not_see() {
    let (mut t, _) = synced(&["c1", "c2"]);
    let (tickets, _) = take(&mut t, NOW);
    t.checked(
        &node(),
        tickets,
        &checked(vec![live(NOW_S); 2]),
        NOW,
        None,
        false,
    );
    t.notice(&node(), b"c1", Change::Written, Some(NOW_S));
    t.walk_started();
    t.found(&key("c1"), b"c1", NOW_S, WalkKind::Reconcile, false, NOW);
    assert!(
        t.walk_work(10, false, None).is_none(),
        "a batch waits to fill"
    );
    t.scan_done();
    match t.walk_work(10, true, None) {
        Some(WalkWork::Verify { ids }) => assert_eq!(ids, [b"c1".to_vec()]),
        _ => panic!("a verify read"),
    }
    match t.walk_work(10, true, None) {
        Some(WalkWork::Unseen { ids }) => assert_eq!(ids, [b"c2".to_vec()]),
        _ => panic!("an unseen read"),
    }
    assert!(t.walk_work(10, true, None).is_none());
}

#[test]
fn reads_after_a_walk_forget_what_is_gone_and_move_deadlines_earlier() {
    let (mut t, _) = synced(&["c1", "c2", "c3"]);
    let (tickets, _) = take(&mut t, NOW);
    t.checked(
        &node(),
        tickets,
        &checked(vec![live(NOW_S); 3]),
        NOW,
        None,
        false,
    );
    t.walk_started();
    let set = |oldest: Option<f64>, card| {
        KeyStatus::Set(KeyRead {
            card,
            oldest,
            ..KeyRead::default()
        })
    };
    let reads = Reads {
        keys: vec![set(None, 0), set(Some(NOW_S), 2)],
        time: Some(NOW_S),
        pttl_refused: 0,
    };
    let gone = t.unseen_read(&node(), &[b"c1".to_vec(), b"c2".to_vec()], reads);
    assert_eq!(gone, 1, "c1 is gone; c2 is there");
    let reads = Reads {
        keys: vec![set(Some(NOW_S - 40.0), 5), set(None, 0)],
        time: Some(NOW_S),
        pttl_refused: 0,
    };
    t.verified(&node(), &[b"c2".to_vec(), b"c3".to_vec()], reads);
    assert_eq!(t.index.len(), 1, "c3 read gone");
    assert_eq!(t.index.next_due(), Some(NOW - 40_000 + TTL_MS));
    // Written since its check (members joined, or the key was flushed and written anew): the
    // gauge follows the read, not the check a ttl ago.
    assert_eq!(t.index.members(), 5, "c2's roster as read");
}

#[test]
fn a_walk_counts_keys_it_tracks_as_missed_notifications_only_once_synced() {
    let (mut t, log) = tracked(100);
    t.walk_started();
    t.found(&key("c1"), b"c1", NOW_S, WalkKind::Reconcile, true, NOW);
    assert!(log.said.take().is_empty(), "the first walk misses nothing");
    end(&mut t, WalkEnding::Done);
    log.said.take();
    t.walk_started();
    t.found(&key("c2"), b"c2", NOW_S, WalkKind::Reconcile, true, NOW);
    assert_eq!(log.said.take(), ["missed 1"]);
}

#[test]
fn the_sweeps_follow_reloads_and_keep_what_did_not_change() {
    let (online, _) = job("online");
    let (typing, typing_log) = job("typing");
    let mut s = Sweeps::<TestIo>::new(node(), 0, Capacity::new(100), Arc::new(NoBeat));
    assert!(s.set(vec![online.clone(), typing.clone()]));
    let epochs = s.epochs();
    assert!(
        !s.set(vec![typing.clone(), online.clone()]),
        "the same sweeps"
    );
    assert_eq!(s.epochs().len(), 2);
    assert!(s.set(vec![online.clone()]));
    assert_eq!(typing_log.said.take(), ["forget"]);
    assert_eq!(s.epochs(), [epochs[0]], "online kept its index");
    let (online_again, _) = job("online");
    assert!(s.set(vec![online_again]), "changed settings: a new sweep");
    assert_ne!(s.epochs(), [epochs[0]]);
}

#[test]
fn pages_and_notices_go_to_the_sweeps_whose_keys_they_are() {
    let (online, _) = job("online");
    let (typing, _) = job("typing");
    let mut s = Sweeps::<TestIo>::new(node(), 0, Capacity::new(100), Arc::new(NoBeat));
    s.set(vec![online, typing]);
    let page = crate::scan::Page {
        keys: vec![key("c1"), b"presence:c2:typing".to_vec(), b"other".to_vec()],
        time: NOW_S,
    };
    s.walk_started();
    s.route(&page, &s.epochs(), WalkKind::Reconcile, false, NOW);
    let sizes: Vec<usize> = s.iter().map(|t| t.index.len()).collect();
    assert_eq!(sizes, [1, 1]);
    let notice = Notice {
        pattern: s.channels()[1].clone().into_bytes(),
        key: b"presence:c3:typing".to_vec(),
        change: Change::Written,
    };
    assert_eq!(s.notice(&notice, Some(NOW_S)), None);
    let sizes: Vec<usize> = s.iter().map(|t| t.index.len()).collect();
    assert_eq!(sizes, [1, 2]);
    assert_eq!(s.next_due(), Some(NOW));
}

/// Keys that one walk tracked, each heartbeated every `period_ms` on a phase of its own, checked
/// by the index for `seconds` with every check answered at once: the keys checked in each
/// second.
fn checks_per_second(keys: usize, period_ms: u64, seconds: u64, spread: bool) -> Vec<usize> {
    let (mut t, _) = tracked(keys);
    t.walk_started();
    for i in 0..keys {
        let id = format!("k{i}");
        t.found(
            &key(&id),
            id.as_bytes(),
            NOW_S,
            WalkKind::Discover,
            false,
            NOW,
        );
    }
    let phase = |i: usize| i as u64 * period_ms / keys as u64;
    // The latest heartbeat of key `i` at `now` (ms).
    let last_beat = |i: usize, now: u64| {
        let since = now - NOW + 10 * period_ms - phase(i);
        now - since % period_ms
    };
    let mut per_second = vec![0; seconds as usize];
    let mut now = NOW;
    while now < NOW + seconds * 1000 {
        while let Some(super::Due { tickets, keys, .. }) = t.due_batch(now, 100) {
            per_second[((now - NOW) / 1000) as usize] += keys.len();
            let states = keys
                .iter()
                .map(|k| {
                    let id = &k[b"presence:k".len()..k.len() - b":online".len()];
                    let i: usize = std::str::from_utf8(id).unwrap().parse().unwrap();
                    live(last_beat(i, now) as f64 / 1000.0)
                })
                .collect();
            let mut reply = checked(states);
            reply.time = Some(now as f64 / 1000.0);
            t.checked(&node(), tickets, &reply, now, None, spread);
        }
        now += 10;
    }
    per_second
}

/// The fewest and the most keys checked in any 5 s of `per_second[from..]`, and all of them.
fn spread_of(per_second: &[usize], from: usize) -> (usize, usize, usize) {
    let fives: Vec<usize> = per_second[from..]
        .chunks(5)
        .map(|c| c.iter().sum())
        .collect();
    let (least, most) = (fives.iter().min().unwrap(), fives.iter().max().unwrap());
    (*least, *most, fives.iter().sum())
}

/// The most keys checked in any 20 s of the 40 s cycle of keys heartbeated every 20 s with a
/// ttl of 45 s, over `per_second[from..]` folded onto one cycle.
fn busiest_half(per_second: &[usize], from: usize) -> usize {
    let mut cycle = [0; 40];
    for (s, n) in per_second[from..].iter().enumerate() {
        cycle[s % 40] += n;
    }
    (0..40)
        .map(|o| (0..20).map(|k| cycle[(o + k) % 40]).sum())
        .max()
        .unwrap_or(0)
}

#[test]
fn keys_a_walk_checked_together_are_spread_for_two_looks_each() {
    // 4,000 keys heartbeated every 20 s, ttl 45 s: each is checked every 40 s, 12,000 checks in
    // 120 s, 500 in each 5 s at an even rate. The second looks come over four cycles after the
    // first deadline: the window is past them.
    let together = checks_per_second(4000, 20_000, 400, false);
    let (least, most, total) = spread_of(&together, 280);
    assert_eq!(
        (least, most, total),
        (0, 1000, 12_000),
        "half the time idle, half at twice"
    );
    let spread = checks_per_second(4000, 20_000, 400, true);
    let (least, most, total) = spread_of(&spread, 280);
    assert!(
        total <= 12_000 * 102 / 100,
        "{total} checks in 120 s: none added after the looks"
    );
    assert!(
        most <= 650 && least >= 350,
        "{least} to {most} in 5 s, against 500 on average"
    );
    // Even over the cycle: one look alone left 54 to 56 % of the checks in its busier half
    // (the 5 s left over from two heartbeat periods keep the phase that no heartbeat keeps);
    // the second, within the key's cycle, 50.9 to 52.4 % in 13 runs (the hash is seeded per
    // process).
    let half = busiest_half(&spread, 280);
    assert!(
        half <= 12_000 * 535 / 1000,
        "{half} of 12,000 checks in 20 s of 40"
    );
    let looks: usize = spread[..280].iter().sum::<usize>() - together[..280].iter().sum::<usize>();
    assert!(looks <= 8000, "at most two looks more per key: {looks}");
    // The second looks come over four cycles: from 30 s on, the busiest 5 s held 704 to 756
    // checks in 13 runs, against 861 to 904 with every second look in one cycle.
    let (_, busiest, _) = spread_of(&spread[..280], 30);
    assert!(
        busiest <= 820,
        "{busiest} checks in 5 s while the looks come"
    );
}
