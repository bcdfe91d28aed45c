//! One primary's work: a deadline index per sweep, the keyspace notifications that feed it, and
//! the walks that reconcile it, all going through the one evictor ([`Sweep::check`]).
//!
//! ```text
//!  deadline index (key -> oldest + ttl) --due---> check (read, evict atomically, announce)
//!  keyspace notifications (new keys) ---track-/      |
//!  walks (SCAN: at start, after a resubscription,    +--> next deadline, back into the index
//!         every reconcile_interval, or on each
//!         sweep's schedule without notifications) --track-/
//! ```
//!
//! One task runs the loop; checks, walk pages and subscription work are futures it polls, so no
//! state is shared. A key is checked when its deadline comes (a few milliseconds after, so that
//! Redis's clock has passed it too), and at once when it is new. Checks are batched per sweep
//! (`evict.batch_keys`), `evict.pipeline_depth` in flight at a time.
//!
//! The loop knows Redis's clock from the `TIME` every check and every SCAN page carries: its
//! estimate of Redis's "now" is the last `TIME` read plus the time since, which lags the true
//! instant by the reply's travel, so a cutoff computed from it is never ahead of Redis.

mod answers;
mod canary;
mod checks;
mod liveness;
mod notifications;
mod notified;
mod ops;
mod tracked;
mod walking;
mod walks;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::{EvictConfig, NotificationMode, ScanConfig, TrackingConfig};
use crate::error::Trouble;
use crate::serve::health::{Health, LoopHealth};
use crate::serve::metrics::{Metrics, SweepMetrics};
use crate::store::walk::Page;
use crate::store::{Node, NodeId, Store};
use crate::sweep::{Checked, Sweep};
use crate::tracking::index::{Capacity, NEVER, Ticket, Track};
use crate::tracking::keyspace::{Change, Notice, Subscription};

use checks::{Checks, Look};
use liveness::Liveness;
use notifications::{Io as SubIo, Notifications, Outcome};
use ops::{Done, Io};
use tracked::Tracked;
use walks::{Walk, WalkKind, Walks};

/// Notices taken at once when they have already arrived.
const NOTICE_BATCH: usize = 256;
/// After an error is logged at error level, the same loop's next errors within this long are
/// logged at debug level only, so a flapping Redis does not flood the log.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// The loop turns at least this often, idle or not: its turning is what the systemd watchdog
/// and liveness watch.
pub(crate) const ALIVE_EVERY: Duration = Duration::from_secs(5);

/// The daemon-wide settings every primary's loop works by.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    pub(crate) scan: ScanConfig,
    pub(crate) evict: EvictConfig,
    pub(crate) tracking: TrackingConfig,
    /// `redis.command_timeout`: bounds subscription round trips.
    pub(crate) command_timeout: Duration,
    /// The loop turns at least this often (a quarter of the systemd watchdog's period, at
    /// most [`ALIVE_EVERY`]).
    pub(crate) alive_every: Duration,
}

/// A sweep as the loops run it, shared by every primary.
pub(crate) struct Job {
    pub(crate) sweep: Arc<Sweep>,
    pub(crate) metrics: SweepMetrics,
}

impl Job {
    fn name(&self) -> &str {
        &self.sweep.config().name
    }
}

/// What a primary's loop is told.
pub(crate) enum Command {
    /// The sweeps to run here from now on: a reload changed them, or a lease was won or lost.
    /// A sweep that is new, or whose settings changed, starts with an empty index and a walk.
    Jobs(Vec<Arc<Job>>),
    /// A sweep's schedule ticked: walk, unless notifications make it unnecessary.
    Tick(String),
}

/// One primary's loop, with what it works with.
pub(crate) struct Primary {
    pub(crate) node: Node,
    pub(crate) store: Store,
    pub(crate) settings: Arc<Settings>,
    pub(crate) capacity: Arc<Capacity>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) health: Arc<Health>,
    /// Set while notifications are in use here (the engine reads it for the sweeps' intervals).
    pub(crate) subscribed: Arc<AtomicBool>,
    /// Told when work fails here: the topology may have changed (a failover).
    pub(crate) suspect: Arc<tokio::sync::Notify>,
    /// Where the loop records Redis's last answer, so that a loop replacing this one after a
    /// failover knows since when the apps could not write.
    pub(crate) last_answer: Arc<LastAnswer>,
    /// This loop replaces primaries that stopped answering at this instant (Redis's clock): a
    /// failover. Its first answer ends that outage, and the credit follows.
    pub(crate) inherited_outage: Option<f64>,
    /// This loop starts on a change of the topology, not at start: its server took keys over
    /// (a failover, maybe to a replica that lags, even while the old primary still answers).
    /// Its first probe ends with a credit, as a followed failover's does.
    pub(crate) takes_over: bool,
}

/// Redis's last answer to a primary's loop: when (local instant) and its clock then.
#[derive(Debug, Default)]
pub(crate) struct LastAnswer(std::sync::Mutex<Option<(Instant, f64)>>);

impl LastAnswer {
    fn set(&self, at: Instant, redis: f64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((at, redis));
    }

    /// Redis's clock at the last answer, if that is longer ago than an outage takes to show.
    pub(crate) fn stalled_since(&self) -> Option<f64> {
        let last = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        last.filter(|(at, _)| at.elapsed() > liveness::STALL)
            .map(|(_, redis)| redis)
    }
}

impl Primary {
    /// Runs until `cancel` fires, then lets the checks in flight finish (their events are
    /// published) and returns.
    pub(crate) async fn run(self, commands: mpsc::Receiver<Command>, cancel: CancellationToken) {
        let id = self.node.id().clone();
        let now = Instant::now();
        let loop_health = Arc::new(self.health.register_loop(&format!("primary {id}")));
        let mode = self.settings.tracking.notifications;
        let mut run = Run {
            outages: self.metrics.outages(&id),
            gauge: self.metrics.notifications_gauge(&id),
            config_refused: self.metrics.config_refused_gauge(&id),
            checks: Checks {
                batch: self.settings.evict.batch_keys,
                depth: self.settings.evict.pipeline_depth,
            },
            walks: Walks::new(now, self.settings.tracking.reconcile_interval),
            notifications: Notifications::new(
                now,
                mode == NotificationMode::Off,
                mode == NotificationMode::On,
            ),
            liveness: {
                let mut liveness = Liveness::new(now, self.inherited_outage);
                if self.takes_over {
                    liveness.on_moved();
                }
                liveness
            },
            io: Io {
                store: self.store,
                node: self.node,
                settings: self.settings,
                cancel,
            },
            id,
            capacity: self.capacity,
            metrics: self.metrics,
            health: self.health,
            loop_health,
            commands,
            jobs: Vec::new(),
            next_epoch: 0,
            in_flight: FuturesUnordered::new(),
            walk: None,
            subscribed_flag: self.subscribed,
            suspect: self.suspect,
            canary_key: None,
            planned_wake: None,
            last_error_log: None,
            failure: None,
            last_answer: self.last_answer,
            refresh_after: now,
        };
        run.main().await;
        run.drain().await;
        run.metrics.forget_node(&run.id);
        run.health.set_refused(&run.id, None);
        for t in &run.jobs {
            t.job.metrics.forget_node(&run.id);
            t.job.sweep.guard().forget(&run.id);
        }
        run.loop_health.retire();
    }
}

/// What woke the loop.
enum Event {
    Command(Option<Command>),
    Done(Done),
    Page(Option<Result<Page, Error>>),
    Notice(Option<Notice>),
    Subscription(Outcome<Subscription>),
    Timer,
    Cancelled,
}

/// The loop: it selects events and applies what its parts (`checks`, `walks`,
/// `notifications`, `liveness`) decide.
struct Run {
    id: NodeId,
    io: Io,
    capacity: Arc<Capacity>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    loop_health: Arc<LoopHealth>,
    commands: mpsc::Receiver<Command>,
    jobs: Vec<Tracked>,
    next_epoch: u64,
    in_flight: FuturesUnordered<BoxFuture<'static, Done>>,
    checks: Checks,
    walks: Walks,
    walk: Option<Walk>,
    notifications: Notifications<Subscription>,
    /// Shares whether notifications are in use with the engine (for the sweeps' intervals).
    subscribed_flag: Arc<AtomicBool>,
    gauge: prometheus::IntGauge,
    /// 1 while the server refuses `CONFIG`.
    config_refused: prometheus::IntGauge,
    suspect: Arc<tokio::sync::Notify>,
    liveness: Liveness,
    /// Shares Redis's last answer with the engine.
    last_answer: Arc<LastAnswer>,
    outages: prometheus::IntCounter,
    /// The canary's key here, once known (see [`canary`]).
    canary_key: Option<Vec<u8>>,
    /// When the loop's timer was last asked to fire: a turn far later was a pause of the
    /// daemon.
    planned_wake: Option<Instant>,
    last_error_log: Option<Instant>,
    /// A failure since the last look at the primary: behind Sentinel it may have moved.
    failure: Option<Error>,
    refresh_after: Instant,
}

impl Run {
    async fn main(&mut self) {
        loop {
            self.maybe_refresh_node().await;
            self.start_work();
            self.loop_health.alive();
            let event = self.next_event().await;
            self.paused();
            match event {
                Event::Cancelled | Event::Command(None) => return,
                Event::Command(Some(c)) => self.command(c),
                Event::Done(done) => self.done(done),
                Event::Page(page) => self.page(page),
                Event::Notice(Some(n)) => {
                    self.notice(n);
                    self.notices_waiting();
                }
                Event::Notice(None) => self.subscription_lost("the connection closed"),
                Event::Subscription(o) => {
                    let report = self.notifications.on_outcome(Instant::now(), o);
                    self.apply(report);
                }
                Event::Timer => {}
            }
        }
    }

    /// Waits for whatever comes first.
    async fn next_event(&mut self) -> Event {
        let now = Instant::now();
        let wake = self.next_wake(now);
        self.planned_wake = Some(wake);
        let room = self.checks.room(self.in_flight.len());
        let queued_ok = self.checks.room_for_page(self.queued());
        let walk_wants_page = self
            .walk
            .as_ref()
            .is_some_and(|w| w.wants_page(now, room, queued_ok));
        let Run {
            commands,
            in_flight,
            walk,
            notifications,
            io,
            ..
        } = self;
        let subscription = async {
            match notifications.io() {
                SubIo::Op(op) => Event::Subscription(op.await),
                SubIo::Active(sub) => Event::Notice(sub.next().await),
                SubIo::Nothing => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = io.cancel.cancelled() => Event::Cancelled,
            c = commands.recv() => Event::Command(c),
            Some(done) = in_flight.next(), if !in_flight.is_empty() => Event::Done(done),
            e = subscription => e,
            p = async { walk.as_mut().expect("guarded").pages.next().await }, if walk_wants_page => Event::Page(p),
            () = tokio::time::sleep_until(wake) => Event::Timer,
        }
    }

    /// The earliest instant something is due: a deadline, a timer of the loop.
    fn next_wake(&self, now: Instant) -> Instant {
        let mut wake = now + self.io.settings.alive_every;
        let mut at = |t: Instant| wake = wake.min(t);
        if self.checks.room(self.in_flight.len())
            && self.liveness.judging()
            && let Some(clock) = self.liveness.clock()
            && let Some(due) = self.jobs.iter().filter_map(|t| t.index.next_due()).min()
        {
            at(clock.local(Checks::wake_ms(due)));
        }
        // Walks start only when none runs: their timers would only spin meanwhile.
        match &self.walk {
            None => at(self.walks.next_wake(self.notifications.walk_waits(now))),
            Some(w) => w.paced_until(now).into_iter().for_each(&mut at),
        }
        self.notifications.next_wake().into_iter().for_each(&mut at);
        self.liveness.next_wake().into_iter().for_each(&mut at);
        wake
    }

    /// Keys queued by the walk in flight, waiting for a check or a read.
    fn queued(&self) -> usize {
        self.jobs.iter().map(Tracked::queued).sum()
    }

    /// Starts whatever is due: subscription work, walks, checks, probes.
    fn start_work(&mut self) {
        let now = Instant::now();
        if self.walk.is_none() && self.walks.reconcile_due(now) {
            self.notifications.want_recheck();
        }
        let patterns: Vec<String> = self.jobs.iter().map(|t| t.channel.clone()).collect();
        let io = &self.io;
        self.notifications
            .poll(now, |op| io.subscription(op, patterns.clone()));
        if let Some(report) = self.notifications.judge(now) {
            self.apply(report);
        }
        if self.walk.is_none() && self.walks.due(now, self.notifications.walk_waits(now)) {
            self.start_walk(WalkKind::Reconcile);
        }
        self.dispatch_checks();
        self.dispatch_walk_work();
        if !self.io.cancel.is_cancelled() {
            self.poll_liveness(now);
        }
        if let Some(clock) = self.liveness.clock() {
            // A hold whose time is up ends even if no check asks the guard.
            for t in &self.jobs {
                t.job.sweep.guard().holding(clock.now());
            }
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Jobs(jobs) => self.set_jobs(jobs),
            Command::Tick(name) => {
                let active = self.notifications.in_use();
                let Some(t) = self.jobs.iter_mut().find(|t| t.job.name() == name) else {
                    return;
                };
                // With notifications a walk adds nothing between reconciliations, unless some
                // keys could not be tracked.
                if active && t.synced && t.untracked == 0 {
                    return;
                }
                let now = Instant::now();
                let previous = t.last_tick.replace(now);
                if let Some(walk) = &self.walk {
                    // A walk serves every sweep: one started since this sweep's previous tick
                    // (another sweep's tick, met at the same moment) is this tick's walk. Only
                    // a walk older than that is late.
                    let overrun = previous.is_some_and(|p| walk.started < p);
                    t.job.metrics.tick(overrun);
                    tracing::debug!(sweep = %name, node = %self.id, overrun, "a walk is still running; skipping this tick");
                    return;
                }
                t.job.metrics.tick(false);
                self.start_walk(WalkKind::Discover);
            }
        }
    }

    /// Makes the sweeps run here match `jobs`: unchanged ones keep their index; new and changed
    /// ones start empty, and a walk finds their keys.
    fn set_jobs(&mut self, jobs: Vec<Arc<Job>>) {
        let mut kept = Vec::with_capacity(jobs.len());
        let mut old: Vec<Tracked> = std::mem::take(&mut self.jobs);
        let mut added = false;
        for job in jobs {
            match old.iter().position(|t| Arc::ptr_eq(&t.job, &job)) {
                Some(i) => kept.push(old.swap_remove(i)),
                None => {
                    added = true;
                    self.next_epoch += 1;
                    kept.push(Tracked::new(
                        job,
                        self.next_epoch,
                        self.io.node.db(),
                        self.capacity.clone(),
                        self.loop_health.clone(),
                    ));
                }
            }
        }
        let removed = !old.is_empty();
        for t in old {
            t.job.metrics.forget_node(&self.id);
            t.job.sweep.guard().forget(&self.id);
        }
        self.jobs = kept;
        if added || removed {
            let now = Instant::now();
            self.walks.want_sync(now);
            // The subscription's patterns follow the sweeps: subscribe again (an attempt in
            // flight was for the sweeps as they were).
            let report = self.notifications.restart(now);
            self.apply(report);
        }
    }

    /// Hands due keys to checks, a batch per sweep, while there is room in flight.
    fn dispatch_checks(&mut self) {
        let Some(clock) = self.liveness.clock() else {
            return;
        };
        if self.io.cancel.is_cancelled() {
            return;
        }
        let now_ms = clock.now_ms();
        let mut taken = Vec::with_capacity(self.checks.batch);
        loop {
            let mut any = false;
            for i in 0..self.jobs.len() {
                if !self.checks.room(self.in_flight.len()) {
                    return;
                }
                if !Checks::ripe(self.jobs[i].index.next_due(), now_ms) {
                    continue;
                }
                let at = Instant::now();
                let ttl = self.jobs[i].job.sweep.config().ttl.as_secs_f64();
                let Some(judge) = self.liveness.judge_at(at) else {
                    return;
                };
                taken.clear();
                self.jobs[i]
                    .index
                    .take_due(Checks::due_by(now_ms), self.checks.batch, &mut taken);
                if taken.is_empty() {
                    continue;
                }
                any = true;
                let t = &self.jobs[i];
                let pattern = &t.job.sweep.config().pattern;
                let (tickets, keys): (Vec<Ticket>, Vec<Vec<u8>>) = taken
                    .drain(..)
                    .map(|(ticket, id)| (ticket, pattern.key(&id)))
                    .unzip();
                let read_time = clock.at.elapsed() > checks::CLOCK_REFRESH;
                let opts = checks::deadline_opts(
                    judge,
                    read_time,
                    self.liveness.held_back(at, judge),
                    self.liveness.spare_until(at, ttl),
                );
                let epoch = t.epoch;
                let check = self.io.check(t, keys, opts);
                self.in_flight.push(Box::pin(async move {
                    Done::Checked {
                        epoch,
                        tickets,
                        checked: check.await,
                    }
                }));
            }
            if !any {
                return;
            }
        }
    }

    fn done(&mut self, done: Done) {
        self.loop_health.progress();
        let now = Instant::now();
        match done {
            Done::Permitted(Ok(())) => {
                tracing::info!(node = %self.id, "the Redis user may now run everything the checks need");
                self.liveness.on_proof(now, true);
                self.health.set_refused(&self.id, None);
            }
            Done::Permitted(Err(e)) => {
                self.liveness.on_proof(now, false);
                self.note_refusal(&e);
            }
            Done::Probe(Ok(probed)) => self.probed(now, probed),
            Done::Probe(Err(e)) => {
                self.liveness.on_probe(now, Err(()));
                self.log_error("Redis did not answer TIME", &e);
                self.failed(e);
            }
            Done::Checked {
                epoch,
                tickets,
                checked,
            } => self.checked(epoch, tickets, checked),
            Done::Direct { epoch, checked } => self.direct_checked(epoch, checked),
            Done::Verified { epoch, ids, reads } => self.verified(epoch, ids, reads),
            Done::Unseen { epoch, ids, reads } => self.unseen_read(epoch, ids, reads),
        }
        self.finish_walk_if_done();
    }

    fn checked(&mut self, epoch: u64, tickets: Vec<Ticket>, checked: Checked) {
        if checked.error.is_none() {
            self.replied(checked.time);
        } else if let Some(time) = checked.time {
            self.liveness.observe_time(Instant::now(), time);
        }
        let credit = self.liveness.credit();
        let now_ms = self.liveness.clock().map_or(0, |c| c.now_ms());
        let Some(t) = self.jobs.iter_mut().find(|t| t.epoch == epoch) else {
            return;
        };
        let ttl_ms = t.job.sweep.config().ttl.as_millis() as u64;
        // Members an outage kept from heartbeating are looked at again when their credit ends;
        // members the storm guard holds, when the hold ends.
        let credit_until = credit.map(|c| c.until(ttl_ms as f64 / 1000.0));
        let spared_until = checks::spared_until(credit_until, checked.hold_until, now_ms);
        let written_by = now_ms + ttl_ms;
        for (k, (ticket, state)) in tickets.into_iter().zip(&checked.states).enumerate() {
            let expires_in = checked.expires_in.get(k).copied().flatten();
            match checks::next_look(state, now_ms, ttl_ms, spared_until, expires_in) {
                Look::Forget => t.index.checked(ticket, None, written_by),
                Look::At { next, card } => t.index.checked(ticket, Some((next, card)), written_by),
                Look::Retry(at) => t.index.retry(ticket, at),
            }
        }
        t.job
            .metrics
            .deadline_checks(checked.states.len() as u64, checked.error.is_some());
        t.index_changed(&self.id);
        if let Some(e) = checked.error {
            self.log_error("a check failed; its keys are checked again", &e);
            self.failed(e);
        }
    }

    /// A refusal of the credentials or of a command (an ACL) is not an outage: it is counted by
    /// kind, and a refused command makes `/readyz` name it until the permissions are proven.
    fn note_refusal(&mut self, e: &Error) {
        let trouble = e.trouble();
        match trouble {
            Trouble::Permission => {
                self.metrics.redis_failure(trouble);
                self.health.set_refused(&self.id, Some(e.to_string()));
                self.liveness.on_refusal(Instant::now());
            }
            Trouble::Credentials => self.metrics.redis_failure(trouble),
            Trouble::Unreachable | Trouble::Timeout | Trouble::Other => {}
        }
    }

    /// After a failure: Redis may have restarted (keys gone, or created anew), so the index is
    /// reconciled once Redis answers again; and behind Sentinel the primary may have moved.
    fn failed(&mut self, e: Error) {
        self.note_refusal(&e);
        self.liveness.on_failure();
        self.suspect.notify_one();
        self.walks.want_sync(Instant::now() + checks::RETRY);
        self.failure = Some(e);
    }

    fn notice(&mut self, n: Notice) {
        if let Some(report) = self.notifications.on_notice(Instant::now()) {
            self.apply(report);
        }
        let clock = self.liveness.clock();
        let Some(t) = self
            .jobs
            .iter_mut()
            .find(|t| t.channel.as_bytes() == n.pattern)
        else {
            return;
        };
        let Some(id) = t.job.sweep.config().pattern.conversation_id(&n.key) else {
            return;
        };
        match n.change {
            Change::Written => {
                if let Some(clock) = &clock {
                    t.job.sweep.guard().heartbeat(clock.now());
                }
                let now_ms = clock.map(|c| c.now_ms());
                // A score written now is due by now + ttl; before the first reply there is no
                // clock to say when now is, and the first walk reads every key anyway.
                let by = now_ms.map_or(NEVER, |now| {
                    now + t.job.sweep.config().ttl.as_millis() as u64
                });
                if !t.index.written(id, by)
                    && t.index.track(id, now_ms.unwrap_or(0)) == Track::Full
                    && t.untracked == 0
                {
                    // Left to walks on the schedule, like any key a walk could not track: from
                    // now on ticks walk again. The next walk counts such keys; a notice cannot
                    // tell a key it refused before from a new one.
                    tracing::warn!(
                        sweep = %t.job.name(),
                        node = %self.id,
                        max_keys = self.io.settings.tracking.max_keys,
                        "tracking.max_keys reached: new keys are checked by walks on the sweep's schedule"
                    );
                    t.untracked = 1;
                    t.job.metrics.node_figures(&self.id, |f| f.untracked = 1);
                }
            }
            Change::Deleted => {
                t.index.deleted(id);
                t.index_changed(&self.id);
            }
            Change::Removed => {}
        }
    }

    /// After a failure, the primary is looked up again (behind Sentinel it may have moved: a
    /// READONLY reply, a lost connection), and so it is when the store has followed a failover
    /// on its own; a data-path connection that broke is replaced. At most once per
    /// [`checks::RETRY`].
    async fn maybe_refresh_node(&mut self) {
        let io = &self.io;
        if self.refresh_after > Instant::now()
            || (self.failure.is_none() && !io.node.is_broken() && !io.store.moved(&io.node))
        {
            return;
        }
        self.refresh_after = Instant::now() + checks::RETRY;
        // A connection that broke may have been to a Redis that restarted: nothing is judged
        // on its replacement until a probe shows whether the data was kept.
        self.liveness.on_failure();
        let failure = self.failure.take();
        let refreshed = tokio::select! {
            () = io.cancel.cancelled() => return,
            r = async {
                if let Some(e) = &failure {
                    io.store.recover(e).await;
                }
                io.store.node(&self.id).await
            } => r,
        };
        match refreshed {
            Ok(Some(node)) => {
                if node.server() != self.io.node.server() {
                    tracing::info!(node = %self.id, server = %node.server(), "the primary moved; following it");
                    self.liveness.on_moved();
                    let report = self.notifications.restart(Instant::now());
                    self.apply(report);
                    self.walks.want_sync_soon();
                }
                self.io.node = node;
            }
            Ok(None) => {
                tracing::debug!(node = %self.id, "no longer a primary; waiting to be stopped");
            }
            Err(e) => {
                self.log_error("cannot reach the primary", &e);
                self.failure = Some(e);
            }
        }
    }

    fn log_error(&mut self, what: &str, e: &Error) {
        let now = Instant::now();
        if self
            .last_error_log
            .is_some_and(|at| now.duration_since(at) < LOG_EVERY)
        {
            tracing::debug!(node = %self.id, error = %e, "{what}");
            return;
        }
        self.last_error_log = Some(now);
        tracing::error!(node = %self.id, error = %e, "{what}");
    }

    /// After cancellation: the checks in flight finish and their events are published.
    async fn drain(&mut self) {
        while let Some(done) = self.in_flight.next().await {
            self.done(done);
        }
        if let Some(walk) = self.walk.take() {
            for t in &self.jobs {
                if walk.epochs.contains(&t.epoch) {
                    t.job.metrics.walk_interrupted(t.walk_scanned);
                }
            }
        }
    }
}
