//! Redis's own clock steps (an NTP step, a VM resumed with a stale clock, a clock set by hand)
//! while live users heartbeat with scores from Redis `TIME`: a forward step makes every score
//! look older at once, a backward one puts the scores written before it in Redis's future. The
//! server runs under libfaketime (see `support::faketime`); its monotonic clock, like the
//! daemon's, does not move.

use std::time::{Duration, Instant};

use crate::faults::{
    Events, HealthWatch, LiveUsers, assert_verdict, daemon, write_zombies, write_zombies_of,
};
use crate::support::faketime::SteppedServer;
use crate::support::{Binary, metric, scrape, wait_until};

const NOTIFY: &[&str] = &["--notify-keyspace-events", "Kgz"];

/// Waits until `d` counts a step of Redis's clock in `direction`.
fn step_counted(d: &Binary, direction: &str) {
    wait_until(
        &format!("a {direction} step counted"),
        Duration::from_secs(5),
        || {
            metric(
                &scrape(d.http_addr()),
                "presence_sweeper_redis_clock_steps_total",
                &[("direction", direction)],
            )
            .is_some_and(|n| n >= 1.0)
        },
    );
}

/// Asserts that each of `zombies` was announced between `from` and `to` after `start`.
fn announced_within(events: &Events, zombies: &[String], start: Instant, from: f64, to: f64) {
    for z in zombies {
        let at = events
            .arrivals()
            .iter()
            .find(|a| &a.user == z)
            .map(|a| a.at.saturating_duration_since(start).as_secs_f64());
        assert!(
            at.is_some_and(|s| (from..=to).contains(&s)),
            "{z} announced {at:?} s after the step, not within {from}..{to} s"
        );
    }
}

#[test]
fn a_forward_step_of_30_s_announces_no_live_user_and_zombies_a_ttl_after_it() {
    let Some(stepped) = SteppedServer::start(NOTIFY) else {
        return;
    };
    let server = &stepped.server;
    let events = Events::start(server);
    // 60 users, each heartbeating every 2 s on its own phase; ttl 6 s. The storm guard is off:
    // the step's credit alone must spare them.
    let mut users = LiveUsers::start(server, 12, 5, Duration::from_secs(2));
    let d = daemon(
        server,
        "6s",
        "[sweeps.online.storm_guard]\nenabled = false\n",
    );
    let health = HealthWatch::start(&d);
    std::thread::sleep(Duration::from_secs(3));
    // Written a second before the step: due 5 s after it on real time.
    let zombies = write_zombies(server, "fwd", 10, 5, 1.0);
    stepped.offset(30);
    let step = Instant::now();
    step_counted(&d, "forward");
    std::thread::sleep(Duration::from_secs(10));
    assert_verdict(&events, &users.ids(), &zombies, 1, &d);
    // Not at the step (their scores looked 31 s old), but a ttl of real time after it.
    announced_within(&events, &zombies, step, 4.0, 8.0);
    users.stop();
    health.assert_always_live();
}

#[test]
fn a_forward_step_of_4_s_against_the_typing_window_stops_no_typist() {
    let Some(stepped) = SteppedServer::start(NOTIFY) else {
        return;
    };
    let server = &stepped.server;
    let events = Events::start(server);
    // 90 typists, a keystroke every second; the typing sweep's default ttl of 5 s and storm
    // guard.
    let mut typists = LiveUsers::start_keys(&[server], "", "typing", 18, 5, Duration::from_secs(1));
    let toml = "[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.online]\nenabled = false\n";
    let d = Binary::spawn(toml, &["--redis-url", &server.url()], &[]);
    d.wait_ready(Duration::from_secs(10));
    let health = HealthWatch::start(&d);
    std::thread::sleep(Duration::from_secs(3));
    let zombies = write_zombies_of(server, "typing", "", "fwd4", 6, 3, 0.5);
    stepped.offset(4);
    let step = Instant::now();
    step_counted(&d, "forward");
    std::thread::sleep(Duration::from_secs(9));
    assert_verdict(&events, &typists.ids(), &zombies, 1, &d);
    announced_within(&events, &zombies, step, 3.0, 8.0);
    typists.stop();
    health.assert_always_live();
}

#[test]
fn a_backward_step_of_30_s_announces_no_live_user_and_reports_scores_in_the_future() {
    let Some(stepped) = SteppedServer::start(NOTIFY) else {
        return;
    };
    let server = &stepped.server;
    let events = Events::start(server);
    let mut users = LiveUsers::start(server, 12, 5, Duration::from_secs(2));
    let d = daemon(server, "6s", "");
    let health = HealthWatch::start(&d);
    std::thread::sleep(Duration::from_secs(3));
    stepped.offset(-30);
    step_counted(&d, "backward");
    // The live users' scores were written before the step: 30 s in Redis's future now (ZADD GT
    // keeps them). The keys with the latest deadlines are checked at once and say so.
    wait_until(
        "scores ahead of Redis's clock reported",
        Duration::from_secs(5),
        || {
            metric(
                &scrape(d.http_addr()),
                "presence_sweeper_scores_ahead_keys_total",
                &[("sweep", "online")],
            )
            .is_some_and(|n| n >= 1.0)
        },
    );
    // Zombies written after the step leave at their deadlines, 5 s after they were written.
    let written = Instant::now();
    let zombies = write_zombies(server, "back", 10, 5, 1.0);
    std::thread::sleep(Duration::from_secs(9));
    assert_verdict(&events, &users.ids(), &zombies, 1, &d);
    announced_within(&events, &zombies, written, 4.0, 7.0);
    assert!(
        d.log().contains("Redis's clock stepped back"),
        "the step is logged:\n{}",
        d.log()
    );
    users.stop();
    health.assert_always_live();
}
