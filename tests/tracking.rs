//! Deadline-driven sweeping: keys are checked when their oldest member's window closes, new keys
//! come from keyspace notifications where the server has them on, and walks reconcile.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::{Binary, RedisServer, Subscriber, metric, redis_now, scrape, wait_until};
use redis::Commands;

/// Keyspace notifications as docs/operations.md tells operators to turn them on.
const NOTIFICATIONS: &[&str] = &["--notify-keyspace-events", "KEA"];

fn daemon(server: &RedisServer, toml: &str) -> Binary {
    Binary::spawn(
        &format!("[http]\nlisten = \"127.0.0.1:0\"\n{toml}"),
        &["--redis-url", &server.url()],
        &[],
    )
}

/// Only the online sweep, with `ttl` and `schedule`.
fn online(ttl: &str, schedule: &str, extra: &str) -> String {
    format!(
        "[sweeps.typing]\nenabled = false\n[sweeps.online]\nttl = \"{ttl}\"\nschedule = \"{schedule}\"\n{extra}"
    )
}

fn value(d: &Binary, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric(&scrape(d.http_addr()), name, labels).unwrap_or(f64::NAN)
}

fn wait_metric(d: &Binary, name: &str, labels: &[(&str, &str)], want: f64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let got = value(d, name, labels);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}{labels:?} is {got}, not {want}, after {timeout:?}; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn in_use(d: &Binary, server: &RedisServer) -> f64 {
    value(
        d,
        "presence_sweeper_notifications_in_use",
        &[("node", &format!("127.0.0.1:{}", server.port))],
    )
}

/// How late each event came: its timestamp minus (last_seen + ttl), by user.
fn lags(events: &[crate::support::Received], ttl: f64) -> HashMap<String, f64> {
    events
        .iter()
        .map(|e| {
            let v = e.json();
            let lag = v["timestamp"].as_f64().unwrap() - (v["last_seen"].as_f64().unwrap() + ttl);
            (v["user_id"].as_str().unwrap().to_owned(), lag)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_notifications_a_new_key_is_tracked_at_once_and_leaves_at_its_deadline() {
    let server = RedisServer::start_with(NOTIFICATIONS);
    let mut con = server.con();
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    // Walks on the schedule would hide what notifications do: keep them an hour apart.
    let d = daemon(&server, &online("2s", "1h", ""));
    d.wait_ready(Duration::from_secs(10));
    wait_until("notifications in use", Duration::from_secs(5), || {
        in_use(&d, &server) == 1.0
    });

    let now = redis_now(&mut con);
    let _: () = con
        .zadd_multiple(
            "presence:new:online",
            &[(now, "leaves"), (now + 1.0, "later")],
        )
        .unwrap();
    // Tracked within milliseconds of the first ZADD, not at the next walk.
    let tracked = Instant::now();
    wait_metric(
        &d,
        "presence_sweeper_tracked_keys",
        &[("sweep", "online")],
        1.0,
        Duration::from_secs(1),
    );
    // Not at the next walk (30 s): bounds wide enough for a machine other runs load.
    assert!(tracked.elapsed() < Duration::from_secs(2));

    let events = sub.wait_for(2, Duration::from_secs(6)).await;
    let lags = lags(&events, 2.0);
    assert_eq!(lags.len(), 2, "both leave: {events:?}");
    for (user, lag) in &lags {
        assert!(
            (0.0..0.25).contains(lag),
            "{user} left {lag:.3} s after its deadline"
        );
    }
    let s = scrape(d.http_addr());
    assert_eq!(
        metric(
            &s,
            "presence_sweeper_sweeps_total",
            &[("sweep", "online"), ("result", "success")]
        ),
        Some(1.0),
        "one walk at start, none since: deadlines did the work"
    );
    assert_eq!(
        metric(
            &s,
            "presence_sweeper_missed_notifications_total",
            &[("sweep", "online")]
        ),
        Some(0.0)
    );
    assert!(
        metric(
            &s,
            "presence_sweeper_deadline_checks_total",
            &[("sweep", "online")]
        )
        .unwrap()
            >= 3.0
    );
    wait_metric(
        &d,
        "presence_sweeper_tracked_keys",
        &[("sweep", "online")],
        0.0,
        Duration::from_secs(1),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_notifications_known_keys_leave_at_their_deadline_between_walks() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    let _: () = con
        .zadd_multiple(
            "presence:known:online",
            &[(now, "stops"), (now + 60.0, "stays")],
        )
        .unwrap();
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let d = daemon(&server, &online("2s", "4s", ""));
    d.wait_ready(Duration::from_secs(10));
    assert_eq!(in_use(&d, &server), 0.0);

    // The start-up walk found the key; its zombie leaves at its deadline, not at the next walk.
    let events = sub.wait_for(1, Duration::from_secs(5)).await;
    let lag = lags(&events, 2.0)["stops"];
    assert!((0.0..0.25).contains(&lag), "left {lag:.3} s late");

    // A key that appears between walks waits for the next one (schedule 4 s).
    let now = redis_now(&mut con);
    let _: () = con
        .zadd("presence:fresh:online", "gone", now - 10.0)
        .unwrap();
    let events = sub.wait_for(2, Duration::from_secs(6)).await;
    assert_eq!(events.len(), 2, "{}", d.log());
    assert_eq!(events[1].json()["user_id"], "gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_switched_off_at_runtime_are_noticed_within_one_reconcile_interval() {
    let server = RedisServer::start_with(NOTIFICATIONS);
    let mut con = server.con();
    let d = daemon(
        &server,
        &online("2s", "300ms", "[tracking]\nreconcile_interval = \"2s\"\n"),
    );
    wait_until("notifications in use", Duration::from_secs(10), || {
        in_use(&d, &server) == 1.0
    });
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("")
        .query(&mut con)
        .unwrap();
    let off = Instant::now();
    wait_until("notifications noticed off", Duration::from_secs(5), || {
        in_use(&d, &server) == 0.0
    });
    assert!(
        off.elapsed() < Duration::from_secs(5),
        "{:?}",
        off.elapsed()
    );
    // The line is logged as the gauge changes, but it reaches `d.log()` through
    // the thread that reads the daemon's stderr: wait for it rather than read once.
    d.wait_for_log(
        "notify-keyspace-events was changed",
        1,
        Duration::from_secs(5),
    );
    // From now on the schedule's walks find new keys.
    let now = redis_now(&mut con);
    let _: () = con
        .zadd("presence:after:online", "gone", now - 10.0)
        .unwrap();
    wait_until("found by a walk", Duration::from_secs(3), || {
        let n: u64 = con.zcard("presence:after:online").unwrap();
        n == 0
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_subscription_is_renewed_and_a_walk_finds_what_was_missed() {
    let server = RedisServer::start_with(NOTIFICATIONS);
    let mut con = server.con();
    let d = daemon(&server, &online("2s", "1h", ""));
    d.wait_ready(Duration::from_secs(10));
    wait_until("notifications in use", Duration::from_secs(5), || {
        in_use(&d, &server) == 1.0
    });
    let walks = d.walks("online");
    kill_subscriptions(&mut con);
    // Written while nobody listens.
    let now = redis_now(&mut con);
    let _: () = con.zadd("presence:gap:online", "gone", now - 10.0).unwrap();
    d.wait_for_log(
        "lost the keyspace-notification subscription",
        1,
        Duration::from_secs(5),
    );
    wait_until("subscribed again", Duration::from_secs(5), || {
        in_use(&d, &server) == 1.0
    });
    wait_until(
        "the key written in the gap swept",
        Duration::from_secs(5),
        || {
            let n: u64 = con.zcard("presence:gap:online").unwrap();
            n == 0
        },
    );
    assert!(
        d.walks("online") > walks,
        "a walk followed the new subscription"
    );
    assert_eq!(
        value(
            &d,
            "presence_sweeper_missed_notifications_total",
            &[("sweep", "online")]
        ),
        0.0,
        "a walk after a resubscription expects what it finds"
    );
}

#[test]
fn a_redis_restart_rebuilds_the_index() {
    let mut server = RedisServer::start_with(NOTIFICATIONS);
    let mut con = server.con();
    let now = redis_now(&mut con);
    // Due in ten minutes: tracked with that deadline.
    let _: () = con.zadd("presence:c1:online", "u1", now + 600.0).unwrap();
    let d = daemon(&server, &online("2s", "1h", "[log]\nlevel = \"debug\"\n"));
    d.wait_ready(Duration::from_secs(10));
    wait_metric(
        &d,
        "presence_sweeper_tracked_keys",
        &[("sweep", "online")],
        1.0,
        Duration::from_secs(2),
    );
    // Its first check is done: it waits for the deadline ten minutes away.
    wait_until("the first check", Duration::from_secs(5), || {
        value(
            &d,
            "presence_sweeper_deadline_checks_total",
            &[("sweep", "online")],
        ) >= 1.0
    });

    // Nothing is persisted: the key is gone, then written anew with a member due in 2 s, once
    // the daemon has subscribed again and walked (the walk finds no key): only the notice of
    // the write can say its deadline is no longer ten minutes away.
    server.restart();
    wait_until(
        "the walk after subscribing",
        Duration::from_secs(10),
        || {
            let log = d.log();
            log.match_indices("keyspace notifications in use")
                .nth(1)
                .is_some_and(|(at, _)| log[at..].contains("walk finished"))
        },
    );
    let mut con = server.con();
    let now = redis_now(&mut con);
    let _: () = con.zadd("presence:c1:online", "u2", now).unwrap();
    wait_until("swept at its new deadline", Duration::from_secs(8), || {
        let n: u64 = con.zcard("presence:c1:online").unwrap();
        n == 0
    });
    let left = redis_now(&mut con) - now;
    assert!(
        left < 4.0,
        "left after {left:.1} s, not at the old deadline"
    );
    assert!(
        d.log()
            .contains("lost the keyspace-notification subscription")
    );
}

#[test]
fn configure_notifications_turns_them_on_and_keeps_the_servers_flags() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Ex"]);
    let d = daemon(
        &server,
        &online("2s", "1h", "[tracking]\nconfigure_notifications = true\n"),
    );
    wait_until("notifications in use", Duration::from_secs(10), || {
        in_use(&d, &server) == 1.0
    });
    let flags: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query(&mut server.con())
        .unwrap();
    let flags = &flags[1];
    // The server's own are kept, and the cheapest that serve are added: new keys where the
    // server has them (new_keys.rs), the sorted sets' keyspace events on Redis 6.2.
    for c in ['E', 'x'] {
        assert!(flags.contains(c), "{c} in {flags:?}");
    }
    if crate::support::server_major_version() >= 7 {
        assert!(flags.contains('n'), "new keys: {flags:?}");
        assert!(!flags.contains('K'), "no keyspace channel added: {flags:?}");
    } else {
        for c in ['K', 'z', 'g'] {
            assert!(flags.contains(c), "Redis 6.2 has no n: {c} in {flags:?}");
        }
    }
    assert_eq!(
        value(&d, "presence_sweeper_notifications_expected", &[]),
        1.0
    );
}

/// Redis reads `n` back without it beside `A` (`AKE` for `KEAn`): added there, the flags would
/// look off at every look and be set again each time. Beside `A` it adds `K`, once.
#[test]
fn configure_notifications_beside_a_sets_flags_that_read_back_on() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "EA"]);
    let d = daemon(
        &server,
        &online(
            "2s",
            "1h",
            "[tracking]\nconfigure_notifications = true\nreconcile_interval = \"1s\"\n",
        ),
    );
    wait_until("notifications in use", Duration::from_secs(10), || {
        in_use(&d, &server) == 1.0
    });
    // A look at each reconciliation, one a second.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        d.count("turned keyspace notifications on"),
        1,
        "{}",
        d.log()
    );
    let flags: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query(&mut server.con())
        .unwrap();
    assert!(flags[1].contains('K'), "{flags:?}");
    assert_eq!(in_use(&d, &server), 1.0);
}

#[test]
fn a_server_without_notifications_is_left_alone_and_reported() {
    let server = RedisServer::start();
    let d = daemon(
        &server,
        &online("2s", "1h", "[tracking]\nnotifications = \"on\"\n"),
    );
    d.wait_ready(Duration::from_secs(10));
    d.wait_for_log(
        "keyspace notifications are not in use here",
        1,
        Duration::from_secs(5),
    );
    assert_eq!(in_use(&d, &server), 0.0);
    assert_eq!(
        value(&d, "presence_sweeper_notifications_expected", &[]),
        1.0
    );
    let flags: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query(&mut server.con())
        .unwrap();
    assert_eq!(flags[1], "", "the server's configuration is not changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_keys_are_checked_by_scheduled_walks() {
    let server = RedisServer::start_with(NOTIFICATIONS);
    let mut con = server.con();
    let now = redis_now(&mut con);
    // Every key has a member that goes stale in 2 s.
    for c in 0..5 {
        let _: () = con
            .zadd_multiple(
                format!("presence:c{c}:online"),
                &[(now, "soon"), (now + 600.0, "live")],
            )
            .unwrap();
    }
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let d = daemon(
        &server,
        &online("2s", "500ms", "[tracking]\nmax_keys = 2\n"),
    );
    d.wait_ready(Duration::from_secs(10));
    let s = scrape(d.http_addr());
    assert_eq!(
        metric(&s, "presence_sweeper_tracked_keys", &[("sweep", "online")]),
        Some(2.0)
    );
    assert_eq!(
        metric(
            &s,
            "presence_sweeper_untracked_keys",
            &[("sweep", "online")]
        ),
        Some(3.0)
    );
    // The warning goes out with the walk's end, through the daemon's stderr: it may reach the
    // test a moment after readiness does.
    d.wait_for_log("tracking.max_keys reached", 1, Duration::from_secs(5));
    // The tracked keys' members leave at their deadline, the others at the next walk on the
    // schedule, although notifications are in use.
    let events = sub.wait_for(5, Duration::from_secs(5)).await;
    assert_eq!(events.len(), 5, "{}", d.log());
    let late: Vec<f64> = lags(&events, 2.0).into_values().collect();
    // Within a few walks of 500 ms, on a machine other runs may load.
    assert!(late.iter().all(|&l| l < 2.0), "{late:?}");
}

/// The cap reached by a notification, not a walk: the key written past it is left to walks on
/// the schedule, which start again at once, with a warning and the metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_key_noticed_past_the_cap_is_checked_by_scheduled_walks() {
    let server = RedisServer::start_with(NOTIFICATIONS);
    let mut con = server.con();
    let now = redis_now(&mut con);
    for c in 0..2 {
        let _: () = con
            .zadd(format!("presence:full{c}:online"), "live", now + 600.0)
            .unwrap();
    }
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let d = daemon(
        &server,
        &online("2s", "500ms", "[tracking]\nmax_keys = 2\n"),
    );
    d.wait_ready(Duration::from_secs(10));
    wait_until("notifications in use", Duration::from_secs(5), || {
        d.log().contains("keyspace notifications in use")
    });
    // Walks are skipped now: every key is tracked and notifications are in use.
    let walks = d.walks("online");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(d.walks("online"), walks, "{}", d.log());
    let now = redis_now(&mut con);
    let _: () = con.zadd("presence:late:online", "soon", now).unwrap();
    let events = sub.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(events.len(), 1, "{}", d.log());
    let late: Vec<f64> = lags(&events, 2.0).into_values().collect();
    // Within a few walks of 500 ms, on a machine other runs may load.
    assert!(late.iter().all(|&l| l < 2.0), "{late:?}");
    assert!(
        d.log()
            .contains("tracking.max_keys reached: new keys are checked by walks"),
        "{}",
        d.log()
    );
    let s = scrape(d.http_addr());
    assert!(
        metric(
            &s,
            "presence_sweeper_untracked_keys",
            &[("sweep", "online")]
        )
        .unwrap()
            >= 1.0
    );
}

/// One SCAN walk serves every sweep: its MATCH is what their patterns share.
#[test]
fn one_walk_serves_every_sweep() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    for kind in ["online", "typing"] {
        let _: () = con
            .zadd(format!("presence:c1:{kind}"), "gone", now - 100.0)
            .unwrap();
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg("0")
        .query(&mut con)
        .unwrap();
    let (code, stdout, stderr) =
        crate::support::run_binary(&["--redis-url", &server.url(), "sweep"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("online: keys_scanned=1 keys=1 members=0 evicted=1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("typing: keys_scanned=1 keys=1 members=0 evicted=1"),
        "{stdout}"
    );
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg("1000")
        .query(&mut con)
        .unwrap();
    let scans: Vec<String> = log
        .iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let args: Vec<String> = redis::from_redis_value_ref(&fields[3]).ok()?;
            (args[0] == "SCAN").then(|| args.join(" "))
        })
        .collect();
    assert_eq!(scans.len(), 1, "one walk: {scans:?}");
    assert!(scans[0].contains("MATCH presence:* "), "{scans:?}");
}

/// A score written in the past (a delayed heartbeat without `GT`) moves a tracked key's deadline
/// earlier than the index knows: the next reconciliation reads it, with notifications (only the
/// keys written since their checks) or without (every key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_score_written_in_the_past_is_caught_by_reconciliation() {
    for extra in [NOTIFICATIONS, &[][..]] {
        let server = RedisServer::start_with(extra);
        let mut con = server.con();
        let now = redis_now(&mut con);
        let _: () = con.zadd("presence:c1:online", "live", now + 600.0).unwrap();
        let d = daemon(
            &server,
            &online("2s", "1h", "[tracking]\nreconcile_interval = \"2s\"\n"),
        );
        d.wait_ready(Duration::from_secs(10));
        // Checked once: its deadline is the live member's, ten minutes away.
        wait_metric(
            &d,
            "presence_sweeper_deadline_checks_total",
            &[("sweep", "online")],
            1.0,
            Duration::from_secs(2),
        );
        std::thread::sleep(Duration::from_millis(200));
        let _: () = con.zadd("presence:c1:online", "late", now - 100.0).unwrap();
        let written = Instant::now();
        wait_until(
            "the late score found by a reconciliation",
            Duration::from_secs(6),
            || {
                let members: Vec<String> = con.zrange("presence:c1:online", 0, -1).unwrap();
                members == ["live"]
            },
        );
        assert!(
            written.elapsed() > Duration::from_millis(300),
            "not before a reconciliation: {:?}",
            written.elapsed()
        );
    }
}

/// Kills every subscriber's connection, as a proxy or a network blip would.
fn kill_subscriptions(con: &mut redis::Connection) {
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(con)
        .unwrap();
    assert!(killed >= 1, "no subscriber to kill");
}

/// SCAN calls Redis served so far.
fn scans(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Watches SCAN calls until `sweep` has walked `n` times: when the first one after `from`
/// came, and when the walk count reached `n`.
fn watch_walk(
    d: &Binary,
    con: &mut redis::Connection,
    n: u64,
    from: u64,
    timeout: Duration,
) -> (Instant, Instant) {
    let deadline = Instant::now() + timeout;
    let mut first = None;
    loop {
        let now = Instant::now();
        if first.is_none() && scans(con) > from {
            first = Some(now);
        }
        if d.walks("online") >= n {
            return (first.unwrap_or(now), now);
        }
        assert!(
            now < deadline,
            "no walk {n} within {timeout:?}:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_reconciliation_is_spread_over_half_its_interval_and_hurries_for_a_catch_up() {
    let server = RedisServer::start_with(NOTIFICATIONS);
    let mut con = server.con();
    // About 45 pages of SCAN; live for ten minutes, so nothing is evicted.
    let keys = (0..40_000).map(|i| format!("presence:r{i}:online"));
    crate::support::seed_keys(&mut con, keys, 0, 1);
    let d = daemon(
        &server,
        &online("2s", "1h", "[tracking]\nreconcile_interval = \"8s\"\n"),
    );
    d.wait_ready(Duration::from_secs(10));
    wait_until("notifications in use", Duration::from_secs(5), || {
        in_use(&d, &server) == 1.0
    });
    d.wait_walks("online", 1, Duration::from_secs(10));
    // The first reconciliation, 8 s after the start-up walk: its pages spread over 4 s.
    let before = scans(&mut con);
    let (first, ended) = watch_walk(&d, &mut con, 2, before, Duration::from_secs(20));
    let took = ended - first;
    assert!(
        took >= Duration::from_millis(3200),
        "a reconciliation took {took:?}, not about 4 s:\n{}",
        d.log()
    );
    // The next one: the subscription is lost a moment into it, and it goes on at full speed,
    // so that the catch-up walk that follows the new subscription does not wait for the rest
    // of its 4 s.
    let from = scans(&mut con);
    wait_until("the next reconciliation", Duration::from_secs(15), || {
        scans(&mut con) > from
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(d.walks("online"), 2, "the third walk is under way");
    kill_subscriptions(&mut con);
    let killed = Instant::now();
    let (_, hurried) = watch_walk(&d, &mut con, 3, 0, Duration::from_secs(10));
    assert!(
        hurried - killed < Duration::from_millis(2500),
        "the spread walk went on for {:?} after the subscription was lost:\n{}",
        hurried - killed,
        d.log()
    );
    d.wait_walks("online", 4, Duration::from_secs(10));
    d.wait_for_log(
        "lost the keyspace-notification subscription",
        1,
        Duration::from_secs(1),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spread_reconciliation_does_not_hold_back_the_walks_of_keys_past_the_cap() {
    let server = RedisServer::start_with(NOTIFICATIONS);
    let mut con = server.con();
    // About 55 pages of 100: a reconciliation every 10 s would take 5 s, spread.
    let keys = (0..5_000).map(|i| format!("presence:r{i}:online"));
    crate::support::seed_keys(&mut con, keys, 0, 1);
    let d = daemon(
        &server,
        &online(
            "2s",
            "1s",
            "[scan]\ncount = 100\n[tracking]\nreconcile_interval = \"10s\"\nmax_keys = 100\n",
        ),
    );
    d.wait_walks("online", 2, Duration::from_secs(10));
    // Keys past the cap are walked on the schedule, a reconciliation in flight or not.
    let (mut last, mut last_at) = (d.walks("online"), Instant::now());
    let mut longest = Duration::ZERO;
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(13) {
        std::thread::sleep(Duration::from_millis(50));
        let walks = d.walks("online");
        if walks > last {
            longest = longest.max(last_at.elapsed());
            (last, last_at) = (walks, Instant::now());
        }
    }
    longest = longest.max(last_at.elapsed());
    assert!(
        longest < Duration::from_millis(3000),
        "{longest:?} without a walk on a 1 s schedule:\n{}",
        d.log()
    );
}
