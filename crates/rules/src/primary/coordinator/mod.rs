//! The rules that tie one primary's parts together, with no I/O: what a failure does, when the
//! primary is looked up again, when a walk starts, what a lost subscription does, and that
//! nothing is evicted while Redis's standing is in doubt. It owns the parts that decide from time and
//! events (`standing`, `walks`, `notifications`), takes what happened with the local instant it
//! happened at, and queues [`Action`]s for the loop, which only selects events and applies
//! them ([`Coordinator::take_actions`]). What it concludes is logged here and reported through
//! the primary's [`NodeReport`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use std::time::Instant;

use super::Io;
use super::canary::WriteRefusal;
use super::deadlines;
use super::notifications::{CatchUp, Notifications, Op, Outcome, Pending, Polled, Report, Say};
use super::standing::{self, ClockStep, Evidence, Seen, Standing, Verdict, Writes};
use super::walks::{Start, WalkKind, Walks};
use crate::clock::RedisClock;
use crate::node::NodeId;
use crate::pause::{self, PauseWatch};
use crate::report::NodeReport;
use crate::trouble::{Failure, Trouble};

/// After an error is logged at error level, the same loop's next errors within this long are
/// logged at debug level only, so a flapping Redis does not flood the log.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// What the loop is asked to do.
#[derive(Debug)]
pub enum Action<E> {
    /// Send the standing probe (`TIME`, the canary, the `run_id`).
    Probe,
    /// Prove every sweep's permissions (after a refusal).
    ProvePermissions,
    /// Look the primary up again, recovering the store from this failure first (behind
    /// Sentinel the primary may have moved).
    Refresh(Option<E>),
    /// Start a walk.
    Walk(Start),
    /// Writes may have gone unnoticed: every index reads its keys at the next reconciliation.
    Unnoticed,
    /// Redis's clock stepped back: the keys with the latest deadlines are checked at once, and
    /// their scores in Redis's future reported.
    RecheckLatest,
    /// Work failed here, or the primary became a replica: the topology may have changed (a
    /// failover). The engine looks at it once for every primary.
    Suspect,
}

/// What the loop knows of its surroundings at a turn.
#[derive(Debug, Clone, Copy, Default)]
pub struct Turn {
    /// A walk is in flight.
    pub walking: bool,
    /// How many sweeps run here: with none there is nothing to walk.
    pub sweeps: usize,
    /// The data path's connection to the primary broke, or the store followed a failover on
    /// its own (the primary's server changed).
    pub node_changed: bool,
    /// Shutdown is under way: nothing new goes out but what finishes the work in flight.
    pub stopping: bool,
}

/// What a look at the primary found.
#[derive(Debug)]
pub enum Refreshed<E> {
    /// The same server.
    Same,
    /// Another server serves this primary's keys now (a failover followed).
    Moved(String),
    /// This server is no longer a primary: the engine stops the loop.
    NotPrimary,
    /// It could not be looked up (its error): tried again after a while.
    Failed(E),
    /// Shutdown came first.
    Cancelled,
}

/// What the engine learns from one primary's loop.
#[derive(Debug, Default)]
pub struct Shared {
    /// Whether notifications are in use here (the engine sets the sweeps' intervals from it).
    pub subscribed: AtomicBool,
    /// Redis's last answer here.
    pub last_answer: LastAnswer,
    /// Pauses of the daemon itself, watched by the engine.
    pub pauses: Arc<PauseWatch>,
}

/// Redis's last answer to a primary's loop: when (local instant) and its clock then.
#[derive(Debug, Default)]
pub struct LastAnswer(std::sync::Mutex<Option<(Instant, f64)>>);

impl LastAnswer {
    fn set(&self, at: Instant, redis: f64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((at, redis));
    }

    /// Redis's clock at the last answer, if that is longer ago than an outage takes to show
    /// at `now`: a loop replacing this one after a failover knows since when the apps could
    /// not write.
    pub fn stalled_since(&self, now: Instant) -> Option<f64> {
        let last = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        last.filter(|(at, _)| now.saturating_duration_since(*at) > standing::STALL)
            .map(|(_, redis)| redis)
    }
}

/// How the loop starts.
pub struct Setup {
    pub node: NodeId,
    pub reconcile_interval: Duration,
    /// `tracking.notifications = "off"`.
    pub notifications_off: bool,
    /// `tracking.notifications = "on"`: their absence is worth a warning.
    pub notifications_expected: bool,
    /// This loop replaces primaries that stopped answering at this instant (Redis's clock).
    pub inherited_outage: Option<f64>,
    /// Its server took keys over (a failover): its first probe ends with a credit.
    pub takes_over: bool,
}

/// Looks at the primary after a failure, at most once per [`deadlines::RETRY`].
#[derive(Debug)]
struct Refresh {
    after: Instant,
    in_flight: bool,
}

/// The rules of one primary's loop, over the I/O side's types `I` (the real ones in the loop,
/// stand-ins in the tests).
pub struct Coordinator<I: Io> {
    node: NodeId,
    standing: Standing,
    walks: Walks,
    notifications: Notifications<I>,
    report: Box<dyn NodeReport>,
    shared: Arc<Shared>,
    /// A failure since the last look at the primary: behind Sentinel it may have moved.
    failure: Option<I::Error>,
    refresh: Refresh,
    /// The daemon's pauses taken in so far.
    pauses_seen: pause::Cursor,
    last_error_log: Option<Instant>,
    actions: Vec<Action<I::Error>>,
}

impl<I: Io> Coordinator<I> {
    pub fn new(
        at: Instant,
        setup: Setup,
        report: Box<dyn NodeReport>,
        shared: Arc<Shared>,
    ) -> Self {
        let mut standing = Standing::new(at, setup.inherited_outage);
        if setup.takes_over {
            standing.on_moved(at);
        }
        Self {
            node: setup.node,
            standing,
            walks: Walks::new(at, setup.reconcile_interval),
            notifications: Notifications::new(
                at,
                setup.notifications_off,
                setup.notifications_expected,
            ),
            report,
            shared,
            failure: None,
            refresh: Refresh {
                after: at,
                in_flight: false,
            },
            pauses_seen: pause::Cursor::default(),
            last_error_log: None,
            actions: Vec::new(),
        }
    }

    /// What the loop is to do now, in order.
    pub fn take_actions(&mut self) -> Vec<Action<I::Error>> {
        std::mem::take(&mut self.actions)
    }

    /// Redis's clock as last read, if it was.
    pub fn clock(&self) -> Option<RedisClock> {
        self.standing.clock()
    }

    /// How a check at `at` of a sweep of window `ttl` (seconds) may judge; `None`: nothing may
    /// be evicted now (Redis's standing is in doubt after a failure, a pause of the daemon, a move, or
    /// while the primary is being looked up again).
    pub fn verdict(&self, at: Instant, ttl: f64) -> Option<Verdict> {
        if self.refresh.in_flight {
            return None;
        }
        self.standing.verdict(at, ttl)
    }

    /// Until when (Redis's clock) members of a sweep of window `ttl` are spared by the credit
    /// of the last outage or reset, if it was granted.
    pub fn credit_until(&self, ttl: f64) -> Option<f64> {
        self.standing.credit().map(|c| c.until(ttl))
    }

    /// Whether notifications are in use now.
    pub fn in_use(&self) -> bool {
        self.notifications.in_use()
    }

    /// Whether a catch-up walk is wanted (a subscription was lost or made, the primary moved).
    pub fn catch_up_wanted(&self) -> bool {
        self.walks.sync_wanted()
    }

    /// Changes whenever a subscription is made or lost.
    pub fn generation(&self) -> u64 {
        self.notifications.generation()
    }

    /// What the loop polls for the subscription.
    pub fn subscription(&mut self) -> Polled<'_, I> {
        self.notifications.polled()
    }

    /// Decides what is due at `now`, queueing the actions: a look at the primary after a
    /// failure, subscription work (its futures made by `start`), a walk, probes.
    pub fn turn(&mut self, now: Instant, turn: Turn, start: impl FnMut(Op<I>) -> Pending<I>) {
        self.maybe_refresh(now, turn);
        // A walk queued (by a tick) counts as one in flight: the loop starts it next.
        let walking = turn.walking || self.actions.iter().any(|a| matches!(a, Action::Walk(_)));
        if !walking && self.walks.reconcile_due(now) {
            self.notifications.want_recheck();
        }
        self.notifications.poll(now, start);
        if let Some(report) = self.notifications.judge(now) {
            self.apply(now, report);
        }
        if !walking && self.walks.due(now, self.notifications.walk_waits(now)) {
            let can_walk = turn.sweeps > 0 && !turn.stopping;
            self.start_walk(now, WalkKind::Reconcile, can_walk);
        }
        // While the primary is looked up again nothing goes to it: as if the look were the
        // only thing in flight.
        if !turn.stopping && !self.refresh.in_flight {
            while let Some(action) = self.standing.poll(now) {
                self.actions.push(match action {
                    standing::Request::Probe => Action::Probe,
                    standing::Request::ProvePermissions => Action::ProvePermissions,
                });
            }
        }
    }

    /// A schedule tick (or the reconciliation) asks for a walk of `kind`: queued unless there
    /// is nothing to walk.
    pub fn start_walk(&mut self, at: Instant, kind: WalkKind, can_walk: bool) {
        if !can_walk {
            self.walks.nothing_to_walk(at);
            return;
        }
        let start = self.walks.start(at, kind, self.notifications.in_use());
        self.actions.push(Action::Walk(start));
    }

    /// After a failure, the primary is looked up again (behind Sentinel it may have moved),
    /// and so it is when the store followed a failover on its own or the data path's
    /// connection broke; at most once per [`deadlines::RETRY`], one look at a time.
    fn maybe_refresh(&mut self, now: Instant, turn: Turn) {
        let wanted = self.failure.is_some() || turn.node_changed;
        if !wanted || turn.stopping || self.refresh.in_flight || self.refresh.after > now {
            return;
        }
        self.refresh = Refresh {
            after: now + deadlines::RETRY,
            in_flight: true,
        };
        // A connection that broke may have been to a Redis that restarted: nothing is judged
        // on its replacement until a probe shows whether the data was kept.
        self.standing.on_failure();
        self.actions.push(Action::Refresh(self.failure.take()));
    }

    /// The look at the primary came back at `at`.
    pub fn on_refreshed(&mut self, at: Instant, refreshed: Refreshed<I::Error>) {
        self.refresh.in_flight = false;
        match refreshed {
            Refreshed::Same | Refreshed::Cancelled => {}
            Refreshed::Moved(server) => {
                tracing::info!(node = %self.node, %server, "the primary moved; following it");
                self.standing.on_moved(at);
                let report = self.notifications.restart(at);
                self.apply(at, report);
                self.walks.want_sync_soon();
            }
            Refreshed::NotPrimary => {
                tracing::debug!(node = %self.node, "no longer a primary; waiting to be stopped");
            }
            Refreshed::Failed(e) => {
                self.log_error(at, "cannot reach the primary", &e);
                self.failure = Some(e);
            }
        }
    }

    /// The loop turned: a pause of the daemon since the last turn is neither an outage nor a
    /// reason for a credit, but Redis is probed before anything is judged again.
    pub fn on_turn(&mut self, at: Instant) {
        let Some((ended, pause)) = self.shared.pauses.since(&mut self.pauses_seen, at) else {
            return;
        };
        self.standing.on_pause(ended, pause);
        tracing::warn!(
            node = %self.node,
            seconds = format_args!("{:.1}", pause.as_secs_f64()),
            "the daemon itself did not run for a while (paused or starved): not a Redis outage; checking Redis before judging"
        );
    }

    /// The earliest instant something is due, given when the next batch of keys is ripe
    /// (`due`, ms on Redis's clock; only when a check could go) and the walk in flight (`None`: none is;
    /// `Some(paced)`: one is, its next page held back until `paced`).
    pub fn next_wake(
        &self,
        now: Instant,
        alive_every: Duration,
        due: Option<u64>,
        walk: Option<Option<Instant>>,
    ) -> Instant {
        let mut wake = now + alive_every;
        let mut at = |t: Instant| wake = wake.min(t);
        if let Some(due) = due
            && self.verdict(now, 0.0).is_some()
            && let Some(clock) = self.standing.clock()
        {
            at(clock.local(due));
        }
        // Walks start only when none runs: their timers would only spin meanwhile.
        match walk {
            None => at(self.walks.next_wake(self.notifications.walk_waits(now))),
            Some(paced) => paced.into_iter().for_each(&mut at),
        }
        self.notifications.next_wake().into_iter().for_each(&mut at);
        if !self.refresh.in_flight {
            self.standing.next_wake().into_iter().for_each(&mut at);
        }
        if self.failure.is_some() && !self.refresh.in_flight {
            at(self.refresh.after.max(now));
        }
        wake
    }

    /// Redis answered at `at` (with its clock, when the reply says) a request sent at `sent`,
    /// if known.
    pub fn on_reply(&mut self, sent: Option<Instant>, at: Instant, time: Option<f64>) {
        let seen = self.standing.on_reply(sent, at, time);
        self.seen(at, seen);
    }

    /// A reply that failed still carried Redis's clock.
    pub fn on_time(&mut self, sent: Option<Instant>, at: Instant, time: f64) {
        let step = self.standing.observe_time(sent, at, time);
        self.seen(
            at,
            Seen {
                step,
                ..Seen::default()
            },
        );
    }

    /// A check sent at `sent` came back at `at`, carrying Redis's clock if it read it. One that
    /// failed is no answer (its failure is told apart), but its clock still counts.
    pub fn on_check(&mut self, sent: Instant, at: Instant, time: Option<f64>, failed: bool) {
        match (failed, time) {
            (false, time) => self.on_reply(Some(sent), at, time),
            (true, Some(time)) => self.on_time(Some(sent), at, time),
            (true, None) => {}
        }
    }

    /// Whether a check at `now` should read Redis's `TIME` anew: no reply carried it for a
    /// while.
    pub fn wants_time(&self, now: Instant) -> bool {
        self.standing
            .last_read()
            .is_none_or(|at| now.saturating_duration_since(at) > deadlines::CLOCK_REFRESH)
    }

    /// The probe came back at `at`: what it shows of Redis's data, and of an outage it ends.
    pub fn on_probe(&mut self, at: Instant, probe: Result<Evidence, I::Error>) {
        let ev = match probe {
            Ok(ev) => ev,
            Err(e) => {
                self.standing.on_probe(at, Err(()));
                return self.on_failure(at, "Redis did not answer TIME", e);
            }
        };
        let seen = self.standing.on_probe(at, Ok(ev));
        if seen.canary_refused {
            tracing::warn!(node = %self.node, "the Redis user may not ZINCRBY the canary (presence-sweeper:canary:*): a flush or a rewind of Redis's data is seen only when Redis restarts (its run_id), and refused writes not at all");
        }
        if let Some(reset) = seen.reset {
            tracing::warn!(node = %self.node, reason = ?reset, "Redis's data was reset or rewound: every member it holds gets a full ttl from now");
        }
        self.seen(at, seen);
    }

    /// Says and reports what a reply or a probe showed: an outage that ended, a step of Redis's
    /// clock, writes refused or taken again.
    fn seen(&mut self, at: Instant, seen: Seen) {
        let node = &self.node;
        if let Some(outage) = seen.outage {
            self.report.outage();
            tracing::warn!(
                %node,
                seconds = format_args!("{:.1}", outage.seconds),
                "Redis did not answer for a while: every member it holds gets a full ttl from now"
            );
        }
        if let Some(step) = seen.step {
            self.report.clock_step(step.direction(), step.seconds());
            let seconds = format_args!("{:.1}", step.seconds());
            match step {
                ClockStep::Forward(_) => {
                    tracing::warn!(%node, %seconds, "Redis's clock stepped forward: every member it holds gets a full ttl of real time from now")
                }
                ClockStep::Backward(_) => {
                    tracing::warn!(%node, %seconds, "Redis's clock stepped back: zombies leave that much later, and scores written before the step lie in its future");
                    self.actions.push(Action::RecheckLatest);
                }
            }
        }
        match seen.writes {
            Some(Writes::Refused(refusal)) => self.writes_refused(at, refusal),
            Some(Writes::Taken { seconds }) => {
                self.report.writes_refused(None);
                tracing::warn!(%node, seconds = format_args!("{seconds:.1}"), "Redis takes writes again: every member it holds gets a full ttl from now");
            }
            None => {}
        }
        if let Some((at, redis)) = self.standing.last_reply() {
            self.shared.last_answer.set(at, redis);
        }
    }

    /// The canary's increment was refused: the apps' heartbeats are, too. Nobody is judged
    /// until Redis takes writes again; a replica now (READONLY) means a failover, so the
    /// topology and the primary are looked at again.
    fn writes_refused(&mut self, at: Instant, refusal: WriteRefusal) {
        let why = format!(
            "Redis refuses writes ({}): the apps cannot heartbeat, so nobody is judged until it takes them again",
            refusal.code()
        );
        tracing::warn!(node = %self.node, code = refusal.code(), "{why}");
        self.report.writes_refused(Some(why));
        if refusal == WriteRefusal::ReadOnly {
            self.actions.push(Action::Suspect);
            self.failure = Some(I::Error::read_only());
            self.walks.want_sync(at + deadlines::RETRY);
        }
    }

    /// The permissions were proven again after a refusal (`Ok`), or are still refused.
    pub fn on_permitted(&mut self, at: Instant, permitted: Result<(), I::Error>) {
        match permitted {
            Ok(()) => {
                tracing::info!(node = %self.node, "the Redis user may now run everything the checks need");
                self.standing.on_proof(at, true);
                self.report.refused(None);
            }
            Err(e) => {
                self.standing.on_proof(at, false);
                self.note_refusal(at, &e);
            }
        }
    }

    /// Work failed at `at` (`what` says which): Redis may have restarted (keys gone, or created
    /// anew), so nothing is judged until a probe shows whether it kept its data, and the index
    /// is reconciled once Redis answers again; the engine looks at the topology, and the
    /// primary is looked up again (behind Sentinel it may have moved).
    pub fn on_failure(&mut self, at: Instant, what: &str, e: I::Error) {
        self.log_error(at, what, &e);
        self.note_refusal(at, &e);
        self.standing.on_failure();
        self.actions.push(Action::Suspect);
        self.walks.want_sync(at + deadlines::RETRY);
        self.failure = Some(e);
    }

    /// A refusal of the credentials or of a command (an ACL) is not an outage: it is counted by
    /// kind, and a refused command makes readiness name it until the permissions are proven.
    fn note_refusal(&mut self, at: Instant, e: &I::Error) {
        let trouble = e.trouble();
        match trouble {
            Trouble::Permission => {
                self.report.failure(trouble);
                self.report.refused(Some(e.to_string()));
                self.standing.on_refusal(at);
            }
            Trouble::Credentials => self.report.failure(trouble),
            Trouble::Unreachable | Trouble::Timeout | Trouble::Other => {}
        }
    }

    /// Logs `e` at error level, or at debug level within [`LOG_EVERY`] of the last error.
    fn log_error(&mut self, at: Instant, what: &str, e: &I::Error) {
        if self
            .last_error_log
            .is_some_and(|last| at.saturating_duration_since(last) < LOG_EVERY)
        {
            tracing::debug!(node = %self.node, error = %e, "{what}");
            return;
        }
        self.last_error_log = Some(at);
        tracing::error!(node = %self.node, error = %e, "{what}");
    }

    /// The sweeps here changed (a reload, a lease won or lost): a walk finds the keys of new
    /// ones, and the subscription's patterns follow (an attempt in flight was for the sweeps as
    /// they were).
    pub fn on_sweeps_changed(&mut self, at: Instant) {
        self.walks.want_sync(at);
        let report = self.notifications.restart(at);
        self.apply(at, report);
    }

    /// The loop's in-flight window is `depth` now.
    pub fn on_window(&self, depth: usize) {
        self.report.check_window(depth);
    }

    /// A notice arrived at `at`: notifications flow.
    pub fn on_notice(&mut self, at: Instant) {
        self.report.notice();
        if let Some(report) = self.notifications.on_notice(at) {
            self.apply(at, report);
        }
    }

    /// The subscription operation in flight came to `outcome` at `at`.
    pub fn on_subscription(&mut self, at: Instant, outcome: Outcome<I>) {
        let report = self.notifications.on_outcome(at, outcome);
        self.apply(at, report);
    }

    /// The subscription's connection closed at `at`: often the first sign of a restart.
    pub fn on_subscription_lost(&mut self, at: Instant, why: &str) {
        tracing::warn!(node = %self.node, reason = why, "lost the keyspace-notification subscription; subscribing again, then a walk finds what was missed");
        self.standing.on_failure();
        let report = self.notifications.on_lost(at);
        self.apply(at, report);
    }

    /// A walk failed at `at` with `error`.
    pub fn on_walk_failed(&mut self, at: Instant, error: I::Error) {
        self.on_failure(at, "a walk failed; it is tried again", error);
    }

    /// Applies what a change of the subscription asks: the log, the gauges, the walks that
    /// find what went unnoticed.
    fn apply(&mut self, at: Instant, report: Report<I::Error>) {
        let node = &self.node;
        match report.say {
            Some(Say::InUse) => {
                tracing::info!(%node, "keyspace notifications in use");
            }
            Some(Say::Warn(why)) => {
                tracing::warn!(%node, reason = %why, "keyspace notifications are not in use here: walks follow each sweep's schedule");
            }
            Some(Say::Info(why)) => {
                tracing::info!(%node, reason = %why, "keyspace notifications are off here: walks follow each sweep's schedule");
            }
            Some(Say::Debug(why)) => {
                tracing::debug!(%node, reason = %why, "keyspace notifications are still off here");
            }
            None => {}
        }
        if let Some(e) = report.failed {
            self.log_error(
                at,
                "could not subscribe to keyspace notifications; retrying",
                &e,
            );
        }
        match report.catch_up {
            Some(CatchUp::Now) => self.walks.want_sync(at),
            Some(CatchUp::Soon) => self.walks.want_sync_soon(),
            None => {}
        }
        if report.unnoticed {
            self.actions.push(Action::Unnoticed);
        }
        if let Some(refused) = report.config_refused {
            self.report.config_refused(refused);
        }
        if let Some(in_use) = report.in_use {
            self.shared.subscribed.store(in_use, Ordering::Relaxed);
            self.report.notifications(in_use);
        }
    }

    /// The loop stops: this primary's series and refusal go.
    pub fn forget(&self) {
        self.report.forget();
    }
}

#[cfg(test)]
mod tests;
