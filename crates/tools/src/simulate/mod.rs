//! `presence-sweeper-tools simulate`: live presence traffic against a Redis on this machine, to
//! demo a sweeper running separately and to measure it: eviction lag, false evictions,
//! duplicates and missed zombies.
//!
//! Users heartbeat the way the README tells apps to (`heartbeat.lua`: score from Redis `TIME`,
//! `ZADD GT`, key TTL refreshed), one script call per conversation with all its users, spread
//! evenly over the heartbeat period by a few worker tasks that each own a share of the
//! conversations. Each tick, a worker first lets users vanish (they just stop heartbeating), then
//! sends the heartbeats that are due in one pipeline (in a cluster, as calls of their own) and
//! waits for them: a worker never has a call
//! in flight for a conversation it is changing, so the last score of a vanished user is exact.
//!
//! Before the first heartbeat the simulator PSUBSCRIBEs to the sweep's channel and judges every
//! event ([`tracker::Tracker`]). After `--duration` nobody vanishes any more (and typing bursts end), and
//! the run goes on for the grace period, heartbeats continuing, so the last zombies can be
//! evicted. A zombie is given `--grace` from its last heartbeat (ttl + 2 x schedule by default:
//! its window plus two passes); one still there after that is missed.
//!
//! Conversation ids are `sim-<run>-<n>`, with a random run id, so that runs never share keys or
//! events; at the end the simulator deletes exactly the keys it wrote, by name.

mod board;
mod report;
mod scenario;
mod tracker;
mod watch;
mod worker;

use presence_sweeper_config as config;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use board::{Board, lock};
pub(crate) use board::{Heard, Narrator};
pub(crate) use report::SimulateReport;
use report::TypingReport;
pub(crate) use scenario::{Scenario, SimulateOptions, plan};
use tracker::Fate;
pub(crate) use tracker::Judgement;
use watch::{WATCH_EVERY, Watch, end_time, unix_now, watch_redis};
use worker::{Clock, KEYSTROKE, Worker, Wrote};

use presence_sweeper_config::CONVERSATION_ID;
use presence_sweeper_redis::subscriber::{Push, Subscriber};
use presence_sweeper_redis::{Error, Opener, Store};

use crate::loopback::{self, NotLoopback};

/// Worker tasks at most.
const WORKERS: usize = 4;
/// How long after the end the subscriber keeps listening for events already published.
const DRAIN: Duration = Duration::from_millis(300);
/// Keys deleted per DEL at the end.
const DELETE_BATCH: usize = 500;

/// Runs the simulation: subscribe, heartbeat and vanish for the duration, go on for the grace,
/// then delete the keys it wrote. Ctrl-C (`cancel`) ends it early, with the same clean-up and a
/// report of what happened so far.
///
/// Redis going away mid-run (a restart, a failover, a pause) does not end it: the workers'
/// heartbeats fail and are tried again, the subscriber reconnects, and a watcher notes outages,
/// restarts (a new `run_id`) and gaps in the subscription, so that members whose data a restart
/// lost, or whose events went out while nobody listened, are told apart from missed zombies.
/// Only failing to start (Redis unreachable, the script refused) is an error: once the run
/// started, the report always comes.
pub(crate) async fn run(
    plan: &Scenario,
    redis: &config::Redis,
    cancel: &CancellationToken,
) -> Result<SimulateReport, RunError> {
    run_narrated(plan, redis, cancel, None).await
}

/// [`run`], telling `narrator` of each event as it is judged.
pub(crate) async fn run_narrated(
    plan: &Scenario,
    redis: &config::Redis,
    cancel: &CancellationToken,
    narrator: Option<Narrator>,
) -> Result<SimulateReport, RunError> {
    let (store, script) = connect(redis).await?;

    let prefix = plan.prefix();
    let mut patterns = vec![channel_pattern(&plan.sweep.channel.to_string(), &prefix)];
    if let Some(t) = &plan.typing {
        patterns.push(channel_pattern(&t.channel.to_string(), &prefix));
        patterns.dedup();
    }
    let shared = Arc::new(Board::new(plan, narrator));
    let watch = Arc::new(Watch::default());
    let events = Listener {
        store: store.clone(),
        patterns,
        timeout: redis.command_timeout,
        shared: shared.clone(),
        watch: watch.clone(),
    };
    let sub = events.subscribe().await?;

    let stop = cancel.child_token();
    let stop_listening = CancellationToken::new();
    let watcher = tokio::spawn(watch_redis(
        store.clone(),
        watch.clone(),
        stop_listening.clone(),
    ));
    let listener = tokio::spawn(events.listen(sub, stop_listening.clone()));
    tracing::info!(
        sweep = %plan.sweep.name,
        conversations = plan.conversations,
        users = plan.users,
        duration = %humantime::format_duration(plan.duration),
        grace = %humantime::format_duration(plan.tail()),
        "simulation started"
    );
    if plan.heartbeat >= plan.sweep.ttl {
        tracing::warn!(
            "the heartbeat period is not shorter than the sweep's ttl: live users will be evicted"
        );
    }
    if plan.typing.as_ref().is_some_and(|t| t.ttl <= KEYSTROKE) {
        tracing::warn!("the typing sweep's ttl is not longer than the 1 s between keystrokes");
    }

    let start = Instant::now();
    let clock = Clock {
        start,
        vanish_until: start + plan.duration,
        end: start + plan.duration + plan.tail(),
    };
    let workers = WORKERS.min(plan.conversations as usize).max(1);
    let tasks: Vec<_> = (0..workers)
        .map(|index| {
            let worker = Worker::new(plan, index, workers, &store, &script, shared.clone());
            tokio::spawn(worker.run(clock, stop.clone()))
        })
        .collect();
    let mut counts = Wrote::default();
    for task in tasks {
        match task.await {
            Ok(c) => counts.add(&c),
            // A worker cannot panic short of a bug; what it wrote before is lost to the counts,
            // not to the verdicts (those are in `shared`).
            Err(e) => tracing::error!(error = %e, "a simulation worker stopped"),
        }
    }
    let stopped = Instant::now();

    // Listener published before the end may still be on their way.
    let end = end_time(&store, &watch).await;
    tokio::time::sleep(DRAIN).await;
    stop_listening.cancel();
    let _ = listener.await;
    let _ = watcher.await;
    let fates = Fates::read(plan, &shared, &store, &watch, end).await;
    let cleaned = match delete_keys(plan, &shared, &store).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "could not delete the run's keys; they expire on their own (10 x ttl)");
            false
        }
    };

    let vanished_for = stopped.min(clock.vanish_until).duration_since(start);
    let report = judge(
        plan,
        &shared,
        &counts,
        &watch,
        &fates,
        Closing {
            end,
            vanished_for,
            interrupted: cancel.is_cancelled(),
            cleaned,
        },
    );
    tracing::info!(
        evictions = report.evictions,
        false_evictions = report.false_evictions,
        missed_zombies = report.missed_zombies,
        "simulation finished"
    );
    Ok(report)
}

/// Why a run did not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    /// Redis could not be reached, or refused the script.
    #[error(transparent)]
    Redis(#[from] Error),
    /// A cluster announced a primary off this machine.
    #[error(transparent)]
    Refused(#[from] NotLoopback),
}

/// Connects, and loads the heartbeat script; in a cluster, only if every primary it announces
/// is on this machine (its seeds were checked with the configuration).
async fn connect(redis: &config::Redis) -> Result<(Store, redis::Script), RunError> {
    let store = Store::connect_as(redis, Opener::Tool("simulate")).await?;
    if store.is_cluster() {
        for node in store.nodes().await? {
            let (host, port) = node.host_port().unwrap_or((node.server(), 0));
            loopback::require_node(host, port)?;
        }
    }
    let script = redis::Script::new(include_str!("heartbeat.lua"));
    script
        .load_async(&mut store.connection())
        .await
        .map_err(Error::from)?;
    Ok((store, script))
}

/// How the run went, beside the verdicts.
struct Closing {
    /// Redis's clock at the end, in Unix seconds.
    end: f64,
    vanished_for: Duration,
    interrupted: bool,
    /// The run's keys were deleted.
    cleaned: bool,
}

/// Whether each overdue member is still in Redis, asked at the end (`None`: Redis did not
/// answer), with what the watch saw; decides each one's [`Fate`].
struct Fates<'w> {
    present: std::collections::HashMap<(bool, u64), Option<bool>>,
    watch: &'w Watch,
    /// The ttl of the online and the typing sweep, in seconds: no member is evicted earlier
    /// than its last score + ttl.
    ttls: (f64, f64),
}

impl<'w> Fates<'w> {
    async fn read(
        plan: &Scenario,
        shared: &Board,
        store: &Store,
        watch: &'w Watch,
        end: f64,
    ) -> Self {
        let mut overdue: Vec<(bool, tracker::Overdue)> = lock(&shared.online)
            .overdue(end, plan.grace.as_secs_f64())
            .into_iter()
            .map(|o| (false, o))
            .collect();
        if plan.typing.is_some() {
            overdue.extend(
                lock(&shared.typing)
                    .overdue(end, plan.typing_grace.as_secs_f64())
                    .into_iter()
                    .map(|o| (true, o)),
            );
        }
        let asks = overdue.into_iter().map(|(typing, o)| {
            let mut con = store.connection();
            async move {
                let score: Result<Option<f64>, _> = redis::cmd("ZSCORE")
                    .arg(&*o.key)
                    .arg(format!("u{}", o.user))
                    .query_async(&mut con)
                    .await;
                ((typing, o.user), score.ok().map(|s| s.is_some()))
            }
        });
        let present = futures_util::stream::iter(asks)
            .buffer_unordered(64)
            .collect()
            .await;
        let ttls = (
            plan.sweep.ttl.as_secs_f64(),
            plan.typing.as_ref().map_or(0.0, |t| t.ttl.as_secs_f64()),
        );
        Self {
            present,
            watch,
            ttls,
        }
    }

    fn of(&self, typing: bool, o: &tracker::Overdue) -> Fate {
        let st = self.watch.state();
        let due = o.last_seen + if typing { self.ttls.1 } else { self.ttls.0 };
        // Only a gap that lasted past the member's deadline can have hidden its event.
        let unheard = st
            .gaps
            .iter()
            .any(|&(_, resumed)| resumed.is_none_or(|r| r > due));
        match self.present.get(&(typing, o.user)).copied().flatten() {
            None => Fate::Unverified,
            Some(true) => Fate::Missed,
            Some(false) if st.restarts.iter().any(|&r| r > o.last_seen) => Fate::LostInRestart,
            Some(false) if unheard => Fate::Unobserved,
            // Removed while its event was being listened for, and none came.
            Some(false) => Fate::Missed,
        }
    }
}

/// The verdicts at the run's end (Redis's clock).
fn judge(
    plan: &Scenario,
    shared: &Board,
    counts: &Wrote,
    watch: &Watch,
    fates: &Fates<'_>,
    run: Closing,
) -> SimulateReport {
    let end = run.end;
    let online = lock(&shared.online).tally(end, plan.grace.as_secs_f64(), |o| fates.of(false, o));
    let typing = plan.typing.as_ref().map(|t| {
        let tally =
            lock(&shared.typing).tally(end, plan.typing_grace.as_secs_f64(), |o| fates.of(true, o));
        TypingReport {
            sweep: t.name.clone(),
            bursts: tally.abandoned,
            keystrokes: counts.keystrokes,
            stops: tally.evictions,
            stop_lag_seconds: tally.lag,
            false_stops: tally.false_evictions,
            duplicate_stops: tally.duplicates,
            missed_stops: tally.missed,
            pending_stops: tally.pending,
            lost_in_restart: tally.lost_in_restart,
            unobserved_stops: tally.unobserved,
            unverified_stops: tally.unverified,
        }
    });
    let unexpected_events = shared.unexpected.load(Ordering::Relaxed);
    let ok = online.false_evictions
        + online.duplicates
        + online.missed
        + online.unverified
        + unexpected_events
        == 0
        && typing.as_ref().is_none_or(|t| {
            t.false_stops + t.duplicate_stops + t.missed_stops + t.unverified_stops == 0
        });
    // Every event the run received in its conversations, judged or not.
    let events_received = online.evictions
        + online.false_evictions
        + online.duplicates
        + unexpected_events
        + typing
            .as_ref()
            .map_or(0, |t| t.stops + t.false_stops + t.duplicate_stops);
    let st = watch.state();
    SimulateReport {
        sweep: plan.sweep.name.clone(),
        ttl_seconds: plan.sweep.ttl.as_secs_f64(),
        conversations: plan.conversations,
        users_per_conversation: plan.users,
        heartbeat_seconds: plan.heartbeat.as_secs_f64(),
        duration_seconds: run.vanished_for.as_secs_f64(),
        grace_seconds: plan.grace.as_secs_f64(),
        interrupted: run.interrupted,
        redis_outages: st.outages,
        redis_restarts: st.restarts.len() as u64,
        subscription_gaps: st.gaps.len() as u64,
        failed_heartbeat_calls: counts.failed_calls,
        keys_deleted: run.cleaned,
        heartbeats: counts.heartbeats,
        heartbeat_calls: counts.calls,
        users_vanished: online.abandoned,
        evictions: online.evictions,
        eviction_lag_seconds: online.lag,
        new_conversations: shared.new_conversations.load(Ordering::Relaxed),
        new_key_evictions: online.new_key_evictions,
        new_key_eviction_lag_seconds: online.new_key_lag,
        false_evictions: online.false_evictions,
        duplicate_events: online.duplicates,
        missed_zombies: online.missed,
        pending_zombies: online.pending,
        lost_in_restart: online.lost_in_restart,
        unobserved_evictions: online.unobserved,
        unverified_zombies: online.unverified,
        unexpected_events,
        events_received,
        no_sweeper_answered: events_received == 0 && online.missed > 0,
        typing,
        ok,
    }
}

/// The PSUBSCRIBE pattern of a channel template for this run's conversations: the literal parts
/// escaped, `{conversation_id}` replaced by `<prefix>*`.
pub(crate) fn channel_pattern(template: &str, prefix: &str) -> String {
    let escape = |s: &str| {
        let mut out = String::with_capacity(s.len());
        for c in s.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out
    };
    template
        .split(CONVERSATION_ID)
        .map(escape)
        .collect::<Vec<_>>()
        .join(&format!("{}*", escape(prefix)))
}

/// Deletes the keys this run wrote, by name: never a pattern another user of the Redis may share.
async fn delete_keys(plan: &Scenario, shared: &Board, store: &Store) -> Result<(), Error> {
    let mut con = store.connection();
    let prefix = plan.prefix();
    let sweeps: Vec<&config::Sweep> = std::iter::once(&plan.sweep)
        .chain(plan.typing.as_ref())
        .collect();
    let opened = shared.new_conversations.load(Ordering::Relaxed);
    let ids = (0..u64::from(plan.conversations))
        .map(|n| format!("{prefix}{n}"))
        .chain((0..opened).map(|n| format!("{prefix}new{n}")));
    let keys = ids.flat_map(|id| {
        sweeps
            .iter()
            .map(move |s| s.pattern.key(id.as_bytes()))
            .collect::<Vec<_>>()
    });
    // In a cluster, one DEL per key, each routed to its slot's primary.
    let per_key = store.is_cluster();
    let mut batch = Vec::with_capacity(DELETE_BATCH);
    for key in keys {
        batch.push(key);
        if batch.len() == DELETE_BATCH {
            delete(&mut con, &batch, per_key).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        delete(&mut con, &batch, per_key).await?;
    }
    Ok(())
}

/// Deletes one batch of keys: one `DEL` for them all, or in a cluster one per key, sent at once.
async fn delete(
    con: &mut presence_sweeper_redis::Conn,
    keys: &[Vec<u8>],
    per_key: bool,
) -> Result<(), Error> {
    if per_key {
        futures_util::future::try_join_all(keys.iter().map(|key| {
            let mut con = con.clone();
            async move { redis::cmd("DEL").arg(key).query_async::<()>(&mut con).await }
        }))
        .await?;
    } else {
        redis::cmd("DEL").arg(keys).query_async::<()>(con).await?;
    }
    Ok(())
}

/// The run's subscription to the events of its conversations, over the daemon's own
/// subscriber: a connection of its own, read only as fast as the run judges events, so that a
/// burst waits in Redis rather than here.
struct Listener {
    store: Store,
    /// Channel patterns of the run's conversations ([`channel_pattern`]).
    patterns: Vec<String>,
    /// How long Redis may take to confirm a subscription (`redis.command_timeout`).
    timeout: Duration,
    shared: Arc<Board>,
    watch: Arc<Watch>,
}

impl Listener {
    /// Subscribes to every pattern, and waits until Redis confirmed each: events published
    /// from then on are heard. Listener that come before the last confirmation are judged.
    async fn subscribe(&self) -> Result<Subscriber, Error> {
        // The one server, or in a cluster the first primary: PUBLISH reaches every node.
        let node = self
            .store
            .nodes()
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "no Redis server to subscribe to",
                ))
            })?;
        let mut sub = self.store.subscriber(&node).await?;
        let mut args: Vec<&[u8]> = vec![b"PSUBSCRIBE"];
        args.extend(self.patterns.iter().map(String::as_bytes));
        let confirmed = async {
            sub.command(&args).await?;
            let mut confirmed = 0;
            while confirmed < self.patterns.len() {
                match sub.next().await? {
                    Push::Subscribed => confirmed += 1,
                    Push::Message { payload, .. } => self.shared.event(payload, self.watch.now()),
                    Push::Error(e) => return Err(redis::RedisError::from(e)),
                    Push::Pong | Push::Other => {}
                }
            }
            Ok(())
        };
        tokio::time::timeout(self.timeout, confirmed)
            .await
            .unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "Redis did not confirm the subscription in time",
                )
                .into())
            })?;
        Ok(sub)
    }

    /// Judges events until `stop`. When the subscription is lost (Redis restarted, failed over)
    /// the gap is noted and the subscription taken up again as soon as Redis answers.
    async fn listen(self, mut sub: Subscriber, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                read = sub.next() => match read {
                    Ok(Push::Message { payload, .. }) => {
                        self.shared.event(payload, self.watch.now());
                        continue;
                    }
                    Ok(Push::Subscribed | Push::Pong | Push::Other) => continue,
                    Ok(Push::Error(e)) => {
                        let e = redis::RedisError::from(e);
                        tracing::debug!(error = %e, "an error on the event subscription");
                    }
                    Err(e) => tracing::debug!(error = %e, "the event subscription ended"),
                },
            }
            let lost_at = self.watch.now().unwrap_or_else(unix_now);
            self.watch.state().gaps.push((lost_at, None));
            tracing::warn!("the event subscription was lost; taking it up again");
            sub = loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(WATCH_EVERY) => {}
                }
                match self.subscribe().await {
                    Ok(sub) => break sub,
                    Err(e) => tracing::debug!(error = %e, "subscribing again failed"),
                }
            };
            let resumed = self.watch.now().unwrap_or_else(unix_now);
            if let Some(gap) = self.watch.state().gaps.last_mut() {
                gap.1 = Some(resumed);
            }
            tracing::warn!("subscribed again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_pattern_escapes_the_literal_parts() {
        assert_eq!(
            channel_pattern("presence:{conversation_id}:events", "sim-ab12cd-"),
            "presence:sim-ab12cd-*:events"
        );
        assert_eq!(
            channel_pattern("ev[{conversation_id}]*", "sim-1-"),
            "ev\\[sim-1-*\\]\\*"
        );
        assert_eq!(channel_pattern("all-events", "sim-1-"), "all-events");
    }
}
