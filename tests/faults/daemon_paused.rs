//! The daemon itself is paused (SIGSTOP: a frozen VM, a throttled container) while Redis and
//! the apps go on: no outage is counted, no credit given, and zombies due during the pause
//! leave within a second of the resume.

use std::time::{Duration, Instant};

use crate::faults::{
    Events, HealthWatch, LiveUsers, assert_gauges_follow, assert_verdict, daemon, write_zombies,
};
use crate::support::{RedisServer, scrape};

/// `presence_sweeper_redis_outages_total`, over every primary.
fn outages(d: &crate::support::Binary) -> f64 {
    let s = scrape(d.http_addr());
    s.iter()
        .filter(|x| x.name == "presence_sweeper_redis_outages_total")
        .map(|x| x.value)
        .sum()
}

#[test]
fn a_paused_daemon_is_no_redis_outage() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kgz"]);
    let events = Events::start(&server);
    let mut users = LiveUsers::start(&server, 20, 5, Duration::from_secs(1));
    let d = daemon(&server, "3s", "");
    std::thread::sleep(Duration::from_secs(2));
    let before = outages(&d);
    // Due 3 s from now, in the middle of the pause.
    let zombies = write_zombies(&server, "paused", 10, 5, 0.0);
    std::thread::sleep(Duration::from_millis(200));
    d.signal("STOP");
    std::thread::sleep(Duration::from_secs(6));
    d.signal("CONT");
    let resumed = Instant::now();
    let health = HealthWatch::start(&d);
    std::thread::sleep(Duration::from_secs(3));
    assert_verdict(&events, &users.ids(), &zombies, 1, &d);
    let late: Vec<(String, Duration)> = events
        .arrivals()
        .iter()
        .filter(|a| zombies.contains(&a.user))
        .map(|a| (a.user.clone(), a.at.saturating_duration_since(resumed)))
        .collect();
    let worst = late.iter().map(|(_, l)| *l).max().unwrap();
    eprintln!("zombies announced at most {worst:?} after the resume");
    assert!(
        worst <= Duration::from_secs(1),
        "zombies announced late after the resume: {late:?}\nlog:\n{}",
        d.log()
    );
    assert_eq!(
        outages(&d),
        before,
        "a pause of the daemon counted as a Redis outage"
    );
    assert_gauges_follow(&server, &d, Duration::from_secs(10));
    users.stop();
    health.assert_always_live();
}
