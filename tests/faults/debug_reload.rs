//! DEBUG RELOAD under live users: Redis saves its data, empties itself and loads it back,
//! blocking everyone meanwhile, with the same `run_id`. Nobody live is announced, zombies leave
//! once, `/healthz` stays 200 and the gauges follow.

use std::time::Duration;

use crate::faults::{
    Events, HealthWatch, LiveUsers, assert_gauges_follow, assert_verdict, daemon, write_zombies,
};
use crate::support::RedisServer;

#[test]
fn debug_reload_under_live_users_announces_no_live_user() {
    let server = RedisServer::start_with(&[
        "--enable-debug-command",
        "local",
        "--notify-keyspace-events",
        "Kgz",
    ]);
    let events = Events::start(&server);
    let mut users = LiveUsers::start(&server, 60, 5, Duration::from_secs(2));
    let d = daemon(&server, "6s", "");
    let health = HealthWatch::start(&d);
    std::thread::sleep(Duration::from_secs(3));
    // Zombies written before the reloads, due between them.
    let zombies = write_zombies(&server, "reload", 20, 10, 1.0);
    for _ in 0..3 {
        let _: () = redis::cmd("DEBUG")
            .arg("RELOAD")
            .query(&mut server.con())
            .unwrap();
        std::thread::sleep(Duration::from_secs(2));
    }
    // Every zombie due, and a ttl more for anything falsely judged stale to show.
    std::thread::sleep(Duration::from_secs(10));
    assert_verdict(&events, &users.ids(), &zombies, 1, &d);
    assert_gauges_follow(&server, &d, Duration::from_secs(10));
    users.stop();
    health.assert_always_live();
}
