//! Walks, from start to end: their pages, the reads and checks they queue, and how they end.

use super::*;
use crate::primary::testing::failure;

/// The epoch of the sweep a walk task serves.
fn epoch_of(task: &Task<TestIo>) -> u64 {
    match task {
        Task::Check { epoch, .. }
        | Task::Direct { epoch, .. }
        | Task::Verify { epoch, .. }
        | Task::Unseen { epoch, .. } => *epoch,
        _ => panic!("not a sweep's task: {}", line(task)),
    }
}

/// A reconciliation of work whose first walk found `ids` and whose checks found each key's
/// oldest member at [`REDIS_T0`]: it starts at `t0` + [`RECONCILE`], which it returns.
fn reconciling(t0: Instant, shape: Shape, ids: &[&str]) -> (W, Arc<SweepLog>, Instant) {
    let (mut w, log) = walked(t0, shape, ids);
    let t1 = window(t0);
    for (epoch, tickets, _) in checks(turn_tasks(&mut w, t1)) {
        let n = tickets.len();
        // Heartbeats a moment ago: not due again before the reconciliation.
        let checked = live(n, REDIS_T0 + 0.05, REDIS_T0 + 30.0);
        w.on_checked(at(t1), t1, epoch, tickets, checked);
    }
    log.said.take();
    let t2 = t0 + RECONCILE;
    assert_eq!(steady(&mut w, t2), ["scan presence:*:online"]);
    (w, log, t2)
}

#[test]
fn a_walk_takes_pages_only_with_room_in_flight() {
    let t0 = crate::testing::now();
    let shape = Shape {
        depth: 1,
        ..Shape::default()
    };
    let (mut w, _) = work(t0, shape, &["online"]);
    assert!(!w.wants_page(t0), "no walk yet");
    assert_eq!(turn(&mut w, t0), ["scan presence:*:online", "probe"]);
    assert!(!w.wants_page(t0), "the probe fills the pipeline");
    w.on_probe(at(t0), evidence(REDIS_T0));
    assert!(w.wants_page(t0));
    w.on_page(at(t0), None);
    assert!(!w.wants_page(t0), "the scan is done");
}

#[test]
fn a_walk_ends_once_its_scan_is_done_and_nothing_it_queued_waits() {
    let t0 = crate::testing::now();
    let (mut w, log) = answered(t0, Shape::default());
    w.on_page(at(t0), Some(Ok(page(&["a", "b"], REDIS_T0))));
    assert!(turn(&mut w, t0).is_empty(), "more pages may come");
    w.on_page(at(t0 + ms(3)), None);
    assert_eq!(turn(&mut w, t0 + ms(3)), ["scan over"]);
    assert_eq!(log.said.take(), ["walk ok 2"]);
    assert!(!w.wants_page(t0 + ms(3)));
}

#[test]
fn a_paced_walk_wakes_the_loop_for_its_next_page() {
    let t0 = crate::testing::now();
    let shape = Shape {
        batch: 100,
        capacity: 0,
        keys_per_second: Some(10.0),
        ..Shape::default()
    };
    let (mut w, _) = answered(t0, shape);
    let ids: Vec<String> = (0..10).map(|n| n.to_string()).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    w.on_page(at(t0), Some(Ok(page(&ids, REDIS_T0))));
    let t1 = t0 + ms(600);
    assert!(steady(&mut w, t1).is_empty(), "a batch waits to fill");
    assert!(!w.wants_page(t1), "ten keys take a second");
    assert_eq!(w.next_wake(t1), t0 + secs(1));
    assert!(w.wants_page(t0 + secs(1)));
}

#[test]
fn keys_past_the_index_are_checked_directly_judged_no_later_than_their_page() {
    let t0 = crate::testing::now();
    let shape = Shape {
        capacity: 1,
        ..Shape::default()
    };
    let (mut w, _) = answered(t0, shape);
    let t1 = t0 + ms(100);
    w.on_page(at(t1), Some(Ok(page(&["a", "b", "c"], REDIS_T0))));
    assert!(turn(&mut w, t1).is_empty(), "a batch waits to fill");
    w.on_page(at(t1), None);
    let tasks = turn_tasks(&mut w, t1);
    assert_eq!(lines(&tasks), ["direct online b,c"]);
    let Some(Task::Direct { batch, .. }) = tasks.into_iter().next() else {
        unreachable!()
    };
    assert_eq!(batch.opts.judge_at, REDIS_T0, "as the page was read");
    assert!(matches!(batch.opts.purpose, Purpose::Walk { .. }));
}

#[test]
fn direct_checks_wait_for_a_verdict_and_hold_the_pages_back() {
    let t0 = crate::testing::now();
    let shape = Shape {
        batch: 2,
        depth: 2,
        capacity: 0,
        ..Shape::default()
    };
    let (mut w, _) = answered(t0, shape);
    let nothing = |_: Op<TestIo>, _: Vec<String>| -> Pending<TestIo> { unreachable!() };
    // The connection broke: nothing is judged while the primary is looked up again.
    let tasks = w.turn(at(t0), true, nothing);
    assert_eq!(lines(&tasks), ["refresh false"]);
    w.on_page(at(t0), Some(Ok(page(&["a", "b", "c", "d"], REDIS_T0))));
    assert!(turn(&mut w, t0).is_empty(), "no verdict, no eviction");
    assert!(!w.wants_page(t0), "batch x depth keys wait already");
    w.on_refreshed(at(t0), Refreshed::Same);
    assert_eq!(
        turn(&mut w, t0),
        ["probe"],
        "a probe shows Redis kept its data"
    );
    w.on_probe(at(t0), evidence(REDIS_T0));
    assert_eq!(turn(&mut w, t0), ["direct online a,b", "direct online c,d"]);
}

#[test]
fn a_reconciliation_reads_tracked_keys_in_batches() {
    let t0 = crate::testing::now();
    let shape = Shape {
        batch: 2,
        ..Shape::default()
    };
    let (mut w, _, t2) = reconciling(t0, shape, &["a", "b", "c"]);
    w.on_page(at(t2), Some(Ok(page(&["a", "b", "c"], REDIS_T0 + 60.0))));
    assert_eq!(turn(&mut w, t2), ["verify a,b"], "c waits for a batch");
    w.on_page(at(t2), None);
    assert_eq!(turn(&mut w, t2), ["verify c"]);
}

#[test]
fn a_score_written_in_the_past_moves_a_deadline_earlier() {
    let t0 = crate::testing::now();
    let (mut w, log, t2) = reconciling(t0, Shape::default(), &["a"]);
    w.on_page(at(t2), Some(Ok(page(&["a"], REDIS_T0 + 60.0))));
    w.on_page(at(t2), None);
    let task = turn_tasks(&mut w, t2).remove(0);
    assert_eq!(line(&task), "verify a");
    // Its app wrote a score a minute old while nobody listened: it is overdue.
    let old = reads(1, 2, Some(REDIS_T0 - 60.0));
    w.on_walked(
        at(t2),
        epoch_of(&task),
        Walked::Verified(vec![b"a".to_vec()], Ok(old)),
    );
    assert_eq!(
        turn(&mut w, t2),
        ["scan over", "check online a"],
        "long overdue: no window to wait for"
    );
    assert_eq!(log.said.take(), ["walk ok 1"]);
}

#[test]
fn keys_the_walk_did_not_find_are_read_and_forgotten_when_gone() {
    let t0 = crate::testing::now();
    let (mut w, log) = walked(t0, Shape::default(), &["a", "b"]);
    let t1 = t0 + ms(10);
    w.on_tick(t1, "online");
    assert_eq!(turn(&mut w, t1), ["scan presence:*:online"]);
    w.on_page(at(t1), Some(Ok(page(&["a"], REDIS_T0))));
    w.on_page(at(t1), None);
    let task = turn_tasks(&mut w, t1).remove(0);
    assert_eq!(line(&task), "unseen b");
    let gone = reads(1, 0, None);
    w.on_walked(
        at(t1),
        epoch_of(&task),
        Walked::Unseen(vec![b"b".to_vec()], Ok(gone)),
    );
    assert_eq!(turn(&mut w, t1), ["scan over"]);
    assert_eq!(log.said.take(), ["tick false", "walk ok 1"]);
    assert_eq!(turn(&mut w, window(t0)), ["check online a"]);
}

#[test]
fn a_walk_interrupted_by_a_lost_connection_ends_once_its_requests_are_back() {
    let t0 = crate::testing::now();
    let shape = Shape {
        batch: 1,
        ..Shape::default()
    };
    let (mut w, log, t2) = reconciling(t0, shape, &["a"]);
    w.on_page(at(t2), Some(Ok(page(&["a"], REDIS_T0 + 60.0))));
    let task = turn_tasks(&mut w, t2).remove(0);
    assert_eq!(line(&task), "verify a");
    w.on_page(at(t2), Some(Err(failure())));
    assert!(!w.wants_page(t2), "a failed walk reads no more pages");
    assert!(turn(&mut w, t2).is_empty(), "its read is still out");
    let read = reads(1, 2, Some(REDIS_T0));
    w.on_walked(
        at(t2),
        epoch_of(&task),
        Walked::Verified(vec![b"a".to_vec()], Ok(read)),
    );
    assert_eq!(log.said.take(), ["walk failed 1"]);
    assert_eq!(turn(&mut w, t2), ["scan over", "suspect", "refresh true"]);
}

#[test]
fn a_failed_read_fails_the_walk() {
    let t0 = crate::testing::now();
    let (mut w, log, t2) = reconciling(t0, Shape::default(), &["a"]);
    w.on_page(at(t2), Some(Ok(page(&["a"], REDIS_T0 + 60.0))));
    w.on_page(at(t2), None);
    let task = turn_tasks(&mut w, t2).remove(0);
    let ids = vec![b"a".to_vec()];
    w.on_walked(
        at(t2),
        epoch_of(&task),
        Walked::Verified(ids, Err(failure())),
    );
    assert_eq!(log.said.take(), ["walk failed 1"]);
    assert_eq!(turn(&mut w, t2), ["scan over", "suspect", "refresh true"]);
}

#[test]
fn a_walk_cut_short_by_shutdown_is_reported_interrupted() {
    let t0 = crate::testing::now();
    let (mut w, log) = answered(t0, Shape::default());
    w.on_page(at(t0), Some(Ok(page(&["a"], REDIS_T0))));
    w.stop();
    assert!(!w.wants_page(t0), "no page after shutdown");
    assert!(turn(&mut w, t0 + secs(1)).is_empty());
    w.stopped();
    assert_eq!(log.said.take(), ["walk interrupted 1"]);
}

#[test]
fn a_tick_walks_unless_a_walk_runs() {
    let t0 = crate::testing::now();
    let (mut w, log) = walked(t0, Shape::default(), &[]);
    let t1 = t0 + ms(200);
    w.on_tick(t1, "online");
    assert_eq!(turn(&mut w, t1), ["scan presence:*:online"]);
    w.on_tick(t1 + ms(100), "online");
    assert!(turn(&mut w, t1 + ms(100)).is_empty(), "the walk serves it");
    assert_eq!(log.said.take(), ["tick false", "tick false"]);
    w.on_tick(t1 + ms(100), "elsewhere");
    assert!(turn(&mut w, t1 + ms(100)).is_empty(), "no such sweep here");
}

#[test]
fn a_stop_takes_back_the_walks_requests_then_reports_it_cut_short() {
    let t0 = crate::testing::now();
    let shape = Shape {
        batch: 1,
        ..Shape::default()
    };
    let (mut w, log, t2) = reconciling(t0, shape, &["a"]);
    w.on_page(at(t2), Some(Ok(page(&["a"], REDIS_T0 + 60.0))));
    let task = turn_tasks(&mut w, t2).remove(0);
    w.stop();
    assert!(turn(&mut w, t2).is_empty());
    let read = reads(1, 2, Some(REDIS_T0));
    w.on_walked(
        at(t2),
        epoch_of(&task),
        Walked::Verified(vec![b"a".to_vec()], Ok(read)),
    );
    assert_eq!(w.in_flight(), 0);
    assert!(log.said.take().is_empty(), "its scan was not done");
    w.stopped();
    assert_eq!(log.said.take(), ["walk interrupted 1"]);
}

#[test]
fn a_walk_that_ends_while_stopping_counts_as_cut_short() {
    let t0 = crate::testing::now();
    let (mut w, log, t2) = reconciling(t0, Shape::default(), &["a"]);
    w.on_page(at(t2), Some(Ok(page(&["a"], REDIS_T0 + 60.0))));
    w.on_page(at(t2), None);
    let task = turn_tasks(&mut w, t2).remove(0);
    w.stop();
    let read = reads(1, 2, Some(REDIS_T0));
    w.on_walked(
        at(t2),
        epoch_of(&task),
        Walked::Verified(vec![b"a".to_vec()], Ok(read)),
    );
    assert_eq!(log.said.take(), ["walk interrupted 1"]);
    assert_eq!(turn(&mut w, t2), ["scan over"]);
    w.stopped();
    assert!(log.said.take().is_empty(), "told once");
}
