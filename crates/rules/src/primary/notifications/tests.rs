//! The subscription's rules, with paused time and no Redis.
use super::*;
use crate::primary::testing::{TestError, TestIo, failure};

type N = Notifications<TestIo>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Starts what is due, returning the operations started.
fn poll(n: &mut N, at: Instant) -> Vec<&'static str> {
    let mut started = Vec::new();
    n.poll(at, |op| {
        started.push(match op {
            Op::Subscribe => "subscribe",
            Op::Ping(_) => "ping",
            Op::Recheck(_) => "recheck",
        });
        Box::pin(std::future::pending())
    });
    started
}

fn subscribed(at: Instant) -> N {
    let mut n = N::new(at, false, false);
    assert_eq!(poll(&mut n, at), ["subscribe"]);
    let r = n.on_outcome(at, Outcome::Subscribed(Box::new(7), Config::On));
    assert_eq!(r.in_use, Some(true));
    n
}

fn failed() -> Outcome<TestIo> {
    Outcome::Failed(failure())
}

#[test]
fn off_stays_off() {
    let t0 = crate::testing::now();
    let mut n = N::new(t0, true, false);
    assert!(poll(&mut n, t0).is_empty());
    assert_eq!(n.next_wake(), None);
    assert!(n.restart(t0).in_use.is_none());
    assert!(poll(&mut n, t0).is_empty());
}

#[test]
fn a_subscription_asks_for_a_walk_at_once() {
    let t0 = crate::testing::now();
    let mut n = N::new(t0, false, false);
    assert_eq!(poll(&mut n, t0), ["subscribe"]);
    assert!(n.walk_waits(t0), "a walk waits for the subscription");
    assert!(poll(&mut n, t0).is_empty(), "one operation at a time");
    let r = n.on_outcome(t0, Outcome::Subscribed(Box::new(1), Config::On));
    assert_eq!(r.catch_up, Some(CatchUp::Now));
    assert!(r.unnoticed && n.in_use());
    assert_eq!(r.say, Some(Say::InUse));
    assert!(!n.walk_waits(t0));
    assert!(matches!(n.polled(), Polled::Active(1)));
}

#[test]
fn resubscribe_backoff_doubles_up_to_its_cap() {
    let t0 = crate::testing::now();
    let mut n = N::new(t0, false, false);
    let mut at = t0;
    let mut waits = Vec::new();
    for _ in 0..8 {
        assert_eq!(poll(&mut n, at), ["subscribe"]);
        let r = n.on_outcome(at, failed());
        assert!(r.failed.is_some() && r.in_use == Some(false));
        let retry = n.next_wake().unwrap();
        waits.push(retry.duration_since(at).as_millis());
        assert!(
            poll(&mut n, retry - ms(1)).is_empty(),
            "not before the wait"
        );
        at = retry;
    }
    assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
}

#[test]
fn resubscribe_backoff_is_reset_by_a_success() {
    let t0 = crate::testing::now();
    let mut n = N::new(t0, false, false);
    for _ in 0..4 {
        let at = n.next_wake().unwrap();
        poll(&mut n, at);
        n.on_outcome(t0, failed());
    }
    let at = n.next_wake().unwrap();
    poll(&mut n, at);
    n.on_outcome(at, Outcome::Subscribed(Box::new(1), Config::On));
    let lost = at + ms(10);
    n.on_lost(lost);
    assert_eq!(n.next_wake(), Some(lost + RESUBSCRIBE_FIRST));
    poll(&mut n, lost + RESUBSCRIBE_FIRST);
    n.on_outcome(lost + RESUBSCRIBE_FIRST, failed());
    assert_eq!(
        n.next_wake(),
        Some(lost + RESUBSCRIBE_FIRST + RESUBSCRIBE_FIRST * 2),
        "the backoff goes on from the lost subscription's"
    );
}

#[test]
fn a_lost_subscription_asks_for_one_catch_up_walk_and_counts_a_generation() {
    let t0 = crate::testing::now();
    let mut n = subscribed(t0);
    let generation = n.generation();
    let r = n.on_lost(t0 + ms(50));
    assert_eq!(r.catch_up, Some(CatchUp::Soon));
    assert!(r.unnoticed && !n.in_use());
    assert_eq!(n.generation(), generation + 1);
    assert!(
        n.walk_waits(t0 + ms(50)),
        "the walk waits for the resubscription"
    );
    // Failing again while not in use asks for no second walk.
    poll(&mut n, t0 + ms(150));
    let r = n.on_outcome(t0 + ms(150), failed());
    assert_eq!(r.catch_up, None);
}

#[test]
fn a_walk_stops_waiting_for_a_subscription_that_keeps_failing() {
    let t0 = crate::testing::now();
    let mut n = N::new(t0, false, false);
    let mut at = t0;
    // Waits of 100, 200, 400 and 800 ms: a walk waits; then 1.6 s: it goes ahead.
    for waits in [true, true, true, true, false] {
        poll(&mut n, at);
        n.on_outcome(at, failed());
        assert_eq!(n.walk_waits(at), waits);
        at = n.next_wake().unwrap();
    }
}

#[test]
fn the_subscription_is_pinged_on_its_pace() {
    let t0 = crate::testing::now();
    let mut n = subscribed(t0);
    assert_eq!(n.next_wake(), Some(t0 + SUBSCRIPTION_PING));
    assert!(poll(&mut n, t0 + ms(10)).is_empty());
    assert_eq!(poll(&mut n, t0 + SUBSCRIPTION_PING), ["ping"]);
    assert!(matches!(n.polled(), Polled::Op(_)));
    let r = n.on_outcome(t0 + SUBSCRIPTION_PING, Outcome::Kept(Box::new(7)));
    assert!(r.in_use.is_none() && !r.unnoticed);
    assert!(n.in_use(), "in use throughout the ping");
    assert_eq!(n.next_wake(), Some(t0 + SUBSCRIPTION_PING * 2));
}

#[test]
fn a_failed_ping_drops_the_subscription_and_retries_soon() {
    let t0 = crate::testing::now();
    let mut n = subscribed(t0);
    let at = t0 + SUBSCRIPTION_PING;
    poll(&mut n, at);
    let r = n.on_outcome(at, failed());
    assert_eq!(r.catch_up, Some(CatchUp::Soon));
    assert_eq!(n.next_wake(), Some(at + RESUBSCRIBE_FIRST));
}

#[test]
fn a_recheck_comes_before_a_ping_and_waits_for_an_operation_in_flight() {
    let t0 = crate::testing::now();
    let mut n = subscribed(t0);
    let at = t0 + SUBSCRIPTION_PING;
    assert_eq!(poll(&mut n, at), ["ping"]);
    n.want_recheck();
    assert!(poll(&mut n, at).is_empty(), "the ping is in flight");
    n.on_outcome(at, Outcome::Kept(Box::new(7)));
    assert_eq!(poll(&mut n, at + ms(1)), ["recheck"]);
    n.on_outcome(at + ms(2), Outcome::Kept(Box::new(7)));
    assert!(
        poll(&mut n, at + ms(3)).is_empty(),
        "one recheck per reconciliation"
    );
}

#[test]
fn unavailable_is_said_once_and_looked_at_again_at_reconciliation() {
    let t0 = crate::testing::now();
    let mut n = N::new(t0, false, false);
    poll(&mut n, t0);
    let off = || Outcome::Unavailable {
        why: "off".into(),
        refused: false,
    };
    let r = n.on_outcome(t0, off());
    assert_eq!(r.say, Some(Say::Info("off".into())));
    assert_eq!(
        n.next_wake(),
        None,
        "no retries: reconciliations look again"
    );
    n.want_recheck();
    assert!(poll(&mut n, t0 + ms(1)).is_empty(), "back to idle first");
    assert_eq!(poll(&mut n, t0 + ms(1)), ["subscribe"]);
    assert_eq!(
        n.on_outcome(t0 + ms(2), off()).say,
        Some(Say::Debug("off".into()))
    );
    poll(&mut n, t0);
    n.want_recheck();
    poll(&mut n, t0 + ms(3));
    poll(&mut n, t0 + ms(3));
    let r = n.on_outcome(
        t0 + ms(4),
        Outcome::Unavailable {
            why: "refused".into(),
            refused: true,
        },
    );
    assert_eq!(
        r.say,
        Some(Say::Warn("refused".into())),
        "a change, and an ACL to fix"
    );
}

#[test]
fn losing_notifications_that_were_in_use_is_a_warning() {
    let t0 = crate::testing::now();
    let mut n = subscribed(t0);
    n.want_recheck();
    assert_eq!(poll(&mut n, t0 + ms(1)), ["recheck"]);
    let r = n.on_outcome(
        t0 + ms(2),
        Outcome::Unavailable {
            why: "off".into(),
            refused: false,
        },
    );
    assert_eq!(r.say, Some(Say::Warn("off".into())));
    assert_eq!(r.catch_up, Some(CatchUp::Soon));
}

#[test]
fn a_restart_drops_the_operation_in_flight_and_subscribes_at_once() {
    let t0 = crate::testing::now();
    let mut n = subscribed(t0);
    assert_eq!(poll(&mut n, t0 + SUBSCRIPTION_PING), ["ping"]);
    let r = n.restart(t0 + SUBSCRIPTION_PING);
    assert!(r.unnoticed && r.in_use == Some(false));
    assert!(matches!(n.polled(), Polled::Nothing));
    assert_eq!(poll(&mut n, t0 + SUBSCRIPTION_PING), ["subscribe"]);
}

fn subscribed_with(at: Instant, config: Config) -> (N, Report<TestError>) {
    let mut n = N::new(at, false, false);
    assert_eq!(poll(&mut n, at), ["subscribe"]);
    let r = n.on_outcome(at, Outcome::Subscribed(Box::new(7), config));
    (n, r)
}

fn refused() -> Config {
    Config::Refused("no CONFIG".into())
}

#[test]
fn config_refused_subscribes_and_a_notice_proves_them_on() {
    let t0 = crate::testing::now();
    let (mut n, r) = subscribed_with(t0, refused());
    assert_eq!(r.config_refused, Some(true), "the refusal is reported");
    assert!(matches!(r.say, Some(Say::Warn(_))));
    assert_eq!(r.in_use, Some(false), "not in use before a notice");
    assert!(
        matches!(n.polled(), Polled::Active(7)),
        "subscribed all the same"
    );
    let r = n.on_notice(t0 + ms(300)).expect("a change");
    assert_eq!(r.in_use, Some(true));
    assert_eq!(r.catch_up, Some(CatchUp::Now));
    assert_eq!(r.say, Some(Say::InUse));
    assert!(n.on_notice(t0 + ms(301)).is_none(), "said once");
    assert!(n.in_use());
}

#[test]
fn a_refused_config_is_reported_once_and_never_asked_again() {
    let t0 = crate::testing::now();
    let (mut n, _) = subscribed_with(t0, refused());
    n.on_notice(t0);
    n.want_recheck();
    let mut at = t0;
    for _ in 0..20 {
        at += SUBSCRIPTION_PING;
        n.on_notice(at);
        for op in poll(&mut n, at) {
            assert_eq!(op, "ping", "no look at the settings");
            n.on_outcome(at, Outcome::Kept(Box::new(7)));
        }
    }
    // Lost and made again: the refusal is no news.
    n.on_lost(at);
    poll(&mut n, at + RESUBSCRIBE_FIRST);
    let r = n.on_outcome(at, Outcome::Subscribed(Box::new(7), refused()));
    assert_eq!(r.config_refused, None);
    assert_eq!(r.say, None, "no second warning");
}

#[test]
fn silence_past_the_bound_ends_their_use_and_a_notice_brings_it_back() {
    let t0 = crate::testing::now();
    let (mut n, _) = subscribed_with(t0, refused());
    n.on_notice(t0);
    let last = t0 + ms(1500);
    n.on_notice(last);
    assert_eq!(n.next_wake(), Some(t0 + SUBSCRIPTION_PING));
    assert!(n.judge(last + SILENT - ms(1)).is_none());
    let r = n.judge(last + SILENT).expect("silent");
    assert_eq!(r.in_use, Some(false));
    assert_eq!(r.catch_up, Some(CatchUp::Soon));
    assert!(r.unnoticed);
    assert!(matches!(r.say, Some(Say::Warn(_))));
    assert!(n.judge(last + SILENT * 2).is_none(), "said once");
    assert!(matches!(n.polled(), Polled::Active(_)), "still listening");
    let r = n.on_notice(last + SILENT * 3).expect("back");
    assert_eq!(r.in_use, Some(true));
    assert_eq!(r.catch_up, Some(CatchUp::Now));
}

#[test]
fn a_quiet_keyspace_is_looked_at_and_on_counts_as_a_notice() {
    let t0 = crate::testing::now();
    let (mut n, r) = subscribed_with(t0, Config::On);
    assert_eq!(r.in_use, Some(true), "the server says on");
    let mut at = t0;
    while at < t0 + QUIET - ms(1) {
        at += SUBSCRIPTION_PING;
        if poll(&mut n, at.min(t0 + QUIET - ms(1))) == ["ping"] {
            n.on_outcome(at, Outcome::Kept(Box::new(7)));
        }
    }
    assert_eq!(poll(&mut n, t0 + QUIET), ["recheck"]);
    let r = n.on_outcome(t0 + QUIET, Outcome::Looked(Box::new(7), Config::On));
    assert!(r.in_use.is_none() && r.say.is_none(), "nothing changed");
    assert!(n.judge(t0 + SILENT).is_none(), "quiet, not silent");
    assert!(
        n.judge(t0 + QUIET + SILENT).is_some(),
        "unless looked again"
    );
}

#[test]
fn switched_off_is_seen_by_a_look_and_switched_on_by_a_notice() {
    let t0 = crate::testing::now();
    let (mut n, _) = subscribed_with(t0, Config::On);
    assert_eq!(poll(&mut n, t0 + QUIET), ["recheck"]);
    let off = Config::Off(String::new());
    let r = n.on_outcome(t0 + QUIET, Outcome::Looked(Box::new(7), off.clone()));
    assert_eq!(r.in_use, Some(false));
    let Some(Say::Warn(why)) = r.say else {
        panic!("{:?}", r.say)
    };
    assert!(
        why.starts_with("notify-keyspace-events was changed to \"\""),
        "{why}"
    );
    assert!(matches!(n.polled(), Polled::Active(_)), "still listening");
    // Looked at again while off: no new line.
    assert_eq!(poll(&mut n, t0 + QUIET * 2), ["recheck"]);
    let r = n.on_outcome(t0 + QUIET * 2, Outcome::Looked(Box::new(7), off));
    assert!(r.in_use.is_none());
    assert!(
        matches!(r.say, Some(Say::Debug(_))),
        "said once, as it changed"
    );
    let r = n.on_notice(t0 + QUIET * 2 + ms(5)).expect("on again");
    assert_eq!(r.in_use, Some(true));
    assert_eq!(r.say, Some(Say::InUse));
}

#[test]
fn a_look_without_an_answer_leaves_the_judgment_to_silence() {
    let t0 = crate::testing::now();
    let (mut n, _) = subscribed_with(t0, Config::On);
    assert_eq!(poll(&mut n, t0 + QUIET), ["recheck"]);
    // The look hangs (a paused server): the bound holds all the same.
    assert_eq!(n.next_wake(), Some(t0 + SILENT));
    let r = n.judge(t0 + SILENT).expect("silent");
    assert_eq!(r.in_use, Some(false));
    let r = n.on_outcome(
        t0 + SILENT + ms(1),
        Outcome::Looked(Box::new(7), Config::NoAnswer),
    );
    assert!(r.in_use.is_none() && r.config_refused.is_none());
}

#[test]
fn off_at_subscription_is_said_once_and_listened_to() {
    let t0 = crate::testing::now();
    let (mut n, r) = subscribed_with(t0, Config::Off("Ex".into()));
    assert_eq!(r.in_use, Some(false));
    assert_eq!(
        r.say,
        Some(Say::Info(
            "notify-keyspace-events is \"Ex\", without K and z (or K and A)".into()
        ))
    );
    assert_eq!(poll(&mut n, t0 + QUIET), ["recheck"]);
    let off = Outcome::Looked(Box::new(7), Config::Off("Ex".into()));
    assert!(matches!(
        n.on_outcome(t0 + QUIET, off).say,
        Some(Say::Debug(_))
    ));
    assert_eq!(r.catch_up, Some(CatchUp::Now));
    assert!(
        n.judge(t0 + SILENT * 2).is_none(),
        "not in use: nothing to end"
    );
    assert!(
        n.on_notice(t0 + SILENT * 2)
            .is_some_and(|r| r.in_use == Some(true))
    );
}

#[test]
fn a_config_that_answers_again_clears_the_refusal() {
    let t0 = crate::testing::now();
    let (mut n, _) = subscribed_with(t0, refused());
    n.restart(t0);
    poll(&mut n, t0);
    let r = n.on_outcome(t0, Outcome::Subscribed(Box::new(7), Config::On));
    assert_eq!(
        r.config_refused,
        Some(false),
        "a failover to a server that answers"
    );
    assert_eq!(r.in_use, Some(true));
}
