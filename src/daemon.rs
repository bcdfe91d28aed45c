//! The long-running daemon: the metrics and health server, a Redis probe, and one task per
//! enabled sweep on its own schedule, all sharing one Redis connection; reloads on SIGHUP;
//! drains on shutdown.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::{
    Config, ConfigError, CoordinationConfig, EvictConfig, ScanConfig, SweepConfig, redact_url,
};
use crate::health::{Health, SweepHealth};
use crate::http;
use crate::lease::Lease;
use crate::metrics::{Metrics, SweepMetrics};
use crate::pass::{Pass, PassError, PassOptions, PassReport};
use crate::schedule::{CronClock, Ticker};
use crate::store::Store;
use crate::sweep::{Observer as CheckObserver, Sweep};
use crate::systemd::Notifier;

/// How long shutdown waits for passes in flight; below the 5 s an orchestrator is promised.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(4);

/// How often Redis is PINGed between passes, so `redis_up` and `/readyz` stay current even
/// when every schedule is long.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Re-reads the configuration (file and environment) on SIGHUP.
pub type Loader = Box<dyn Fn() -> Result<Config, ConfigError> + Send>;

/// Everything the daemon needs from outside; tests build it with their own listener, channels
/// and loader.
pub struct Daemon {
    /// The configuration to start with.
    pub config: Config,
    /// The bound metrics and health address.
    pub listener: TcpListener,
    /// One item per reload request (SIGHUP).
    pub reloads: mpsc::Receiver<()>,
    /// How to read the configuration again.
    pub loader: Loader,
    /// systemd notifications.
    pub notifier: Arc<Notifier>,
}

/// What every sweep loop shares.
#[derive(Clone)]
struct Shared {
    store: Store,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    notifier: Arc<Notifier>,
}

impl Shared {
    /// Pings the systemd watchdog if every sweep loop turned recently and no pass is stuck.
    fn watchdog(&self) {
        if let Some(period) = self.notifier.watchdog_period()
            && self.health.loops_alive_within(period / 2)
            && self.health.liveness().is_ok()
        {
            self.notifier.watchdog();
        }
    }
}

/// A sweep loop that runs, with the settings it runs with.
struct RunningSweep {
    settings: Settings,
    /// Ends the loop after its pass in flight; shutdown cancels it too.
    retire: CancellationToken,
    task: JoinHandle<()>,
    cron_job: Option<uuid::Uuid>,
}

/// What a sweep loop is built from; a change of any of it restarts the loop.
#[derive(Clone, PartialEq)]
struct Settings {
    sweep: SweepConfig,
    scan: ScanConfig,
    evict: EvictConfig,
    sharded_pubsub: bool,
    coordination: CoordinationConfig,
}

impl Settings {
    fn of(config: &Config) -> Vec<Self> {
        config
            .enabled_sweeps()
            .map(|s| Self {
                sweep: s.clone(),
                scan: config.scan.clone(),
                evict: config.evict.clone(),
                sharded_pubsub: config.redis.sharded_pubsub,
                coordination: config.coordination.clone(),
            })
            .collect()
    }
}

impl Daemon {
    /// Runs until `cancel` fires.
    ///
    /// Redis being away is never fatal: connecting is retried, and a pass that fails is logged
    /// and the next one tries again. On `cancel` readiness drops, no new script call starts,
    /// calls in flight finish (up to [`DRAIN_TIMEOUT`]), then the server stops.
    pub async fn run(self, cancel: CancellationToken) -> Result<(), Error> {
        let Self {
            mut config,
            listener,
            mut reloads,
            loader,
            notifier,
        } = self;
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(stall_timeout(&config));
        let http_stop = CancellationToken::new();
        let server = http::serve(
            listener,
            http::State {
                metrics: metrics.clone(),
                health: health.clone(),
            },
            http_stop.clone(),
        );
        // Series of every sweep exist from start-up, at zero, even while Redis is unreachable.
        for s in config.enabled_sweeps() {
            metrics.sweep(s);
            health.sweep(&s.name);
        }
        metrics.set_redis_up(false);

        let url = redact_url(&config.redis.url);
        notifier.status(&format!("connecting to Redis at {url}"));
        let on_failure = |e: &Error, retry_in: Duration| {
            notifier.status(&format!("waiting for Redis at {url}: {e}"));
            notifier.extend_start_timeout(retry_in + config.redis.connect_timeout * 2);
            notifier.watchdog();
        };
        let Some(store) = Store::connect_with_retry(&config.redis, &cancel, on_failure).await
        else {
            notifier.stopping();
            return stop_server(server, http_stop).await;
        };
        health.set_redis_up(true);
        metrics.set_redis_up(true);

        let shared = Shared {
            store,
            metrics,
            health: health.clone(),
            notifier: notifier.clone(),
        };
        let probe = tokio::spawn(probe_redis(shared.clone(), cancel.clone()));
        let mut sweeps = Sweeps {
            cron: CronClock::default(),
            running: BTreeMap::new(),
            retiring: BTreeMap::new(),
        };
        sweeps
            .apply(Settings::of(&config), &shared, &cancel)
            .await?;
        let status = |n: usize| format!("sweeping ({n} sweeps)");
        notifier.ready(&status(sweeps.running.len()));
        tracing::info!(
            sweeps = sweeps.running.len(),
            "connected to Redis; sweeping"
        );

        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                Some(()) = reloads.recv() => {
                    notifier.reloading();
                    match loader() {
                        Ok(new) => {
                            warn_restart_needed(&config, &new);
                            // Connection, server and logging keep running as they started.
                            config = Config { redis: config.redis, http: config.http, log: config.log, ..new };
                            sweeps.apply(Settings::of(&config), &shared, &cancel).await?;
                            shared.metrics.config_reload(true);
                            tracing::info!(sweeps = sweeps.running.len(), "configuration reloaded");
                        }
                        Err(e) => {
                            shared.metrics.config_reload(false);
                            tracing::error!(
                                error = %e,
                                "configuration reload rejected; the running configuration stays in effect"
                            );
                        }
                    }
                    notifier.ready(&status(sweeps.running.len()));
                }
            }
        }

        notifier.stopping();
        health.set_shutting_down();
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, sweeps.join_all()).await;
        if drained.is_err() {
            tracing::warn!("passes still running after the drain deadline; abandoning them");
            sweeps.abort_all();
        }
        sweeps.cron.shutdown().await;
        let _ = probe.await;
        stop_server(server, http_stop).await
    }
}

async fn stop_server(server: JoinHandle<()>, stop: CancellationToken) -> Result<(), Error> {
    stop.cancel();
    let _ = server.await;
    Ok(())
}

/// A pass that shows no progress for this long is stuck: every Redis call it makes is bounded by
/// `redis.command_timeout`, so a healthy pass moves on far sooner.
fn stall_timeout(config: &Config) -> Duration {
    (config.redis.command_timeout * 4).max(Duration::from_secs(60))
}

/// Settings a reload cannot change in a running process; say so instead of ignoring them.
fn warn_restart_needed(old: &Config, new: &Config) {
    let mut changed = Vec::new();
    if old.redis != new.redis {
        changed.push("redis");
    }
    if old.http != new.http {
        changed.push("http");
    }
    if old.log != new.log {
        changed.push("log");
    }
    if !changed.is_empty() {
        tracing::warn!(
            sections = %changed.join(", "),
            "these settings changed but only take effect after a restart; the running values stay in use"
        );
    }
}

/// The sweep loops, and the loops being retired after a reload.
struct Sweeps {
    cron: CronClock,
    running: BTreeMap<String, RunningSweep>,
    /// Loops told to stop after their pass in flight; a replacement waits for its predecessor
    /// so a sweep never overlaps itself.
    retiring: BTreeMap<String, JoinHandle<()>>,
}

impl Sweeps {
    /// Makes the running loops match `wanted`: unchanged ones carry on untouched, changed ones
    /// are replaced once their pass in flight is done, removed ones stop, new ones start.
    async fn apply(
        &mut self,
        wanted: Vec<Settings>,
        shared: &Shared,
        cancel: &CancellationToken,
    ) -> Result<(), Error> {
        let names: Vec<String> = self.running.keys().cloned().collect();
        for name in names {
            let keep = wanted
                .iter()
                .any(|w| w.sweep.name == name && self.running[&name].settings == *w);
            if keep {
                continue;
            }
            let old = self.running.remove(&name).expect("listed above");
            old.retire.cancel();
            if let Some(job) = old.cron_job {
                self.cron.remove(job).await;
            }
            self.retiring.insert(name.clone(), old.task);
            if !wanted.iter().any(|w| w.sweep.name == name) {
                shared.metrics.forget_sweep(&name);
                shared.health.forget_sweep(&name);
                tracing::info!(sweep = %name, "sweep removed; it stops after its pass in flight");
            }
        }
        for settings in wanted {
            if self.running.contains_key(&settings.sweep.name) {
                continue;
            }
            let name = settings.sweep.name.clone();
            let after = self.retiring.remove(&name);
            let running = self.start(settings, after, shared, cancel).await?;
            self.running.insert(name, running);
        }
        self.retiring.retain(|_, task| !task.is_finished());
        Ok(())
    }

    async fn start(
        &mut self,
        settings: Settings,
        after: Option<JoinHandle<()>>,
        shared: &Shared,
        cancel: &CancellationToken,
    ) -> Result<RunningSweep, Error> {
        let sweep = &settings.sweep;
        let ticker = Ticker::start(&sweep.schedule, &mut self.cron).await?;
        let cron_job = ticker.cron_job();
        let retire = cancel.child_token();
        let observer = Observer {
            metrics: shared.metrics.sweep(sweep),
            health: shared.health.sweep(&sweep.name),
        };
        let lease = settings.coordination.lease.then(|| {
            (
                Lease::new(
                    &settings.coordination.key_prefix,
                    &sweep.name,
                    settings.coordination.lease_ttl,
                ),
                shared.metrics.lease_gauge(&sweep.name),
            )
        });
        let sweeper = Arc::new(Sweep::with_settings(
            sweep,
            &settings.evict,
            settings.sharded_pubsub,
        ));
        let pass = Pass {
            scan: settings.scan.clone(),
            evict: settings.evict.clone(),
        };
        let loop_ = run_sweep(
            sweeper,
            pass,
            shared.clone(),
            ticker,
            lease,
            observer,
            retire.clone(),
            cancel.clone(),
        );
        let task = tokio::spawn(async move {
            if let Some(previous) = after {
                let _ = previous.await;
            }
            loop_.await;
        });
        tracing::info!(
            sweep = %sweep.name,
            schedule = %sweep.schedule,
            ttl = %humantime::format_duration(sweep.ttl),
            "sweep scheduled"
        );
        Ok(RunningSweep {
            settings,
            retire,
            task,
            cron_job,
        })
    }

    async fn join_all(&mut self) {
        for s in self.running.values_mut() {
            let _ = (&mut s.task).await;
        }
        for task in self.retiring.values_mut() {
            let _ = task.await;
        }
    }

    fn abort_all(&self) {
        for s in self.running.values() {
            s.task.abort();
        }
        for task in self.retiring.values() {
            task.abort();
        }
    }
}

/// What a sweep loop reports to: metrics and health.
#[derive(Clone)]
struct Observer {
    metrics: SweepMetrics,
    health: SweepHealth,
}

impl CheckObserver for Observer {
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

/// Marks the loop dead in the health state if it ends without being retired (a panic).
struct DeathWatch<'a> {
    health: &'a SweepHealth,
    retire: &'a CancellationToken,
}

impl Drop for DeathWatch<'_> {
    fn drop(&mut self) {
        if !self.retire.is_cancelled() {
            self.health.stopped();
        }
    }
}

/// Runs one sweep: a pass at start, then one per tick, never two at once. A tick that finds the
/// previous pass still running is skipped, logged and counted. `retire` ends the loop once the
/// pass in flight is done; `cancel` (shutdown) also cuts that pass short between script calls.
#[allow(clippy::too_many_arguments)]
async fn run_sweep(
    sweeper: Arc<Sweep>,
    pass: Pass,
    shared: Shared,
    mut ticker: Ticker,
    lease: Option<(Lease, prometheus::IntGauge)>,
    observer: Observer,
    retire: CancellationToken,
    cancel: CancellationToken,
) {
    let _watch = DeathWatch {
        health: &observer.health,
        retire: &retire,
    };
    let name = sweeper.config().name.clone();
    let sweeps = [sweeper];
    // With a systemd watchdog the loop also turns on its own, so an idle sweep (a long cron
    // schedule) still proves it is responsive.
    let mut heartbeat = shared
        .notifier
        .watchdog_period()
        .map(|p| tokio::time::interval(p / 4));
    let try_lease = || async {
        if let Some((lease, gauge)) = &lease {
            if let Err(e) = lease.try_hold(&mut shared.store.connection()).await {
                tracing::warn!(sweep = %name, error = %e, "could not take or renew the lease");
            }
            gauge.set(i64::from(lease.held()));
        }
    };
    // Without a lease every replica sweeps; with one, only the holder does. A standby counts as
    // having done its part for readiness: standing by is its job.
    let may_sweep = || match &lease {
        None => true,
        Some((lease, _)) => {
            if !lease.held() {
                tracing::debug!(sweep = %name, "another replica holds the lease; standing by");
                observer.health.pass_finished(true);
            }
            lease.held()
        }
    };
    let start_pass = || {
        observer.health.pass_started();
        async {
            pass.run(
                &shared.store,
                &sweeps,
                PassOptions::default(),
                &observer,
                &cancel,
            )
            .await
            .map(|mut r| r.remove(0))
            .map_err(|mut e| PassError {
                partial: vec![e.partial.remove(0)],
                error: e.error,
            })
        }
    };
    // A replacement that waited for its predecessor may find itself retired already.
    if retire.is_cancelled() {
        return;
    }
    try_lease().await;
    let mut in_flight = may_sweep().then(|| Box::pin(start_pass()));
    let mut next_lease_attempt = lease
        .as_ref()
        .map(|(l, _)| tokio::time::Instant::now() + l.attempt_every());
    loop {
        tokio::select! {
            result = async { in_flight.as_mut().expect("guarded").await }, if in_flight.is_some() => {
                in_flight = None;
                if let Err(e) = &result {
                    shared.store.recover(&e.error).await;
                }
                finish_pass(&name, &shared, &observer, result);
            }
            () = ticker.tick() => {
                if in_flight.is_some() {
                    observer.metrics.overrun();
                    tracing::warn!(sweep = %name, "previous pass still running; skipping this tick");
                } else if may_sweep() {
                    in_flight = Some(Box::pin(start_pass()));
                }
            }
            () = async { tokio::time::sleep_until(next_lease_attempt.expect("guarded")).await },
                if next_lease_attempt.is_some() => {
                try_lease().await;
                next_lease_attempt = lease
                    .as_ref()
                    .map(|(l, _)| tokio::time::Instant::now() + l.attempt_every());
            }
            _ = async { heartbeat.as_mut().expect("guarded").tick().await }, if heartbeat.is_some() => {}
            () = retire.cancelled() => break,
        }
        observer.health.alive();
        shared.watchdog();
    }
    // Let the pass in flight finish, still turning for the watchdog: a sweep retired by a
    // reload may have a long pass left.
    if let Some(mut pass) = in_flight {
        let result = loop {
            tokio::select! {
                result = &mut pass => break result,
                _ = async { heartbeat.as_mut().expect("guarded").tick().await }, if heartbeat.is_some() => {
                    observer.health.alive();
                    shared.watchdog();
                }
            }
        };
        finish_pass(&name, &shared, &observer, result);
    }
    if let Some((lease, gauge)) = &lease {
        lease.release(&mut shared.store.connection()).await;
        gauge.set(0);
    }
}

fn finish_pass(
    name: &str,
    shared: &Shared,
    observer: &Observer,
    result: Result<PassReport, PassError>,
) {
    let result = result.map_err(|mut e| (e.error, e.partial.remove(0)));
    match result {
        Ok(r) if r.complete => {
            observer.metrics.pass_succeeded(&r, unix_now());
            observer.health.pass_finished(true);
            shared.health.set_redis_up(true);
            shared.metrics.set_redis_up(true);
            tracing::info!(
                sweep = %name,
                keys = r.counts.keys,
                members = r.counts.members,
                evicted = r.counts.evicted,
                events = r.counts.events_published,
                duration_ms = r.duration.as_secs_f64() * 1000.0,
                "pass finished"
            );
        }
        Ok(r) => {
            observer.metrics.pass_interrupted(&r);
            observer.health.pass_finished(false);
            tracing::info!(
                sweep = %name,
                keys = r.counts.keys,
                evicted = r.counts.evicted,
                events = r.counts.events_published,
                "pass cut short by shutdown"
            );
        }
        Err((error, partial)) => {
            observer.metrics.pass_failed(&partial);
            observer.health.pass_finished(false);
            tracing::error!(
                sweep = %name,
                error = %error,
                keys = partial.counts.keys,
                evicted = partial.counts.evicted,
                events = partial.counts.events_published,
                "pass failed; the next one will retry"
            );
        }
    }
}

/// PINGs Redis every [`PROBE_INTERVAL`] until shutdown, logging changes of state.
async fn probe_redis(shared: Shared, cancel: CancellationToken) {
    let mut was_up = true;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(PROBE_INTERVAL) => {}
        }
        let up = match tokio::time::timeout(PROBE_INTERVAL, shared.store.ping()).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                if was_up {
                    tracing::warn!(error = %e, "Redis stopped answering");
                }
                false
            }
            Err(_) => {
                if was_up {
                    tracing::warn!("Redis did not answer a PING within {PROBE_INTERVAL:?}");
                }
                false
            }
        };
        if up && !was_up {
            tracing::info!("Redis answers again");
        }
        was_up = up;
        shared.health.set_redis_up(up);
        shared.metrics.set_redis_up(up);
        // With no sweep configured this is the only thing that keeps the watchdog fed.
        shared.watchdog();
    }
}

/// The wall clock, in Unix seconds (for `last_success_timestamp_seconds`).
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
