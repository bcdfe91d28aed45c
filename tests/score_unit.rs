//! A sweep whose `score_unit` is not the apps': scores about 1000 times off Redis's clock. The
//! sweep evicts nothing (no false leave), says so in the log, a gauge and `/readyz`, and
//! recovers by itself once the scores are right.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::{Binary, RedisServer, Subscriber, http_get, metric, redis_now, scrape};

const CONVERSATIONS: usize = 30;
const USERS: usize = 5;

/// A heartbeat scored by Redis TIME times `ARGV[1]` (1: seconds, 1000: milliseconds).
const HEARTBEAT: &str = "local t = redis.call('TIME') \
    local now = (tonumber(t[1]) + tonumber(t[2]) / 1000000) * tonumber(ARGV[1]) \
    redis.call('ZADD', KEYS[1], now, ARGV[2])";

/// 150 live users, each heartbeating every second at its own phase, in the unit the test sets.
struct Apps {
    running: Arc<AtomicBool>,
    per_second: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Apps {
    fn start(server: &RedisServer, per_second: u64) -> Self {
        let running = Arc::new(AtomicBool::new(true));
        let unit = Arc::new(AtomicU64::new(per_second));
        let (r, u) = (running.clone(), unit.clone());
        let client = server.client();
        let thread = std::thread::spawn(move || {
            let mut con = client.get_connection().unwrap();
            let users = CONVERSATIONS * USERS;
            let gap = Duration::from_secs(1) / users as u32;
            while r.load(Ordering::Relaxed) {
                for n in 0..users {
                    let _: Result<(), _> = redis::cmd("EVAL")
                        .arg(HEARTBEAT)
                        .arg(1)
                        .arg(format!("presence:c{}:online", n % CONVERSATIONS))
                        .arg(u.load(Ordering::Relaxed))
                        .arg(format!("u{n}"))
                        .query(&mut con);
                    std::thread::sleep(gap);
                }
            }
        });
        Self {
            running,
            per_second: unit,
            thread: Some(thread),
        }
    }

    fn write_in(&self, per_second: u64) {
        self.per_second.store(per_second, Ordering::Relaxed);
    }
}

impl Drop for Apps {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn population(server: &RedisServer) -> u64 {
    let mut con = server.con();
    (0..CONVERSATIONS)
        .map(|c| {
            redis::cmd("ZCARD")
                .arg(format!("presence:c{c}:online"))
                .query::<u64>(&mut con)
                .unwrap()
        })
        .sum()
}

fn mismatch_gauge(d: &Binary) -> Option<f64> {
    metric(
        &scrape(d.http_addr()),
        "presence_sweeper_score_unit_mismatch",
        &[("sweep", "online")],
    )
}

/// Waits until `/readyz` answers `status` with a body containing `needle`.
fn wait_readyz(d: &Binary, status: u16, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (got, body) = http_get(d.http_addr(), "/readyz");
        if got == status && body.contains(needle) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz: {got} {body}; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seconds_written_to_a_sweep_in_milliseconds_make_no_false_leaves() {
    mismatch_is_refused_and_recovers("milliseconds", 1, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn milliseconds_written_to_a_sweep_in_seconds_are_named_and_recover() {
    mismatch_is_refused_and_recovers("seconds", 1000, 1).await;
}

/// The sweep counts in `unit`; the apps write `wrong` units per second, then `right` ones.
async fn mismatch_is_refused_and_recovers(unit: &str, wrong: u64, right: u64) {
    let server = RedisServer::start();
    let apps = Apps::start(&server, wrong);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let config = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n\
         [sweeps.online]\nttl = \"3s\"\nschedule = \"500ms\"\nscore_unit = \"{unit}\"\n"
    );
    let d = Binary::spawn(&config, &["--redis-url", &server.url()], &[]);

    let body = wait_readyz(&d, 503, "score_unit");
    assert!(
        body.contains("sweep online") && body.contains(&format!("\"{unit}\"")),
        "{body}"
    );
    // Longer than a ttl: every heartbeat would have looked stale (or none ever would).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(sub.received().len(), 0, "no leave at all: {}", d.log());
    assert_eq!(population(&server), (CONVERSATIONS * USERS) as u64);
    assert_eq!(mismatch_gauge(&d), Some(1.0));
    let line = "score_unit mismatch:";
    assert_eq!(d.count(line), 1, "logged once: {}", d.log());
    let logged = d.log();
    let logged = logged.lines().find(|l| l.contains(line)).unwrap();
    assert!(
        logged.contains("ERROR") || logged.contains("error"),
        "{logged}"
    );
    assert!(
        logged.contains("online") && logged.contains(unit),
        "{logged}"
    );
    assert!(
        !logged.contains("u1") && !logged.contains("c1"),
        "no ids: {logged}"
    );

    // The apps write the sweep's unit: once every key reads right for a ttl, it is over.
    apps.write_in(right);
    d.wait_ready(Duration::from_secs(20));
    assert_eq!(mismatch_gauge(&d), Some(0.0));
    assert!(d.log().contains("score_unit mismatch over"), "{}", d.log());
    // And zombies leave again.
    let mut con = server.con();
    let zombie = (redis_now(&mut con) - 10.0) * right as f64;
    let _: () = redis::cmd("ZADD")
        .arg("presence:z:online")
        .arg(zombie)
        .arg("zombie")
        .query(&mut con)
        .unwrap();
    let events = sub.wait_for(1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let users: Vec<String> = sub
        .received()
        .iter()
        .map(|e| e.json()["user_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(users, vec!["zombie".to_owned()], "{events:?}: {}", d.log());
    assert_eq!(population(&server), (CONVERSATIONS * USERS) as u64);
}
