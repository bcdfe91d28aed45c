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
//! The decisions are the rules' ([`presence_sweeper_rules::primary::work::Work`]): which keys are
//! checked when, batched per sweep (`evict.batch_keys`), `evict.pipeline_depth` requests in
//! flight at a time; when a walk starts, reads its next page and ends; what a failure, a lost
//! subscription or a step of Redis's clock does. A key is checked when its deadline comes (a
//! few milliseconds after, so that Redis's clock has passed it too), and at once when it is new.
//! The I/O that carries the decisions out is beside this loop: `ops` (what the futures share,
//! the check, the look at the primary), `standing_io`, `notifications_io`, `walks_io`.
//!
//! This loop only selects events, hands them to the work, and applies the tasks that come back.
//! One task runs it; checks, walk pages and subscription work are futures it polls, so no state
//! is shared.
//!
//! The loop knows Redis's clock from the `TIME` every check and every SCAN page carries: its
//! estimate of Redis's "now" is the last `TIME` read plus the time since, which lags the true
//! instant by the reply's travel, so a cutoff computed from it is never ahead of Redis.

mod canary;
mod io;
mod notifications_io;
mod ops;
mod settings;
mod standing_io;
mod walks_io;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, FuturesUnordered};
use presence_sweeper_config::NotificationMode;
use presence_sweeper_redis::{Error, Node, Store};
use presence_sweeper_rules::index::Capacity;
use presence_sweeper_rules::keyspace::Notice;
use presence_sweeper_rules::primary::coordinator::{Coordinator, Setup};
use presence_sweeper_rules::primary::deadlines::Batching;
use presence_sweeper_rules::primary::notifications::{Outcome, Polled};
use presence_sweeper_rules::primary::sweeps::Sweeps;
use presence_sweeper_rules::primary::work::{self, Now, Task, Walked, Work};
use presence_sweeper_rules::report::{Beat, NodeReport};
use presence_sweeper_rules::scan::Page;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) use io::{RedisIo, SweepJob};
pub(crate) use presence_sweeper_rules::primary::coordinator::{LastAnswer, Shared};
pub(crate) use settings::LoopSettings;

use crate::time::now;
use ops::{Done, Ops};

/// Notices taken at once when they have already arrived.
const NOTICE_BATCH: usize = 256;
/// The loop turns at least this often, idle or not: its turning is what the systemd watchdog
/// and liveness watch.
pub(crate) const ALIVE_EVERY: Duration = Duration::from_secs(5);

/// What a primary's loop is told.
pub(crate) enum Order {
    /// The sweeps to run here from now on: a reload changed them, or a lease was won or lost.
    /// A sweep that is new, or whose settings changed, starts with an empty index and a walk.
    Jobs(Vec<Arc<SweepJob>>),
    /// A sweep's schedule ticked: walk, unless notifications make it unnecessary.
    Tick(String),
}

/// One primary's loop, with what it works with.
pub(crate) struct PrimaryLoop {
    pub(crate) node: Node,
    pub(crate) store: Store,
    pub(crate) settings: Arc<LoopSettings>,
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

impl PrimaryLoop {
    /// Runs until `cancel` fires, then lets the checks in flight finish (their events are
    /// published) and returns.
    pub(crate) async fn run(self, commands: mpsc::Receiver<Order>, cancel: CancellationToken) {
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
        let settings = work::Settings {
            batching: Batching {
                batch: self.settings.evict.batch_keys,
                depth: self.settings.evict.pipeline_depth,
                max_depth: self.settings.evict.max_pipeline_depth,
            },
            keys_per_second: match self.settings.scan.max_keys_per_second {
                0 => None,
                rate => Some(f64::from(rate)),
            },
            max_keys: self.settings.tracking.max_keys,
            alive_every: self.settings.alive_every,
            spread_first: true,
        };
        let coord = Coordinator::new(now, setup, self.report, self.shared);
        let sweeps = Sweeps::new(id, self.node.db(), self.capacity, self.beat.clone());
        let mut run = Run {
            work: Work::new(coord, sweeps, settings, self.beat.clone()),
            ops: Ops {
                store: self.store,
                node: self.node,
                settings: self.settings,
                cancel,
            },
            beat: self.beat,
            commands,
            in_flight: FuturesUnordered::new(),
            pages: None,
            suspect: self.suspect,
            canary_key: None,
        };
        run.main().await;
        run.drain().await;
        run.work.forget();
        run.beat.retire();
    }
}

/// What woke the loop.
enum Wake {
    Order(Option<Order>),
    Done(Done),
    Page(Option<Result<Page, Error>>),
    Notice(Option<Notice>),
    Subscription(Outcome<RedisIo>),
    Timer,
    Cancelled,
}

/// The loop: it selects events, hands them to the work, and applies the tasks that come back.
struct Run {
    work: Work<RedisIo>,
    ops: Ops,
    beat: Arc<dyn Beat>,
    commands: mpsc::Receiver<Order>,
    in_flight: FuturesUnordered<BoxFuture<'static, Done>>,
    /// The SCAN pages of the walk in flight.
    pages: Option<BoxStream<'static, Result<Page, Error>>>,
    suspect: Arc<tokio::sync::Notify>,
    /// The canary's key here, once known (see [`canary`]).
    canary_key: Option<Vec<u8>>,
}

/// The instant now, as the work takes it.
fn at() -> Now {
    Now {
        at: now(),
        unix: crate::time::unix_now(),
    }
}

impl Run {
    async fn main(&mut self) {
        loop {
            self.turn();
            self.beat.alive();
            let event = self.next_event().await;
            let now = now();
            self.work.woke(now);
            match event {
                Wake::Cancelled | Wake::Order(None) => return,
                Wake::Order(Some(Order::Jobs(jobs))) => self.work.on_jobs(now, jobs),
                Wake::Order(Some(Order::Tick(name))) => self.work.on_tick(now, &name),
                Wake::Done(done) => self.done(done),
                Wake::Page(page) => self.work.on_page(at(), page),
                Wake::Notice(Some(n)) => {
                    self.work.on_notice(now, &n);
                    self.notices_waiting();
                }
                Wake::Notice(None) => self.work.on_subscription_lost(now),
                Wake::Subscription(o) => self.work.on_subscription(now, o),
                Wake::Timer => {}
            }
        }
    }

    /// Waits for whatever comes first.
    async fn next_event(&mut self) -> Wake {
        let now = now();
        // The work bounds what is in flight by its own count of it.
        debug_assert_eq!(self.work.in_flight(), self.in_flight.len());
        let wake = self.work.next_wake(now);
        let wants_page = self.work.wants_page(now);
        let Run {
            commands,
            in_flight,
            pages,
            work,
            ops,
            ..
        } = self;
        let subscription = async {
            match work.subscription() {
                Polled::Op(op) => Wake::Subscription(op.await),
                Polled::Active(sub) => Wake::Notice(sub.next().await),
                Polled::Nothing => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = ops.cancel.cancelled() => Wake::Cancelled,
            c = commands.recv() => Wake::Order(c),
            Some(done) = in_flight.next(), if !in_flight.is_empty() => Wake::Done(done),
            e = subscription => e,
            p = async { pages.as_mut().expect("a walk has pages").next().await }, if wants_page => Wake::Page(p),
            () = crate::time::sleep_until(wake) => Wake::Timer,
        }
    }

    /// Asks the work what goes out now, and sends it.
    fn turn(&mut self) {
        if self.ops.cancel.is_cancelled() {
            self.work.stop();
        }
        let node_changed = self.ops.node.is_broken() || self.ops.store.moved(&self.ops.node);
        let ops = &self.ops;
        let tasks = self.work.turn(at(), node_changed, |op, patterns| {
            ops.subscription(op, patterns)
        });
        for task in tasks {
            self.apply(task);
        }
    }

    /// Carries out one task: a request becomes a future in flight.
    fn apply(&mut self, task: Task<RedisIo>) {
        let request = match task {
            Task::Probe => self.ops.probe(self.canary_key.clone()),
            Task::ProvePermissions(jobs) => {
                let sweeps = jobs.iter().map(|j| j.evictor.clone()).collect();
                self.ops.prove_permissions(sweeps)
            }
            Task::Refresh(failure) => self.ops.refresh(failure),
            Task::Suspect => return self.suspect.notify_one(),
            Task::Scan { glob } => return self.pages = Some(self.ops.pages(glob)),
            Task::ScanOver => return self.pages = None,
            Task::Check {
                epoch,
                tickets,
                batch,
            } => {
                let sent = now();
                let check = self.ops.check(batch);
                Box::pin(async move {
                    let checked = check.await;
                    Done::Checked {
                        epoch,
                        tickets,
                        checked,
                        sent,
                    }
                })
            }
            Task::Direct { epoch, batch } => {
                let check = self.ops.check(batch);
                Box::pin(async move {
                    let walked = Walked::Direct(check.await);
                    Done::Walked { epoch, walked }
                })
            }
            Task::Verify { epoch, ids, keys } => self.ops.verify(epoch, ids, keys),
            Task::Unseen { epoch, ids, keys } => self.ops.unseen(epoch, ids, keys),
        };
        self.in_flight.push(request);
    }

    /// A request came back: its result goes to the work.
    fn done(&mut self, done: Done) {
        let now = at();
        match done {
            Done::Permitted(permitted) => self.work.on_permitted(now, permitted),
            Done::Probe(probe) => {
                let evidence = probe.map(|p| {
                    self.canary_key = p.key;
                    p.evidence
                });
                self.work.on_probe(now, evidence);
            }
            Done::Refreshed(refreshed, node) => {
                if let Some(node) = node {
                    self.ops.node = node;
                }
                self.work.on_refreshed(now, refreshed);
            }
            Done::Checked {
                epoch,
                tickets,
                checked,
                sent,
            } => self.work.on_checked(now, sent, epoch, tickets, checked),
            Done::Walked { epoch, walked } => self.work.on_walked(now, epoch, walked),
        }
    }

    /// Takes the notices that have already arrived, up to a batch, without a turn of the loop
    /// for each: under a flood of writes the loop keeps up with the subscription, whose
    /// messages otherwise wait in memory.
    fn notices_waiting(&mut self) {
        use futures_util::FutureExt as _;
        for _ in 0..NOTICE_BATCH {
            let now = now();
            let Polled::Active(sub) = self.work.subscription() else {
                return;
            };
            match sub.next().now_or_never() {
                Some(Some(n)) => self.work.on_notice(now, &n),
                Some(None) => return self.work.on_subscription_lost(now),
                None => return,
            }
        }
    }

    /// After cancellation: the requests in flight finish (checks publish their events) and
    /// their results are handed in; a walk still in flight was cut short.
    async fn drain(&mut self) {
        while let Some(done) = self.in_flight.next().await {
            if self.ops.cancel.is_cancelled() {
                self.work.stop();
            }
            self.done(done);
        }
        self.work.stopped();
    }
}
