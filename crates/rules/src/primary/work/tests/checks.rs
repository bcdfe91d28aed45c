//! Checks of keys at their deadlines: when they go, how many at once, and what their results
//! change.

use super::*;
use crate::primary::testing::{failure, refusal};

#[test]
fn nothing_is_checked_before_redis_answers() {
    let t0 = crate::testing::now();
    let (mut w, _) = work(t0, Shape::default(), &["online"]);
    assert_eq!(turn(&mut w, t0), ["scan presence:*:online", "probe"]);
    assert_eq!(w.in_flight(), 1, "the probe is out");
    w.on_notice(t0, &written("a"));
    assert!(turn(&mut w, window(t0)).is_empty(), "no clock, no verdict");
    w.on_probe(at(window(t0)), evidence(REDIS_T0 + 0.05));
    assert_eq!(w.in_flight(), 0);
    assert_eq!(turn(&mut w, window(t0)), ["check online a"]);
}

#[test]
fn a_batch_waits_for_its_window() {
    let t0 = crate::testing::now();
    let (mut w, _) = walked(t0, Shape::default(), &["a", "b"]);
    assert!(turn(&mut w, t0 + ms(49)).is_empty());
    assert_eq!(
        w.next_wake(t0 + ms(49)),
        window(t0),
        "the loop wakes when the window ends"
    );
    assert_eq!(turn(&mut w, window(t0)), ["check online a,b"]);
}

#[test]
fn a_batch_holds_at_most_batch_keys() {
    let t0 = crate::testing::now();
    let shape = Shape {
        batch: 2,
        ..Shape::default()
    };
    let (mut w, _) = walked(t0, shape, &["a", "b", "c", "d", "e"]);
    assert_eq!(
        turn(&mut w, window(t0)),
        ["check online a,b", "check online c,d", "check online e"]
    );
    assert_eq!(w.in_flight(), 3);
}

#[test]
fn requests_in_flight_stay_within_the_pipeline_depth() {
    let t0 = crate::testing::now();
    let shape = Shape::batching(1, 2);
    let (mut w, _) = walked(t0, shape, &["a", "b", "c"]);
    let t1 = window(t0);
    let tasks = turn_tasks(&mut w, t1);
    assert_eq!(lines(&tasks), ["check online a", "check online b"]);
    assert!(turn(&mut w, t1).is_empty(), "no room");
    assert!(w.next_wake(t1) > t1, "a due key without room wakes nobody");
    let (epoch, tickets, _) = checks(tasks).remove(0);
    w.on_checked(
        at(t1),
        t1,
        epoch,
        tickets,
        live(1, REDIS_T0 + 0.05, REDIS_T0),
    );
    assert_eq!(turn(&mut w, t1), ["check online c"]);
}

/// Every check among `tasks` comes back at `t`, its key live.
fn land_live(w: &mut W, t: Instant, tasks: Vec<Task<TestIo>>) {
    for (epoch, tickets, _) in checks(tasks) {
        w.on_checked(at(t), t, epoch, tickets, live(1, REDIS_T0 + 0.05, REDIS_T0));
    }
}

#[test]
fn the_window_grows_while_due_keys_wait_and_shrinks_when_none_do() {
    let t0 = crate::testing::now();
    let shape = Shape {
        max_depth: 3,
        ..Shape::batching(1, 1)
    };
    let (mut w, _) = walked(t0, shape, &["a", "b", "c", "d"]);
    let t1 = window(t0);
    let tasks = turn_tasks(&mut w, t1);
    assert_eq!(lines(&tasks), ["check online a"]);
    assert_eq!(w.window(), 1);
    land_live(&mut w, t1, tasks);
    assert_eq!(w.window(), 2, "keys waited for room: one more in flight");
    let tasks = turn_tasks(&mut w, t1);
    assert_eq!(lines(&tasks), ["check online b", "check online c"]);
    land_live(&mut w, t1, tasks);
    assert_eq!(
        w.window(),
        3,
        "d waited through both landings: up to max_depth"
    );
    let tasks = turn_tasks(&mut w, t1);
    assert_eq!(lines(&tasks), ["check online d"]);
    land_live(&mut w, t1, tasks);
    assert_eq!(w.window(), 2, "nothing waits: one less");
}

#[test]
fn sweeps_take_turns_for_the_room_in_flight() {
    let t0 = crate::testing::now();
    let shape = Shape::batching(1, 3);
    let (mut w, _) = work(t0, shape, &["online", "typing"]);
    assert_eq!(turn(&mut w, t0), ["scan presence:*", "probe"]);
    w.on_probe(at(t0), evidence(REDIS_T0));
    let keys = ["a", "b"].iter().flat_map(|id| {
        ["online", "typing"].map(|sweep| format!("presence:{id}:{sweep}").into_bytes())
    });
    let page = Page {
        keys: keys.collect(),
        time: REDIS_T0,
    };
    w.on_page(at(t0), Some(Ok(page)));
    w.on_page(at(t0), None);
    assert_eq!(turn(&mut w, t0), ["scan over"]);
    assert_eq!(
        turn(&mut w, window(t0)),
        ["check online a", "check typing a", "check online b"]
    );
}

#[test]
fn a_checked_key_comes_back_at_its_deadline() {
    let t0 = crate::testing::now();
    let (mut w, log) = walked(t0, Shape::default(), &["a"]);
    let t1 = window(t0);
    let (epoch, tickets, opts) = checks(turn_tasks(&mut w, t1)).remove(0);
    assert_eq!(opts.judge_at, REDIS_T0 + 0.05, "judged on Redis's clock");
    w.on_checked(
        at(t1),
        t1,
        epoch,
        tickets,
        live(1, REDIS_T0 + 0.05, REDIS_T0),
    );
    assert_eq!(log.said.take(), ["checks 1 false"]);
    // The oldest member heartbeat at the walk's instant: due a ttl (45 s) later.
    let due = t0 + secs(45) + ms(50);
    let t2 = due - ms(100);
    assert!(steady(&mut w, t2).is_empty());
    let wake = w.next_wake(t2);
    assert!(
        wake < due + ms(1) && due < wake + ms(1),
        "sooner than the next probe"
    );
    // A millisecond for the rounding of Redis's clock to milliseconds.
    assert_eq!(turn(&mut w, due + ms(1)), ["check online a"]);
}

#[test]
fn a_notice_tracks_a_new_key_and_checks_it_after_the_window() {
    let t0 = crate::testing::now();
    let (mut w, _) = walked(t0, Shape::default(), &[]);
    let t1 = t0 + ms(250);
    w.on_notice(t1, &written("new"));
    assert!(turn(&mut w, t1).is_empty());
    assert_eq!(turn(&mut w, t1 + ms(50)), ["check online new"]);
}

#[test]
fn a_check_reads_redis_clock_when_no_reply_did_for_a_second() {
    let t0 = crate::testing::now();
    let (mut w, _) = walked(t0, Shape::default(), &["a"]);
    let opts = checks(turn_tasks(&mut w, window(t0))).remove(0).2;
    assert!(!reads_time(&opts), "the probe read it a moment ago");
    let t1 = t0 + secs(2);
    w.on_notice(t1, &written("b"));
    let opts = checks(turn_tasks(&mut w, t1 + ms(50))).remove(0).2;
    assert!(reads_time(&opts));
}

#[test]
fn a_failed_check_holds_every_verdict_until_the_primary_and_a_probe_answer() {
    let t0 = crate::testing::now();
    let shape = Shape::batching(1, 1);
    let (mut w, _) = walked(t0, shape, &["a", "b"]);
    let t1 = window(t0);
    let (epoch, tickets, _) = checks(turn_tasks(&mut w, t1)).remove(0);
    w.on_checked(at(t1), t1, epoch, tickets, failed(1, failure()));
    assert_eq!(
        turn(&mut w, t1),
        ["suspect", "refresh true"],
        "b is due, but nothing is judged while Redis is in doubt"
    );
    w.on_refreshed(at(t1 + ms(5)), Refreshed::Same);
    assert_eq!(turn(&mut w, t1 + ms(5)), ["probe"]);
    w.on_probe(at(t1 + ms(10)), evidence(REDIS_T0 + 0.06));
    assert_eq!(turn(&mut w, t1 + ms(10)), ["check online b"]);
}

#[test]
fn a_failed_check_retries_its_keys_after_a_second() {
    let t0 = crate::testing::now();
    let (mut w, _) = walked(t0, Shape::default(), &["a"]);
    let t1 = window(t0);
    let (epoch, tickets, _) = checks(turn_tasks(&mut w, t1)).remove(0);
    let mut failed = failed(1, failure());
    failed.time = Some(REDIS_T0 + 0.05);
    w.on_checked(at(t1), t1, epoch, tickets, failed);
    turn(&mut w, t1);
    w.on_refreshed(at(t1), Refreshed::Same);
    turn(&mut w, t1);
    w.on_probe(at(t1), evidence(REDIS_T0 + 0.05));
    assert_eq!(
        steady(&mut w, t1 + ms(1000)),
        ["scan presence:*:online"],
        "a catch-up walk; a waits for its window"
    );
    assert_eq!(steady(&mut w, t1 + ms(1051)), ["check online a"]);
}

#[test]
fn a_refused_check_asks_for_the_permissions_to_be_proven() {
    let t0 = crate::testing::now();
    let (mut w, _) = walked(t0, Shape::default(), &["a"]);
    let t1 = window(t0);
    let (epoch, tickets, _) = checks(turn_tasks(&mut w, t1)).remove(0);
    w.on_checked(at(t1), t1, epoch, tickets, failed(1, refusal()));
    assert_eq!(turn(&mut w, t1), ["suspect", "refresh true"]);
    w.on_refreshed(at(t1), Refreshed::Same);
    assert_eq!(steady(&mut w, t1), Vec::<String>::new());
    let early = steady(&mut w, t1 + secs(4));
    assert!(!early.contains(&"prove 1".to_owned()), "not at once");
    assert_eq!(steady(&mut w, t1 + secs(5)), ["prove 1"]);
}

#[test]
fn a_check_of_a_sweep_replaced_meanwhile_changes_nothing() {
    let t0 = crate::testing::now();
    let (mut w, old) = walked(t0, Shape::default(), &["a"]);
    let t1 = window(t0);
    let (epoch, tickets, _) = checks(turn_tasks(&mut w, t1)).remove(0);
    let (new, _) = job("online");
    w.on_jobs(t1, vec![new]);
    assert_eq!(old.said.take(), ["forget"]);
    w.on_checked(
        at(t1),
        t1,
        epoch,
        tickets,
        live(1, REDIS_T0 + 0.05, REDIS_T0),
    );
    assert_eq!(w.in_flight(), 0);
    assert!(old.said.take().is_empty(), "reported nowhere");
    assert_eq!(
        turn(&mut w, t1),
        ["scan presence:*:online"],
        "the new sweep's walk finds its keys"
    );
}

#[test]
fn stopping_sends_nothing_new_and_takes_back_what_was_out() {
    let t0 = crate::testing::now();
    let shape = Shape {
        batch: 1,
        ..Shape::default()
    };
    let (mut w, log) = walked(t0, shape, &["a", "b"]);
    let t1 = window(t0);
    let tasks = turn_tasks(&mut w, t1);
    let (epoch, tickets, _) = checks(tasks).remove(0);
    w.stop();
    w.on_notice(t1, &written("c"));
    assert!(
        turn(&mut w, t1 + secs(30)).is_empty(),
        "no check, probe or walk"
    );
    w.on_checked(
        at(t1),
        t1,
        epoch,
        tickets,
        live(1, REDIS_T0 + 0.05, REDIS_T0),
    );
    assert_eq!(log.said.take(), ["checks 1 false"]);
    assert_eq!(w.in_flight(), 1);
}

#[test]
fn a_backward_step_of_redis_clock_rechecks_the_latest_keys() {
    let t0 = crate::testing::now();
    let (mut w, _) = walked(t0, Shape::default(), &["a"]);
    let t1 = window(t0);
    let (epoch, tickets, _) = checks(turn_tasks(&mut w, t1)).remove(0);
    w.on_checked(
        at(t1),
        t1,
        epoch,
        tickets,
        live(1, REDIS_T0 + 0.05, REDIS_T0),
    );
    let t2 = t1 + ms(200);
    w.on_notice(t2, &written("b"));
    let (epoch, tickets, _) = checks(turn_tasks(&mut w, t2 + ms(50))).remove(0);
    // The reply is 30 s behind what Redis's clock read a moment ago.
    w.on_checked(
        at(t2 + ms(51)),
        t2 + ms(50),
        epoch,
        tickets,
        live(1, REDIS_T0 - 20.0, REDIS_T0 - 20.0),
    );
    assert!(
        turn(&mut w, t2 + ms(51)).is_empty(),
        "a is taken out of turn"
    );
    let tasks = turn(&mut w, t2 + ms(101));
    assert!(tasks.iter().any(|t| t.contains('a')), "{tasks:?}");
}
