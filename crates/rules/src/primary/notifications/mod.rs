//! The keyspace-notification subscription of one primary's loop, as one state machine: whether
//! notifications are in use, the operation in flight on them (subscribing, a ping, a look at
//! the server's settings), when to try again, and what the loop must do when that changes.
//!
//! Notices arriving are the proof that notifications flow, not the server's settings: a managed
//! Redis may refuse `CONFIG` while publishing them, and an operator may switch them off at run
//! time. So the daemon subscribes wherever it may, and notifications are in use while notices
//! arrive (any event of a watched key, the sweeper's own removals among them). Where `CONFIG
//! GET` answers, it speaks for a quiet keyspace: after [`QUIET`] without a notice the settings
//! are looked at, and "on" counts as a notice. After [`SILENT`] with neither, notifications are
//! not in use and walks follow each sweep's schedule until the next notice.
//!
//! No I/O: [`Notifications::poll`] says which operation to start and keeps the future the loop
//! makes for it inside the state, and [`Notifications::on_outcome`] takes what it came to. The
//! subscription type is a parameter, so the rules are tested without Redis.

use std::time::Duration;

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use super::Io;
use crate::backoff::Backoff;

/// How often a subscription proves it still delivers.
const SUBSCRIPTION_PING: Duration = Duration::from_secs(5);
/// Bounds of the wait before subscribing again after a failure.
const RESUBSCRIBE_FIRST: Duration = Duration::from_millis(100);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(5);
/// A walk waits for a subscription tried again within this long: then one walk does for both.
const WALK_WAITS: Duration = Duration::from_secs(1);
/// Without a notice for this long, the server's settings are looked at (where it answers).
pub const QUIET: Duration = Duration::from_secs(15);
/// Without a notice (or a look saying they are on) for this long, notifications are not in
/// use: switched off at run time, or a server that stopped answering. Documented in
/// docs/operations.md.
pub const SILENT: Duration = Duration::from_secs(30);

/// What the server's `CONFIG GET notify-keyspace-events` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Config {
    /// On (turned on if `tracking.configure_notifications` said so).
    On,
    /// Off: the flags the server has.
    Off(String),
    /// Refused for good (an ACL, a renamed command), and why: only notices tell.
    Refused(String),
    /// No answer this time (a timeout, a lost connection): nothing learnt.
    NoAnswer,
}

/// What an operation on the subscription came to.
pub enum Outcome<I: Io> {
    /// A new subscription, and what the server's settings said: what was written before it is
    /// found by a walk.
    Subscribed(Box<I::Subscription>, Config),
    /// The subscription still works (a ping).
    Kept(Box<I::Subscription>),
    /// A look at the server's settings.
    Looked(Box<I::Subscription>, Config),
    /// Not to be had here, and why; `refused` if the server has them but the Redis user may
    /// not use them (an ACL to fix, where an operator who left them off needs no warning).
    Unavailable {
        why: String,
        refused: bool,
    },
    Failed(I::Error),
}

/// An operation for the loop to start.
pub enum Op<I: Io> {
    /// Subscribe anew (turning notifications on if the configuration allows).
    Subscribe,
    /// Prove the subscription delivers.
    Ping(Box<I::Subscription>),
    /// Are notifications still on (or on now)? Turns them on if the configuration allows.
    Recheck(Box<I::Subscription>),
}

/// The future of an operation in flight.
pub type Pending<I> = Pin<Box<dyn Future<Output = Outcome<I>> + Send>>;

enum Stage<I: Io> {
    /// `tracking.notifications = "off"`.
    Off,
    /// Not subscribed: try at `retry_at`.
    Idle { retry_at: Instant },
    /// An operation in flight; `subscribing` if it makes a new subscription.
    Busy { op: Pending<I>, subscribing: bool },
    /// Subscribed.
    Active(Box<I::Subscription>),
    /// The server has them off (or will not say): walks follow the schedule; looked at again
    /// at each reconciliation.
    Unavailable,
}

/// What the loop polls for the subscription.
pub enum Polled<'a, I: Io> {
    Op(&'a mut Pending<I>),
    Active(&'a mut I::Subscription),
    Nothing,
}

/// How urgently a walk must find what was written while notifications were not in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Once the walk's usual wait (after a failure) is over.
    Soon,
    /// At once: a new subscription.
    Now,
}

/// What the loop says about notifications (it adds the node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Say {
    InUse,
    /// Not in use, where they were or were expected: a warning.
    Warn(String),
    /// Off here, as the operator may well have meant: said once.
    Info(String),
    /// Still off, as said before.
    Debug(String),
}

/// What a change of the subscription asks of the loop.
#[derive(Debug)]
pub struct Report<E> {
    /// Whether notifications are in use now, when that may have changed.
    pub in_use: Option<bool>,
    /// Writes went (or may go) unnoticed: the next reconciliation reads every key.
    pub unnoticed: bool,
    pub catch_up: Option<CatchUp>,
    pub say: Option<Say>,
    /// An attempt failed: log it (it is tried again).
    pub failed: Option<E>,
    /// Whether the server refuses `CONFIG`, when that may have changed.
    pub config_refused: Option<bool>,
}

// Not derived: a derived `Default` would ask one of `E` too.
impl<E> Default for Report<E> {
    fn default() -> Self {
        Self {
            in_use: None,
            unnoticed: false,
            catch_up: None,
            say: None,
            failed: None,
            config_refused: None,
        }
    }
}

pub struct Notifications<I: Io> {
    stage: Stage<I>,
    backoff: Backoff,
    /// Notifications are in use: subscribed now.
    in_use: bool,
    /// Counts subscriptions made and lost.
    generation: u64,
    /// `tracking.notifications = "on"`: their absence is worth a warning.
    expected: bool,
    next_ping: Instant,
    /// The last notice, or look saying notifications are on, or subscription.
    flow_at: Instant,
    /// What the server says of its settings, and when it was last asked.
    settings: Looks,
}

/// The looks at the server's `notify-keyspace-events` (`CONFIG GET`), where it answers.
struct Looks {
    /// A reconciliation is due to look at the server's settings again.
    recheck_wanted: bool,
    /// Why they were last said to be unavailable, so that each reconciliation's look does not
    /// say it again.
    unavailable_said: Option<String>,
    /// The last look at the server's settings.
    looked_at: Instant,
    /// The server refuses `CONFIG`: nothing to look at, notices alone tell.
    config_refused: bool,
}

impl<I: Io> Notifications<I> {
    /// `off`: `tracking.notifications = "off"`; `expected`: `"on"`.
    pub fn new(at: Instant, off: bool, expected: bool) -> Self {
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
            next_ping: at + SUBSCRIPTION_PING,
            flow_at: at,
            settings: Looks {
                recheck_wanted: false,
                unavailable_said: None,
                looked_at: at,
                config_refused: false,
            },
        }
    }

    pub fn in_use(&self) -> bool {
        self.in_use
    }

    /// Changes whenever a subscription is made or lost: a walk under one generation from start
    /// to end noticed every write.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether a subscription is being made, or will be tried again soon (after a lost one, a
    /// short backoff): a walk waits for it. One that keeps failing waits longer, and the walk
    /// does not.
    pub fn walk_waits(&self, at: Instant) -> bool {
        match self.stage {
            Stage::Busy { subscribing, .. } => subscribing,
            Stage::Idle { retry_at } => retry_at <= at + WALK_WAITS,
            _ => false,
        }
    }

    /// A reconciliation is due: look at the server's settings again.
    pub fn want_recheck(&mut self) {
        self.settings.recheck_wanted = true;
    }

    /// When [`Notifications::poll`] has something to start, if nothing happens meanwhile.
    pub fn next_wake(&self) -> Option<Instant> {
        let silent = self.in_use.then_some(self.flow_at + SILENT);
        let own = match self.stage {
            Stage::Idle { retry_at } => Some(retry_at),
            Stage::Active(_) => Some(match self.look_at() {
                Some(look) => self.next_ping.min(look),
                None => self.next_ping,
            }),
            _ => None,
        };
        own.into_iter().chain(silent).min()
    }

    /// When the quiet calls for a look at the server's settings (never where it refuses them).
    fn look_at(&self) -> Option<Instant> {
        (!self.settings.config_refused).then(|| self.flow_at.max(self.settings.looked_at) + QUIET)
    }

    /// Whether a subscription is held (idle or with a ping or a look in flight).
    fn holds_subscription(&self) -> bool {
        matches!(
            self.stage,
            Stage::Active(_)
                | Stage::Busy {
                    subscribing: false,
                    ..
                }
        )
    }

    /// What the loop polls: the operation in flight, or the subscription's messages.
    pub fn polled(&mut self) -> Polled<'_, I> {
        match &mut self.stage {
            Stage::Busy { op, .. } => Polled::Op(op),
            Stage::Active(sub) => Polled::Active(&mut **sub),
            _ => Polled::Nothing,
        }
    }

    /// Starts what is due at `at`, with the future `start` makes for it.
    pub fn poll(&mut self, at: Instant, mut start: impl FnMut(Op<I>) -> Pending<I>) {
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
        let quiet =
            matches!(self.stage, Stage::Active(_)) && self.look_at().is_some_and(|look| look <= at);
        if self.settings.recheck_wanted
            && self.settings.config_refused
            && matches!(self.stage, Stage::Active(_))
        {
            // Nothing to look at: the subscription's pings and notices tell.
            self.settings.recheck_wanted = false;
        }
        if (self.settings.recheck_wanted || quiet) && !matches!(self.stage, Stage::Busy { .. }) {
            self.settings.recheck_wanted = false;
            match std::mem::replace(&mut self.stage, Stage::Unavailable) {
                Stage::Unavailable => {
                    self.backoff.reset();
                    self.stage = Stage::Idle { retry_at: at };
                    return;
                }
                Stage::Active(sub) => {
                    self.settings.looked_at = at;
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
    pub fn on_outcome(&mut self, at: Instant, outcome: Outcome<I>) -> Report<I::Error> {
        match outcome {
            Outcome::Subscribed(sub, config) => {
                self.backoff.reset();
                self.stage = Stage::Active(sub);
                self.next_ping = at + SUBSCRIPTION_PING;
                (self.flow_at, self.settings.looked_at) = (at, at);
                let mut report = self.on_config(config, true);
                // Whatever was written before the subscription is found by a walk.
                report.catch_up = Some(CatchUp::Now);
                report
            }
            Outcome::Kept(sub) => {
                self.backoff.reset();
                self.stage = Stage::Active(sub);
                Report::default()
            }
            Outcome::Looked(sub, config) => {
                self.stage = Stage::Active(sub);
                self.on_config(config, false)
            }
            Outcome::Unavailable { why, refused } => {
                let say = self.say_off(why, refused);
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

    /// What the server's settings say, at subscription (`fresh`) or at a look. "On" counts as
    /// a notice; "off" ends their use (a notice proves them on again); a refusal is said once.
    fn on_config(&mut self, config: Config, fresh: bool) -> Report<I::Error> {
        let refused = matches!(config, Config::Refused(_));
        let mut report = Report::default();
        if refused != self.settings.config_refused && config != Config::NoAnswer {
            self.settings.config_refused = refused;
            report.config_refused = Some(refused);
        }
        match config {
            Config::On => {
                self.flow_at = self.settings.looked_at;
                if !self.in_use || fresh {
                    report = Report {
                        config_refused: report.config_refused,
                        ..self.now_in_use()
                    };
                }
            }
            Config::Off(flags) => {
                // One line per change: each look at a server left off says nothing new.
                let wording = |verb: &str| {
                    format!("notify-keyspace-events {verb} {flags:?}, without K and z (or K and A)")
                };
                let (changed, is) = (wording("was changed to"), wording("is"));
                if self.settings.unavailable_said.as_deref() == Some(&changed) {
                    self.settings.unavailable_said = Some(is.clone());
                }
                let say = self.say_off(if self.in_use { changed } else { is }, false);
                if self.in_use || fresh {
                    report = Report {
                        config_refused: report.config_refused,
                        ..self.set_in_use(false)
                    };
                }
                report.say = Some(say);
            }
            Config::Refused(why) => {
                if report.config_refused.is_some() {
                    report.say = Some(Say::Warn(format!(
                        "{why}: notifications are used while notices arrive"
                    )));
                }
                if fresh {
                    // In use once a notice arrives.
                    report = Report {
                        say: report.say.take(),
                        config_refused: report.config_refused,
                        ..self.set_in_use(false)
                    };
                }
            }
            Config::NoAnswer => {}
        }
        report
    }

    /// How to say that notifications are not to be had here: once per reason, a warning where
    /// they were in use or are expected (or an ACL is to blame), else plain information.
    fn say_off(&mut self, why: String, refused: bool) -> Say {
        let say = if self.in_use || self.settings.unavailable_said.as_deref() != Some(&why) {
            if self.in_use || refused || self.expected {
                Say::Warn(why.clone())
            } else {
                Say::Info(why.clone())
            }
        } else {
            Say::Debug(why.clone())
        };
        self.settings.unavailable_said = Some(why);
        say
    }

    fn now_in_use(&mut self) -> Report<I::Error> {
        self.settings.unavailable_said = None;
        let mut report = self.set_in_use(true);
        // Keys written while notifications were not in use are found by a walk: the ones
        // since the last scheduled walk would wait for the next reconciliation otherwise.
        report.catch_up = Some(CatchUp::Now);
        report.say = Some(Say::InUse);
        report
    }

    /// A notice arrived at `at`: notifications flow. Cheap when nothing changes (every notice
    /// comes here).
    pub fn on_notice(&mut self, at: Instant) -> Option<Report<I::Error>> {
        self.flow_at = at;
        (!self.in_use && self.holds_subscription()).then(|| self.now_in_use())
    }

    /// Ends the use of notifications that have been silent for [`SILENT`] at `at`: the
    /// subscription is kept, and the next notice brings them back.
    pub fn judge(&mut self, at: Instant) -> Option<Report<I::Error>> {
        if !self.in_use || at < self.flow_at + SILENT {
            return None;
        }
        let why = format!(
            "no keyspace notification arrived for {} s",
            SILENT.as_secs()
        );
        self.settings.unavailable_said = Some(why.clone());
        let mut report = self.set_in_use(false);
        report.say = Some(Say::Warn(why));
        Some(report)
    }

    /// The subscription's connection closed at `at`: subscribe again after a short wait.
    pub fn on_lost(&mut self, at: Instant) -> Report<I::Error> {
        self.backoff.reset();
        self.stage = Stage::Idle {
            retry_at: at + self.backoff.next_delay(),
        };
        self.set_in_use(false)
    }

    /// Drops the subscription (and any operation in flight) and subscribes anew: the sweeps,
    /// or the primary's server, changed.
    pub fn restart(&mut self, at: Instant) -> Report<I::Error> {
        if matches!(self.stage, Stage::Off) {
            return Report::default();
        }
        self.backoff.reset();
        self.stage = Stage::Idle { retry_at: at };
        self.set_in_use(false)
    }

    fn set_in_use(&mut self, in_use: bool) -> Report<I::Error> {
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
mod tests;
