//! The coordinator's rules, on explicit instants and with no Redis: subscriptions are `u32`s,
//! and what it reports is recorded.

use super::*;
use crate::primary::canary::{Reading, WriteRefusal};
use crate::primary::notifications::Config;
use crate::primary::testing::{Said, TestError, TestIo, failure, node, refusal};

type C = Coordinator<TestIo>;

const HOUR: Duration = Duration::from_secs(3600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn setup(notifications_off: bool) -> Setup {
    Setup {
        node: node(),
        reconcile_interval: HOUR,
        notifications_off,
        notifications_expected: false,
        inherited_outage: None,
        takes_over: false,
    }
}

/// A coordinator started at `t0`, what it reports, and what it shares with the engine.
fn coordinator(t0: Instant, notifications_off: bool) -> (C, Said, Arc<Shared>) {
    let said = Said::default();
    let shared = Arc::new(Shared::default());
    let c = C::new(
        t0,
        setup(notifications_off),
        Box::new(said.clone()),
        shared.clone(),
    );
    (c, said, shared)
}

/// One sweep here, no walk in flight, nothing changed.
fn idle() -> Turn {
    Turn {
        sweeps: 1,
        ..Turn::default()
    }
}

/// Turns at `at`: the actions queued and the subscription operations started.
fn turn(c: &mut C, at: Instant, t: Turn) -> (Vec<String>, Vec<&'static str>) {
    let mut ops = Vec::new();
    c.turn(at, t, |op| {
        ops.push(match op {
            Op::Subscribe => "subscribe",
            Op::Ping(_) => "ping",
            Op::Recheck(_) => "recheck",
        });
        Box::pin(std::future::pending())
    });
    let actions = c
        .take_actions()
        .into_iter()
        .map(|a| match a {
            Action::Probe => "probe".to_owned(),
            Action::ProvePermissions => "prove".to_owned(),
            Action::Refresh(e) => format!("refresh {}", e.is_some()),
            Action::Walk(start) => format!("walk {:?}", start.kind).to_lowercase(),
            Action::Unnoticed => "unnoticed".to_owned(),
            Action::RecheckLatest => "recheck latest".to_owned(),
            Action::Suspect => "suspect".to_owned(),
        })
        .collect();
    (actions, ops)
}

fn evidence(time: f64, count: u64) -> Result<Evidence, TestError> {
    Ok(Evidence {
        time,
        canary: Reading::Count(count),
        run_id: Some("a".into()),
    })
}

/// A coordinator without notifications whose first probe Redis answered at 1000 s; the first
/// walk is under way.
fn answered(t0: Instant) -> (C, Said, Arc<Shared>) {
    let (mut c, said, shared) = coordinator(t0, true);
    assert_eq!(turn(&mut c, t0, idle()).0, ["walk reconcile", "probe"]);
    c.on_probe(t0, evidence(1000.0, 1));
    assert!(c.verdict(t0, 45.0).is_some());
    (c, said, shared)
}

fn walking() -> Turn {
    Turn {
        walking: true,
        ..idle()
    }
}

#[test]
fn nothing_is_judged_before_redis_answers() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = coordinator(t0, true);
    assert_eq!(c.verdict(t0, 45.0), None);
    assert_eq!(turn(&mut c, t0, idle()).0, ["walk reconcile", "probe"]);
    assert_eq!(
        c.verdict(t0, 45.0),
        None,
        "a probe in flight proves nothing"
    );
    c.on_probe(t0 + ms(2), evidence(1000.0, 1));
    let v = c.verdict(t0 + ms(2), 45.0).expect("judging");
    assert_eq!(v.judge_at, 1000.0);
    assert_eq!((v.held_back, v.spare_until), (false, None));
}

#[test]
fn the_first_walk_waits_for_the_subscription_being_made() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = coordinator(t0, false);
    assert_eq!(
        turn(&mut c, t0, idle()),
        (vec!["probe".into()], vec!["subscribe"])
    );
    c.on_subscription(t0 + ms(5), Outcome::Subscribed(Box::new(1), Config::On));
    assert!(c.in_use());
    assert_eq!(said.take(), ["notifications true"]);
    let (actions, ops) = turn(&mut c, t0 + ms(5), idle());
    assert_eq!(actions, ["unnoticed", "walk reconcile"]);
    assert!(ops.is_empty());
}

#[test]
fn a_failure_stops_every_verdict_until_the_primary_and_a_probe_answer() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = answered(t0);
    let t1 = t0 + secs(1);
    c.on_failure(t1, "a check failed", failure());
    assert_eq!(c.verdict(t1, 45.0), None, "in doubt");
    // The engine looks at the topology, and the primary is looked up first; nothing else
    // goes to it meanwhile.
    assert_eq!(turn(&mut c, t1, walking()).0, ["suspect", "refresh true"]);
    assert_eq!(turn(&mut c, t1 + ms(10), walking()).0, Vec::<String>::new());
    c.on_refreshed(t1 + ms(20), Refreshed::Same);
    assert_eq!(c.verdict(t1 + ms(20), 45.0), None, "still in doubt");
    assert_eq!(turn(&mut c, t1 + ms(20), walking()).0, ["probe"]);
    c.on_probe(t1 + ms(25), evidence(1001.0, 2));
    let v = c.verdict(t1 + ms(25), 45.0).expect("judging again");
    assert_eq!(
        v.spare_until, None,
        "a failure that Redis answered through is no outage"
    );
}

#[test]
fn a_failure_asks_for_a_catch_up_walk_after_the_retry_delay() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = answered(t0);
    let t1 = t0 + secs(1);
    c.on_failure(t1, "a walk failed", failure());
    let actions = turn(&mut c, t1, idle()).0;
    assert!(
        !actions.iter().any(|a| a.starts_with("walk")),
        "{actions:?}"
    );
    let actions = turn(&mut c, t1 + deadlines::RETRY, idle()).0;
    assert!(
        actions.contains(&"walk reconcile".to_owned()),
        "{actions:?}"
    );
}

#[test]
fn the_primary_is_looked_up_at_most_once_per_retry() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = answered(t0);
    c.on_failure(t0, "x", failure());
    assert_eq!(turn(&mut c, t0, walking()).0, ["suspect", "refresh true"]);
    c.on_refreshed(t0 + ms(1), Refreshed::Failed(failure()));
    assert_eq!(turn(&mut c, t0 + ms(2), walking()).0, ["probe"]);
    c.on_probe(t0 + ms(3), Err(failure()));
    let early = t0 + deadlines::RETRY - ms(1);
    let actions = turn(&mut c, early, walking()).0;
    assert!(
        !actions.iter().any(|a| a.starts_with("refresh")),
        "{actions:?}"
    );
    let wake = c.next_wake(early, secs(5), None, Some(None));
    assert!(
        wake <= t0 + deadlines::RETRY,
        "the loop wakes for the retry"
    );
    let actions = turn(&mut c, t0 + deadlines::RETRY, walking()).0;
    assert_eq!(actions.first().map(String::as_str), Some("refresh true"));
}

#[test]
fn a_broken_connection_is_looked_up_again_without_a_failure() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = answered(t0);
    let changed = Turn {
        node_changed: true,
        ..walking()
    };
    assert_eq!(turn(&mut c, t0, changed).0, ["refresh false"]);
    assert_eq!(
        c.verdict(t0, 45.0),
        None,
        "not while the primary is looked up"
    );
}

#[test]
fn a_followed_failover_ends_with_a_credit() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = answered(t0);
    c.on_failure(t0, "x", failure());
    turn(&mut c, t0, walking());
    c.on_refreshed(t0 + ms(100), Refreshed::Moved("10.0.0.2:6379".into()));
    assert_eq!(turn(&mut c, t0 + ms(100), walking()).0, ["probe"]);
    c.on_probe(t0 + ms(110), evidence(500.0, 1));
    let v = c.verdict(t0 + ms(110), 45.0).expect("judging");
    // From when the reply came: its TIME (500) ran at most the 10 ms round trip before.
    assert_eq!(
        v.spare_until,
        Some(500.0 + 0.01 + 45.0),
        "every member gets a full ttl"
    );
}

#[test]
fn a_followed_failover_subscribes_again_and_walks() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = coordinator(t0, false);
    turn(&mut c, t0, idle());
    c.on_subscription(t0, Outcome::Subscribed(Box::new(1), Config::On));
    c.on_probe(t0, evidence(1000.0, 1));
    turn(&mut c, t0, idle());
    said.take();
    c.on_failure(t0, "x", failure());
    turn(&mut c, t0, walking());
    c.on_refreshed(t0 + ms(10), Refreshed::Moved("b".into()));
    assert_eq!(said.take(), ["notifications false"]);
    assert!(!c.in_use());
    let (actions, ops) = turn(&mut c, t0 + ms(10), idle());
    assert_eq!(ops, ["subscribe"]);
    assert_eq!(
        actions,
        ["unnoticed", "probe"],
        "the walk waits for the subscription"
    );
}

#[test]
fn nothing_new_goes_out_while_stopping() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = coordinator(t0, true);
    c.on_failure(t0, "x", failure());
    let stopping = Turn {
        stopping: true,
        ..idle()
    };
    assert_eq!(
        turn(&mut c, t0 + secs(2), stopping).0,
        ["suspect"],
        "the engine still hears of the failure; nothing goes to Redis"
    );
}

#[test]
fn a_tick_walks_only_when_there_is_something_to_walk() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = answered(t0);
    c.start_walk(t0, WalkKind::Discover, false);
    assert!(c.take_actions().is_empty());
    c.start_walk(t0, WalkKind::Discover, true);
    assert!(matches!(
        c.take_actions()[..],
        [Action::Walk(Start {
            kind: WalkKind::Discover,
            ..
        })]
    ));
}

#[test]
fn a_refused_command_shows_on_readiness_until_proven_again() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = answered(t0);
    said.take();
    c.on_failure(t0, "a check failed", refusal());
    assert_eq!(said.take(), ["failure permission", "refused true"]);
    turn(&mut c, t0, walking());
    c.on_refreshed(t0, Refreshed::Same);
    turn(&mut c, t0, walking());
    c.on_probe(t0, evidence(1000.0, 2));
    let later = t0 + secs(5);
    let actions = turn(&mut c, later, walking()).0;
    assert!(actions.contains(&"prove".to_owned()), "{actions:?}");
    c.on_permitted(later, Err(refusal()));
    assert_eq!(said.take(), ["failure permission", "refused true"]);
    c.on_permitted(later + secs(5), Ok(()));
    assert_eq!(said.take(), ["refused false"]);
}

#[test]
fn refused_credentials_are_counted_but_are_no_refused_command() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = answered(t0);
    said.take();
    c.on_failure(t0, "x", TestError(Trouble::Credentials));
    assert_eq!(said.take(), ["failure credentials"]);
}

#[test]
fn a_lost_subscription_doubts_redis_and_subscribes_again() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = coordinator(t0, false);
    turn(&mut c, t0, idle());
    c.on_subscription(t0, Outcome::Subscribed(Box::new(1), Config::On));
    c.on_probe(t0, evidence(1000.0, 1));
    turn(&mut c, t0, idle());
    said.take();
    let t1 = t0 + secs(3);
    c.on_subscription_lost(t1, "the connection closed");
    assert_eq!(
        c.verdict(t1, 45.0),
        None,
        "often the first sign of a restart"
    );
    assert_eq!(said.take(), ["notifications false"]);
    let (actions, ops) = turn(&mut c, t1, walking());
    assert_eq!(actions, ["unnoticed", "probe"]);
    assert!(ops.is_empty(), "after a short backoff");
    let (_, ops) = turn(&mut c, t1 + secs(1), walking());
    assert_eq!(ops, ["subscribe"]);
}

#[test]
fn a_catch_up_walk_follows_a_lost_subscription_once_subscribed_again() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = coordinator(t0, false);
    turn(&mut c, t0, idle());
    c.on_subscription(t0, Outcome::Subscribed(Box::new(1), Config::On));
    turn(&mut c, t0, idle());
    let t1 = t0 + secs(60);
    c.on_subscription_lost(t1, "x");
    let (actions, _) = turn(&mut c, t1 + secs(1), idle());
    assert!(
        !actions.iter().any(|a| a.starts_with("walk")),
        "{actions:?}"
    );
    c.on_subscription(t1 + secs(1), Outcome::Subscribed(Box::new(2), Config::On));
    let (actions, _) = turn(&mut c, t1 + secs(1), idle());
    assert!(
        actions.contains(&"walk reconcile".to_owned()),
        "{actions:?}"
    );
}

#[test]
fn a_pause_of_the_daemon_is_no_outage_but_doubt() {
    let t0 = crate::testing::now();
    let (mut c, said, shared) = answered(t0);
    said.take();
    let resumed = t0 + secs(3);
    shared.pauses.record(resumed, secs(3));
    c.on_turn(crate::testing::now());
    assert_eq!(c.verdict(resumed, 45.0), None);
    assert_eq!(turn(&mut c, resumed, walking()).0, ["probe"]);
    c.on_probe(resumed, evidence(1003.5, 2));
    assert!(said.take().is_empty(), "no outage");
    let v = c.verdict(resumed, 45.0).expect("judging");
    assert_eq!(v.spare_until, None, "no credit for a pause");
}

#[test]
fn a_turn_without_a_pause_changes_nothing_and_a_pause_is_taken_once() {
    let t0 = crate::testing::now();
    let (mut c, _, shared) = answered(t0);
    c.on_turn(crate::testing::now());
    assert!(c.verdict(t0 + ms(100), 45.0).is_some());
    shared.pauses.record(t0 + secs(2), secs(1));
    c.on_turn(crate::testing::now());
    turn(&mut c, t0 + secs(2), walking());
    c.on_probe(t0 + secs(2), evidence(1002.0, 2));
    c.on_turn(crate::testing::now());
    assert!(c.verdict(t0 + secs(2), 45.0).is_some(), "taken once");
}

#[test]
fn an_outage_is_reported_once_and_shared_with_the_engine() {
    let t0 = crate::testing::now();
    let (mut c, said, shared) = answered(t0);
    said.take();
    assert_eq!(shared.last_answer.stalled_since(t0), None);
    assert_eq!(
        shared.last_answer.stalled_since(t0 + secs(2)),
        Some(1000.0),
        "a loop taking over after a failover inherits the outage"
    );
    c.on_reply(None, t0 + secs(3), Some(1003.0));
    assert_eq!(said.take(), ["outage"]);
    let v = c.verdict(t0 + secs(3), 6.0).expect("judging");
    assert_eq!(v.spare_until, Some(1009.0));
    c.on_reply(None, t0 + secs(4), Some(1004.0));
    assert!(said.take().is_empty());
    assert_eq!(shared.last_answer.stalled_since(t0 + secs(4)), None);
}

#[test]
fn a_loop_that_takes_over_credits_its_first_probe() {
    let t0 = crate::testing::now();
    let said = Said::default();
    let setup = Setup {
        takes_over: true,
        ..setup(true)
    };
    let mut c = C::new(t0, setup, Box::new(said), Arc::default());
    turn(&mut c, t0, idle());
    c.on_probe(t0, evidence(2000.0, 1));
    let v = c.verdict(t0, 5.0).expect("judging");
    assert_eq!(v.spare_until, Some(2005.0));
}

#[test]
fn changed_sweeps_walk_and_subscribe_again() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = coordinator(t0, false);
    turn(&mut c, t0, idle());
    c.on_subscription(t0, Outcome::Subscribed(Box::new(1), Config::On));
    turn(&mut c, t0, idle());
    said.take();
    let t1 = t0 + secs(10);
    c.on_sweeps_changed(t1);
    assert_eq!(said.take(), ["notifications false"]);
    let (actions, ops) = turn(&mut c, t1, idle());
    assert_eq!(ops, ["subscribe"]);
    assert!(
        !actions.iter().any(|a| a.starts_with("walk")),
        "{actions:?}"
    );
    c.on_subscription(t1, Outcome::Subscribed(Box::new(2), Config::On));
    let (actions, _) = turn(&mut c, t1, idle());
    assert!(
        actions.contains(&"walk reconcile".to_owned()),
        "{actions:?}"
    );
}

#[test]
fn with_nothing_to_walk_no_catch_up_is_owed() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = coordinator(t0, true);
    let none = Turn {
        sweeps: 0,
        ..idle()
    };
    assert_eq!(turn(&mut c, t0, none).0, ["probe"]);
    let actions = turn(&mut c, t0 + secs(1), idle()).0;
    assert!(
        !actions.iter().any(|a| a.starts_with("walk")),
        "{actions:?}"
    );
}

#[test]
fn without_sweeps_the_reconciliation_s_time_does_not_keep_the_loop_awake() {
    // A standby's primary: no sweep here. Once the first reconciliation came due, its past
    // instant used to be the loop's next wake at every turn: the loop spun.
    let t0 = crate::testing::now();
    let (mut c, _, _) = answered(t0);
    let none = Turn {
        sweeps: 0,
        ..idle()
    };
    let due = t0 + HOUR;
    let actions = turn(&mut c, due, none).0;
    assert!(
        !actions.iter().any(|a| a.starts_with("walk")),
        "{actions:?}"
    );
    let wake = c.next_wake(due, secs(5), None, None);
    assert!(
        wake > due,
        "the loop's next wake is ahead of it: {:?}",
        wake - due
    );
    let actions = turn(&mut c, due + HOUR, idle()).0;
    assert!(
        actions.contains(&"walk reconcile".to_owned()),
        "with a sweep again, the reconciliation comes an interval later: {actions:?}"
    );
}

#[test]
fn the_reconciliation_walks_and_looks_at_the_settings_again() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = coordinator(t0, false);
    turn(&mut c, t0, idle());
    c.on_subscription(t0, Outcome::Subscribed(Box::new(1), Config::On));
    turn(&mut c, t0, idle());
    // Notices kept arriving, and the subscription's pings came back.
    let hour = t0 + HOUR;
    c.on_notice(hour - secs(1));
    let (actions, ops) = turn(&mut c, hour - secs(1), idle());
    assert_eq!((actions.len(), ops), (0, vec!["ping"]));
    c.on_subscription(hour - secs(1), Outcome::Kept(Box::new(1)));
    let (actions, ops) = turn(&mut c, hour, idle());
    assert!(
        actions.contains(&"walk reconcile".to_owned()),
        "{actions:?}"
    );
    assert_eq!(ops, ["recheck"]);
}

#[test]
fn the_loop_wakes_for_a_deadline_only_while_judging() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = coordinator(t0, true);
    turn(&mut c, t0, idle());
    let due = 1_000_200;
    let wake = c.next_wake(t0, secs(5), Some(due), Some(None));
    assert!(wake >= t0 + ms(100), "not judging: no deadline wakes it");
    c.on_probe(t0, evidence(1000.0, 1));
    let wake = c.next_wake(t0, secs(5), Some(due), Some(None));
    assert_eq!(wake, t0 + ms(200), "when the batch is ripe");
}

#[test]
fn errors_flapping_are_logged_at_error_level_once_per_interval() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = answered(t0);
    c.on_failure(t0, "x", failure());
    assert_eq!(c.last_error_log, Some(t0));
    c.on_failure(t0 + secs(5), "x", failure());
    assert_eq!(c.last_error_log, Some(t0), "within LOG_EVERY: debug only");
    c.on_failure(t0 + LOG_EVERY, "x", failure());
    assert_eq!(c.last_error_log, Some(t0 + LOG_EVERY));
}

#[test]
fn the_loop_forgets_its_primary_when_it_stops() {
    let t0 = crate::testing::now();
    let (c, said, _) = coordinator(t0, true);
    c.forget();
    assert_eq!(said.take(), ["forget"]);
}

#[test]
fn a_failure_during_the_look_at_the_primary_asks_for_another_and_the_gap_stays_an_outage() {
    let t0 = crate::testing::now();
    let (mut c, _, _) = answered(t0);
    c.on_failure(t0, "x", failure());
    turn(&mut c, t0, walking());
    c.on_failure(t0 + ms(10), "x", failure());
    // The look at the primary is in flight and its retry delay long past: no wake for it.
    let later = t0 + secs(3);
    let wake = c.next_wake(later, secs(5), None, Some(None));
    assert!(wake >= later, "nothing due in the past");
    c.on_turn(crate::testing::now());
    c.on_refreshed(wake, Refreshed::Same);
    assert_eq!(
        turn(&mut c, wake, walking()).0,
        ["suspect", "refresh true"],
        "the failure during the look asks for another"
    );
    c.on_refreshed(wake, Refreshed::Same);
    assert_eq!(turn(&mut c, wake, walking()).0, ["probe"]);
    c.on_probe(wake, evidence(1003.0, 2));
    let v = c.verdict(wake, 4.0).expect("judging");
    assert_eq!(
        v.spare_until,
        Some(1007.0),
        "the gap was an outage, not a pause"
    );
}

#[test]
fn a_step_of_redis_s_clock_is_reported_once_and_a_forward_one_spares_everyone() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = answered(t0);
    said.take();
    c.on_reply(Some(t0 + secs(1)), t0 + secs(1), Some(1031.0));
    assert_eq!(said.take(), ["step forward 30"]);
    let v = c.verdict(t0 + secs(1), 6.0).expect("judging");
    assert_eq!(v.spare_until, Some(1037.0));
    c.on_time(Some(t0 + secs(2)), t0 + secs(2), 1002.0);
    assert_eq!(said.take(), ["step backward 30"]);
    assert_eq!(
        turn(&mut c, t0 + secs(2), walking()).0[0],
        "recheck latest",
        "the latest deadlines are checked at once: their scores may lie in Redis's future"
    );
}

fn oom(time: f64) -> Result<Evidence, TestError> {
    Ok(Evidence {
        time,
        canary: Reading::WritesRefused(WriteRefusal::Oom),
        run_id: Some("a".into()),
    })
}

#[test]
fn refused_writes_show_on_readiness_and_end_with_a_credit() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = answered(t0);
    said.take();
    c.on_probe(t0 + secs(1), oom(1001.0));
    assert_eq!(said.take(), ["writes refused true"]);
    assert_eq!(c.verdict(t0 + secs(1), 4.0), None, "nobody is judged");
    assert!(
        !c.take_actions()
            .iter()
            .any(|a| matches!(a, Action::Suspect)),
        "a full Redis is no failover"
    );
    for s in 2..16 {
        c.on_probe(t0 + secs(s), oom(1000.0 + s as f64));
    }
    assert!(said.take().is_empty(), "once per episode");
    c.on_probe(t0 + secs(16), evidence(1016.0, 5));
    assert_eq!(said.take(), ["writes refused false"]);
    let v = c.verdict(t0 + secs(16), 4.0).expect("judging");
    assert_eq!(v.spare_until, Some(1020.0));
}

#[test]
fn a_primary_turned_replica_is_looked_up_again() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = answered(t0);
    said.take();
    let readonly = Ok(Evidence {
        time: 1001.0,
        canary: Reading::WritesRefused(WriteRefusal::ReadOnly),
        run_id: Some("a".into()),
    });
    c.on_probe(t0 + secs(1), readonly);
    assert_eq!(said.take(), ["writes refused true"]);
    assert_eq!(
        turn(&mut c, t0 + secs(1), walking()).0,
        ["suspect", "refresh true"]
    );
}

#[test]
fn a_look_at_the_primary_cut_short_by_shutdown_changes_nothing() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = answered(t0);
    said.take();
    c.on_failure(t0, "x", failure());
    assert_eq!(turn(&mut c, t0, walking()).0, ["suspect", "refresh true"]);
    c.on_refreshed(t0, Refreshed::Cancelled);
    assert!(said.take().is_empty());
    let stopping = Turn {
        stopping: true,
        ..walking()
    };
    assert!(
        turn(&mut c, t0 + secs(5), stopping).0.is_empty(),
        "no new look while stopping"
    );
}

#[test]
fn a_redis_loading_its_data_judges_nobody_until_it_takes_writes() {
    let t0 = crate::testing::now();
    let (mut c, said, _) = answered(t0);
    said.take();
    let loading = Ok(Evidence {
        time: 1001.0,
        canary: Reading::WritesRefused(WriteRefusal::Loading),
        run_id: Some("b".into()),
    });
    c.on_probe(t0 + secs(1), loading);
    assert_eq!(said.take(), ["writes refused true"]);
    assert_eq!(c.verdict(t0 + secs(1), 5.0), None);
}
