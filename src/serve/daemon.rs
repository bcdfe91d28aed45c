//! The long-running daemon: the metrics and health server, a Redis probe, and the engine that
//! runs every enabled sweep on every primary; reloads on SIGHUP; drains on shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::serve::StartError;
use crate::serve::health::Health;
use crate::serve::http;
use crate::serve::logging::LogStats;
use crate::serve::metrics::{BuildInfo, Metrics};
use crate::serve::reports::DaemonReports;
use crate::serve::systemd::Notifier;
use crate::serve::web_config::CurrentWeb;
use crate::serve::webhooks::Webhooks;
use crate::tracking::engine::{self, Engine};
use presence_sweeper_config::{Config, ConfigError};
use presence_sweeper_redis::Error;
use presence_sweeper_redis::Store;
use presence_sweeper_rules::backoff::Backoff;
use presence_sweeper_rules::trouble::Trouble;
use presence_sweeper_webhooks::DueSlots;

/// How long shutdown waits for work in flight; below the 5 s an orchestrator is promised.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(4);

/// When a shut-down process exits whatever it is doing: the drain, the server's stop and the
/// log's flush fit in it, and it is within the 5 s promised.
pub const EXIT_DEADLINE: Duration = Duration::from_millis(4750);

/// How often Redis is PINGed, so `redis_up` and `/readyz` stay current even when nothing else
/// talks to Redis.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// The longest the probe waits for the sentinels' view of the primary (see
/// `Store::recheck_primary`) before it gives up until the next re-check.
const RECHECK_LIMIT: Duration = Duration::from_secs(5);

/// Re-reads the configuration (file and environment) on SIGHUP.
pub type Loader = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

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
    /// The logger's counts of lines it could not write, for the metrics.
    pub logs: LogStats,
    /// What the binary was built from, for `build_info`.
    pub build: BuildInfo,
}

impl Daemon {
    /// Runs until `cancel` fires.
    ///
    /// Redis being away is never fatal: connecting is retried, and work that fails is logged
    /// and tried again. A reload (SIGHUP) while connecting takes effect at once, so a fixed
    /// password file needs no restart; a reload that changes `[redis]` (a rotated password)
    /// reconnects. On `cancel` readiness drops, no new eviction starts, calls in flight finish
    /// and publish their events (up to [`DRAIN_TIMEOUT`]), then the server stops.
    pub async fn run(self, cancel: CancellationToken) -> Result<(), StartError> {
        let Self {
            mut config,
            listener,
            mut reloads,
            loader,
            notifier,
            logs,
            build,
        } = self;
        let metrics = Arc::new(Metrics::new(build));
        metrics.watch_logs(logs);
        let health = Health::new(stall_timeout(&config));
        let web = Arc::new(CurrentWeb::load(config.http.web_config_file.clone())?);
        let http_stop = CancellationToken::new();
        let server = http::serve(
            listener,
            http::Handlers {
                metrics: metrics.clone(),
                health: health.clone(),
                web: web.clone(),
            },
            http_stop.clone(),
        );
        // Series of every sweep exist from start-up, at zero, even while Redis is unreachable.
        for s in config.enabled_sweeps() {
            metrics.sweep(s);
            health.sweep(&s.name);
        }
        for h in config.enabled_webhooks() {
            metrics.webhooks().endpoint(&h.name);
        }
        metrics.set_redis_up(false);
        let mut ctx = Ctx {
            reloads: &mut reloads,
            loader: &loader,
            metrics: &metrics,
            health: &health,
            notifier: &notifier,
            web: &web,
        };
        loop {
            let Some(store) = connect(&mut config, &mut ctx, &cancel).await else {
                break;
            };
            match serve(store, &mut config, &mut ctx, &cancel).await? {
                Ending::Stop => break,
                Ending::Reconnect => {}
            }
        }
        notifier.stopping();
        stop_server(server, http_stop).await;
        // The last word: a log that ends without it is a process that died.
        tracing::info!("stopped");
        Ok(())
    }
}

/// What the phases of the daemon share.
struct Ctx<'a> {
    reloads: &'a mut mpsc::Receiver<()>,
    loader: &'a Loader,
    metrics: &'a Arc<Metrics>,
    health: &'a Arc<Health>,
    notifier: &'a Arc<Notifier>,
    web: &'a CurrentWeb,
}

/// What follows a connection's life.
enum Ending {
    Stop,
    /// `[redis]` changed: connect again with it.
    Reconnect,
}

/// Connects, retrying with a capped exponential backoff until Redis answers or `cancel` fires
/// (then `None`). Every failure is logged, counted by kind and shown on `/readyz`; a reload
/// meanwhile replaces the configuration (`[redis]` included) and tries again at once.
async fn connect(
    config: &mut Config,
    ctx: &mut Ctx<'_>,
    cancel: &CancellationToken,
) -> Option<Store> {
    let watch = ctx.health.register_loop("start-up");
    let mut backoff = Backoff::new(FIRST_RETRY, MAX_RETRY);
    let mut delay = backoff.next_delay();
    let mut attempt = 1u32;
    loop {
        watch.alive();
        let url = config.redis.describe();
        ctx.notifier
            .status(&format!("connecting to Redis at {url}"));
        match Store::connect(&config.redis).await {
            Ok(store) => {
                if attempt > 1 {
                    tracing::info!(attempt, "connected to Redis");
                }
                watch.retire();
                ctx.health.set_redis(Ok(()));
                ctx.metrics.set_redis_up(true);
                return Some(store);
            }
            Err(e) => {
                let why = redis_down(&e);
                let trouble = e.trouble();
                ctx.metrics.redis_failure(trouble);
                if trouble.is_refusal() {
                    // Retrying will not help until someone fixes it: say so loudly.
                    tracing::error!(
                        error = %e,
                        attempt,
                        retry_in_ms = delay.as_millis() as u64,
                        "Redis refused the daemon's credentials; fix them and send SIGHUP (retrying meanwhile)"
                    );
                } else if trouble == Trouble::Unreachable {
                    tracing::warn!(
                        error = %e,
                        attempt,
                        retry_in_ms = delay.as_millis() as u64,
                        "Redis is not reachable yet; retrying"
                    );
                } else {
                    // It answered: not an outage (another kind of server, an old Redis).
                    tracing::warn!(
                        error = %e,
                        attempt,
                        retry_in_ms = delay.as_millis() as u64,
                        "Redis is not usable yet; retrying"
                    );
                }
                ctx.notifier
                    .status(&format!("waiting for Redis at {url}: {why}"));
                ctx.notifier.extend_start_timeout(
                    delay.saturating_add(config.redis.connect_timeout.saturating_mul(2)),
                );
                ctx.notifier.watchdog();
                ctx.health.set_redis(Err(why));
            }
        }
        tokio::select! {
            () = cancel.cancelled() => {
                watch.retire();
                return None;
            }
            Some(()) = ctx.reloads.recv() => {
                ctx.notifier.reloading();
                if let Some(new) = reload(config, ctx, true) {
                    *config = new;
                    backoff.reset();
                    delay = backoff.next_delay();
                }
                continue;
            }
            () = tokio::time::sleep(delay) => {}
        }
        delay = backoff.next_delay();
        attempt += 1;
    }
}

/// Sweeps with `store` until shutdown, or until a reload changes `[redis]`; then drains.
async fn serve(
    store: Store,
    config: &mut Config,
    ctx: &mut Ctx<'_>,
    cancel: &CancellationToken,
) -> Result<Ending, StartError> {
    // This connection's work stops on shutdown, or to reconnect.
    let stop = cancel.child_token();
    let probe = tokio::spawn(probe_redis(
        store.clone(),
        ctx.metrics.clone(),
        ctx.health.clone(),
        stop.clone(),
    ));
    let reports = Arc::new(DaemonReports {
        metrics: ctx.metrics.clone(),
        health: ctx.health.clone(),
    });
    let alive_every = engine::alive_every(ctx.notifier.watchdog_period());
    // Deliveries run beside the sweeps, never in their way: a receiver that hangs holds only
    // its own tasks.
    let due_slots = DueSlots::default();
    let mut hooks = Webhooks::start(
        store.clone(),
        config,
        ctx.metrics.clone(),
        due_slots.clone(),
        &stop,
    );
    let mut engine = Engine::new(store, config, reports, alive_every, due_slots, stop.clone());
    engine.apply(config).await?;
    let status = |n: usize| format!("sweeping ({n} sweeps)");
    ctx.notifier.ready(&status(engine.sweep_count()));
    tracing::info!(
        sweeps = engine.sweep_count(),
        "connected to Redis; sweeping"
    );
    let next = loop {
        tokio::select! {
            () = cancel.cancelled() => break Ending::Stop,
            Some(()) = ctx.reloads.recv() => {
                ctx.notifier.reloading();
                if let Some(new) = reload(config, ctx, false) {
                    if new.redis != config.redis {
                        tracing::info!(
                            "configuration reloaded; the Redis settings changed: reconnecting with them"
                        );
                        *config = new;
                        break Ending::Reconnect;
                    }
                    *config = new;
                    engine.apply(config).await?;
                    hooks.apply(config, &stop).await;
                    tracing::info!(sweeps = engine.sweep_count(), "configuration reloaded");
                }
                ctx.notifier.ready(&status(engine.sweep_count()));
            }
            () = engine.step() => watchdog(ctx),
        }
    };
    match next {
        Ending::Stop => {
            ctx.notifier.stopping();
            ctx.health.set_shutting_down();
        }
        Ending::Reconnect => {
            ctx.health
                .set_redis(Err("reconnecting to Redis with new settings".into()));
            ctx.metrics.set_redis_up(false);
        }
    }
    stop.cancel();
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        tokio::join!(engine.drain(), hooks.stop())
    })
    .await;
    if drained.is_err() {
        tracing::warn!("work still in flight after the drain deadline; abandoning it");
    }
    engine.abort().await;
    engine.retire();
    let _ = probe.await;
    Ok(next)
}

/// Pings the systemd watchdog if every loop turned recently and none is stuck: the pings come
/// from the work loops' turning, not from a timer of their own.
fn watchdog(ctx: &Ctx<'_>) {
    if let Some(period) = ctx.notifier.watchdog_period()
        && ctx.health.loops_alive_within(period / 2)
        && ctx.health.liveness().is_ok()
    {
        ctx.notifier.watchdog();
    }
}

/// Reads the configuration again; `None` (logged and counted) if it is rejected. `[http]` and
/// `[log]` keep their running values; a changed `[redis]` is the caller's to act on. The web
/// config file is read again on its own: renewed certificates need no restart.
fn reload(config: &Config, ctx: &Ctx<'_>, connecting: bool) -> Option<Config> {
    match ctx.web.reload() {
        Ok(true) => tracing::info!("web config file reloaded; new connections use it"),
        Ok(false) => {}
        Err(e) => tracing::error!(
            error = %e,
            "web config file reload rejected; the running TLS and auth settings stay in effect"
        ),
    }
    match (ctx.loader)() {
        Ok(new) => {
            warn_restart_needed(config, &new);
            ctx.metrics.config_reload(true);
            if connecting {
                tracing::info!("configuration reloaded; connecting with it");
            }
            // The server and logging keep running as they started.
            Some(Config {
                http: config.http.clone(),
                log: config.log.clone(),
                ..new
            })
        }
        Err(e) => {
            ctx.metrics.config_reload(false);
            tracing::error!(
                error = %e,
                "configuration reload rejected; the running configuration stays in effect"
            );
            None
        }
    }
}

/// Why Redis is not usable, for `/readyz`: a refusal of the credentials or of a command is not
/// an outage, and says what to fix.
fn redis_down(e: &Error) -> String {
    match e.trouble() {
        Trouble::Credentials => format!("Redis refused the credentials: {e}"),
        Trouble::Permission => e.to_string(),
        Trouble::Unreachable => format!("Redis is unreachable: {e}"),
        Trouble::Timeout => format!("Redis does not answer: {e}"),
        Trouble::Other => format!("Redis is not usable: {e}"),
    }
}

async fn stop_server(server: JoinHandle<()>, stop: CancellationToken) {
    stop.cancel();
    let _ = server.await;
}

/// A pass that shows no progress for this long is stuck: every Redis call it makes is bounded by
/// `redis.command_timeout` (an eviction's by `redis.eviction_timeout`), so a healthy pass moves
/// on far sooner.
fn stall_timeout(config: &Config) -> Duration {
    let redis = &config.redis;
    redis
        .command_timeout
        .saturating_mul(4)
        .max(redis.eviction_timeout.saturating_add(redis.command_timeout))
        .max(Duration::from_secs(60))
}

/// Settings a reload cannot change in a running process; say so instead of ignoring them.
fn warn_restart_needed(old: &Config, new: &Config) {
    let mut changed = Vec::new();
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

/// First wait between connection attempts; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(200);
/// Longest wait between connection attempts.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// PINGs Redis every [`PROBE_INTERVAL`] until shutdown, logging changes of state; behind
/// Sentinel, also re-checks which server is the primary.
async fn probe_redis(
    store: Store,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    cancel: CancellationToken,
) {
    let mut was_up = true;
    // What the last failure was, so that a change of cause is said too: a connection killed
    // by a password rotation reads as "broken pipe" first, then as a refused password.
    let mut said: Option<Trouble> = None;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(PROBE_INTERVAL) => {}
        }
        let status = match tokio::time::timeout(PROBE_INTERVAL, store.ping()).await {
            Ok(Ok(())) => {
                said = None;
                Ok(())
            }
            Ok(Err(e)) => {
                let trouble = e.trouble();
                metrics.redis_failure(trouble);
                if was_up || (trouble.is_refusal() && said != Some(trouble)) {
                    said = Some(trouble);
                    if trouble.is_refusal() {
                        tracing::error!(
                            error = %e,
                            "Redis refused the daemon's credentials; fix them and send SIGHUP"
                        );
                    } else {
                        tracing::warn!(error = %e, "Redis stopped answering");
                    }
                }
                Err(redis_down(&e))
            }
            Err(_) => {
                metrics.redis_failure(Trouble::Timeout);
                if was_up {
                    tracing::warn!("Redis did not answer a PING within {PROBE_INTERVAL:?}");
                }
                Err(format!(
                    "Redis does not answer: no answer to a PING within {PROBE_INTERVAL:?}"
                ))
            }
        };
        let up = status.is_ok();
        if up && !was_up {
            tracing::info!("Redis answers again");
        }
        was_up = up;
        health.set_redis(status);
        metrics.set_redis_up(up);
        if up {
            // Outside the PING's deadline: slow sentinels must not make a primary that answers
            // look down. Bounded, so that the probe goes on.
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tokio::time::timeout(RECHECK_LIMIT, store.recheck_primary()) => {}
            }
        }
    }
}
