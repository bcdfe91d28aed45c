//! The long-running daemon: one task per enabled sweep, each on its own schedule, all sharing one
//! Redis connection, until shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::Config;
use crate::schedule::{CronClock, Ticker};
use crate::store::Store;
use crate::sweeper::{NoObserver, PassObserver, PassOptions, PassReport, Sweeper};

/// How long shutdown waits for passes in flight; below the 5 s an orchestrator is promised.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(4);

/// Runs until `cancel` fires, then lets every sweep finish its script calls in flight (up to
/// [`DRAIN_TIMEOUT`]) and returns. Redis being away is never fatal: connecting is retried, and a
/// pass that fails is logged and the next one tries again.
pub async fn run(config: Config, cancel: CancellationToken) -> Result<(), Error> {
    let Some(store) = Store::connect_with_retry(&config.redis, &cancel).await else {
        return Ok(());
    };
    tracing::info!(
        sweeps = config.enabled_sweeps().count(),
        "connected to Redis; sweeping"
    );
    let mut cron = CronClock::default();
    let mut tasks = JoinSet::new();
    for sweep in config.enabled_sweeps() {
        let ticker = Ticker::start(&sweep.schedule, &mut cron).await?;
        let sweeper = Sweeper::new(sweep, &config);
        tasks.spawn(run_sweep(
            sweeper,
            store.clone(),
            ticker,
            Arc::new(NoObserver),
            cancel.clone(),
        ));
    }
    cancel.cancelled().await;
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("passes still running after the drain deadline; abandoning them");
        tasks.abort_all();
    }
    cron.shutdown().await;
    Ok(())
}

/// Runs one sweep: a pass at start, then one per tick, never two at once. A tick that finds the
/// previous pass still running is skipped and logged.
pub async fn run_sweep(
    sweeper: Sweeper,
    store: Store,
    mut ticker: Ticker,
    observer: Arc<dyn PassObserver>,
    cancel: CancellationToken,
) {
    let name = sweeper.config().name.clone();
    let start_pass = || sweeper.pass(&store, PassOptions::default(), observer.as_ref(), &cancel);
    let mut in_flight = Some(Box::pin(start_pass()));
    loop {
        tokio::select! {
            result = async { in_flight.as_mut().expect("guarded").await }, if in_flight.is_some() => {
                in_flight = None;
                log_pass(&name, result);
            }
            () = ticker.tick() => {
                if in_flight.is_some() {
                    tracing::warn!(sweep = %name, "previous pass still running; skipping this tick");
                } else {
                    in_flight = Some(Box::pin(start_pass()));
                }
            }
            () = cancel.cancelled() => break,
        }
    }
    // The pass sees the same token: it starts no new call and returns once its calls are done.
    if let Some(pass) = in_flight {
        log_pass(&name, pass.await);
    }
}

fn log_pass(name: &str, result: Result<PassReport, crate::sweeper::PassError>) {
    match result {
        Ok(r) => tracing::info!(
            sweep = %name,
            keys = r.keys,
            members = r.members,
            evicted = r.evicted,
            events = r.events_published,
            duration_ms = r.duration.as_secs_f64() * 1000.0,
            complete = r.complete,
            "pass finished"
        ),
        Err(e) => tracing::error!(
            sweep = %name,
            error = %e.error,
            keys = e.partial.keys,
            evicted = e.partial.evicted,
            events = e.partial.events_published,
            "pass failed; the next one will retry"
        ),
    }
}
