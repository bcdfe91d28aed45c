//! Keys that leave Redis without the sweeper: deleted (`DEL`), expired by their key TTL (with and
//! without `expired` notifications), or flushed. The gauges follow within seconds (after a
//! flush, within one reconciliation), nobody is announced for them, and live users stay.

use std::time::Duration;

use crate::faults::{
    Events, HealthWatch, LiveUsers, assert_gauges_follow, assert_verdict, daemon, write_zombies,
};
use crate::support::{Binary, RedisServer, redis_now};

/// The sweep's ttl: long, so that the live users' keys are checked seldom and no check of
/// theirs refreshes the gauges by chance. The doomed keys' members score a minute ahead: their
/// keys leave on their own, never because members came due.
const TTL: &str = "60s";
/// How long the gauges may take to settle at first (the zombies' eviction counts anew the
/// members of the live keys they were in).
const SETTLED: Duration = Duration::from_secs(15);
/// Keys that will leave, and their members each.
const DOOMED: usize = 20;
const MEMBERS: usize = 3;

/// Writes the doomed keys `presence:d<c>:online`, members `doomed-<c>-<u>` scored a minute ahead, each key
/// with `expire_ms` as its TTL if given, written in one transaction as the README's heartbeat
/// does. Returns the members.
fn write_doomed(server: &RedisServer, expire_ms: Option<u64>) -> Vec<String> {
    let mut con = server.con();
    let now = redis_now(&mut con);
    let mut pipe = redis::pipe();
    pipe.atomic();
    let mut ids = Vec::new();
    for c in 0..DOOMED {
        let key = format!("presence:d{c}:online");
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(&key);
        for u in 0..MEMBERS {
            let id = format!("doomed-{c}-{u}");
            zadd.arg(now + 60.0).arg(&id);
            ids.push(id);
        }
        pipe.add_command(zadd).ignore();
        if let Some(ms) = expire_ms {
            pipe.cmd("PEXPIRE").arg(&key).arg(ms).ignore();
        }
    }
    let () = pipe.query(&mut con).unwrap();
    ids
}

/// A daemon with live users and a few zombies, its gauges following the truth.
struct Scene {
    server: RedisServer,
    events: Events,
    users: LiveUsers,
    zombies: Vec<String>,
    d: Binary,
    health: HealthWatch,
}

impl Scene {
    fn start(flags: &str, extra: &str) -> Self {
        let server = RedisServer::start_with(&["--notify-keyspace-events", flags]);
        let events = Events::start(&server);
        let users = LiveUsers::start(&server, 4, 3, Duration::from_secs(1));
        // Every live user written once before the first walk counts the members.
        std::thread::sleep(Duration::from_millis(1_500));
        let d = daemon(&server, TTL, extra);
        let health = HealthWatch::start(&d);
        // Zombies on the edge of their window: they leave within a second or two.
        let zombies = write_zombies(&server, "z", 4, 2, 59.0);
        // Gone before the keys are, so that a flush cannot take them unannounced.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while zombies.iter().any(|z| !events.counts().contains_key(z)) {
            assert!(
                std::time::Instant::now() < deadline,
                "zombies not announced\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            server,
            events,
            users,
            zombies,
            d,
            health,
        }
    }

    /// No false leave (live users, nor the members of keys that left on their own), every
    /// zombie announced once, `/healthz` 200 throughout.
    fn finish(mut self, doomed: &[String]) {
        let mut innocent = self.users.ids();
        innocent.extend_from_slice(doomed);
        assert_verdict(&self.events, &innocent, &self.zombies, 1, &self.d);
        self.users.stop();
        self.health.assert_always_live();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_keys_leave_the_gauges_at_once() {
    let s = Scene::start("Kgz", "");
    let doomed = write_doomed(&s.server, None);
    assert_gauges_follow(&s.server, &s.d, SETTLED);
    let mut con = s.server.con();
    let mut del = redis::cmd("DEL");
    for c in 0..DOOMED {
        del.arg(format!("presence:d{c}:online"));
    }
    let () = del.query(&mut con).unwrap();
    // The `del` notifications forget them at once.
    assert_gauges_follow(&s.server, &s.d, Duration::from_secs(2));
    s.finish(&doomed);
}

/// Expiring keys: `x` in the flags publishes `expired` (Redis finds expired keys within about
/// a second); without it, the check reads each key's TTL and looks at it again when it ends.
/// The gauges must follow within `within` of the expiry.
async fn keys_expiring(flags: &str, within: Duration) {
    let s = Scene::start(flags, "");
    // Only once the gauges have settled: then the expiry alone can move them.
    assert_gauges_follow(&s.server, &s.d, SETTLED);
    let doomed = write_doomed(&s.server, Some(3_000));
    // The gauges count the keys while they live...
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let s_ = crate::support::scrape(s.d.http_addr());
    let tracked =
        crate::support::metric(&s_, "presence_sweeper_tracked_keys", &[("sweep", "online")]);
    assert!(
        tracked >= Some((DOOMED + 4) as f64),
        "tracked {tracked:?} before the keys expired"
    );
    // ... and drop within 10 s of their expiry.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_gauges_follow(&s.server, &s.d, within);
    s.finish(&doomed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expiring_by_their_ttl_leave_the_gauges_with_expired_events() {
    keys_expiring("Kgxz", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expiring_by_their_ttl_leave_the_gauges_without_expired_events() {
    keys_expiring("Kgz", Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_keys_leave_the_gauges_within_one_reconciliation() {
    let s = Scene::start("Kgz", "[tracking]\nreconcile_interval = \"4s\"\n");
    let doomed = write_doomed(&s.server, None);
    assert_gauges_follow(&s.server, &s.d, SETTLED);
    let mut con = s.server.con();
    let () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    let flushed = std::time::Instant::now();
    // The live users write their keys again within a second; the rest are gone.
    assert_gauges_follow(&s.server, &s.d, Duration::from_secs(6));
    assert!(flushed.elapsed() < Duration::from_secs(6));
    s.finish(&doomed);
}
