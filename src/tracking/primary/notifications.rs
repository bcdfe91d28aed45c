//! The keyspace-notification subscription of one primary's loop, as one state machine: whether
//! notifications are in use, the operation in flight on them (subscribing, a ping, a look at
//! the server's settings), when to try again, and what the loop must do when that changes.
//!
//! No I/O: [`Notifications::poll`] says which operation to start and keeps the future the loop
//! makes for it inside the state, and [`Notifications::on_outcome`] takes what it came to. The
//! subscription type is a parameter, so the rules are tested without Redis.

use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use crate::Error;
use crate::store::backoff::Backoff;

/// How often a subscription proves it still delivers.
const SUBSCRIPTION_PING: Duration = Duration::from_secs(5);
/// Bounds of the wait before subscribing again after a failure.
const RESUBSCRIBE_FIRST: Duration = Duration::from_millis(100);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(5);
/// A walk waits for a subscription tried again within this long: then one walk does for both.
const WALK_WAITS: Duration = Duration::from_secs(1);

/// What an operation on the subscription came to.
pub(crate) enum Outcome<S> {
    /// A new subscription: what was written before it is found by a walk.
    Subscribed(Box<S>),
    /// The subscription still works (a ping, a look at the server's settings).
    Kept(Box<S>),
    /// Not to be had here, and why; `refused` if the server has them but the Redis user may
    /// not use them (an ACL to fix, where an operator who left them off needs no warning).
    Unavailable {
        why: String,
        refused: bool,
    },
    Failed(Error),
}

/// An operation for the loop to start.
pub(crate) enum Op<S> {
    /// Subscribe anew (turning notifications on if the configuration allows).
    Subscribe,
    /// Prove the subscription delivers.
    Ping(Box<S>),
    /// Are notifications still on (or on now)?
    Recheck(Box<S>),
}

/// The future of an operation in flight.
pub(crate) type Pending<S> = BoxFuture<'static, Outcome<S>>;

enum Stage<S> {
    /// `tracking.notifications = "off"`.
    Off,
    /// Not subscribed: try at `retry_at`.
    Idle { retry_at: Instant },
    /// An operation in flight; `subscribing` if it makes a new subscription.
    Busy { op: Pending<S>, subscribing: bool },
    /// Subscribed.
    Active(Box<S>),
    /// The server has them off (or will not say): walks follow the schedule; looked at again
    /// at each reconciliation.
    Unavailable,
}

/// What the loop polls for the subscription.
pub(crate) enum Io<'a, S> {
    Op(&'a mut Pending<S>),
    Active(&'a mut S),
    Nothing,
}

/// How urgently a walk must find what was written while notifications were not in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatchUp {
    /// Once the walk's usual wait (after a failure) is over.
    Soon,
    /// At once: a new subscription.
    Now,
}

/// What the loop says about notifications (it adds the node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Say {
    InUse,
    /// Not in use, where they were or were expected: a warning.
    Warn(String),
    /// Off here, as the operator may well have meant: said once.
    Info(String),
    /// Still off, as said before.
    Debug(String),
}

/// What a change of the subscription asks of the loop.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Whether notifications are in use now, when that may have changed.
    pub(crate) in_use: Option<bool>,
    /// Writes went (or may go) unnoticed: the next reconciliation reads every key.
    pub(crate) unnoticed: bool,
    pub(crate) catch_up: Option<CatchUp>,
    pub(crate) say: Option<Say>,
    /// An attempt failed: log it (it is tried again).
    pub(crate) failed: Option<Error>,
}

pub(crate) struct Notifications<S> {
    stage: Stage<S>,
    backoff: Backoff,
    /// Notifications are in use: subscribed now.
    in_use: bool,
    /// Counts subscriptions made and lost.
    generation: u64,
    /// `tracking.notifications = "on"`: their absence is worth a warning.
    expected: bool,
    /// A reconciliation is due to look at the server's settings again.
    recheck_wanted: bool,
    /// Why they were last said to be unavailable, so that each reconciliation's look does not
    /// say it again.
    unavailable_said: Option<String>,
    next_ping: Instant,
}

impl<S> Notifications<S> {
    /// `off`: `tracking.notifications = "off"`; `expected`: `"on"`.
    pub(crate) fn new(at: Instant, off: bool, expected: bool) -> Self {
        Self {
            stage: if off {
                Stage::Off
            } else {
                Stage::Idle { retry_at: at }
            },
            backoff: Backoff::new(RESUBSCRIBE_FIRST, RESUBSCRIBE_MAX),
            in_use: false,
            generation: 0,
            expected,
            recheck_wanted: false,
            unavailable_said: None,
            next_ping: at + SUBSCRIPTION_PING,
        }
    }

    pub(crate) fn in_use(&self) -> bool {
        self.in_use
    }

    /// Changes whenever a subscription is made or lost: a walk under one generation from start
    /// to end noticed every write.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether a subscription is being made, or will be tried again soon (after a lost one, a
    /// short backoff): a walk waits for it. One that keeps failing waits longer, and the walk
    /// does not.
    pub(crate) fn walk_waits(&self, at: Instant) -> bool {
        match self.stage {
            Stage::Busy { subscribing, .. } => subscribing,
            Stage::Idle { retry_at } => retry_at <= at + WALK_WAITS,
            _ => false,
        }
    }

    /// A reconciliation is due: look at the server's settings again.
    pub(crate) fn want_recheck(&mut self) {
        self.recheck_wanted = true;
    }

    /// When [`Notifications::poll`] has something to start, if nothing happens meanwhile.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        match self.stage {
            Stage::Idle { retry_at } => Some(retry_at),
            Stage::Active(_) => Some(self.next_ping),
            _ => None,
        }
    }

    /// What the loop polls: the operation in flight, or the subscription's messages.
    pub(crate) fn io(&mut self) -> Io<'_, S> {
        match &mut self.stage {
            Stage::Busy { op, .. } => Io::Op(op),
            Stage::Active(sub) => Io::Active(sub),
            _ => Io::Nothing,
        }
    }

    /// Starts what is due at `at`, with the future `start` makes for it.
    pub(crate) fn poll(&mut self, at: Instant, mut start: impl FnMut(Op<S>) -> Pending<S>) {
        if let Stage::Idle { retry_at } = self.stage
            && retry_at <= at
        {
            self.stage = Stage::Busy {
                op: start(Op::Subscribe),
                subscribing: true,
            };
        }
        // Before a ping: a look at the server's settings proves the subscription as well. An
        // operation in flight only delays it.
        if self.recheck_wanted && !matches!(self.stage, Stage::Busy { .. }) {
            self.recheck_wanted = false;
            match std::mem::replace(&mut self.stage, Stage::Unavailable) {
                Stage::Unavailable => {
                    self.backoff.reset();
                    self.stage = Stage::Idle { retry_at: at };
                    return;
                }
                Stage::Active(sub) => {
                    self.stage = Stage::Busy {
                        op: start(Op::Recheck(sub)),
                        subscribing: false,
                    };
                }
                other => self.stage = other,
            }
        }
        if matches!(self.stage, Stage::Active(_)) && self.next_ping <= at {
            self.next_ping = at + SUBSCRIPTION_PING;
            let Stage::Active(sub) = std::mem::replace(&mut self.stage, Stage::Unavailable) else {
                unreachable!("matched above")
            };
            self.stage = Stage::Busy {
                op: start(Op::Ping(sub)),
                subscribing: false,
            };
        }
    }

    /// The operation in flight came to `outcome` at `at`.
    pub(crate) fn on_outcome(&mut self, at: Instant, outcome: Outcome<S>) -> Report {
        match outcome {
            Outcome::Subscribed(sub) => {
                self.backoff.reset();
                self.unavailable_said = None;
                self.stage = Stage::Active(sub);
                self.next_ping = at + SUBSCRIPTION_PING;
                let mut report = self.set_in_use(true);
                // Whatever was written before the subscription is found by a walk.
                report.catch_up = Some(CatchUp::Now);
                report.say = Some(Say::InUse);
                report
            }
            Outcome::Kept(sub) => {
                self.backoff.reset();
                self.stage = Stage::Active(sub);
                Report::default()
            }
            Outcome::Unavailable { why, refused } => {
                let expected = refused || self.expected;
                // Looked at again every reconciliation: said once, and again if it changes.
                let say = if self.in_use || self.unavailable_said.as_deref() != Some(&why) {
                    if self.in_use || expected {
                        Say::Warn(why.clone())
                    } else {
                        Say::Info(why.clone())
                    }
                } else {
                    Say::Debug(why.clone())
                };
                self.unavailable_said = Some(why);
                self.stage = Stage::Unavailable;
                let mut report = self.set_in_use(false);
                report.say = Some(say);
                report
            }
            Outcome::Failed(e) => {
                self.stage = Stage::Idle {
                    retry_at: at + self.backoff.next_delay(),
                };
                let mut report = self.set_in_use(false);
                report.failed = Some(e);
                report
            }
        }
    }

    /// The subscription's connection closed at `at`: subscribe again after a short wait.
    pub(crate) fn on_lost(&mut self, at: Instant) -> Report {
        self.backoff.reset();
        self.stage = Stage::Idle {
            retry_at: at + self.backoff.next_delay(),
        };
        self.set_in_use(false)
    }

    /// Drops the subscription (and any operation in flight) and subscribes anew: the sweeps,
    /// or the primary's server, changed.
    pub(crate) fn restart(&mut self, at: Instant) -> Report {
        if matches!(self.stage, Stage::Off) {
            return Report::default();
        }
        self.backoff.reset();
        self.stage = Stage::Idle { retry_at: at };
        self.set_in_use(false)
    }

    fn set_in_use(&mut self, in_use: bool) -> Report {
        let mut report = Report {
            in_use: Some(in_use),
            ..Report::default()
        };
        if self.in_use && !in_use {
            // Until a walk finds them, keys written now are not seen.
            report.catch_up = Some(CatchUp::Soon);
        }
        if !in_use || !self.in_use {
            self.generation += 1;
            report.unnoticed = true;
        }
        self.in_use = in_use;
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type N = Notifications<u32>;

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
        let r = n.on_outcome(at, Outcome::Subscribed(Box::new(7)));
        assert_eq!(r.in_use, Some(true));
        n
    }

    fn failed() -> Outcome<u32> {
        Outcome::Failed(crate::store::reply::ReplyError::new("test").into())
    }

    #[test]
    fn off_stays_off() {
        let t0 = Instant::now();
        let mut n = N::new(t0, true, false);
        assert!(poll(&mut n, t0).is_empty());
        assert_eq!(n.next_wake(), None);
        assert!(n.restart(t0).in_use.is_none());
        assert!(poll(&mut n, t0).is_empty());
    }

    #[test]
    fn a_subscription_asks_for_a_walk_at_once() {
        let t0 = Instant::now();
        let mut n = N::new(t0, false, false);
        assert_eq!(poll(&mut n, t0), ["subscribe"]);
        assert!(n.walk_waits(t0), "a walk waits for the subscription");
        assert!(poll(&mut n, t0).is_empty(), "one operation at a time");
        let r = n.on_outcome(t0, Outcome::Subscribed(Box::new(1)));
        assert_eq!(r.catch_up, Some(CatchUp::Now));
        assert!(r.unnoticed && n.in_use());
        assert_eq!(r.say, Some(Say::InUse));
        assert!(!n.walk_waits(t0));
        assert!(matches!(n.io(), Io::Active(1)));
    }

    #[test]
    fn resubscribe_backoff_doubles_up_to_its_cap() {
        let t0 = Instant::now();
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
        let t0 = Instant::now();
        let mut n = N::new(t0, false, false);
        for _ in 0..4 {
            let at = n.next_wake().unwrap();
            poll(&mut n, at);
            n.on_outcome(t0, failed());
        }
        let at = n.next_wake().unwrap();
        poll(&mut n, at);
        n.on_outcome(at, Outcome::Subscribed(Box::new(1)));
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
        let t0 = Instant::now();
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
        let t0 = Instant::now();
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
        let t0 = Instant::now();
        let mut n = subscribed(t0);
        assert_eq!(n.next_wake(), Some(t0 + SUBSCRIPTION_PING));
        assert!(poll(&mut n, t0 + ms(10)).is_empty());
        assert_eq!(poll(&mut n, t0 + SUBSCRIPTION_PING), ["ping"]);
        assert!(matches!(n.io(), Io::Op(_)));
        let r = n.on_outcome(t0 + SUBSCRIPTION_PING, Outcome::Kept(Box::new(7)));
        assert!(r.in_use.is_none() && !r.unnoticed);
        assert!(n.in_use(), "in use throughout the ping");
        assert_eq!(n.next_wake(), Some(t0 + SUBSCRIPTION_PING * 2));
    }

    #[test]
    fn a_failed_ping_drops_the_subscription_and_retries_soon() {
        let t0 = Instant::now();
        let mut n = subscribed(t0);
        let at = t0 + SUBSCRIPTION_PING;
        poll(&mut n, at);
        let r = n.on_outcome(at, failed());
        assert_eq!(r.catch_up, Some(CatchUp::Soon));
        assert_eq!(n.next_wake(), Some(at + RESUBSCRIBE_FIRST));
    }

    #[test]
    fn a_recheck_comes_before_a_ping_and_waits_for_an_operation_in_flight() {
        let t0 = Instant::now();
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
        let t0 = Instant::now();
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
        let t0 = Instant::now();
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
        let t0 = Instant::now();
        let mut n = subscribed(t0);
        assert_eq!(poll(&mut n, t0 + SUBSCRIPTION_PING), ["ping"]);
        let r = n.restart(t0 + SUBSCRIPTION_PING);
        assert!(r.unnoticed && r.in_use == Some(false));
        assert!(matches!(n.io(), Io::Nothing));
        assert_eq!(poll(&mut n, t0 + SUBSCRIPTION_PING), ["subscribe"]);
    }
}
