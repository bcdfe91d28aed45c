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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, FuturesUnordered};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::{EvictConfig, NotificationMode, ScanConfig, TrackingConfig};
use crate::error::Trouble;
use crate::evict::read::{self, KeyRead, Read, Reads};
use crate::serve::health::{Health, LoopHealth};
use crate::serve::metrics::{Metrics, SweepMetrics};
use crate::store::clock::{RedisClock, unix_now};
use crate::store::walk::{self, Page};
use crate::store::{Node, NodeId, Store};
use crate::sweep::{CheckCtx, CheckOpts, Checked, KeyState, Observer, Purpose, Sweep};
use crate::tracking::index::{Capacity, Index, NEVER, Ticket, Track};
use crate::tracking::keyspace::{self, Availability, Change, Notice, Subscription};

/// How long after a failed check its keys are checked again.
const RETRY: Duration = Duration::from_secs(1);
/// A key is checked no sooner than this after its deadline: long enough that Redis's clock is
/// past it (the estimate lags by a reply's travel), so the check finds the zombie stale.
const DEADLINE_MARGIN_MS: u64 = 3;
/// Keys coming due within this long of each other are checked in one batch: each batch costs
/// Redis a round trip's fixed work, and a zombie a few milliseconds more lag is no one's loss.
const BATCH_WINDOW_MS: u64 = 50;
/// A check reads Redis's clock anew when the last reading is older than this.
const CLOCK_REFRESH: Duration = Duration::from_secs(1);
/// Redis answers within milliseconds when it is well. When it has not for this long (down,
/// paused, partitioned from the sweeper), the apps most likely could not write heartbeats
/// either: staleness is not judged further than this past the last reply, and when Redis
/// answers again the gap is an outage, whose members get a full ttl again from its end.
const STALL: Duration = Duration::from_millis(1500);
/// With nothing else to ask, the loop asks Redis for `TIME` this often, so that a gap in its
/// replies is an outage, not a quiet moment.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// A judging instant this far behind Redis's clock (seconds) is held back, not merely read a
/// moment ago.
const HELD_BACK_S: f64 = 0.25;
/// Between probes while Redis does not answer: how soon its return is seen.
const PROBE_RETRY: Duration = Duration::from_millis(100);
/// A key found due but not stale (a heartbeat raced its deadline, or clocks disagree) is looked
/// at again no sooner than this, so no disagreement can make the loop spin.
const MIN_RECHECK_MS: u64 = 20;
/// After Redis refused the daemon's user a command, how often the permissions are proven
/// again (a preflight, which changes nothing), so that a fixed ACL shows at once.
const REFUSED_RECHECK: Duration = Duration::from_secs(5);
/// Keys whose newest heartbeat a check reads when the storm guard suspects silence.
const WITNESSES: usize = 16;
/// How often a key whose every member is pinned (a score of `+inf`) is checked: it has no
/// deadline, but it may vanish without a notification (a restart), and must not stay tracked.
const PINNED_RECHECK_MS: u64 = 3_600_000;
/// Notices taken at once when they have already arrived.
const NOTICE_BATCH: usize = 256;
/// How often a subscription proves it still delivers.
const SUBSCRIPTION_PING: Duration = Duration::from_secs(5);
/// Bounds of the wait before subscribing again after a failure.
const RESUBSCRIBE_FIRST: Duration = Duration::from_millis(100);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(5);
/// Errors of one kind are logged at most this often per primary.
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
        last.filter(|(at, _)| at.elapsed() > STALL)
            .map(|(_, redis)| redis)
    }
}

impl Primary {
    /// Runs until `cancel` fires, then lets the checks in flight finish (their events are
    /// published) and returns.
    pub(crate) async fn run(self, commands: mpsc::Receiver<Command>, cancel: CancellationToken) {
        let id = self.node.id().clone();
        let reconcile = self.settings.tracking.reconcile_interval;
        let loop_health = Arc::new(self.health.register_loop(&format!("primary {id}")));
        let notify = match self.settings.tracking.notifications {
            NotificationMode::Off => Notify::Off,
            _ => Notify::Idle {
                retry_at: Instant::now(),
                backoff: RESUBSCRIBE_FIRST,
            },
        };
        let mut run = Run {
            outages: self.metrics.outages(&id),
            notifications: self.metrics.notifications_gauge(&id),
            routed: self.store.connection(),
            id,
            node: self.node,
            store: self.store,
            settings: self.settings,
            capacity: self.capacity,
            metrics: self.metrics,
            health: self.health,
            loop_health,
            cancel,
            commands,
            jobs: Vec::new(),
            next_epoch: 0,
            clock: None,
            in_flight: FuturesUnordered::new(),
            walk: None,
            sync_wanted: true,
            sync_after: Instant::now(),
            reconcile_at: Instant::now() + reconcile,
            notify,
            notify_op: None,
            subscribed: false,
            subscriptions: 0,
            subscribed_flag: self.subscribed,
            suspect: self.suspect,
            subscribing: false,
            next_ping: Instant::now() + SUBSCRIPTION_PING,
            last_error_log: None,
            failure: None,
            last_reply: None,
            last_answer: self.last_answer,
            inherited_outage: self.inherited_outage,
            probing: false,
            probe_after: Instant::now(),
            refused: None,
            unavailable_said: None,
            recheck_wanted: false,
            credit: None,
            refresh_after: Instant::now(),
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

/// A sweep on this primary.
struct Tracked {
    job: Arc<Job>,
    /// Tells this sweep's futures from those of a sweep it replaced.
    epoch: u64,
    index: Index,
    observer: Arc<dyn Observer>,
    /// The keyspace-notification channel pattern of its keys.
    channel: String,
    /// A walk covering this sweep finished since it was added.
    synced: bool,
    /// Keys the last walk could not track (the index is full).
    untracked: u64,
    /// Keys of this sweep the walk in flight found so far, and could not track.
    walk_scanned: u64,
    walk_untracked: u64,
    /// Work the walk in flight queued: ids to reconcile, and keys to check directly (they could
    /// not be tracked), with the oldest Redis time of the pages they came in.
    verify: Vec<Vec<u8>>,
    direct: Vec<Vec<u8>>,
    direct_time: f64,
    /// Members of the keys walks check directly (untracked): at the last walk's end, and so
    /// far in the walk in flight. The storm guard counts them with the index's.
    direct_members: u64,
    walk_direct_members: u64,
}

impl Tracked {
    /// Tells the storm guard how many members this sweep has here: the tracked keys' as of
    /// their checks, and the untracked keys' as of the walks that checked them.
    fn report_population(&self, node: &NodeId) {
        let direct = self.direct_members.max(self.walk_direct_members);
        self.job
            .sweep
            .guard()
            .population(node, self.index.members() + direct);
    }
}

/// What a future of the loop finished.
enum Done {
    /// A `TIME` asked to show Redis still answers.
    Probe(Result<f64, Error>),
    /// After a refusal: whether the Redis user may now do all that every sweep's checks do.
    Permitted(Result<(), Error>),
    /// A check of keys the index handed out.
    Checked {
        epoch: u64,
        tickets: Vec<Ticket>,
        checked: Checked,
    },
    /// A walk checked keys it could not track.
    Direct { epoch: u64, checked: Checked },
    /// A reconciliation walk read the lowest scores of tracked keys.
    Verified {
        epoch: u64,
        ids: Vec<Vec<u8>>,
        reads: Result<Reads, Error>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WalkKind {
    /// Finds keys the index does not know: on a sweep's schedule, where notifications are not
    /// in use.
    Discover,
    /// Also reads the lowest score of every tracked key, which catches a score written in the
    /// past, a key deleted or created anew while nobody listened (a Redis restart): at start,
    /// after a (re)subscription or a failure, and every `tracking.reconcile_interval`.
    Reconcile,
}

struct Walk {
    kind: WalkKind,
    pages: BoxStream<'static, Result<Page, Error>>,
    started: Instant,
    /// The sweeps it serves.
    epochs: Vec<u64>,
    /// Notifications were in use since before the last walk (and the sweep synced): an
    /// untracked key it finds is a missed notification.
    count_missed: bool,
    /// Notifications were in use when it started; if they still are at its end, every write
    /// since is noticed, and only keys written since their checks need reading again.
    noticed_from_start: bool,
    /// The subscription it started under (a new one means some writes went unnoticed).
    subscription: u64,
    scan_done: bool,
    /// Walk futures not finished yet.
    in_flight: usize,
    error: Option<Error>,
    /// `scan.max_keys_per_second`: when the next page may be asked for.
    next_page_at: Option<Instant>,
    scanned: u64,
}

enum Notify {
    /// `tracking.notifications = "off"`.
    Off,
    /// Not subscribed: try at `retry_at`.
    Idle {
        retry_at: Instant,
        backoff: Duration,
    },
    /// Subscribing, pinging, or checking the server's settings.
    Busy { backoff: Duration },
    /// Subscribed.
    Active(Box<Subscription>),
    /// The server has them off (or will not say): walks follow the schedule; looked at again
    /// at each reconciliation.
    Unavailable,
}

enum NotifyOutcome {
    /// A new subscription: what was written before it is found by a walk.
    Subscribed(Box<Subscription>),
    /// The subscription still works (a ping, a look at the server's settings).
    Kept(Box<Subscription>),
    /// Not to be had here, and why; `refused` if the server has them but the Redis user may
    /// not use them (an ACL to fix, where an operator who left them off needs no warning).
    Unavailable {
        why: String,
        refused: bool,
    },
    Failed(Error),
}

/// An outage of Redis as the loop saw it: from its last reply before the gap to its first
/// after, on Redis's clock (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Credit {
    from: f64,
    to: f64,
}

impl Credit {
    /// Until when a sweep of window `ttl` (seconds) spares the members the outage kept from
    /// heartbeating.
    fn until(&self, ttl: f64) -> f64 {
        self.to + ttl
    }
}

/// What woke the loop.
enum Event {
    Command(Option<Command>),
    Done(Done),
    Page(Option<Result<Page, Error>>),
    Notice(Option<Notice>),
    NotifyOutcome(NotifyOutcome),
    Timer,
    Cancelled,
}

struct Run {
    id: NodeId,
    node: Node,
    store: Store,
    routed: crate::store::Conn,
    settings: Arc<Settings>,
    capacity: Arc<Capacity>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    loop_health: Arc<LoopHealth>,
    cancel: CancellationToken,
    commands: mpsc::Receiver<Command>,
    jobs: Vec<Tracked>,
    next_epoch: u64,
    clock: Option<RedisClock>,
    in_flight: FuturesUnordered<BoxFuture<'static, Done>>,
    walk: Option<Walk>,
    sync_wanted: bool,
    sync_after: Instant,
    reconcile_at: Instant,
    notify: Notify,
    notify_op: Option<BoxFuture<'static, NotifyOutcome>>,
    /// Subscribed now: notifications are in use.
    subscribed: bool,
    /// Counts subscriptions made and lost.
    subscriptions: u64,
    subscribed_flag: Arc<AtomicBool>,
    suspect: Arc<tokio::sync::Notify>,
    /// A subscription is being made: the sync walk waits for it.
    subscribing: bool,
    notifications: prometheus::IntGauge,
    next_ping: Instant,
    last_error_log: Option<Instant>,
    /// A failure since the last look at the primary: behind Sentinel it may have moved.
    failure: Option<Error>,
    /// When Redis last answered (the local instant, and its clock then).
    last_reply: Option<(Instant, f64)>,
    /// Shares `last_reply` with the engine.
    last_answer: Arc<LastAnswer>,
    /// Since when the primaries this loop replaces did not answer (a failover), until its
    /// first answer.
    inherited_outage: Option<f64>,
    probing: bool,
    /// No probe before then: one that failed at once (the connection refused) is not sent
    /// again on the next turn of the loop, which would spin.
    probe_after: Instant,
    /// A reconciliation is due to look at the server's notification settings again.
    recheck_wanted: bool,
    /// Why notifications were last said to be unavailable here, so that each reconciliation's
    /// look does not say it again.
    unavailable_said: Option<String>,
    /// Redis refused a command the daemon needs here (an ACL): when to prove the permissions
    /// again, and whether a proof is in flight.
    refused: Option<(Instant, bool)>,
    /// The last outage, on Redis's clock: members whose window closed during it are spared
    /// until a ttl after its end.
    credit: Option<Credit>,
    outages: prometheus::IntCounter,
    refresh_after: Instant,
}

impl Run {
    async fn main(&mut self) {
        loop {
            self.maybe_refresh_node().await;
            self.start_work();
            self.loop_health.alive();
            match self.next_event().await {
                Event::Cancelled => return,
                Event::Command(None) => return,
                Event::Command(Some(c)) => self.command(c),
                Event::Done(done) => self.done(done),
                Event::Page(page) => self.page(page),
                Event::Notice(Some(n)) => {
                    self.notice(n);
                    self.notices_waiting();
                }
                Event::Notice(None) => self.subscription_lost("the connection closed"),
                Event::NotifyOutcome(o) => self.notify_outcome(o),
                Event::Timer => {}
            }
        }
    }

    /// Waits for whatever comes first.
    async fn next_event(&mut self) -> Event {
        let depth = self.settings.evict.pipeline_depth;
        let wake = self.next_wake();
        let walk_wants_page = self.walk.as_ref().is_some_and(|w| {
            !w.scan_done
                && w.error.is_none()
                && w.next_page_at.is_none_or(|t| t <= Instant::now())
                && self.in_flight.len() < depth
                && self.queued() < self.settings.evict.batch_keys * depth
        });
        let Run {
            commands,
            in_flight,
            walk,
            notify,
            notify_op,
            cancel,
            ..
        } = self;
        tokio::select! {
            biased;
            () = cancel.cancelled() => Event::Cancelled,
            c = commands.recv() => Event::Command(c),
            Some(done) = in_flight.next(), if !in_flight.is_empty() => Event::Done(done),
            o = async { notify_op.as_mut().expect("guarded").await }, if notify_op.is_some() => {
                *notify_op = None;
                Event::NotifyOutcome(o)
            }
            n = async {
                match notify {
                    Notify::Active(sub) => sub.next().await,
                    _ => std::future::pending().await,
                }
            }, if matches!(notify, Notify::Active(_)) => Event::Notice(n),
            p = async { walk.as_mut().expect("guarded").pages.next().await }, if walk_wants_page => Event::Page(p),
            () = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => Event::Timer,
        }
    }

    /// The earliest instant something is due: a deadline, a timer of the loop.
    fn next_wake(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut wake = now + self.settings.alive_every;
        let mut at = |t: Instant| wake = wake.min(t);
        if self.in_flight.len() < self.settings.evict.pipeline_depth
            && let Some(clock) = &self.clock
            && let Some(due) = self.jobs.iter().filter_map(|t| t.index.next_due()).min()
        {
            at(clock.local(due.saturating_add(BATCH_WINDOW_MS)));
        }
        // Walks start only when none runs: their timers would only spin meanwhile.
        if self.walk.is_none() {
            at(self.reconcile_at);
            // A walk waiting for a subscription is woken by its outcome or its retry, not by
            // a timer that is already due (that would spin).
            if self.sync_wanted && !self.subscription_pending(now) {
                at(self.sync_after);
            }
        }
        match &self.notify {
            Notify::Idle { retry_at, .. } => at(*retry_at),
            Notify::Active(_) => at(self.next_ping),
            _ => {}
        }
        if !self.probing {
            match self.last_reply {
                Some((replied, _)) => at((replied + PROBE_EVERY).max(self.probe_after)),
                // Never answered yet (a start, a loop after a failover): ask at the retry pace.
                None => at(self.probe_after),
            }
        }
        if let Some(t) = self.walk.as_ref().and_then(|w| w.next_page_at)
            && t > now
        {
            at(t);
        }
        Some(wake)
    }

    /// Keys queued by the walk in flight, waiting for a check or a read.
    fn queued(&self) -> usize {
        self.jobs
            .iter()
            .map(|t| t.verify.len() + t.direct.len())
            .sum()
    }

    /// Starts whatever is due: subscription work, walks, checks.
    fn start_work(&mut self) {
        let now = Instant::now();
        if let Notify::Idle { retry_at, backoff } = self.notify
            && retry_at <= now
            && self.notify_op.is_none()
        {
            self.notify = Notify::Busy { backoff };
            self.subscribing = true;
            self.notify_op = Some(Box::pin(subscribe(
                self.store.clone(),
                self.node.clone(),
                self.jobs.iter().map(|t| t.channel.clone()).collect(),
                self.settings.clone(),
            )));
        }
        if self.walk.is_none() && self.reconcile_at <= now {
            self.recheck_wanted = true;
        }
        // Before a ping: a look at the server's settings proves the subscription as well.
        if self.recheck_wanted && self.notify_op.is_none() {
            self.recheck_notifications();
        }
        if matches!(self.notify, Notify::Active(_)) && self.next_ping <= now {
            self.next_ping = now + SUBSCRIPTION_PING;
            self.ping_subscription();
        }
        if self.walk.is_none() {
            if self.reconcile_at <= now {
                self.start_walk(WalkKind::Reconcile);
            } else if self.sync_wanted && self.sync_after <= now && !self.subscription_pending(now)
            {
                // A subscription comes first: then nothing written meanwhile can be missed,
                // and one walk does for both.
                self.start_walk(WalkKind::Reconcile);
            }
        }
        self.dispatch_checks();
        self.dispatch_walk_work();
        self.probe_if_quiet();
        self.recheck_permissions();
        if let Some(clock) = &self.clock {
            // A hold whose time is up ends even if no check asks the guard.
            for t in &self.jobs {
                t.job.sweep.guard().holding(clock.now());
            }
        }
    }

    /// Asks for `TIME` when nothing else was answered lately, so that an outage shows. With no
    /// sweep to run here too (a standby without the lease): the outage is known when the
    /// lease is won back.
    fn probe_if_quiet(&mut self) {
        if self.probing || self.cancel.is_cancelled() || self.probe_after > Instant::now() {
            return;
        }
        if self
            .last_reply
            .is_some_and(|(at, _)| at.elapsed() < PROBE_EVERY)
        {
            return;
        }
        self.probing = true;
        let mut node = self.node.clone();
        self.in_flight.push(Box::pin(async move {
            Done::Probe(crate::store::clock::redis_time(&mut node).await)
        }));
    }

    /// After a refusal, proves every sweep's permissions again every [`REFUSED_RECHECK`], on a
    /// key of each sweep's pattern that need not exist: nothing runs, the commands are only
    /// queued and discarded.
    fn recheck_permissions(&mut self) {
        let Some((at, false)) = self.refused else {
            return;
        };
        if at > Instant::now() || self.cancel.is_cancelled() {
            return;
        }
        self.refused = Some((at, true));
        let sweeps: Vec<Arc<Sweep>> = self.jobs.iter().map(|t| t.job.sweep.clone()).collect();
        let (store, node) = (self.store.clone(), self.node.clone());
        self.in_flight.push(Box::pin(async move {
            for sweep in sweeps {
                let key = sweep
                    .config()
                    .pattern
                    .key(b"presence-sweeper-permission-check");
                sweep.forget_preflight(&node);
                if let Err(e) = sweep.preflight(&store, &node, &key).await {
                    return Done::Permitted(Err(e));
                }
            }
            Done::Permitted(Ok(()))
        }));
    }

    /// Redis answered (at `time` on its clock, when the reply says). A gap since the last
    /// answer longer than [`STALL`] was an outage.
    fn replied(&mut self, time: Option<f64>) {
        if let Some(time) = time {
            self.observe_time(time);
        }
        let Some(redis_now) = time.or_else(|| self.clock.map(|c| c.now())) else {
            return;
        };
        let now = Instant::now();
        let gap = match (self.last_reply, self.inherited_outage.take()) {
            (Some((at, redis_at)), _) if now.duration_since(at) > STALL => {
                Some((redis_at, now.duration_since(at).as_secs_f64()))
            }
            (None, Some(from)) => Some((from, redis_now - from)),
            _ => None,
        };
        if let Some((from, seconds)) = gap {
            let outage = Credit {
                from,
                to: redis_now,
            };
            self.credit = Some(match self.credit {
                // A second outage within the credit of the first: one window.
                Some(c) if c.to + STALL.as_secs_f64() * 4.0 >= outage.from => Credit {
                    from: c.from.min(outage.from),
                    to: outage.to,
                },
                _ => outage,
            });
            self.outages.inc();
            tracing::warn!(
                node = %self.id,
                seconds = format_args!("{seconds:.1}"),
                "Redis did not answer for a while: members whose window closed meanwhile get a full ttl from now"
            );
        }
        self.last_reply = Some((now, redis_now));
        self.last_answer.set(now, redis_now);
    }

    /// The instant a check of a sweep of window `ttl` judges staleness at: Redis's "now", but
    /// never further than [`STALL`] past its last answer (the apps may not have been able to
    /// write either), and during an outage's credit the outage's start.
    /// Whether staleness judged at `judge` is held back behind Redis's clock (see
    /// [`Purpose::held_back`]).
    fn held_back(&self, judge: f64) -> bool {
        self.clock.is_some_and(|c| c.now() - judge > HELD_BACK_S)
    }

    fn judge_at(&self, ttl: f64) -> Option<f64> {
        let now = self.clock?.now();
        let (_, last) = self.last_reply?;
        let mut at = now.min(last + STALL.as_secs_f64());
        if let Some(c) = self.credit
            && now < c.until(ttl)
        {
            at = at.min(c.from);
        }
        Some(at)
    }

    /// Whether a subscription is being made, or will be tried again within [`RETRY`] (after a
    /// lost one, a short backoff): a walk waits for it. One that keeps failing waits longer,
    /// and the walk does not.
    fn subscription_pending(&self, now: Instant) -> bool {
        self.subscribing
            || matches!(self.notify, Notify::Idle { retry_at, .. } if retry_at <= now + RETRY)
    }

    fn notifications_active(&self) -> bool {
        self.subscribed
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Jobs(jobs) => self.set_jobs(jobs),
            Command::Tick(name) => {
                let active = self.notifications_active();
                let Some(t) = self.jobs.iter().find(|t| t.job.name() == name) else {
                    return;
                };
                // With notifications a walk adds nothing between reconciliations, unless some
                // keys could not be tracked.
                if active && t.synced && t.untracked == 0 {
                    return;
                }
                if self.walk.is_some() {
                    t.job.metrics.overrun();
                    tracing::debug!(sweep = %name, node = %self.id, "a walk is still running; skipping this tick");
                    return;
                }
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
                    kept.push(self.tracked(job));
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
            self.sync_wanted = true;
            self.sync_after = Instant::now();
            // The subscription's patterns follow the sweeps: subscribe again (an attempt in
            // flight was for the sweeps as they were).
            if !matches!(self.notify, Notify::Off) {
                self.restart_notifications();
            }
        }
    }

    fn tracked(&mut self, job: Arc<Job>) -> Tracked {
        self.next_epoch += 1;
        let observer: Arc<dyn Observer> = Arc::new(LoopObserver {
            metrics: job.metrics.clone(),
            health: self.loop_health.clone(),
        });
        Tracked {
            channel: format!(
                "{}{}",
                keyspace::channel_prefix(self.node.db()),
                job.sweep.config().pattern.glob()
            ),
            job,
            epoch: self.next_epoch,
            index: Index::new(self.capacity.clone()),
            observer,
            synced: false,
            untracked: 0,
            walk_scanned: 0,
            walk_untracked: 0,
            verify: Vec::new(),
            direct: Vec::new(),
            direct_time: f64::INFINITY,
            direct_members: 0,
            walk_direct_members: 0,
        }
    }

    /// Hands due keys to checks, a batch per sweep, while there is room in flight.
    fn dispatch_checks(&mut self) {
        let Some(clock) = self.clock else {
            return;
        };
        if self.cancel.is_cancelled() {
            return;
        }
        let depth = self.settings.evict.pipeline_depth;
        let batch = self.settings.evict.batch_keys;
        let now_ms = clock.now_ms();
        let mut taken = Vec::with_capacity(batch);
        loop {
            let mut any = false;
            for i in 0..self.jobs.len() {
                if self.in_flight.len() >= depth {
                    return;
                }
                // A batch waits for its window, so that keys due close together go together.
                let ripe = self.jobs[i]
                    .index
                    .next_due()
                    .is_some_and(|due| due.saturating_add(BATCH_WINDOW_MS) <= now_ms);
                if !ripe {
                    continue;
                }
                let ttl = self.jobs[i].job.sweep.config().ttl.as_secs_f64();
                let Some(now) = self.judge_at(ttl) else {
                    return;
                };
                taken.clear();
                self.jobs[i].index.take_due(
                    now_ms.saturating_sub(DEADLINE_MARGIN_MS),
                    batch,
                    &mut taken,
                );
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
                let opts = CheckOpts {
                    judge_at: now,
                    purpose: Purpose::Deadline {
                        read_time: clock.at.elapsed() > CLOCK_REFRESH,
                        held_back: self.held_back(now),
                    },
                };
                let epoch = t.epoch;
                let check = self.check(t, keys, opts);
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

    /// A check of `keys` of sweep `t`, as a future that owns what it needs. When the storm
    /// guard suspects the sweep went silent, a few busy keys go with it as witnesses.
    fn check(
        &self,
        t: &Tracked,
        keys: Vec<Vec<u8>>,
        opts: CheckOpts,
    ) -> impl Future<Output = Checked> + Send + 'static {
        let witnesses: Vec<Vec<u8>> =
            if opts.purpose.may_hold() && t.job.sweep.guard().suspects_silence(opts.judge_at) {
                let pattern = &t.job.sweep.config().pattern;
                t.index
                    .latest(WITNESSES)
                    .map(|id| pattern.key(id))
                    .collect()
            } else {
                Vec::new()
            };
        let sweep = t.job.sweep.clone();
        let observer = t.observer.clone();
        let node = self.node.clone();
        let store = self.store.clone();
        let routed = self.routed.clone();
        let cancel = self.cancel.clone();
        async move {
            let ctx = CheckCtx {
                store: &store,
                routed: &routed,
                observer: &*observer,
                cancel: &cancel,
                witnesses: &witnesses,
            };
            sweep.check(node, keys, opts, ctx).await
        }
    }

    /// Hands the walk's queued work to checks and reads.
    fn dispatch_walk_work(&mut self) {
        let Some(walk) = &self.walk else {
            return;
        };
        if self.cancel.is_cancelled() || walk.error.is_some() {
            return;
        }
        let scan_done = walk.scan_done;
        let depth = self.settings.evict.pipeline_depth;
        let batch = self.settings.evict.batch_keys;
        for i in 0..self.jobs.len() {
            loop {
                if self.in_flight.len() >= depth {
                    return;
                }
                let ttl = self.jobs[i].job.sweep.config().ttl.as_secs_f64();
                let judge = self.judge_at(ttl);
                let held_back = judge.is_some_and(|j| self.held_back(j));
                let t = &mut self.jobs[i];
                let epoch = t.epoch;
                if t.direct.len() >= batch || (scan_done && !t.direct.is_empty()) {
                    let n = batch.min(t.direct.len());
                    let keys: Vec<Vec<u8>> = t.direct.drain(..n).collect();
                    let opts = CheckOpts {
                        judge_at: judge.map_or(t.direct_time, |j| t.direct_time.min(j)),
                        purpose: Purpose::Walk { held_back },
                    };
                    if t.direct.is_empty() {
                        t.direct_time = f64::INFINITY;
                    }
                    let t = &self.jobs[i];
                    let check = self.check(t, keys, opts);
                    self.in_flight.push(Box::pin(async move {
                        Done::Direct {
                            epoch,
                            checked: check.await,
                        }
                    }));
                } else if t.verify.len() >= batch || (scan_done && !t.verify.is_empty()) {
                    let n = batch.min(t.verify.len());
                    let ids: Vec<Vec<u8>> = t.verify.drain(..n).collect();
                    let keys: Vec<Vec<u8>> = ids
                        .iter()
                        .map(|id| t.job.sweep.config().pattern.key(id))
                        .collect();
                    let mut node = self.node.clone();
                    self.in_flight.push(Box::pin(async move {
                        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                        let reads = read::read(&mut node, &refs, Read::Oldest).await;
                        Done::Verified { epoch, ids, reads }
                    }));
                } else {
                    break;
                }
                if let Some(w) = &mut self.walk {
                    w.in_flight += 1;
                }
            }
        }
        self.finish_walk_if_done();
    }

    fn start_walk(&mut self, mut kind: WalkKind) {
        if self.jobs.is_empty() || self.cancel.is_cancelled() {
            self.sync_wanted = false;
            return;
        }
        // A walk the index needs to catch up (after a subscription, a failure) counts no missed
        // notification: the periodic one, with notifications in use throughout, does.
        let count_missed = self.notifications_active() && !self.sync_wanted;
        if self.sync_wanted {
            kind = WalkKind::Reconcile;
        }
        if kind == WalkKind::Reconcile {
            self.sync_wanted = false;
            self.reconcile_at = Instant::now() + self.settings.tracking.reconcile_interval;
        }
        let glob = walk::common_glob(self.jobs.iter().map(|t| &t.job.sweep.config().pattern));
        let pages = walk::pages(self.node.clone(), glob, self.settings.scan.count).boxed();
        for t in &mut self.jobs {
            t.walk_scanned = 0;
            t.walk_untracked = 0;
            t.walk_direct_members = 0;
        }
        self.loop_health.busy(true);
        self.walk = Some(Walk {
            kind,
            pages,
            started: Instant::now(),
            epochs: self.jobs.iter().map(|t| t.epoch).collect(),
            count_missed,
            noticed_from_start: self.subscribed,
            subscription: self.subscriptions,
            scan_done: false,
            in_flight: 0,
            error: None,
            next_page_at: None,
            scanned: 0,
        });
        tracing::debug!(node = %self.id, ?kind, "walk started");
    }

    fn page(&mut self, page: Option<Result<Page, Error>>) {
        let Some(walk) = &mut self.walk else {
            return;
        };
        match page {
            None => walk.scan_done = true,
            Some(Err(e)) => walk.error = Some(e),
            Some(Ok(page)) => {
                self.loop_health.progress();
                self.replied(Some(page.time));
                let walk = self.walk.as_mut().expect("checked above");
                walk.scanned += page.keys.len() as u64;
                let rate = self.settings.scan.max_keys_per_second;
                if rate > 0 {
                    let due = walk.scanned as f64 / f64::from(rate);
                    walk.next_page_at = Some(walk.started + Duration::from_secs_f64(due));
                }
                let (kind, count_missed) = (walk.kind, walk.count_missed);
                let epochs = walk.epochs.clone();
                let now_ms = self.clock.map_or(0, |c| c.now_ms());
                for key in page.keys {
                    for t in self.jobs.iter_mut().filter(|t| epochs.contains(&t.epoch)) {
                        let Some(id) = t.job.sweep.config().pattern.conversation_id(&key) else {
                            continue;
                        };
                        t.walk_scanned += 1;
                        if let Some(read) = t.index.needs_reading(id) {
                            if kind == WalkKind::Reconcile && read {
                                t.verify.push(id.to_vec());
                            }
                            continue;
                        }
                        match t.index.track(id, now_ms) {
                            Track::Added => {
                                if count_missed && t.synced {
                                    t.job.metrics.missed_notifications(1);
                                }
                            }
                            Track::Known => {}
                            Track::Full => {
                                t.walk_untracked += 1;
                                t.direct.push(key.clone());
                                t.direct_time = t.direct_time.min(page.time);
                            }
                        }
                    }
                }
            }
        }
        self.finish_walk_if_done();
    }

    fn finish_walk_if_done(&mut self) {
        let Some(walk) = &self.walk else {
            return;
        };
        let failed = walk.error.is_some();
        let drained = walk.scan_done && self.queued() == 0;
        if walk.in_flight > 0 || !(failed || drained) {
            return;
        }
        let walk = self.walk.take().expect("checked above");
        self.loop_health.busy(false);
        let duration = walk.started.elapsed();
        let unix_now = unix_now();
        // A reconciliation that read every key, under one subscription from start to end: from
        // now on every write is noticed.
        let all_noticed = walk.kind == WalkKind::Reconcile
            && !failed
            && walk.noticed_from_start
            && self.subscribed
            && walk.subscription == self.subscriptions;
        for t in &mut self.jobs {
            if !walk.epochs.contains(&t.epoch) {
                continue;
            }
            t.verify.clear();
            t.direct.clear();
            t.direct_time = f64::INFINITY;
            if self.cancel.is_cancelled() {
                t.job.metrics.walk_interrupted(t.walk_scanned);
                continue;
            }
            if failed {
                t.job.metrics.walk_failed(t.walk_scanned, duration);
                continue;
            }
            t.job.metrics.walk_succeeded(t.walk_scanned, duration);
            if all_noticed {
                t.index.set_unnoticed(false);
            }
            if t.walk_untracked > 0 && t.untracked == 0 {
                tracing::warn!(
                    sweep = %t.job.name(),
                    node = %self.id,
                    keys = t.walk_untracked,
                    max_keys = self.settings.tracking.max_keys,
                    "tracking.max_keys reached: the keys past it are checked by walks on the sweep's schedule"
                );
            }
            t.untracked = t.walk_untracked;
            t.direct_members = t.walk_direct_members;
            t.report_population(&self.id);
            if !t.synced {
                tracing::info!(
                    sweep = %t.job.name(),
                    node = %self.id,
                    keys = t.walk_scanned,
                    tracked = t.index.len(),
                    notifications = self.subscribed,
                    "first walk done: its keys are checked at their deadlines from now on"
                );
            }
            t.synced = true;
            let (scanned, untracked) = (t.walk_scanned, t.walk_untracked);
            let (tracked, members) = (t.index.len() as u64, t.index.members());
            t.job.metrics.node_figures(&self.id, |f| {
                f.keys = scanned;
                f.untracked = untracked;
                f.tracked = tracked;
                f.members = members;
                f.last_success = unix_now;
            });
            self.health.walked(t.job.name(), &self.id);
        }
        match walk.error {
            Some(e) => {
                self.log_error("a walk failed; it is tried again", &e);
                self.failed(e);
            }
            None => tracing::debug!(
                node = %self.id,
                kind = ?walk.kind,
                keys = walk.scanned,
                duration_ms = duration.as_millis() as u64,
                "walk finished"
            ),
        }
    }

    fn done(&mut self, done: Done) {
        self.loop_health.progress();
        match done {
            Done::Permitted(Ok(())) => {
                tracing::info!(node = %self.id, "the Redis user may now run everything the checks need");
                self.refused = None;
                self.health.set_refused(&self.id, None);
            }
            Done::Permitted(Err(e)) => {
                self.refused = Some((Instant::now() + REFUSED_RECHECK, false));
                self.note_refusal(&e);
            }
            Done::Probe(result) => {
                self.probing = false;
                match result {
                    Ok(time) => self.replied(Some(time)),
                    Err(e) => {
                        self.probe_after = Instant::now() + PROBE_RETRY;
                        self.log_error("Redis did not answer TIME", &e);
                        self.failed(e);
                    }
                }
            }
            Done::Checked {
                epoch,
                tickets,
                checked,
            } => self.checked(epoch, tickets, checked),
            Done::Direct { epoch, checked } => {
                self.walk_future_done();
                if checked.error.is_none() {
                    self.replied(checked.time);
                }
                if let Some(t) = self.jobs.iter_mut().find(|t| t.epoch == epoch) {
                    t.walk_direct_members += checked.counts.members;
                    t.report_population(&self.id);
                }
                if let Some(e) = checked.error {
                    self.walk_failed(epoch, e);
                }
            }
            Done::Verified { epoch, ids, reads } => {
                self.walk_future_done();
                match reads {
                    Ok(reads) => {
                        self.replied(reads.time);
                        self.verified(epoch, ids, reads)
                    }
                    Err(e) => self.walk_failed(epoch, e),
                }
            }
        }
        self.finish_walk_if_done();
    }

    fn walk_future_done(&mut self) {
        if let Some(w) = &mut self.walk {
            w.in_flight = w.in_flight.saturating_sub(1);
        }
    }

    fn walk_failed(&mut self, _epoch: u64, e: Error) {
        if let Some(w) = &mut self.walk {
            w.error.get_or_insert(e);
        }
    }

    fn checked(&mut self, epoch: u64, tickets: Vec<Ticket>, checked: Checked) {
        if checked.error.is_none() {
            self.replied(checked.time);
        } else if let Some(time) = checked.time {
            self.observe_time(time);
        }
        let credit = self.credit;
        let Some(t) = self.jobs.iter_mut().find(|t| t.epoch == epoch) else {
            return;
        };
        let now_ms = self.clock.map_or(0, |c| c.now_ms());
        let ttl_ms = t.job.sweep.config().ttl.as_millis() as u64;
        // Members an outage kept from heartbeating are looked at again when their credit ends;
        // members the storm guard holds, when the hold ends.
        let spared_until = credit
            .map(|c| c.until(ttl_ms as f64 / 1000.0))
            .into_iter()
            .chain(checked.hold_until)
            .map(|until| (until * 1000.0) as u64)
            .filter(|&until| until > now_ms)
            .max();
        let written_by = now_ms + ttl_ms;
        for (ticket, state) in tickets.into_iter().zip(&checked.states) {
            match *state {
                // A moved key is its new primary's: that primary's walk finds it.
                KeyState::Gone | KeyState::Moved => t.index.checked(ticket, None, written_by),
                KeyState::Live {
                    card,
                    oldest: Some(oldest),
                } => {
                    let deadline = deadline_ms(oldest, ttl_ms);
                    let next = match spared_until {
                        // Pinned members (`+inf`) never come due; the key is still looked at
                        // now and then, so that one lost in a restart is forgotten.
                        _ if deadline == NEVER => now_ms + PINNED_RECHECK_MS,
                        _ if deadline > now_ms => deadline,
                        Some(until) => until + DEADLINE_MARGIN_MS,
                        None => now_ms + MIN_RECHECK_MS,
                    };
                    t.index.checked(ticket, Some((next, card)), written_by);
                }
                KeyState::Live { oldest: None, .. } | KeyState::Unknown => {
                    t.index.retry(ticket, now_ms + RETRY.as_millis() as u64);
                }
            }
        }
        t.job
            .metrics
            .deadline_checks(checked.states.len() as u64, checked.error.is_some());
        let (tracked, members) = (t.index.len() as u64, t.index.members());
        t.report_population(&self.id);
        t.job.metrics.node_figures(&self.id, |f| {
            f.tracked = tracked;
            f.members = members;
        });
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
                if self.refused.is_none() {
                    self.refused = Some((Instant::now() + REFUSED_RECHECK, false));
                }
            }
            Trouble::Credentials => self.metrics.redis_failure(trouble),
            Trouble::Unreachable | Trouble::Other => {}
        }
    }

    /// After a failure: Redis may have restarted (keys gone, or created anew), so the index is
    /// reconciled once Redis answers again; and behind Sentinel the primary may have moved.
    fn failed(&mut self, e: Error) {
        self.note_refusal(&e);
        self.suspect.notify_one();
        self.sync_wanted = true;
        self.sync_after = Instant::now() + RETRY;
        self.failure = Some(e);
    }

    fn verified(&mut self, epoch: u64, ids: Vec<Vec<u8>>, reads: Reads) {
        let Some(t) = self.jobs.iter_mut().find(|t| t.epoch == epoch) else {
            return;
        };
        let ttl_ms = t.job.sweep.config().ttl.as_millis() as u64;
        for (id, read) in ids.iter().zip(reads.keys) {
            match read.set() {
                Some(KeyRead {
                    oldest: Some(oldest),
                    ..
                }) => {
                    let oldest = t.job.sweep.config().score_unit.to_seconds(oldest);
                    t.index.due_by(id, deadline_ms(oldest, ttl_ms));
                }
                // Gone since it was tracked (a restart, a DEL nobody told us of).
                _ => t.index.deleted(id),
            }
        }
    }

    /// Takes the notices that have already arrived, up to a batch, without a turn of the loop
    /// for each: under a flood of writes the loop keeps up with the subscription, whose
    /// messages otherwise wait in memory.
    fn notices_waiting(&mut self) {
        use futures_util::FutureExt as _;
        for _ in 0..NOTICE_BATCH {
            let Notify::Active(sub) = &mut self.notify else {
                return;
            };
            match sub.next().now_or_never() {
                Some(Some(n)) => self.notice(n),
                Some(None) => return self.subscription_lost("the connection closed"),
                None => return,
            }
        }
    }

    fn notice(&mut self, n: Notice) {
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
                if let Some(clock) = &self.clock {
                    t.job.sweep.guard().heartbeat(clock.now());
                }
                let now_ms = self.clock.map(|c| c.now_ms());
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
                        max_keys = self.settings.tracking.max_keys,
                        "tracking.max_keys reached: new keys are checked by walks on the sweep's schedule"
                    );
                    t.untracked = 1;
                    t.job.metrics.node_figures(&self.id, |f| f.untracked = 1);
                }
            }
            Change::Deleted => t.index.deleted(id),
        }
    }

    fn notify_outcome(&mut self, outcome: NotifyOutcome) {
        let backoff = match self.notify {
            Notify::Busy { backoff } => backoff,
            _ => RESUBSCRIBE_FIRST,
        };
        self.subscribing = false;
        match outcome {
            NotifyOutcome::Subscribed(sub) => {
                tracing::info!(node = %self.id, sweeps = self.jobs.len(), "keyspace notifications in use");
                self.unavailable_said = None;
                self.notify = Notify::Active(sub);
                self.set_subscribed(true);
                self.next_ping = Instant::now() + SUBSCRIPTION_PING;
                // Whatever was written before the subscription is found by a walk.
                self.sync_wanted = true;
                self.sync_after = Instant::now();
            }
            NotifyOutcome::Kept(sub) => self.notify = Notify::Active(sub),
            NotifyOutcome::Unavailable { why, refused } => {
                let expected =
                    refused || self.settings.tracking.notifications == NotificationMode::On;
                // Looked at again every reconciliation: said once, and again if it changes.
                if self.subscribed || self.unavailable_said.as_deref() != Some(why.as_str()) {
                    if self.subscribed || expected {
                        tracing::warn!(node = %self.id, reason = %why, "keyspace notifications are not in use here: walks follow each sweep's schedule");
                    } else {
                        tracing::info!(node = %self.id, reason = %why, "keyspace notifications are off here: walks follow each sweep's schedule");
                    }
                } else {
                    tracing::debug!(node = %self.id, reason = %why, "keyspace notifications are still off here");
                }
                self.unavailable_said = Some(why);
                self.notify = Notify::Unavailable;
                self.set_subscribed(false);
            }
            NotifyOutcome::Failed(e) => {
                self.log_error(
                    "could not subscribe to keyspace notifications; retrying",
                    &e,
                );
                self.notify = Notify::Idle {
                    retry_at: Instant::now() + backoff,
                    backoff: (backoff * 2).min(RESUBSCRIBE_MAX),
                };
                self.set_subscribed(false);
            }
        }
    }

    fn set_subscribed(&mut self, subscribed: bool) {
        if self.subscribed && !subscribed {
            // Until a walk finds them, keys written now are not seen: walks follow the schedule.
            self.sync_wanted = true;
        }
        if !subscribed || !self.subscribed {
            // Writes went (or may go) unnoticed: the next reconciliation reads every key.
            self.subscriptions += 1;
            for t in &mut self.jobs {
                t.index.set_unnoticed(true);
            }
        }
        self.subscribed = subscribed;
        self.subscribed_flag.store(subscribed, Ordering::Relaxed);
        self.notifications.set(i64::from(subscribed));
    }

    /// Drops the subscription (and any attempt in flight) and subscribes anew.
    fn restart_notifications(&mut self) {
        self.notify_op = None;
        self.subscribing = false;
        self.notify = Notify::Idle {
            retry_at: Instant::now(),
            backoff: RESUBSCRIBE_FIRST,
        };
        self.set_subscribed(false);
    }

    fn subscription_lost(&mut self, why: &str) {
        tracing::warn!(node = %self.id, reason = why, "lost the keyspace-notification subscription; subscribing again, then a walk finds what was missed");
        self.notify = Notify::Idle {
            retry_at: Instant::now() + RESUBSCRIBE_FIRST,
            backoff: RESUBSCRIBE_FIRST * 2,
        };
        self.set_subscribed(false);
    }

    /// Takes the subscription out of the state while an operation works with it.
    fn take_subscription(&mut self) -> Option<Box<Subscription>> {
        if !matches!(self.notify, Notify::Active(_)) || self.notify_op.is_some() {
            return None;
        }
        let busy = Notify::Busy {
            backoff: RESUBSCRIBE_FIRST,
        };
        match std::mem::replace(&mut self.notify, busy) {
            Notify::Active(sub) => Some(sub),
            _ => unreachable!("matched above"),
        }
    }

    /// Proves the subscription delivers, on its own connection; a failure drops it.
    fn ping_subscription(&mut self) {
        let Some(mut sub) = self.take_subscription() else {
            return;
        };
        let timeout = self.settings.command_timeout;
        self.notify_op = Some(Box::pin(async move {
            match sub.ping(timeout).await {
                Ok(()) => NotifyOutcome::Kept(sub),
                Err(e) => NotifyOutcome::Failed(e),
            }
        }));
    }

    /// At each reconciliation: are notifications still on (or on now)? Notifications switched
    /// off at runtime are noticed here, within one `tracking.reconcile_interval`.
    fn recheck_notifications(&mut self) {
        // Wanted until it runs: a subscription operation in flight (a ping) only delays it.
        if matches!(self.notify, Notify::Active(_)) && self.notify_op.is_some() {
            return;
        }
        self.recheck_wanted = false;
        if matches!(self.notify, Notify::Unavailable) {
            self.notify = Notify::Idle {
                retry_at: Instant::now(),
                backoff: RESUBSCRIBE_FIRST,
            };
            return;
        }
        let Some(sub) = self.take_subscription() else {
            return;
        };
        let store = self.store.clone();
        let node = self.node.clone();
        let settings = self.settings.clone();
        let patterns: Vec<String> = self.jobs.iter().map(|t| t.channel.clone()).collect();
        self.notify_op = Some(Box::pin(async move {
            let on = async {
                let mut con = store.dedicated(&node).await?;
                keyspace::availability(&mut con).await
            };
            match on.await {
                // Redis away: keep the subscription; its pings tell.
                Ok(Availability::On) | Err(_) => NotifyOutcome::Kept(sub),
                Ok(Availability::Off(_)) if settings.tracking.configure_notifications => {
                    drop(sub);
                    subscribe(store, node, patterns, settings).await
                }
                Ok(Availability::Off(flags)) => NotifyOutcome::Unavailable {
                    why: format!("notify-keyspace-events was changed to {flags:?}"),
                    refused: false,
                },
                Ok(Availability::Unknown(why)) => NotifyOutcome::Unavailable { why, refused: true },
            }
        }));
    }

    fn observe_time(&mut self, redis: f64) {
        self.clock = Some(RedisClock {
            redis,
            at: Instant::now(),
        });
    }

    /// After a failure, the primary is looked up again (behind Sentinel it may have moved: a
    /// READONLY reply, a lost connection), and so it is when the store has followed a failover
    /// on its own; a data-path connection that broke is replaced. At most once per [`RETRY`].
    async fn maybe_refresh_node(&mut self) {
        if self.refresh_after > Instant::now()
            || (self.failure.is_none() && !self.node.is_broken() && !self.store.moved(&self.node))
        {
            return;
        }
        self.refresh_after = Instant::now() + RETRY;
        let failure = self.failure.take();
        let refreshed = tokio::select! {
            () = self.cancel.cancelled() => return,
            r = async {
                if let Some(e) = &failure {
                    self.store.recover(e).await;
                }
                self.store.node(&self.id).await
            } => r,
        };
        match refreshed {
            Ok(Some(node)) => {
                if node.server() != self.node.server() {
                    tracing::info!(node = %self.id, server = %node.server(), "the primary moved; following it");
                    if !matches!(self.notify, Notify::Off) {
                        self.restart_notifications();
                    }
                    self.sync_wanted = true;
                }
                self.node = node;
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

/// Subscribes to `patterns` on `node`'s server if its notifications are on (turning them on if
/// the configuration allows).
async fn subscribe(
    store: Store,
    node: Node,
    patterns: Vec<String>,
    settings: Arc<Settings>,
) -> NotifyOutcome {
    let attempt = async {
        let mut con = store.dedicated(&node).await?;
        match keyspace::availability(&mut con).await? {
            Availability::On => {}
            Availability::Off(flags) if settings.tracking.configure_notifications => {
                let set = keyspace::enable(&mut con, &flags).await?;
                tracing::info!(node = %node.id(), flags = %set, "turned keyspace notifications on (tracking.configure_notifications)");
            }
            Availability::Off(flags) => {
                return Ok(Err((
                    format!("notify-keyspace-events is {flags:?}, without K and z (or K and A)"),
                    false,
                )));
            }
            Availability::Unknown(why) => return Ok(Err((why, true))),
        }
        let pubsub = store.subscriber(&node).await?;
        match Subscription::start(pubsub, node.db(), &patterns, settings.command_timeout).await {
            Ok(sub) => Ok::<_, Error>(Ok(sub)),
            Err(Error::Permission { .. }) => Ok(Err((
                format!(
                    "the Redis user may not PSUBSCRIBE {} (add each to its ACL as a channel: &{})",
                    patterns.join(", "),
                    patterns.join(" &")
                ),
                true,
            ))),
            Err(e) => Err(e),
        }
    };
    match attempt.await {
        Ok(Ok(sub)) => NotifyOutcome::Subscribed(Box::new(sub)),
        Ok(Err((why, refused))) => NotifyOutcome::Unavailable { why, refused },
        Err(e) => NotifyOutcome::Failed(e),
    }
}

/// A key whose oldest member scored `oldest` (Unix seconds) is due at this many milliseconds
/// on Redis's clock.
fn deadline_ms(oldest: f64, ttl_ms: u64) -> u64 {
    let at = oldest * 1000.0 + ttl_ms as f64;
    if at.is_nan() || at <= 0.0 {
        0
    } else if at >= NEVER as f64 {
        NEVER
    } else {
        at.ceil() as u64
    }
}

/// What checks on this primary report to: the sweep's metrics, and the loop's liveness.
struct LoopObserver {
    metrics: SweepMetrics,
    health: Arc<LoopHealth>,
}

impl Observer for LoopObserver {
    fn key_checked(&self, cardinality: u64) {
        self.metrics.key_checked(cardinality);
    }
    fn progress(&self) {
        self.health.progress();
    }
    fn member_evicted(&self, lag_seconds: f64) {
        self.metrics.member_evicted(lag_seconds);
    }
    fn published(&self, events: u64) {
        self.metrics.published(events);
    }
    fn events_failed(&self, events: u64) {
        self.metrics.events_failed(events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_from_scores() {
        assert_eq!(deadline_ms(1_764_460_000.25, 45_000), 1_764_460_045_250);
        assert_eq!(deadline_ms(f64::NEG_INFINITY, 45_000), 0);
        assert_eq!(deadline_ms(f64::INFINITY, 45_000), NEVER);
        assert_eq!(deadline_ms(f64::NAN, 45_000), 0);
    }
}
