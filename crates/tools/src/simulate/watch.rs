//! `simulate`'s watcher: what Redis did during the run (outages, restarts, gaps in the
//! subscription), so that the verdicts can tell the sweeper's misses from Redis's.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use presence_sweeper_redis::reply::{redis_time, time};
use presence_sweeper_redis::{Error, Store, Value};
use presence_sweeper_rules::clock::RedisClock;

/// How often the watcher asks Redis for its clock and `run_id`.
pub(super) const WATCH_EVERY: Duration = Duration::from_millis(250);
/// How long the end of the run waits for Redis to answer for the final verdicts.
pub(super) const END_WAIT: Duration = Duration::from_secs(10);

/// The wall clock, in Unix seconds: Redis's when it cannot be asked.
pub(super) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What the watcher and the subscriber saw of Redis during the run.
#[derive(Debug, Default)]
pub(super) struct Watch {
    state: Mutex<WatchState>,
}

#[derive(Debug, Default)]
pub(super) struct WatchState {
    /// Redis's clock at the last answer, and when that was.
    pub(super) clock: Option<RedisClock>,
    /// The server's `run_id` at the last answer.
    pub(super) run_id: Option<String>,
    /// Redis's clock when a new `run_id` was first seen: a restart or a failover before then.
    pub(super) restarts: Vec<f64>,
    /// Periods without an answer.
    pub(super) outages: u64,
    pub(super) down: bool,
    /// Gaps in the event subscription: Redis's clock (estimated) when it was lost, and when it
    /// was taken up again (`None`: still down at the end).
    pub(super) gaps: Vec<(f64, Option<f64>)>,
}

impl Watch {
    pub(super) fn state(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Redis's clock now, estimated from its last answer; `None` before any.
    pub(super) fn now(&self) -> Option<f64> {
        let now = Instant::now().into_std();
        self.state().clock.map(|c| c.at(now))
    }
}

/// Asks Redis for `TIME` and its `run_id` every [`WATCH_EVERY`], until `stop`.
///
/// In a cluster it asks the first primary, the one the run subscribes on (a cluster routes
/// `INFO` to every node): restarts of the other primaries are not told apart from misses.
pub(super) async fn watch_redis(store: Store, watch: Arc<Watch>, stop: CancellationToken) {
    let mut con = Watched::new(store);
    loop {
        let asked = Instant::now();
        let reply = tokio::time::timeout(WATCH_EVERY * 4, con.ask())
            .await
            .unwrap_or_else(|_| {
                Err(
                    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
                        .into(),
                )
            })
            .and_then(|(t, info): (Value, String)| Ok((time(Some(&t))?, info)));
        if reply.is_err() {
            con.lost();
        }
        {
            let mut st = watch.state();
            match reply {
                Ok((t, info)) => {
                    let run_id = info
                        .lines()
                        .find_map(|l| l.strip_prefix("run_id:"))
                        .map(|id| id.trim().to_owned());
                    st.clock = Some(RedisClock {
                        redis: t,
                        read_at: asked.into_std(),
                    });
                    if st.down {
                        st.down = false;
                        tracing::warn!("Redis answers again");
                    }
                    if let Some(new) = &run_id
                        && st.run_id.as_ref().is_some_and(|old| old != new)
                    {
                        tracing::warn!("Redis restarted or failed over (a new run_id)");
                        st.restarts.push(t);
                    }
                    if run_id.is_some() {
                        st.run_id = run_id;
                    }
                }
                Err(e) => {
                    if !st.down {
                        st.down = true;
                        st.outages += 1;
                        tracing::warn!(error = %e, "Redis does not answer; the run goes on");
                    }
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
    }
}

/// The server the watcher asks: the one server, or a cluster's first primary over a connection
/// of its own, opened again after a failure.
struct Watched {
    store: Store,
    node: Option<redis::aio::MultiplexedConnection>,
}

impl Watched {
    fn new(store: Store) -> Self {
        Self { store, node: None }
    }

    async fn ask(&mut self) -> Result<(Value, String), Error> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME").cmd("INFO").arg("server");
        if !self.store.is_cluster() {
            return Ok(pipe.query_async(&mut self.store.connection()).await?);
        }
        if self.node.is_none() {
            let first = self.store.nodes().await?.into_iter().next();
            let first = first.ok_or_else(|| {
                redis::RedisError::from((redis::ErrorKind::Client, "the cluster has no primary"))
            })?;
            self.node = Some(self.store.dedicated(&first).await?);
        }
        let con = self.node.as_mut().expect("opened above");
        Ok(pipe.query_async(con).await?)
    }

    fn lost(&mut self) {
        self.node = None;
    }
}

/// Redis's clock at the end of the run: asked for [`END_WAIT`] at most, else estimated from its
/// last answer.
pub(super) async fn end_time(store: &Store, watch: &Watch) -> f64 {
    let deadline = Instant::now() + END_WAIT;
    loop {
        if let Ok(t) = redis_time(&mut store.connection()).await {
            return t;
        }
        if Instant::now() >= deadline {
            tracing::warn!("Redis did not answer at the end; judging on its clock as last seen");
            return watch.now().unwrap_or_else(unix_now);
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}
