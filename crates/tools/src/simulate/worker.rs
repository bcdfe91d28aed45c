//! The simulator's workers: each owns a share of the conversations and, tick by tick, lets users
//! vanish, starts and ends typing bursts, and sends the heartbeats that are due in one pipeline
//! (in a cluster, as calls of their own, all at once).
//!
//! A worker waits for its pipeline before it changes its conversations again, so a vanished
//! user's last score is exactly the one Redis holds.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use presence_sweeper_redis::Conn;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::board::{Board, lock};
use super::scenario::{Scenario, random_u64};
use presence_sweeper_config::KeyPattern;
use presence_sweeper_config::ScoreUnit;
use presence_sweeper_redis::Error;
use presence_sweeper_redis::Store;

/// Granularity of the schedule: heartbeats are spread over the period in steps of this.
const TICK: Duration = Duration::from_millis(100);
/// A typist writes a keystroke this often...
pub(super) const KEYSTROKE: Duration = Duration::from_secs(1);
/// ...for 2 to 6 seconds...
const BURST: (f64, f64) = (2.0, 6.0);
/// ...and a conversation without a typist gets one every 20 seconds on average.
const BURST_EVERY: Duration = Duration::from_secs(20);

/// When the phases of a run end.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    /// When the run started.
    pub(super) start: Instant,
    /// When users stop vanishing.
    pub(super) vanish_until: Instant,
    /// When the workers stop.
    pub(super) end: Instant,
}

/// What a worker wrote.
#[derive(Debug, Default)]
pub(super) struct Wrote {
    /// Member heartbeats written.
    pub(super) heartbeats: u64,
    /// Script calls that wrote them.
    pub(super) calls: u64,
    /// Typing keystrokes written.
    pub(super) keystrokes: u64,
    /// Heartbeat pipelines that failed (Redis away); in a cluster, heartbeat calls.
    pub(super) failed_calls: u64,
}

impl Wrote {
    /// Adds another worker's counts.
    pub(super) fn add(&mut self, other: &Wrote) {
        self.heartbeats += other.heartbeats;
        self.calls += other.calls;
        self.keystrokes += other.keystrokes;
        self.failed_calls += other.failed_calls;
    }
}

/// A user heartbeating.
#[derive(Debug)]
struct Live {
    user: u64,
    member: String,
    /// Last score written, in the score unit; `None` before the first heartbeat.
    last_score: Option<f64>,
    /// Leaves right after its first heartbeat (the first user of a new conversation).
    visit: bool,
}

impl Live {
    fn new(user: u64) -> Self {
        Self {
            user,
            member: format!("u{user}"),
            last_score: None,
            visit: false,
        }
    }
}

/// A user typing.
#[derive(Debug)]
struct Burst {
    user: u64,
    member: String,
    ends: Instant,
    next: Instant,
    last_score: Option<f64>,
}

/// One conversation, owned by one worker.
#[derive(Debug)]
struct Conversation {
    key: Arc<[u8]>,
    typing_key: Option<Arc<[u8]>>,
    slot: u64,
    live: Vec<Live>,
    burst: Option<Burst>,
}

/// What one heartbeat call of a pipeline was for.
#[derive(Debug, Clone, Copy)]
enum Sent {
    Online(usize),
    Typing(usize),
}

/// One worker: a share of the conversations, heartbeated tick by tick.
pub(super) struct Worker {
    index: usize,
    workers: usize,
    conversations: Vec<Conversation>,
    slots: u64,
    tick: Duration,
    con: Conn,
    /// The cluster client refuses a pipeline whose keys span slots: there each call goes on
    /// its own, all at once (the cluster connection still batches them per node).
    cluster: bool,
    script: redis::Script,
    shared: Arc<Board>,
    rng: Rng,
    vanish_rate: f64,
    vanish_debt: f64,
    rejoin: bool,
    /// New conversations this worker opens per tick, and those it owes.
    new_per_tick: f64,
    new_debt: f64,
    users: u32,
    prefix: String,
    patterns: (KeyPattern, Option<KeyPattern>),
    unit: ScoreUnit,
    key_ttl: u64,
    typing: Option<(ScoreUnit, u64)>,
}

impl Worker {
    /// Worker `index` of `workers`: its share of the conversations, with their initial users
    /// registered as live.
    pub(super) fn new(
        plan: &Scenario,
        index: usize,
        workers: usize,
        store: &Store,
        script: &redis::Script,
        shared: Arc<Board>,
    ) -> Self {
        let tick = TICK.min(plan.heartbeat);
        let slots = (plan.heartbeat.as_secs_f64() / tick.as_secs_f64())
            .round()
            .max(1.0) as u64;
        let prefix = plan.prefix();
        let mine: Vec<u32> = (0..plan.conversations)
            .filter(|n| *n as usize % workers == index)
            .collect();
        let count = mine.len() as u64;
        let conversations = mine
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let id = format!("{prefix}{n}");
                let live = (0..plan.users)
                    .map(|_| {
                        let user = shared.new_user();
                        lock(&shared.online).activate(user);
                        Live::new(user)
                    })
                    .collect();
                Conversation {
                    key: plan.sweep.pattern.key(id.as_bytes()).into(),
                    typing_key: plan
                        .typing
                        .as_ref()
                        .map(|t| t.pattern.key(id.as_bytes()).into()),
                    // Spread this worker's conversations evenly over the period.
                    slot: i as u64 * slots / count,
                    live,
                    burst: None,
                }
            })
            .collect();
        Self {
            index,
            workers,
            conversations,
            slots,
            tick,
            con: store.connection(),
            cluster: store.is_cluster(),
            script: script.clone(),
            shared,
            rng: Rng::new(),
            vanish_rate: plan.vanish_rate,
            vanish_debt: 0.0,
            rejoin: plan.rejoin,
            new_per_tick: plan.new_conversations / 60.0 * tick.as_secs_f64() / workers as f64,
            new_debt: 0.0,
            users: plan.users,
            prefix: plan.prefix(),
            patterns: (
                plan.sweep.pattern.clone(),
                plan.typing.as_ref().map(|t| t.pattern.clone()),
            ),
            unit: plan.sweep.score_unit,
            key_ttl: key_ttl(plan.sweep.ttl),
            typing: plan.typing.as_ref().map(|t| (t.score_unit, key_ttl(t.ttl))),
        }
    }

    /// Ticks until the end of the run or `stop`. Returns what it wrote. Redis failing (down,
    /// restarted, failing over) does not stop it: the heartbeats of a failed pipeline are not
    /// recorded, as the apps' would not be, and the next tick tries again.
    pub(super) async fn run(mut self, clock: Clock, stop: CancellationToken) -> Wrote {
        let mut counts = Wrote::default();
        // Workers tick in turn rather than all at once, so Redis sees an even stream.
        let offset = self.tick.mul_f64(self.index as f64 / self.workers as f64);
        let mut ticker = tokio::time::interval_at(clock.start + offset, self.tick);
        // A late tick is caught up at once: stretching the period instead could make the
        // simulator's own lateness look like the sweeper's false evictions.
        ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
        let mut tick: u64 = 0;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            let now = Instant::now();
            if now >= clock.end {
                break;
            }
            let vanishing = now < clock.vanish_until;
            if vanishing {
                self.vanish();
                self.open_conversations(tick % self.slots);
            }
            if self.typing.is_some() {
                self.typists(now, vanishing);
            }
            if let Err(e) = self.heartbeat(tick % self.slots, now, &mut counts).await {
                counts.failed_calls += 1;
                tracing::debug!(worker = self.index, error = %e, "heartbeats failed");
            }
            self.visits_end();
            tick += 1;
        }
        counts
    }

    /// Lets users vanish at the configured rate: they simply stop heartbeating.
    fn vanish(&mut self) {
        let live: usize = self.conversations.iter().map(|c| c.live.len()).sum();
        self.vanish_debt += live as f64 * self.vanish_rate * self.tick.as_secs_f64() / 60.0;
        while self.vanish_debt >= 1.0 {
            self.vanish_debt -= 1.0;
            // Only users already written can become zombies; pick one at random.
            let n = self.conversations.len();
            let start = self.rng.below(n);
            let Some(ci) = (0..n).map(|i| (start + i) % n).find(|&i| {
                self.conversations[i]
                    .live
                    .iter()
                    .any(|l| l.last_score.is_some())
            }) else {
                return;
            };
            let conversation = &mut self.conversations[ci];
            let m = conversation.live.len();
            let start = self.rng.below(m);
            let Some(li) = (0..m)
                .map(|i| (start + i) % m)
                .find(|&i| conversation.live[i].last_score.is_some())
            else {
                return;
            };
            let gone = conversation.live.swap_remove(li);
            let last_seen = self.unit.to_seconds(gone.last_score.unwrap_or_default());
            lock(&self.shared.online).abandon(gone.user, last_seen, conversation.key.clone());
            if conversation
                .burst
                .as_ref()
                .is_some_and(|b| b.user == gone.user)
            {
                let burst = conversation.burst.take();
                let key = conversation.typing_key.clone();
                self.end_burst(burst, key);
            }
            if self.rejoin {
                let user = self.shared.new_user();
                lock(&self.shared.online).activate(user);
                self.conversations[ci].live.push(Live::new(user));
            }
        }
    }

    /// Opens the new conversations due, heartbeated from this tick's `slot` on: keys that did
    /// not exist, whose first user leaves right after creating them.
    fn open_conversations(&mut self, slot: u64) {
        self.new_debt += self.new_per_tick;
        while self.new_debt >= 1.0 {
            self.new_debt -= 1.0;
            let id = format!("{}new{}", self.prefix, self.shared.new_conversation());
            let live = (0..self.users)
                .map(|i| {
                    let user = self.shared.new_user();
                    lock(&self.shared.online).activate(user);
                    Live {
                        visit: i == 0,
                        ..Live::new(user)
                    }
                })
                .collect();
            self.conversations.push(Conversation {
                key: self.patterns.0.key(id.as_bytes()).into(),
                typing_key: self
                    .patterns
                    .1
                    .as_ref()
                    .map(|p| p.key(id.as_bytes()).into()),
                slot,
                live,
                burst: None,
            });
        }
    }

    /// Users on a visit leave once their first heartbeat is written.
    fn visits_end(&mut self) {
        for c in &mut self.conversations {
            while let Some(i) = c
                .live
                .iter()
                .position(|l| l.visit && l.last_score.is_some())
            {
                let gone = c.live.swap_remove(i);
                let last_seen = self.unit.to_seconds(gone.last_score.unwrap_or_default());
                lock(&self.shared.online).abandon_new_key(gone.user, last_seen, c.key.clone());
            }
        }
    }

    /// Starts, continues and ends typing bursts; no new ones once users stop vanishing.
    fn typists(&mut self, now: Instant, starting: bool) {
        let chance = self.tick.as_secs_f64() / BURST_EVERY.as_secs_f64();
        for ci in 0..self.conversations.len() {
            let ended = self.conversations[ci]
                .burst
                .as_ref()
                .is_some_and(|b| !starting || now >= b.ends);
            if ended {
                let burst = self.conversations[ci].burst.take();
                let key = self.conversations[ci].typing_key.clone();
                self.end_burst(burst, key);
                continue;
            }
            if !starting || self.conversations[ci].burst.is_some() || !self.rng.chance(chance) {
                continue;
            }
            let conversation = &mut self.conversations[ci];
            let m = conversation.live.len();
            if m == 0 {
                continue;
            }
            let pick = &conversation.live[self.rng.below(m)];
            let mut typing = lock(&self.shared.typing);
            // A typist whose last burst is not announced yet waits, so that its stop event
            // cannot be mistaken for one of the new burst.
            if pick.last_score.is_none() || !typing.is_idle(pick.user) {
                continue;
            }
            typing.activate(pick.user);
            let length = BURST.0 + self.rng.unit() * (BURST.1 - BURST.0);
            conversation.burst = Some(Burst {
                user: pick.user,
                member: pick.member.clone(),
                ends: now + Duration::from_secs_f64(length),
                next: now,
                last_score: None,
            });
        }
    }

    fn end_burst(&self, burst: Option<Burst>, key: Option<Arc<[u8]>>) {
        let (Some(burst), Some((unit, _)), Some(key)) = (burst, self.typing, key) else {
            return;
        };
        if let Some(score) = burst.last_score {
            lock(&self.shared.typing).abandon(burst.user, unit.to_seconds(score), key);
        }
    }

    /// Sends the heartbeats of `slot` and the keystrokes due, in one pipeline (in a cluster, as
    /// calls of their own), and waits for them.
    async fn heartbeat(
        &mut self,
        slot: u64,
        now: Instant,
        counts: &mut Wrote,
    ) -> Result<(), Error> {
        let mut calls = Vec::new();
        let mut sent = Vec::new();
        let unit = unit_arg(self.unit);
        for (ci, c) in self.conversations.iter_mut().enumerate() {
            if c.slot == slot && !c.live.is_empty() {
                let mut call = self.script.prepare_invoke();
                call.key(&*c.key).arg(self.key_ttl).arg(unit);
                for l in &c.live {
                    call.arg(&l.member);
                }
                calls.push(call);
                sent.push(Sent::Online(ci));
            }
            if let (Some(b), Some(key), Some((typing_unit, ttl))) =
                (c.burst.as_mut(), &c.typing_key, self.typing)
                && b.next <= now
            {
                let mut call = self.script.prepare_invoke();
                call.key(&**key)
                    .arg(ttl)
                    .arg(unit_arg(typing_unit))
                    .arg(&b.member);
                calls.push(call);
                sent.push(Sent::Typing(ci));
                b.next += KEYSTROKE;
            }
        }
        if sent.is_empty() {
            return Ok(());
        }
        let scores: Vec<Option<f64>> = if self.cluster {
            // Each call loads the script where its node lacks it. Every call is waited for, so
            // none is still running in Redis when the worker changes its conversations again,
            // and the scores of those that succeeded are kept.
            let con = &self.con;
            let replies = futures_util::future::join_all(calls.iter().map(|call| {
                let mut con = con.clone();
                async move { call.invoke_async::<f64>(&mut con).await }
            }))
            .await;
            let failed = replies.iter().filter(|r| r.is_err()).count();
            if let Some(Err(e)) = replies.iter().find(|r| r.is_err()) {
                counts.failed_calls += failed as u64;
                tracing::debug!(worker = self.index, failed, error = %e, "heartbeat calls failed");
            }
            replies.into_iter().map(Result::ok).collect()
        } else {
            let mut pipe = redis::pipe();
            for call in &calls {
                pipe.invoke_script(call);
            }
            let scores: Vec<f64> = match pipe.query_async(&mut self.con).await {
                Ok(s) => s,
                Err(_) => {
                    // Most likely NOSCRIPT from a restarted Redis, or a connection being
                    // re-established: load the script and try once more (heartbeats are
                    // idempotent: ZADD GT and EXPIRE).
                    self.script.load_async(&mut self.con).await?;
                    pipe.query_async(&mut self.con).await?
                }
            };
            scores.into_iter().map(Some).collect()
        };
        for (what, score) in sent.into_iter().zip(scores) {
            let Some(score) = score else { continue };
            match what {
                Sent::Online(ci) => {
                    let c = &mut self.conversations[ci];
                    for l in &mut c.live {
                        l.last_score = Some(score);
                    }
                    counts.heartbeats += c.live.len() as u64;
                    counts.calls += 1;
                }
                Sent::Typing(ci) => {
                    if let Some(b) = self.conversations[ci].burst.as_mut() {
                        b.last_score = Some(score);
                    }
                    counts.keystrokes += 1;
                }
            }
        }
        Ok(())
    }
}

fn unit_arg(unit: ScoreUnit) -> &'static str {
    match unit {
        ScoreUnit::Seconds => "s",
        ScoreUnit::Milliseconds => "ms",
    }
}

/// The key TTL the README recommends: about 10x the window, in whole seconds.
fn key_ttl(ttl: Duration) -> u64 {
    (ttl.as_secs_f64() * 10.0).ceil().max(1.0) as u64
}

/// A small xorshift generator: which user vanishes or types need not be cryptographic, and a
/// dependency for it is not worth it.
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        Self(random_u64() | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in 0..n (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ttl_is_ten_windows() {
        assert_eq!(key_ttl(Duration::from_secs(45)), 450);
        assert_eq!(key_ttl(Duration::from_millis(50)), 1);
        assert_eq!(key_ttl(Duration::from_millis(250)), 3);
    }

    #[test]
    fn rng_stays_in_range() {
        let mut r = Rng::new();
        for n in 1..50 {
            assert!(r.below(n) < n);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
