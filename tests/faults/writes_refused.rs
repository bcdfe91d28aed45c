//! Redis answers but refuses writes: full (`maxmemory` under `noeviction`: `OOM` for `ZADD`,
//! while reads and `ZREM` go on), a failed background save (`MISCONF` for every write), or a
//! write pause (`CLIENT PAUSE ... WRITE`: writes wait). The apps cannot heartbeat meanwhile;
//! nobody may be announced as left for it, and the zombies still leave after.

use std::time::{Duration, Instant};

use crate::faults::{Events, HealthWatch, LiveUsers, assert_verdict, daemon, write_zombies};
use crate::support::{Binary, RedisServer, http_get, metric, scrape, wait_until};

const USERS: (usize, usize) = (12, 5);
const PERIOD: Duration = Duration::from_secs(2);
const TTL: &str = "4s";

fn config(con: &mut redis::Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .unwrap();
}

/// Stops a polling loop when dropped, on a panic too.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Polls `/readyz` every 200 ms until stopped; returns every reason it gave for 503.
fn readiness_reasons(d: &Binary, running: &std::sync::atomic::AtomicBool) -> Vec<String> {
    let mut reasons = Vec::new();
    while running.load(std::sync::atomic::Ordering::Relaxed) {
        let (status, body) = http_get(d.http_addr(), "/readyz");
        if status == 503 {
            reasons.push(body);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    reasons
}

/// Live users (60, every 2 s, ttl 4 s; storm guard off, so the rule alone must spare them),
/// zombies written just before `refuse` makes Redis refuse writes for `lasting`, then `allow`.
/// Asserts no live user announced, every zombie announced once after, `/healthz` 200 all
/// along, and returns the daemon and the reasons `/readyz` gave meanwhile.
fn scenario(
    server: &RedisServer,
    lasting: Duration,
    refuse: impl FnOnce(),
    allow: impl FnOnce(),
) -> (Binary, Vec<String>) {
    let events = Events::start(server);
    let mut users = LiveUsers::start(server, USERS.0, USERS.1, PERIOD);
    let d = daemon(
        server,
        TTL,
        "[sweeps.online.storm_guard]\nenabled = false\n",
    );
    let health = HealthWatch::start(&d);
    std::thread::sleep(Duration::from_secs(3));
    let zombies = write_zombies(server, "full", 10, 5, 1.0);
    let lost_before = users.lost.load(std::sync::atomic::Ordering::Relaxed);
    let running = std::sync::atomic::AtomicBool::new(true);
    let reasons = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| readiness_reasons(&d, &running));
        // Whatever fails below, the watcher stops, so that the scope (and the test) ends.
        let _stop = StopOnDrop(&running);
        refuse();
        let refused = Instant::now();
        std::thread::sleep(lasting);
        allow();
        // Zombies leave a ttl after Redis takes writes again, with room.
        std::thread::sleep(Duration::from_secs(7));
        running.store(false, std::sync::atomic::Ordering::Relaxed);
        let reasons = watcher.join().unwrap();
        assert_verdict(&events, &users.ids(), &zombies, 1, &d);
        events.assert_announced_after(&zombies, refused + lasting, "Redis took writes again");
        reasons
    });
    let lost = users.lost.load(std::sync::atomic::Ordering::Relaxed) - lost_before;
    assert!(lost > 0, "heartbeats were refused meanwhile");
    users.stop();
    health.assert_always_live();
    (d, reasons)
}

#[test]
fn a_full_redis_refusing_heartbeats_announces_no_live_user() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kgz"]);
    let (d, reasons) = scenario(
        &server,
        Duration::from_secs(15),
        || config(&mut server.con(), "maxmemory", "1"),
        || config(&mut server.con(), "maxmemory", "0"),
    );
    assert!(
        reasons.iter().any(|r| r.contains("refuses writes (OOM)")),
        "/readyz says why: {reasons:?}"
    );
    let s = scrape(d.http_addr());
    assert_eq!(
        metric(&s, "presence_sweeper_redis_writes_refused_total", &[]),
        Some(1.0),
        "one episode"
    );
    assert_eq!(
        metric(&s, "presence_sweeper_redis_writes_refused", &[]),
        Some(0.0)
    );
}

/// The background save's child, as its parent lists it.
fn save_child(server: &RedisServer) -> Option<u32> {
    let pid = server.pid();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

#[test]
fn a_failed_background_save_refusing_every_write_announces_no_live_user() {
    // MISCONF needs save points and stop-writes-on-bgsave-error (the default). The save point as
    // two arguments: Redis 6.2 reads `--save "3600 1"` as no save point at all.
    let server =
        RedisServer::start_with(&["--notify-keyspace-events", "Kgz", "--save", "3600", "1"]);
    let refuse = || {
        // A save slow enough to be killed: it fails, and every write is refused after it.
        let mut con = server.con();
        config(&mut con, "rdb-key-save-delay", "1000000");
        let _: String = redis::cmd("BGSAVE").query(&mut con).unwrap();
        let mut child = None;
        wait_until("the save's child", Duration::from_secs(5), || {
            child = save_child(&server);
            child.is_some()
        });
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &child.unwrap().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        wait_until("writes refused", Duration::from_secs(5), || {
            redis::cmd("SET")
                .arg("probe")
                .arg("1")
                .query::<()>(&mut con)
                .is_err_and(|e| e.code() == Some("MISCONF"))
        });
    };
    let allow = || {
        let mut con = server.con();
        config(&mut con, "rdb-key-save-delay", "0");
        let _: String = redis::cmd("BGSAVE").query(&mut con).unwrap();
        wait_until("a save succeeded", Duration::from_secs(10), || {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut con)
                .unwrap();
            info.contains("rdb_last_bgsave_status:ok") && info.contains("rdb_bgsave_in_progress:0")
        });
    };
    let (_, reasons) = scenario(&server, Duration::from_secs(15), refuse, allow);
    assert!(
        reasons.iter().any(|r| r.contains("MISCONF")),
        "/readyz says why: {reasons:?}"
    );
}

#[test]
fn a_write_pause_announces_no_live_user() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kgz"]);
    let _ = scenario(
        &server,
        Duration::from_secs(10),
        || {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(10_000)
                .arg("WRITE")
                .query(&mut server.con())
                .unwrap();
        },
        || {},
    );
}
