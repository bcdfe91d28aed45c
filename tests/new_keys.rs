//! New-key notifications (`notify-keyspace-events` with `E` and `n`, Redis 7.0 and later and
//! Valkey): the daemon hears of a presence key once, when it is created, and never of its
//! heartbeats. A zombie in a brand-new key still leaves at its deadline; a score written in the
//! past into a known key leaves within a ttl, at the key's next check. What
//! `tracking.configure_notifications` sets: `tracking::configure_notifications_*`.

use std::time::{Duration, Instant};

use crate::support::{
    Binary, RedisServer, Subscriber, metric, redis_now, scrape, server_major_version, wait_until,
};
use redis::Commands;

fn daemon(server: &RedisServer, extra: &str) -> Binary {
    Binary::spawn(
        &format!(
            "[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n\
             [sweeps.online]\nttl = \"2s\"\nschedule = \"1h\"\n{extra}"
        ),
        &["--redis-url", &server.url()],
        &[],
    )
}

fn node(server: &RedisServer) -> String {
    format!("127.0.0.1:{}", server.port)
}

fn value(d: &Binary, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric(&scrape(d.http_addr()), name, labels).unwrap_or(f64::NAN)
}

/// Redis 6.2 has no `n`: these tests are for the servers that do.
pub(crate) fn has_new_keys() -> bool {
    if server_major_version() < 7 {
        eprintln!("SKIPPED: this redis-server has no new-key notifications (Redis 6.2)");
        return false;
    }
    true
}

/// One user heartbeating every 200 ms in `key` for `beats` beats, on Redis's clock.
fn heartbeat(con: &mut redis::Connection, key: &str, beats: usize) {
    for _ in 0..beats {
        let now = redis_now(con);
        let _: () = con.zadd(key, "live", now).unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// With `flags`, a new key whose zombie leaves at its deadline while a live user heartbeats 10
/// times: returns the notices the daemon read, and the zombie's lag (s).
async fn one_key_with_heartbeats(flags: &str) -> (f64, f64) {
    let server = RedisServer::start_with(&["--notify-keyspace-events", flags]);
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let d = daemon(&server, "");
    d.wait_ready(Duration::from_secs(10));
    let labels = [("node", node(&server))];
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    tokio::task::block_in_place(|| {
        wait_until("notifications in use", Duration::from_secs(10), || {
            value(&d, "presence_sweeper_notifications_in_use", &labels) == 1.0
        })
    });
    let before = value(&d, "presence_sweeper_notices_total", &labels);
    let mut con = server.con();
    let now = redis_now(&mut con);
    let _: () = con
        .zadd_multiple("presence:new:online", &[(now, "zombie"), (now, "live")])
        .unwrap();
    let tracked = Instant::now();
    tokio::task::block_in_place(|| {
        wait_until("tracked at once", Duration::from_secs(2), || {
            value(&d, "presence_sweeper_tracked_keys", &[("sweep", "online")]) == 1.0
        });
        assert!(tracked.elapsed() < Duration::from_secs(2));
        heartbeat(&mut con, "presence:new:online", 10);
    });
    let events = sub.wait_for(1, Duration::from_secs(5)).await;
    let ev = events[0].json();
    assert_eq!(ev["user_id"], "zombie", "{ev}");
    let lag = ev["timestamp"].as_f64().unwrap() - (ev["last_seen"].as_f64().unwrap() + 2.0);
    let notices = value(&d, "presence_sweeper_notices_total", &labels) - before;
    let members: Vec<String> = con.zrange("presence:new:online", 0, -1).unwrap();
    assert_eq!(members, ["live"], "the heartbeating user stays");
    (notices, lag)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_new_keys_the_daemon_hears_a_key_once_not_its_heartbeats() {
    if !has_new_keys() {
        return;
    }
    let (new_keys, lag) = one_key_with_heartbeats("En").await;
    assert_eq!(new_keys, 1.0, "one notice: the key's creation");
    assert!(
        (0.0..0.25).contains(&lag),
        "left {lag:.3} s after its deadline"
    );
    // Side by side: the keyspace channels carry every heartbeat.
    let (keyspace, lag) = one_key_with_heartbeats("KEA").await;
    assert!(keyspace >= 11.0, "{keyspace} notices with KEA");
    assert!(
        (0.0..0.25).contains(&lag),
        "left {lag:.3} s after its deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_score_written_in_the_past_into_a_known_key_leaves_within_a_ttl() {
    if !has_new_keys() {
        return;
    }
    let server = RedisServer::start_with(&["--notify-keyspace-events", "En"]);
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let d = daemon(&server, "");
    d.wait_ready(Duration::from_secs(10));
    let mut con = server.con();
    let now = redis_now(&mut con);
    let _: () = con.zadd("presence:room:online", "live", now).unwrap();
    tokio::task::block_in_place(|| {
        heartbeat(&mut con, "presence:room:online", 5);
        // A backfill: a member written with a score already stale, into a known key. No
        // notification says so.
        let now = redis_now(&mut con);
        let _: () = con
            .zadd("presence:room:online", "ghost", now - 100.0)
            .unwrap();
    });
    let written = Instant::now();
    let beats = tokio::spawn(async move {
        tokio::task::block_in_place(|| heartbeat(&mut con, "presence:room:online", 15));
    });
    let events = sub.wait_for(1, Duration::from_secs(5)).await;
    let took = written.elapsed();
    assert_eq!(events[0].json()["user_id"], "ghost");
    assert!(
        took <= Duration::from_millis(2500),
        "the ghost left {took:?} after it was written (ttl 2 s)"
    );
    beats.await.unwrap();
    let checks = value(
        &d,
        "presence_sweeper_deadline_checks_total",
        &[("sweep", "online")],
    );
    assert!(checks >= 1.0, "{checks}");
}
