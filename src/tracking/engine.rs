//! Every enabled sweep on every primary: one loop per primary ([`crate::tracking::primary`]), kept in step
//! with the topology (a failover, a resharding), the configuration (reloads) and the leases; and
//! for each sweep its schedule and, optionally, its lease.
//!
//! A sweep's schedule no longer drives eviction: keys are checked at their deadlines. It drives
//! the walks that find new keys where keyspace notifications are not in use.

use presence_sweeper_config as config;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::evictor::Evictor;
use crate::tracking::lease::{Holding, SweepLeases};
use crate::tracking::primary::{self, LastAnswer, Order, PrimaryLoop, Shared, SweepJob};
use crate::tracking::report::Reports;
use crate::tracking::schedule::{CronClock, CronJob, Ticker, TickerError};
use presence_sweeper_config::{Config, NotificationMode};
use presence_sweeper_redis::Store;
use presence_sweeper_rules::clock::after;
use presence_sweeper_rules::index::Capacity;
use presence_sweeper_rules::node::NodeId;
use presence_sweeper_rules::pause::PauseWatch;
use presence_sweeper_rules::report::{Beat, SweepReport, Totals};
use presence_sweeper_rules::summary::Summary;
use presence_sweeper_webhooks::DueSlots;

/// How often the topology is read again (a cluster's primaries after a failover or a
/// resharding); sooner when a primary's work fails, but at most once per [`TOPOLOGY_AFTER`].
const TOPOLOGY_EVERY: Duration = Duration::from_secs(10);
const TOPOLOGY_AFTER: Duration = Duration::from_secs(1);
/// How often the engine itself turns, at most: sweeps' intervals, the watchdog.
const TURN_EVERY: Duration = Duration::from_secs(1);

/// What a sweep's settings are made of; a change of any of it replaces the sweep (its index is
/// rebuilt by a walk).
#[derive(Clone, PartialEq)]
struct SweepSettings {
    sweep: config::Sweep,
    evict: config::Evict,
    events: config::Events,
    sharded_pubsub: bool,
    coordination: config::Coordination,
}

impl SweepSettings {
    fn of(config: &Config) -> Vec<Self> {
        config
            .enabled_sweeps()
            .map(|s| Self {
                sweep: s.clone(),
                evict: config.evict.clone(),
                events: config.events.clone(),
                sharded_pubsub: config.redis.sharded_pubsub,
                coordination: config.coordination.clone(),
            })
            .collect()
    }
}

/// A configured sweep.
struct Entry {
    settings: SweepSettings,
    job: Arc<SweepJob>,
    /// The primaries it runs on here: without a lease, every one; with leases, those held.
    holding: Holding,
    /// Its schedule loop.
    schedule: JoinHandle<()>,
    retire: CancellationToken,
    cron_job: Option<CronJob>,
}

struct PrimaryHandle {
    commands: mpsc::Sender<Order>,
    task: JoinHandle<()>,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

/// What the sweeps' schedule loops tell the engine.
enum Msg {
    Tick(String),
    Lease(String, Holding),
}

/// The sweeps and the primaries' loops.
pub(crate) struct Engine {
    store: Store,
    /// Where the evictors say which cluster slots they marked due for webhooks.
    due_slots: DueSlots,
    settings: Arc<primary::LoopSettings>,
    capacity: Arc<Capacity>,
    reports: Arc<dyn Reports>,
    cancel: CancellationToken,
    sweeps: BTreeMap<String, Entry>,
    /// Evictor loops told to stop, finishing what they do (releasing a lease).
    retiring: Vec<JoinHandle<()>>,
    primaries: BTreeMap<NodeId, PrimaryHandle>,
    /// The primaries there are now, for the sweeps' leases.
    primaries_now: watch::Sender<Vec<NodeId>>,
    cron: CronClock,
    inbox: mpsc::Receiver<Msg>,
    outbox: mpsc::Sender<Msg>,
    topology: tokio::time::Interval,
    /// Primaries' loops say when their work fails.
    suspect: Arc<tokio::sync::Notify>,
    /// Pauses of the daemon itself, for every primary's loop.
    pauses: Arc<PauseWatch>,
    last_topology: std::time::Instant,
    /// The first topology was read: a primary found later took over keys (a failover, a
    /// replica's takeover, slots moved to it).
    topology_known: bool,
    turn: tokio::time::Interval,
    beat: Arc<dyn Beat>,
    /// What the log says of the sweeps' work, and when.
    summary: Summary,
}

impl Engine {
    /// An engine with nothing running yet; [`Engine::apply`] starts the sweeps. Every loop
    /// turns at least every `alive_every` (see [`alive_every`]).
    pub(crate) fn new(
        store: Store,
        config: &Config,
        reports: Arc<dyn Reports>,
        alive_every: Duration,
        due_slots: DueSlots,
        cancel: CancellationToken,
    ) -> Self {
        let (outbox, inbox) = mpsc::channel(64);
        let mut topology = tokio::time::interval(TOPOLOGY_EVERY);
        topology.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut turn = tokio::time::interval(TURN_EVERY.min(alive_every));
        turn.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let tracking = &config.tracking;
        reports.notifications_expected(
            tracking.notifications == NotificationMode::On
                || (tracking.notifications == NotificationMode::Auto
                    && tracking.configure_notifications),
        );
        let pauses = Arc::new(PauseWatch::default());
        tokio::spawn({
            let (pauses, cancel) = (pauses.clone(), cancel.clone());
            async move { crate::tracking::pause::run(&pauses, cancel).await }
        });
        Self {
            due_slots,
            pauses,
            settings: Arc::new(settings_of(config, alive_every)),
            capacity: Capacity::new(tracking.max_keys),
            beat: reports.watch_loop("engine"),
            store,
            reports,
            cancel,
            sweeps: BTreeMap::new(),
            retiring: Vec::new(),
            primaries: BTreeMap::new(),
            primaries_now: watch::Sender::new(Vec::new()),
            cron: CronClock::default(),
            inbox,
            outbox,
            topology,
            suspect: Arc::default(),
            last_topology: crate::time::now(),
            topology_known: false,
            turn,
            summary: Summary::new(crate::time::now()),
        }
    }

    /// Makes the running sweeps match `config`: unchanged ones carry on untouched (their
    /// indexes too), changed ones are replaced, removed ones stop, new ones start. Settings
    /// that every primary's loop works by (`[scan]`, `[evict]`, `[tracking]`) restart the loops.
    pub(crate) async fn apply(&mut self, config: &Config) -> Result<(), TickerError> {
        let settings = settings_of(config, self.settings.alive_every);
        if *self.settings != settings {
            self.settings = Arc::new(settings);
            self.capacity = Capacity::new(config.tracking.max_keys);
            self.stop_primaries().await;
        }
        let wanted = SweepSettings::of(config);
        let names: Vec<String> = self.sweeps.keys().cloned().collect();
        for name in names {
            let keep = wanted
                .iter()
                .any(|w| w.sweep.name == name && self.sweeps[&name].settings == *w);
            if keep {
                continue;
            }
            let old = self.sweeps.remove(&name).expect("listed above");
            old.retire.cancel();
            if let Some(job) = old.cron_job {
                self.cron.remove(job).await;
            }
            self.retiring.push(old.schedule);
            if !wanted.iter().any(|w| w.sweep.name == name) {
                self.reports.forget_sweep(&name);
                tracing::info!(sweep = %name, "sweep removed");
            }
        }
        for settings in wanted {
            if self.sweeps.contains_key(&settings.sweep.name) {
                continue;
            }
            let entry = self.start_sweep(settings).await?;
            self.sweeps.insert(entry.settings.sweep.name.clone(), entry);
        }
        self.retiring.retain(|task| !task.is_finished());
        self.refresh_topology().await;
        self.broadcast_jobs().await;
        Ok(())
    }

    async fn start_sweep(&mut self, settings: SweepSettings) -> Result<Entry, TickerError> {
        let config = &settings.sweep;
        let ticker = Ticker::start(&config.schedule, &mut self.cron).await?;
        let cron_job = ticker.cron_job();
        let handles = self.reports.sweep(config);
        let sweep = Arc::new(
            Evictor::with_settings(
                config,
                &settings.evict,
                &settings.events,
                settings.sharded_pubsub,
                handles.guard,
                handles.units,
            )
            .with_due_slots(self.due_slots.clone()),
        );
        let report = handles.report;
        let job = Arc::new(SweepJob {
            evictor: sweep,
            report: report.clone(),
        });
        let leases = settings.coordination.lease.then(|| {
            (
                SweepLeases::new(
                    &settings.coordination.key_prefix,
                    &config.name,
                    settings.coordination.lease_ttl,
                ),
                report,
            )
        });
        let retire = self.cancel.child_token();
        let schedule = tokio::spawn(run_schedule(ScheduleLoop {
            name: config.name.clone(),
            ticker,
            leases,
            primaries: self.primaries_now.subscribe(),
            store: self.store.clone(),
            outbox: self.outbox.clone(),
            beat: self
                .reports
                .watch_loop(&format!("schedule {}", config.name)),
            alive_every: self.settings.alive_every,
            retire: retire.clone(),
        }));
        tracing::info!(
            sweep = %config.name,
            schedule = %config.schedule,
            ttl = %humantime::format_duration(config.ttl),
            "sweep scheduled"
        );
        Ok(Entry {
            holding: match settings.coordination.lease {
                true => Holding::Nodes(Default::default()),
                false => Holding::All,
            },
            settings,
            job,
            schedule,
            retire,
            cron_job,
        })
    }

    /// Waits for the next thing to do and does it: a tick, a lease change, a look at the
    /// topology. Call it in a loop.
    pub(crate) async fn step(&mut self) {
        enum Next {
            Msg(Msg),
            Topology,
            Turn,
        }
        let soon = self.last_topology + TOPOLOGY_AFTER;
        let next = tokio::select! {
            Some(msg) = self.inbox.recv() => Next::Msg(msg),
            _ = self.topology.tick() => Next::Topology,
            () = async {
                self.suspect.notified().await;
                crate::time::sleep_until(soon).await;
            } => Next::Topology,
            _ = self.turn.tick() => Next::Turn,
        };
        match next {
            Next::Msg(Msg::Tick(name)) => {
                for p in self.primaries.values() {
                    let _ = p.commands.try_send(Order::Tick(name.clone()));
                }
            }
            Next::Msg(Msg::Lease(name, holding)) => {
                if let Some(entry) = self.sweeps.get_mut(&name) {
                    entry.job.report.runs_on(match &holding {
                        Holding::All => None,
                        Holding::Nodes(held) => Some(held),
                    });
                    entry.holding = holding;
                    self.broadcast_jobs().await;
                }
            }
            Next::Topology => self.refresh_topology().await,
            Next::Turn => self.turn(),
        }
        self.beat.alive();
    }

    /// The sweeps' intervals (the time between walks), from whether every primary uses
    /// notifications now.
    fn turn(&mut self) {
        let everywhere = !self.primaries.is_empty()
            && self
                .primaries
                .values()
                .all(|p| p.shared.subscribed.load(Ordering::Relaxed));
        for entry in self.sweeps.values() {
            let interval = match everywhere {
                true => self.settings.tracking.reconcile_interval,
                false => entry.settings.sweep.schedule.interval().unwrap_or_default(),
            };
            entry.job.report.interval(interval);
        }
        self.retiring.retain(|task| !task.is_finished());
        let now = crate::time::now();
        self.bursts(now);
        if let Some(covered) = self.summary.due(now) {
            self.summarize(covered);
        }
    }

    /// An info line as soon as a sweep evicts a large burst (counts only: never an id).
    fn bursts(&mut self, now: std::time::Instant) {
        for (name, entry) in &self.sweeps {
            let evicted = entry.job.report.totals().evicted;
            if let Some((burst, over)) = self.summary.burst(name, evicted, now) {
                tracing::info!(
                    sweep = %name,
                    evicted = burst,
                    seconds = over.as_secs(),
                    "large eviction burst: {burst} members evicted within {} s",
                    over.as_secs().max(1)
                );
            }
        }
    }

    /// One info line per sweep: what it did in the `covered` time since the last summary.
    fn summarize(&mut self, covered: Duration) {
        let subscribed = self
            .primaries
            .values()
            .filter(|p| p.shared.subscribed.load(Ordering::Relaxed))
            .count();
        let minutes = covered.as_secs_f64() / 60.0;
        let period = match minutes.round() as u64 {
            0 | 1 => "minute".to_owned(),
            n => format!("{n} minutes"),
        };
        for (name, entry) in &self.sweeps {
            let totals = entry.job.report.totals();
            let done: Totals = self.summary.since_last(name, totals);
            tracing::info!(
                sweep = %name,
                evicted = done.evicted,
                events = done.published,
                events_lost = done.lost,
                events_unconfirmed = done.unconfirmed,
                checks = done.checks,
                walks = done.walks,
                failed_walks = done.failed_walks,
                tracked_keys = done.tracked,
                members = done.members,
                primaries = self.primaries.len(),
                notifications_on = subscribed,
                active = entry.holding != Holding::Nodes(Default::default()),
                "summary of the last {period}"
            );
        }
        let sweeps = &self.sweeps;
        self.summary.retain(|name| sweeps.contains_key(name));
    }

    /// The jobs `node`'s loop runs now.
    fn jobs_for(&self, node: &NodeId) -> Vec<Arc<SweepJob>> {
        self.sweeps
            .values()
            .filter(|e| e.holding.covers(node))
            .map(|e| e.job.clone())
            .collect()
    }

    async fn broadcast_jobs(&mut self) {
        for (id, p) in &self.primaries {
            let _ = p.commands.send(Order::Jobs(self.jobs_for(id))).await;
        }
    }

    /// Starts a loop for every primary of the topology now, and stops those of servers that
    /// are no longer primaries.
    async fn refresh_topology(&mut self) {
        self.last_topology = crate::time::now();
        let nodes = match self.store.nodes().await {
            Ok(nodes) => nodes,
            Err(e) => {
                tracing::debug!(error = %e, "could not read the topology; keeping the primaries as they were");
                return;
            }
        };
        let ids: Vec<NodeId> = nodes.iter().map(|n| n.id().clone()).collect();
        let gone: Vec<NodeId> = self
            .primaries
            .keys()
            .filter(|id| !ids.contains(id))
            .cloned()
            .collect();
        // Primaries that left while not answering failed over: the apps could not write to
        // their keys since then, and the loops that take those keys over never saw it.
        let now = crate::time::now();
        let inherited_outage = gone
            .iter()
            .filter_map(|id| self.primaries[id].shared.last_answer.stalled_since(now))
            .reduce(f64::min);
        for id in gone {
            let p = self.primaries.remove(&id).expect("listed above");
            tracing::info!(node = %id, "no longer a primary; its loop stops");
            p.stop.cancel();
            self.retiring.push(p.task);
        }
        for node in nodes {
            let id = node.id().clone();
            if self.primaries.contains_key(&id) {
                continue;
            }
            let (commands, inbox) = mpsc::channel(64);
            let _ = commands.try_send(Order::Jobs(self.jobs_for(&id)));
            let stop = self.cancel.child_token();
            let shared = Arc::new(Shared {
                subscribed: AtomicBool::new(false),
                last_answer: LastAnswer::default(),
                pauses: self.pauses.clone(),
            });
            let primary = PrimaryLoop {
                report: self.reports.node(&id),
                beat: self.reports.watch_loop(&format!("primary {id}")),
                node,
                store: self.store.clone(),
                settings: self.settings.clone(),
                capacity: self.capacity.clone(),
                shared: shared.clone(),
                suspect: self.suspect.clone(),
                inherited_outage,
                takes_over: self.topology_known,
            };
            let task = tokio::spawn(primary.run(inbox, stop.clone()));
            tracing::debug!(node = %id, "primary loop started");
            self.primaries.insert(
                id,
                PrimaryHandle {
                    commands,
                    task,
                    shared,
                    stop,
                },
            );
        }
        self.reports
            .primaries(self.primaries.keys().cloned().collect());
        let ids: Vec<NodeId> = self.primaries.keys().cloned().collect();
        self.primaries_now.send_if_modified(|now| {
            let changed = *now != ids;
            *now = ids;
            changed
        });
        self.topology_known = true;
    }

    async fn stop_primaries(&mut self) {
        for (_, p) in std::mem::take(&mut self.primaries) {
            p.stop.cancel();
            let _ = p.task.await;
        }
    }

    /// After cancellation: every loop finishes what is in flight (checks publish their events,
    /// leases are released). The caller bounds the wait.
    pub(crate) async fn drain(&mut self) {
        for p in self.primaries.values_mut() {
            let _ = (&mut p.task).await;
        }
        for e in self.sweeps.values_mut() {
            let _ = (&mut e.schedule).await;
        }
        for task in &mut self.retiring {
            let _ = task.await;
        }
    }

    /// Stops whatever the drain left running.
    pub(crate) async fn abort(&mut self) {
        for p in self.primaries.values() {
            p.task.abort();
        }
        for e in self.sweeps.values() {
            e.schedule.abort();
        }
        for task in &self.retiring {
            task.abort();
        }
        self.cron.shutdown().await;
    }

    /// How many sweeps run.
    pub(crate) fn sweep_count(&self) -> usize {
        self.sweeps.len()
    }

    /// The engine's own loop is done.
    pub(crate) fn retire(&self) {
        self.beat.retire();
    }
}

fn settings_of(config: &Config, alive_every: Duration) -> primary::LoopSettings {
    primary::LoopSettings {
        scan: config.scan.clone(),
        evict: config.evict.clone(),
        tracking: config.tracking.clone(),
        command_timeout: config.redis.command_timeout,
        alive_every,
    }
}

/// How often every loop turns at least, with a watchdog of `period`: a quarter of it, so that a
/// wedged loop stops the pings in time, and at most [`primary::ALIVE_EVERY`].
pub(crate) fn alive_every(watchdog: Option<Duration>) -> Duration {
    watchdog.map_or(primary::ALIVE_EVERY, |p| (p / 4).min(primary::ALIVE_EVERY))
}

/// One sweep's schedule loop (the "schedule <sweep>" loop health watches): it turns the
/// schedule's ticks and the sweep's lease into messages for the engine.
struct ScheduleLoop {
    name: String,
    ticker: Ticker,
    leases: Option<(SweepLeases, Arc<dyn SweepReport>)>,
    /// The primaries there are now, for the leases.
    primaries: watch::Receiver<Vec<NodeId>>,
    store: Store,
    outbox: mpsc::Sender<Msg>,
    beat: Arc<dyn Beat>,
    alive_every: Duration,
    /// Ends the loop (the sweep was removed or changed); shutdown cancels it too.
    retire: CancellationToken,
}

/// Sends the sweep's ticks, and where this replica holds its leases, until retired; then gives
/// the leases up so that another replica takes over at once.
async fn run_schedule(mut c: ScheduleLoop) {
    let mut alive = tokio::time::interval(c.alive_every);
    let mut next_lease_attempt = c.leases.as_ref().map(|_| crate::time::now());
    // Unknown until the first attempt, which then says either way: a replica that never holds
    // a lease must still say that it stands by (it is ready so).
    let mut holding = None;
    loop {
        tokio::select! {
            () = c.retire.cancelled() => break,
            () = c.ticker.tick() => {
                let _ = c.outbox.send(Msg::Tick(c.name.clone())).await;
            }
            // New primaries: their leases are shared out at once.
            Ok(()) = c.primaries.changed(), if next_lease_attempt.is_some() => {
                next_lease_attempt = Some(crate::time::now());
            }
            () = async { crate::time::sleep_until(next_lease_attempt.expect("guarded")).await },
                if next_lease_attempt.is_some() => {
                let primaries = c.primaries.borrow_and_update().clone();
                let (leases, report) = c.leases.as_mut().expect("guarded");
                if primaries.is_empty() {
                    // The topology is not known yet: whether one lease or one per primary is
                    // not either. Its first reading wakes this loop.
                    next_lease_attempt = Some(after(crate::time::now(), leases.attempt_every()));
                    continue;
                }
                let (now, error) = leases.attempt(&c.store, &primaries).await;
                if let Some(e) = error {
                    tracing::warn!(sweep = %c.name, error = %e, "could not take or renew a lease");
                }
                report.leases(&leases.held(&primaries));
                if holding.as_ref() != Some(&now) {
                    holding = Some(now.clone());
                    let _ = c.outbox.send(Msg::Lease(c.name.clone(), now)).await;
                }
                next_lease_attempt = Some(after(crate::time::now(), leases.attempt_every()));
            }
            _ = alive.tick() => {}
        }
        c.beat.alive();
    }
    if let Some((leases, report)) = &mut c.leases {
        leases.release(&c.store).await;
        report.leases(&[]);
    }
    c.beat.retire();
}
