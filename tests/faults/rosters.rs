//! Rosters that change between checks, unheard: with `En` the daemon hears new keys only (on
//! Redis 6.2, which has no `n`, it hears nothing and learns keys by walks), and a key of one
//! member is read with one command (`ZRANGE key 0 1 WITHSCORES`) that tells its size only up
//! to one. Members who join such a key are counted at its next check all the same, and leave
//! as zombies once, while the member who stays is never announced.

use std::time::Duration;

use crate::faults::{Events, LiveUsers, assert_gauges_follow, assert_verdict, daemon};
use crate::support::{RedisServer, server_major_version};

/// Short, so that each key is checked every few seconds.
const TTL: &str = "4s";
const CONVERSATIONS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_joining_a_key_of_one_are_counted_and_leave_once() {
    let flags = if server_major_version() >= 7 {
        "En"
    } else {
        ""
    };
    let server = RedisServer::start_with(&["--notify-keyspace-events", flags]);
    let events = Events::start(&server);
    // One member per key, heartbeating every second: `live-c<c>-0`.
    let mut stays = LiveUsers::start(&server, CONVERSATIONS, 1, Duration::from_secs(1));
    std::thread::sleep(Duration::from_millis(1_500));
    let d = daemon(&server, TTL, "");
    assert_gauges_follow(&server, &d, Duration::from_secs(10));
    // Two more join each key (`live-c<c>-1`, `-2`; `-0` is written by both writers).
    let mut joiners = LiveUsers::start(&server, CONVERSATIONS, 3, Duration::from_secs(1));
    std::thread::sleep(Duration::from_millis(1_500));
    // Each key's next check, within a ttl, finds it grown and counts it.
    assert_gauges_follow(&server, &d, Duration::from_secs(8));
    let (_, members) = crate::faults::truth(&server);
    assert_eq!(members, (CONVERSATIONS * 3) as u64, "every joiner written");
    // The joiners vanish: zombies a ttl later, announced once each.
    joiners.stop();
    let zombies: Vec<String> = joiners
        .ids()
        .into_iter()
        .filter(|id| !id.ends_with("-0"))
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(12);
    while zombies.iter().any(|z| !events.counts().contains_key(z)) {
        assert!(
            std::time::Instant::now() < deadline,
            "joiners not announced: {:?}\n{}",
            events.counts(),
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_gauges_follow(&server, &d, Duration::from_secs(8));
    assert_verdict(&events, &stays.ids(), &zombies, 1, &d);
    stays.stop();
}
