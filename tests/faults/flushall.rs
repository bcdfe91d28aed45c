//! FLUSHALL under live users: the apps write their keys again on their next heartbeat; nobody
//! live is announced, and zombies written after the flush leave a ttl after the credit.

use std::time::Duration;

use crate::faults::{
    Events, HealthWatch, LiveUsers, assert_gauges_follow, assert_verdict, daemon, write_zombies,
};
use crate::support::RedisServer;

#[test]
fn flushall_under_live_users_announces_no_live_user() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kgz"]);
    let events = Events::start(&server);
    let mut users = LiveUsers::start(&server, 40, 5, Duration::from_secs(2));
    let d = daemon(&server, "6s", "");
    let health = HealthWatch::start(&d);
    std::thread::sleep(Duration::from_secs(3));
    let _: () = redis::cmd("FLUSHALL").query(&mut server.con()).unwrap();
    let zombies = write_zombies(&server, "flush", 10, 5, 1.0);
    d.wait_for_log("was reset or rewound", 1, Duration::from_secs(5));
    std::thread::sleep(Duration::from_secs(10));
    assert_verdict(&events, &users.ids(), &zombies, 1, &d);
    assert_gauges_follow(&server, &d, Duration::from_secs(10));
    users.stop();
    health.assert_always_live();
}
