//! One primary's work: a deadline index per sweep, the keyspace notifications that feed it, and
//! the walks that reconcile it, all going through the one evictor ([`crate::evictor::Evictor::check`]).
//!
//! ```text
//!  deadline index (key -> oldest + ttl) --due---> check (read, evict atomically, announce)
//!  keyspace notifications (new keys) ---track-/      |
//!  walks (SCAN: at start, after a resubscription,    +--> next deadline, back into the index
//!         every reconcile_interval, or on each
//!         sweep's schedule without notifications) --track-/
//! ```
//!
//! The parts decide and do no I/O: `coordinator` (the rules that tie the others together:
//! failures, looking the primary up again, when to walk, "nothing is evicted while liveness is
//! in doubt"), `liveness` (Redis's clock, outages, resets and the credit, read from a
//! `canary`), `notifications` (the subscription), `walks` (when to walk), `deadlines` (when a
//! key is due, batching) and `sweeps` / `tracked` (each sweep's index and the walk's queues).
//! Their I/O is beside them: `ops` (what the futures share, the check, the look at the primary),
//! `liveness_io`, `notifications_io`, `walks_io`.
//!
//! This loop only selects events and applies what the parts decide. One task runs it; checks,
//! walk pages and subscription work are futures it polls, so no state is shared. A key is
//! checked when its deadline comes (a few milliseconds after, so that Redis's clock has passed it
//! too), and at once when it is new. Checks are batched per sweep (`evict.batch_keys`),
//! `evict.pipeline_depth` in flight at a time.
//!
//! The loop knows Redis's clock from the `TIME` every check and every SCAN page carries: its
//! estimate of Redis's "now" is the last `TIME` read plus the time since, which lags the true
//! instant by the reply's travel, so a cutoff computed from it is never ahead of Redis.

mod canary;
mod io;
mod notifications_io;
mod ops;
mod standing_io;
mod walks_io;

use presence_sweeper_config as config;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, FuturesUnordered};
use presence_sweeper_config::NotificationMode;
use presence_sweeper_redis::{Error, Node, Store};
use presence_sweeper_rules::check::Checked;
use presence_sweeper_rules::index::{Capacity, Ticket};
use presence_sweeper_rules::keyspace::Notice;
use presence_sweeper_rules::primary::Job as _;
use presence_sweeper_rules::primary::coordinator::{Action, Coordinator, Setup, Turn};
use presence_sweeper_rules::primary::deadlines::{self, Batching};
use presence_sweeper_rules::primary::notifications::{Outcome, Polled};
use presence_sweeper_rules::primary::sweeps::Sweeps;
use presence_sweeper_rules::primary::tracked::{Tick, WalkEnd, WalkWork};
use presence_sweeper_rules::primary::walks::{Start, Walk, WalkKind};
use presence_sweeper_rules::report::{Beat, NodeReport};
use presence_sweeper_rules::scan::Page;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) use io::{Job, Redis};
pub(crate) use presence_sweeper_rules::primary::coordinator::{LastAnswer, Shared};

use crate::time::now;
use ops::{Done, Ops, Walked};

/// Notices taken at once when they have already arrived.
const NOTICE_BATCH: usize = 256;
/// The loop turns at least this often, idle or not: its turning is what the systemd watchdog
/// and liveness watch.
pub(crate) const ALIVE_EVERY: Duration = Duration::from_secs(5);

/// The daemon-wide settings every primary's loop works by.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    pub(crate) scan: config::Scan,
    pub(crate) evict: config::Evict,
    pub(crate) tracking: config::Tracking,
    /// `redis.command_timeout`: bounds subscription round trips.
    pub(crate) command_timeout: Duration,
    /// The loop turns at least this often (a quarter of the systemd watchdog's period, at
    /// most [`ALIVE_EVERY`]).
    pub(crate) alive_every: Duration,
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
    pub(crate) report: Box<dyn NodeReport>,
    pub(crate) beat: Arc<dyn Beat>,
    /// What the engine learns from this loop.
    pub(crate) shared: Arc<Shared>,
    /// Told when work fails here: the topology may have changed (a failover). One for every
    /// primary: the engine looks at the topology once for all.
    pub(crate) suspect: Arc<tokio::sync::Notify>,
    /// This loop replaces primaries that stopped answering at this instant (Redis's clock): a
    /// failover. Its first answer ends that outage, and the credit follows.
    pub(crate) inherited_outage: Option<f64>,
    /// This loop starts on a change of the topology, not at start: its server took keys over
    /// (a failover, maybe to a replica that lags, even while the old primary still answers).
    /// Its first probe ends with a credit, as a followed failover's does.
    pub(crate) takes_over: bool,
}

impl Primary {
    /// Runs until `cancel` fires, then lets the checks in flight finish (their events are
    /// published) and returns.
    pub(crate) async fn run(self, commands: mpsc::Receiver<Command>, cancel: CancellationToken) {
        let now = now();
        let id = self.node.id().clone();
        let mode = self.settings.tracking.notifications;
        let setup = Setup {
            node: id.clone(),
            reconcile_interval: self.settings.tracking.reconcile_interval,
            notifications_off: mode == NotificationMode::Off,
            notifications_expected: mode == NotificationMode::On,
            inherited_outage: self.inherited_outage,
            takes_over: self.takes_over,
        };
        let mut run = Run {
            coord: Coordinator::new(now, setup, self.report, self.shared),
            sweeps: Sweeps::new(id, self.node.db(), self.capacity, self.beat.clone()),
            batching: Batching {
                batch: self.settings.evict.batch_keys,
                depth: self.settings.evict.pipeline_depth,
            },
            ops: Ops {
                store: self.store,
                node: self.node,
                settings: self.settings,
                cancel,
            },
            beat: self.beat,
            commands,
            in_flight: FuturesUnordered::new(),
            walk: None,
            pages: None,
            suspect: self.suspect,
            canary_key: None,
        };
        run.main().await;
        run.drain().await;
        run.sweeps.forget();
        run.coord.forget();
        run.beat.retire();
    }
}

/// What woke the loop.
enum Event {
    Command(Option<Command>),
    Done(Done),
    Page(Option<Result<Page, Error>>),
    Notice(Option<Notice>),
    Subscription(Outcome<Redis>),
    Timer,
    Cancelled,
}

/// The loop: it selects events and applies what its parts decide.
struct Run {
    coord: Coordinator<Redis>,
    sweeps: Sweeps<Redis>,
    batching: Batching,
    ops: Ops,
    beat: Arc<dyn Beat>,
    commands: mpsc::Receiver<Command>,
    in_flight: FuturesUnordered<BoxFuture<'static, Done>>,
    walk: Option<Walk<Error>>,
    /// The SCAN pages of the walk in flight.
    pages: Option<BoxStream<'static, Result<Page, Error>>>,
    suspect: Arc<tokio::sync::Notify>,
    /// The canary's key here, once known (see [`canary`]).
    canary_key: Option<Vec<u8>>,
}

impl Run {
    async fn main(&mut self) {
        loop {
            self.start_work();
            self.beat.alive();
            let event = self.next_event().await;
            let now = now();
            self.coord.on_turn(now);
            match event {
                Event::Cancelled | Event::Command(None) => return,
                Event::Command(Some(c)) => self.command(now, c),
                Event::Done(done) => self.done(now, done),
                Event::Page(page) => self.page(now, page),
                Event::Notice(Some(n)) => {
                    self.notice(now, &n);
                    self.notices_waiting();
                }
                Event::Notice(None) => self
                    .coord
                    .on_subscription_lost(now, "the connection closed"),
                Event::Subscription(o) => self.coord.on_subscription(now, o),
                Event::Timer => {}
            }
        }
    }

    /// Waits for whatever comes first.
    async fn next_event(&mut self) -> Event {
        let now = now();
        let room = self.batching.room(self.in_flight.len());
        let due = self.sweeps.next_due().filter(|_| room);
        let walk = self.walk.as_ref().map(|w| w.paced_until(now));
        let wake = self
            .coord
            .next_wake(now, self.ops.settings.alive_every, due, walk);
        let queued_ok = self.batching.room_for_page(self.sweeps.queued());
        let walk_wants_page = self
            .walk
            .as_ref()
            .is_some_and(|w| w.wants_page(now, room, queued_ok));
        let Run {
            commands,
            in_flight,
            pages,
            coord,
            ops,
            ..
        } = self;
        let subscription = async {
            match coord.subscription() {
                Polled::Op(op) => Event::Subscription(op.await),
                Polled::Active(sub) => Event::Notice(sub.next().await),
                Polled::Nothing => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = ops.cancel.cancelled() => Event::Cancelled,
            c = commands.recv() => Event::Command(c),
            Some(done) = in_flight.next(), if !in_flight.is_empty() => Event::Done(done),
            e = subscription => e,
            p = async { pages.as_mut().expect("guarded").next().await }, if walk_wants_page => Event::Page(p),
            () = crate::time::sleep_until(wake) => Event::Timer,
        }
    }

    /// Starts whatever is due: what the coordinator asks, checks, the walk's work.
    fn start_work(&mut self) {
        let now = now();
        let stopping = self.ops.cancel.is_cancelled();
        let turn = Turn {
            walking: self.walk.is_some(),
            sweeps: self.sweeps.len(),
            node_changed: self.ops.node.is_broken() || self.ops.store.moved(&self.ops.node),
            stopping,
        };
        let patterns = self.sweeps.channels();
        let ops = &self.ops;
        self.coord
            .turn(now, turn, |op| ops.subscription(op, patterns.clone()));
        self.apply_actions(now);
        self.dispatch_checks();
        self.dispatch_walk_work();
        if let Some(clock) = self.coord.clock() {
            self.sweeps.holding(clock.at(now));
        }
    }

    fn apply_actions(&mut self, now: Instant) {
        for action in self.coord.take_actions() {
            match action {
                Action::Probe => self.in_flight.push(self.ops.probe(self.canary_key.clone())),
                Action::ProvePermissions => {
                    let sweeps = self.sweeps.iter().map(|t| t.job.evictor.clone()).collect();
                    self.in_flight.push(self.ops.prove_permissions(sweeps));
                }
                Action::Refresh(failure) => self.in_flight.push(self.ops.refresh(failure)),
                Action::Walk(start) => self.start_walk(now, start),
                Action::Unnoticed => self.sweeps.set_unnoticed(),
                Action::Suspect => self.suspect.notify_one(),
                Action::RecheckLatest => {
                    let now_ms = self.coord.clock().map_or(0, |c| c.ms_at(now));
                    self.sweeps.recheck_latest(now_ms);
                }
            }
        }
    }

    fn command(&mut self, now: Instant, command: Command) {
        match command {
            Command::Jobs(jobs) => {
                if self.sweeps.set(jobs) {
                    self.coord.on_sweeps_changed(now);
                }
            }
            Command::Tick(name) => {
                let walk = self.walk.as_ref().map(|w| w.started);
                match self.sweeps.tick(&name, now, self.coord.in_use(), walk) {
                    Tick::Skip => {}
                    Tick::Running { overrun } => {
                        tracing::debug!(sweep = %name, node = %self.sweeps.node(), overrun, "a walk is still running; skipping this tick");
                    }
                    Tick::Walk => {
                        let stopping = self.ops.cancel.is_cancelled();
                        self.coord.start_walk(now, WalkKind::Discover, !stopping);
                    }
                }
            }
        }
    }

    /// Hands due keys to checks, a batch per sweep, while there is room in flight and liveness
    /// allows a verdict.
    fn dispatch_checks(&mut self) {
        let Some(clock) = self.coord.clock() else {
            return;
        };
        if self.ops.cancel.is_cancelled() {
            return;
        }
        let now_ms = clock.ms_at(now());
        let read_time = self.coord.wants_time(now());
        let mut any = true;
        while any {
            any = false;
            for i in 0..self.sweeps.len() {
                let t = self.sweeps.get_mut(i);
                let ttl = t.job.evictor.config().ttl.as_secs_f64();
                let room = self.batching.room(self.in_flight.len());
                let Some(verdict) = self.coord.verdict(now(), ttl).filter(|_| room) else {
                    return;
                };
                let Some((tickets, keys)) = t.due_batch(now_ms, self.batching.batch) else {
                    continue;
                };
                any = true;
                let (epoch, sent) = (t.epoch, now());
                let check = self
                    .ops
                    .check(t, keys, deadlines::deadline_opts(verdict, read_time));
                self.in_flight.push(Box::pin(async move {
                    Done::Checked {
                        epoch,
                        tickets,
                        checked: check.await,
                        sent,
                    }
                }));
            }
        }
    }

    fn done(&mut self, now: Instant, done: Done) {
        self.beat.progress();
        match done {
            Done::Permitted(permitted) => self.coord.on_permitted(now, permitted),
            Done::Probe(probe) => {
                let evidence = probe.map(|p| {
                    self.canary_key = p.key;
                    p.evidence
                });
                self.coord.on_probe(now, evidence);
            }
            Done::Refreshed(refreshed, node) => {
                if let Some(node) = node {
                    self.ops.node = node;
                }
                self.coord.on_refreshed(now, refreshed);
            }
            Done::Checked {
                epoch,
                tickets,
                checked,
                sent,
            } => self.checked((now, sent), epoch, tickets, checked),
            Done::Walked { epoch, walked } => self.walked(now, epoch, walked),
        }
        self.finish_walk_if_done(now);
    }

    fn checked(
        &mut self,
        (now, sent): (Instant, Instant),
        epoch: u64,
        tickets: Vec<Ticket>,
        checked: Checked<Error>,
    ) {
        let failed = checked.error.is_some();
        self.coord.on_check(sent, now, checked.time, failed);
        let now_ms = self.coord.clock().map_or(0, |c| c.ms_at(now));
        let credit = |ttl: f64| self.coord.credit_until(ttl);
        let node = self.sweeps.node().clone();
        if let Some(t) = self.sweeps.by_epoch(epoch) {
            let credit_until = credit(t.job.evictor.config().ttl.as_secs_f64());
            t.checked(&node, tickets, &checked, now_ms, credit_until);
        }
        if let Some(e) = checked.error {
            self.coord
                .on_failure(now, "a check failed; its keys are checked again", e);
        }
    }

    fn notice(&mut self, now: Instant, n: &Notice) {
        self.coord.on_notice(now);
        let redis_now = self.coord.clock().map(|c| c.at(now));
        if let Some(sweep) = self.sweeps.notice(n, redis_now) {
            tracing::warn!(
                sweep = %sweep,
                node = %self.sweeps.node(),
                max_keys = self.ops.settings.tracking.max_keys,
                "tracking.max_keys reached: new keys are checked by walks on the sweep's schedule"
            );
        }
    }

    /// Takes the notices that have already arrived, up to a batch, without a turn of the loop
    /// for each: under a flood of writes the loop keeps up with the subscription, whose
    /// messages otherwise wait in memory.
    fn notices_waiting(&mut self) {
        use futures_util::FutureExt as _;
        for _ in 0..NOTICE_BATCH {
            let now = now();
            let Polled::Active(sub) = self.coord.subscription() else {
                return;
            };
            match sub.next().now_or_never() {
                Some(Some(n)) => self.notice(now, &n),
                Some(None) => {
                    return self
                        .coord
                        .on_subscription_lost(now, "the connection closed");
                }
                None => return,
            }
        }
    }

    /// After cancellation: the checks in flight finish and their events are published.
    async fn drain(&mut self) {
        while let Some(done) = self.in_flight.next().await {
            self.done(now(), done);
        }
        if let Some(walk) = self.walk.take() {
            for t in self.sweeps.iter() {
                if walk.epochs.contains(&t.epoch) {
                    t.walk_interrupted();
                }
            }
        }
    }
}

/// The walk in flight, as the loop drives it.
impl Run {
    fn start_walk(&mut self, now: Instant, start: Start) {
        let pages = self
            .ops
            .pages(self.sweeps.iter().map(|t| &t.job.evictor.config().pattern));
        let rate = match self.ops.settings.scan.max_keys_per_second {
            0 => None,
            rate => Some(f64::from(rate)),
        };
        self.sweeps.walk_started();
        self.beat.busy(true);
        let subscription = (self.coord.in_use(), self.coord.generation());
        let epochs = self.sweeps.epochs();
        self.walk = Some(Walk::new(now, start, epochs, rate, subscription));
        self.pages = Some(pages);
        tracing::debug!(node = %self.sweeps.node(), kind = ?start.kind, "walk started");
    }

    fn page(&mut self, now: Instant, page: Option<Result<Page, Error>>) {
        let Some(walk) = &mut self.walk else {
            return;
        };
        match page {
            None => {
                walk.scan_done = true;
                self.sweeps.scan_done(&walk.epochs);
            }
            Some(Err(e)) => walk.fail(e),
            Some(Ok(page)) => {
                walk.pace.page(page.keys.len());
                let (kind, count_missed) = (walk.kind, walk.count_missed);
                let epochs = walk.epochs.clone();
                self.beat.progress();
                self.coord.on_reply(None, now, Some(page.time));
                let now_ms = self.coord.clock().map_or(0, |c| c.ms_at(now));
                self.sweeps
                    .route(&page, &epochs, kind, count_missed, now_ms);
            }
        }
        self.finish_walk_if_done(now);
    }

    /// Hands the walk's queued work to checks and reads, while there is room in flight.
    fn dispatch_walk_work(&mut self) {
        let Some(walk) = &self.walk else {
            return;
        };
        if self.ops.cancel.is_cancelled() || walk.error.is_some() {
            return;
        }
        let scan_done = walk.scan_done;
        for i in 0..self.sweeps.len() {
            while self.batching.room(self.in_flight.len()) {
                let Some(future) = self.walk_future(i, scan_done) else {
                    break;
                };
                self.in_flight.push(future);
                if let Some(w) = &mut self.walk {
                    w.future_started();
                }
            }
        }
        self.finish_walk_if_done(now());
    }

    /// The next check or read of keys the walk queued for sweep `i`, if a batch is ready.
    fn walk_future(&mut self, i: usize, scan_done: bool) -> Option<BoxFuture<'static, Done>> {
        let t = self.sweeps.get_mut(i);
        let ttl = t.job.evictor.config().ttl.as_secs_f64();
        // Nothing is evicted while liveness is in doubt: the keys wait for its verdict.
        let verdict = self.coord.verdict(now(), ttl);
        let epoch = t.epoch;
        let job = t.job.clone();
        let pattern = &job.evictor.config().pattern;
        Some(
            match t.walk_work(self.batching.batch, scan_done, verdict)? {
                WalkWork::Direct {
                    keys,
                    page_time,
                    verdict,
                } => {
                    let check = self
                        .ops
                        .check(t, keys, deadlines::walk_opts(verdict, page_time));
                    Box::pin(async move {
                        let walked = Walked::Direct(check.await);
                        Done::Walked { epoch, walked }
                    })
                }
                WalkWork::Verify { ids } => {
                    let keys = ids.iter().map(|id| pattern.key(id)).collect();
                    self.ops.verify(epoch, ids, keys)
                }
                WalkWork::Unseen { ids } => {
                    let keys = ids.iter().map(|id| pattern.key(id)).collect();
                    self.ops.unseen(epoch, ids, keys)
                }
            },
        )
    }

    fn finish_walk_if_done(&mut self, now: Instant) {
        if !self
            .walk
            .as_ref()
            .is_some_and(|w| w.over(self.sweeps.queued()))
        {
            return;
        }
        let walk = self.walk.take().expect("checked above");
        self.pages = None;
        self.beat.busy(false);
        let in_use = self.coord.in_use();
        let end = WalkEnd {
            how: walk.ending(self.ops.cancel.is_cancelled()),
            duration: now.saturating_duration_since(walk.started),
            all_noticed: walk.all_noticed(in_use, self.coord.generation()),
            notifications: in_use,
            max_keys: self.ops.settings.tracking.max_keys,
            unix_now: crate::time::unix_now(),
        };
        let node = self.sweeps.node().clone();
        for i in 0..self.sweeps.len() {
            let t = self.sweeps.get_mut(i);
            if walk.epochs.contains(&t.epoch) {
                t.walk_ended(&node, end).log(t.job.name(), &node, &end);
            }
        }
        match walk.error {
            Some(e) => self.coord.on_walk_failed(now, e),
            None => tracing::debug!(
                node = %node,
                kind = ?walk.kind,
                keys = walk.pace.scanned(),
                duration_ms = end.duration.as_millis() as u64,
                "walk finished"
            ),
        }
    }

    /// A future of the walk in flight finished: what it found goes to its sweep, and a
    /// failure fails the walk (it ends once its other futures have).
    fn walked(&mut self, now: Instant, epoch: u64, walked: Walked) {
        let node = self.sweeps.node().clone();
        let error = match walked {
            Walked::Direct(checked) => {
                if checked.error.is_none() {
                    self.coord.on_reply(None, now, checked.time);
                }
                if let Some(t) = self.sweeps.by_epoch(epoch) {
                    t.direct_checked(&node, checked.counts.members);
                }
                checked.error
            }
            Walked::Verified(_, Err(e)) | Walked::Unseen(_, Err(e)) => Some(e),
            Walked::Verified(ids, Ok(reads)) => {
                self.coord.on_reply(None, now, reads.time);
                if let Some(t) = self.sweeps.by_epoch(epoch) {
                    t.verified(&node, &ids, reads);
                }
                None
            }
            Walked::Unseen(ids, Ok(reads)) => {
                self.coord.on_reply(None, now, reads.time);
                if let Some(t) = self.sweeps.by_epoch(epoch) {
                    let keys = t.unseen_read(&node, &ids, reads);
                    if keys > 0 {
                        tracing::debug!(sweep = %t.job.name(), %node, keys, "forgot keys the walk did not find: they are gone");
                    }
                }
                None
            }
        };
        if let Some(w) = &mut self.walk {
            w.future_done();
            error.into_iter().for_each(|e| w.fail(e));
        }
    }
}
