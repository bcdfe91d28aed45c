//! The long-running daemon: the metrics and health server, a Redis probe, and the engine that
//! runs every enabled sweep on every primary; reloads on SIGHUP; drains on shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::{Config, ConfigError, redact_url};
use crate::engine::Engine;
use crate::health::Health;
use crate::http;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::systemd::Notifier;

/// How long shutdown waits for work in flight; below the 5 s an orchestrator is promised.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(4);

/// How often Redis is PINGed, so `redis_up` and `/readyz` stay current even when nothing else
/// talks to Redis.
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

impl Daemon {
    /// Runs until `cancel` fires.
    ///
    /// Redis being away is never fatal: connecting is retried, and work that fails is logged
    /// and tried again. On `cancel` readiness drops, no new eviction starts, calls in flight
    /// finish and publish their events (up to [`DRAIN_TIMEOUT`]), then the server stops.
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
        let watch = health.register_loop("start-up");

        let url = redact_url(&config.redis.url);
        notifier.status(&format!("connecting to Redis at {url}"));
        let on_failure = |e: &Error, retry_in: Duration| {
            notifier.status(&format!("waiting for Redis at {url}: {e}"));
            notifier.extend_start_timeout(retry_in + config.redis.connect_timeout * 2);
            notifier.watchdog();
        };
        let Some(store) = Store::connect_with_retry(&config.redis, &cancel, on_failure).await
        else {
            watch.retire();
            notifier.stopping();
            return stop_server(server, http_stop).await;
        };
        watch.retire();
        health.set_redis_up(true);
        metrics.set_redis_up(true);

        let probe = tokio::spawn(probe_redis(
            store.clone(),
            metrics.clone(),
            health.clone(),
            cancel.clone(),
        ));
        let mut engine = Engine::new(
            store,
            &config,
            metrics.clone(),
            health.clone(),
            notifier.clone(),
            cancel.clone(),
        );
        engine.apply(&config).await?;
        let status = |n: usize| format!("sweeping ({n} sweeps)");
        notifier.ready(&status(engine.sweep_count()));
        tracing::info!(
            sweeps = engine.sweep_count(),
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
                            engine.apply(&config).await?;
                            metrics.config_reload(true);
                            tracing::info!(sweeps = engine.sweep_count(), "configuration reloaded");
                        }
                        Err(e) => {
                            metrics.config_reload(false);
                            tracing::error!(
                                error = %e,
                                "configuration reload rejected; the running configuration stays in effect"
                            );
                        }
                    }
                    notifier.ready(&status(engine.sweep_count()));
                }
                () = engine.step() => {}
            }
        }

        notifier.stopping();
        health.set_shutting_down();
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, engine.drain()).await;
        if drained.is_err() {
            tracing::warn!("work still in flight after the drain deadline; abandoning it");
        }
        engine.abort().await;
        engine.retire();
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

/// PINGs Redis every [`PROBE_INTERVAL`] until shutdown, logging changes of state.
async fn probe_redis(
    store: Store,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    cancel: CancellationToken,
) {
    let mut was_up = true;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(PROBE_INTERVAL) => {}
        }
        let up = match tokio::time::timeout(PROBE_INTERVAL, store.ping()).await {
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
        health.set_redis_up(up);
        metrics.set_redis_up(up);
    }
}
