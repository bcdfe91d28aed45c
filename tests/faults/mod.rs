//! The standing fault matrix: every server event that could announce live users as gone, tried
//! the way it happens against a daemon with live users.
//!
//! Each live user heartbeats on its own phase (users of one conversation do not write together),
//! with the README's heartbeat (score from Redis `TIME`, `ZADD GT`); a tick that cannot reach
//! Redis is lost, not retried, as in real apps. Zombies are members written once and never
//! again. A subscriber that follows Redis through restarts counts every event, and a watcher
//! polls `/healthz` throughout. Every scenario asserts 0 false leaves, every zombie announced,
//! gauges equal to the truth, and `/healthz` 200 all along.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{Binary, RedisServer, http_get, metric, scrape};

mod clock_steps;
mod daemon_paused;
mod debug_reload;
mod deletions;
mod failover;
mod flushall;
mod late_replies;
mod notifications;
mod restored_snapshot;
mod rosters;
mod silent_redis;
mod writes_refused;

/// The README's heartbeat: score from Redis TIME, ZADD GT.
const HEARTBEAT: &str = "local t = redis.call('TIME') \
    local now = tonumber(t[1]) + tonumber(t[2]) / 1000000 \
    redis.call('ZADD', KEYS[1], 'GT', now, ARGV[1]) \
    return tostring(now)";

/// A blocking connection that gives up on a silent server after `timeout`, so that one paused
/// Redis costs a tick, not the thread.
fn connect(client: &redis::Client, timeout: Duration) -> Option<redis::Connection> {
    let con = client.get_connection_with_timeout(timeout).ok()?;
    con.set_read_timeout(Some(timeout)).ok()?;
    con.set_write_timeout(Some(timeout)).ok()?;
    Some(con)
}

/// Live users, each heartbeating every `period` on its own phase; user `n` of conversation `c`
/// is `live-c<c>-<n>` in `presence:<prefix>f<c>:online` (the prefix is empty unless given, e.g.
/// a hash tag that keeps every key on one cluster primary).
pub struct LiveUsers {
    running: Arc<AtomicBool>,
    /// Heartbeats that reached Redis, and ticks lost because it did not answer.
    pub written: Arc<AtomicU64>,
    pub lost: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub conversations: usize,
    pub users: usize,
}

impl LiveUsers {
    pub fn start(
        server: &RedisServer,
        conversations: usize,
        users: usize,
        period: Duration,
    ) -> Self {
        Self::start_on(&[server], "", conversations, users, period)
    }

    /// [`LiveUsers::start`] on keys `presence:<prefix>f<c>:online`, writing to the first of
    /// `servers` that takes the write: a tick refused (down, or a replica) is lost, and the next
    /// one tries the next server, as apps that follow a failover.
    pub fn start_on(
        servers: &[&RedisServer],
        prefix: &str,
        conversations: usize,
        users: usize,
        period: Duration,
    ) -> Self {
        Self::start_keys(servers, prefix, "online", conversations, users, period)
    }

    /// [`LiveUsers::start_on`] for the sweep `sweep` (`online`, `typing`): keys
    /// `presence:<prefix>f<c>:<sweep>`.
    pub fn start_keys(
        servers: &[&RedisServer],
        prefix: &str,
        sweep: &str,
        conversations: usize,
        users: usize,
        period: Duration,
    ) -> Self {
        let sweep = sweep.to_owned();
        let running = Arc::new(AtomicBool::new(true));
        let written = Arc::new(AtomicU64::new(0));
        let lost = Arc::new(AtomicU64::new(0));
        let (r, w, l) = (running.clone(), written.clone(), lost.clone());
        let clients: Vec<redis::Client> = servers.iter().map(|s| s.client()).collect();
        let prefix = prefix.to_owned();
        let thread = std::thread::spawn(move || {
            let mut target = 0;
            let script = redis::Script::new(HEARTBEAT);
            let total = conversations * users;
            let start = Instant::now();
            // (next tick, conversation, user), phases spread evenly over the period.
            let mut ticks: Vec<(Duration, usize, usize)> = (0..total)
                .map(|i| {
                    (
                        period.mul_f64(i as f64 / total as f64),
                        i / users,
                        i % users,
                    )
                })
                .collect();
            let mut con: Option<redis::Connection> = None;
            while r.load(Ordering::Relaxed) {
                let (i, &(due, c, u)) = ticks
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, t)| t.0)
                    .expect("at least one user");
                let now = start.elapsed();
                if due > now {
                    std::thread::sleep((due - now).min(Duration::from_millis(50)));
                    continue;
                }
                ticks[i].0 = due + period;
                if con.is_none() {
                    con = connect(&clients[target], period / 4);
                }
                let ok = con.as_mut().is_some_and(|con| {
                    script
                        .key(format!("presence:{prefix}f{c}:{sweep}"))
                        .arg(format!("live-c{c}-{u}"))
                        .invoke::<String>(con)
                        .is_ok()
                });
                if ok {
                    w.fetch_add(1, Ordering::Relaxed);
                } else {
                    // Lost: the app carries on at its next tick, on a new connection.
                    l.fetch_add(1, Ordering::Relaxed);
                    con = None;
                    target = (target + 1) % clients.len();
                }
            }
        });
        Self {
            running,
            written,
            lost,
            thread: Some(thread),
            conversations,
            users,
        }
    }

    /// Every live user's id.
    pub fn ids(&self) -> Vec<String> {
        (0..self.conversations)
            .flat_map(|c| (0..self.users).map(move |u| format!("live-c{c}-{u}")))
            .collect()
    }

    pub fn stop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for LiveUsers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes `n` zombies (members never written again) scored `age` seconds before Redis's now,
/// into conversations of their own (`presence:z<c>:online`, member `zombie-<tag>-<c>`) and
/// into the live users' conversations (`presence:f<c>:online`, member `zombie-<tag>-f<c>`).
pub fn write_zombies(
    server: &RedisServer,
    tag: &str,
    n: usize,
    live_conversations: usize,
    age: f64,
) -> Vec<String> {
    write_zombies_in(server, "", tag, n, live_conversations, age)
}

/// [`write_zombies`] into keys `presence:<prefix>...:online`, those of
/// [`LiveUsers::start_on`] with the same prefix.
pub fn write_zombies_in(
    server: &RedisServer,
    prefix: &str,
    tag: &str,
    n: usize,
    live_conversations: usize,
    age: f64,
) -> Vec<String> {
    write_zombies_of(server, "online", prefix, tag, n, live_conversations, age)
}

/// [`write_zombies_in`] into the keys of the sweep `sweep` (`presence:<prefix>...:<sweep>`).
pub fn write_zombies_of(
    server: &RedisServer,
    sweep: &str,
    prefix: &str,
    tag: &str,
    n: usize,
    live_conversations: usize,
    age: f64,
) -> Vec<String> {
    let mut con = server.con();
    let now = crate::support::redis_now(&mut con);
    let mut ids = Vec::new();
    for c in 0..n {
        let (key, id) = if c < live_conversations {
            (
                format!("presence:{prefix}f{c}:{sweep}"),
                format!("zombie-{tag}-f{c}"),
            )
        } else {
            (
                format!("presence:{prefix}z{tag}{c}:{sweep}"),
                format!("zombie-{tag}-{c}"),
            )
        };
        let _: () = redis::cmd("ZADD")
            .arg(&key)
            .arg(now - age)
            .arg(&id)
            .query(&mut con)
            .unwrap();
        ids.push(id);
    }
    ids
}

/// One event as it arrived.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub user: String,
    pub at: Instant,
}

/// Collects every leave event on `presence:*:events`, following Redis through restarts: it
/// resubscribes within milliseconds of Redis answering again.
pub struct Events {
    running: Arc<AtomicBool>,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Events {
    pub fn start(server: &RedisServer) -> Self {
        let running = Arc::new(AtomicBool::new(true));
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let (r, a) = (running.clone(), arrivals.clone());
        let client = server.client();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut ready = Some(ready_tx);
            while r.load(Ordering::Relaxed) {
                let Some(mut con) = connect(&client, Duration::from_millis(200)) else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let mut pubsub = con.as_pubsub();
                if pubsub.psubscribe("presence:*:events").is_err() {
                    continue;
                }
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
                while r.load(Ordering::Relaxed) {
                    match pubsub.get_message() {
                        Ok(msg) => {
                            let json: serde_json::Value =
                                serde_json::from_slice(msg.get_payload_bytes()).unwrap();
                            let user = json["user_id"].as_str().unwrap_or_default().to_owned();
                            a.lock().unwrap().push(Arrival {
                                user,
                                at: Instant::now(),
                            });
                        }
                        Err(e) if e.is_timeout() => {}
                        Err(_) => break,
                    }
                }
            }
        });
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("subscribed to events");
        Self {
            running,
            arrivals,
            thread: Some(thread),
        }
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }

    /// Asserts that each of `users` was announced after `after` (`what`: the event it follows).
    pub fn assert_announced_after(&self, users: &[String], after: Instant, what: &str) {
        let arrivals = self.arrivals();
        for u in users {
            assert!(
                arrivals.iter().any(|a| &a.user == u && a.at > after),
                "zombie {u} not announced after {what}"
            );
        }
    }

    /// Whether every one of `users` was announced.
    pub fn announced_all(&self, users: &[String]) -> bool {
        let counts = self.counts();
        users.iter().all(|u| counts.contains_key(u))
    }

    /// How often each user was announced.
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for a in self.arrivals() {
            *counts.entry(a.user).or_insert(0) += 1;
        }
        counts
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `/healthz` every 100 ms and remembers every answer that was not 200.
pub struct HealthWatch {
    running: Arc<AtomicBool>,
    failures: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HealthWatch {
    pub fn start(d: &Binary) -> Self {
        let addr = d.http_addr();
        let running = Arc::new(AtomicBool::new(true));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let (r, f) = (running.clone(), failures.clone());
        let thread = std::thread::spawn(move || {
            while r.load(Ordering::Relaxed) {
                // A refused connection (the daemon gone) is a failure to record, not a panic
                // of this thread.
                match std::panic::catch_unwind(|| http_get(addr, "/healthz")) {
                    Ok((200, _)) => {}
                    Ok((status, body)) => f.lock().unwrap().push(format!("{status} {body}")),
                    Err(_) => f.lock().unwrap().push("no answer".into()),
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Self {
            running,
            failures,
            thread: Some(thread),
        }
    }

    /// Stops watching and asserts `/healthz` was 200 throughout.
    pub fn assert_always_live(mut self) {
        self.running.store(false, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let failures = self.failures.lock().unwrap();
        assert!(failures.is_empty(), "/healthz was not 200: {failures:?}");
    }
}

/// Asserts that no live user was announced, and that each of `zombies` was announced at least
/// once and at most `at_most` times (more than once only where Redis brought it back).
pub fn assert_verdict(
    events: &Events,
    live: &[String],
    zombies: &[String],
    at_most: usize,
    d: &Binary,
) {
    let counts = events.counts();
    let false_leaves: Vec<&String> = live.iter().filter(|u| counts.contains_key(*u)).collect();
    assert!(
        false_leaves.is_empty(),
        "{} of {} live users announced as left: {:?}\nlog:\n{}",
        false_leaves.len(),
        live.len(),
        &false_leaves[..false_leaves.len().min(10)],
        d.log()
    );
    let missed: Vec<&String> = zombies
        .iter()
        .filter(|z| !counts.contains_key(*z))
        .collect();
    assert!(
        missed.is_empty(),
        "zombies never announced: {missed:?}\nlog:\n{}",
        d.log()
    );
    let doubled: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n > at_most).collect();
    assert!(doubled.is_empty(), "announced too often: {doubled:?}");
}

/// The truth about `presence:*:online` keys: (keys, members).
pub fn truth(server: &RedisServer) -> (u64, u64) {
    truth_on(&mut server.con())
}

/// [`truth`] on one connection (one cluster node's own keys).
pub fn truth_on(con: &mut redis::Connection) -> (u64, u64) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("presence:*:online")
        .query(con)
        .unwrap();
    let members = keys
        .iter()
        .map(|k| redis::cmd("ZCARD").arg(k).query::<u64>(con).unwrap())
        .sum();
    (keys.len() as u64, members)
}

/// Waits up to `within` for the online sweep's `tracked_keys` and `members` gauges to equal
/// the truth in Redis (it may move meanwhile: both are read again each time).
pub fn assert_gauges_follow(server: &RedisServer, d: &Binary, within: Duration) {
    assert_gauges_follow_truth(|| truth(server), d, within);
}

/// [`assert_gauges_follow`] with the truth told by `truth` (e.g. summed over a cluster's
/// primaries).
pub fn assert_gauges_follow_truth(
    mut truth: impl FnMut() -> (u64, u64),
    d: &Binary,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    loop {
        let (keys, members) = truth();
        let s = scrape(d.http_addr());
        let tracked = metric(&s, "presence_sweeper_tracked_keys", &[("sweep", "online")]);
        let gauge = metric(&s, "presence_sweeper_members", &[("sweep", "online")]);
        if tracked == Some(keys as f64) && gauge == Some(members as f64) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "gauges {tracked:?} keys / {gauge:?} members, Redis holds {keys} / {members} after {within:?}\nlog:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A daemon sweeping only `presence:*:online`, with `ttl` and the rest of `extra`.
pub fn daemon(server: &RedisServer, ttl: &str, extra: &str) -> Binary {
    let toml = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n\
         [sweeps.online]\nttl = \"{ttl}\"\n{extra}"
    );
    let d = Binary::spawn(&toml, &["--redis-url", &server.url()], &[]);
    d.wait_ready(Duration::from_secs(10));
    d
}
