//! Redis accepts connections but answers nothing (paused): the daemon is alive but not ready,
//! counts the timeouts, and evicts nobody live; after the stall, real zombies leave.

use std::time::Duration;

use crate::faults::{
    Events, HealthWatch, LiveUsers, assert_gauges_follow, assert_verdict, daemon, write_zombies,
};
use crate::support::{RedisServer, http_get, metric, scrape};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_redis_is_no_reason_to_restart_the_daemon_or_evict_anyone() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kgz"]);
    let events = Events::start(&server);
    let mut users = LiveUsers::start(&server, 20, 5, Duration::from_secs(1));
    let d = daemon(&server, "4s", "");
    let health = HealthWatch::start(&d);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let zombies = write_zombies(&server, "before", 10, 5, 1.0);

    server.signal("STOP");
    // Longer than twice the ttl and than the command timeout (5 s): every call in flight fails.
    let mut saw_unready = false;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (status, body) = http_get(d.http_addr(), "/readyz");
        if status == 503 {
            assert!(body.contains("does not answer"), "{body}");
            saw_unready = true;
        }
    }
    assert!(saw_unready, "/readyz stayed 200 while Redis was silent");
    let s = scrape(d.http_addr());
    assert!(
        metric(
            &s,
            "presence_sweeper_redis_failures_total",
            &[("kind", "timeout")]
        )
        .unwrap()
            >= 1.0,
        "timeouts are counted"
    );
    server.signal("CONT");
    let resumed = std::time::Instant::now();

    // Back: the apps heartbeat again; zombies leave a ttl later, live users never.
    d.wait_ready(Duration::from_secs(15));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_verdict(&events, &users.ids(), &zombies, 1, &d);
    // Nothing could be evicted while Redis was silent; the zombies left after it.
    assert!(events.arrivals().iter().all(|a| a.at > resumed));
    assert_gauges_follow(&server, &d, Duration::from_secs(10));
    use std::sync::atomic::Ordering::Relaxed;
    assert!(users.written.load(Relaxed) > 0, "the apps heartbeat");
    assert!(
        users.lost.load(Relaxed) > 0,
        "ticks were lost during the stall"
    );
    users.stop();
    health.assert_always_live();
}
