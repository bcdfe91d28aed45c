//! The daemon as operators run it: schedules, Redis going away and coming back, shutdown.

use std::time::{Duration, Instant};

use crate::support::{Binary, DeadPort, RedisServer, Subscriber, redis_now, wait_until};
use redis::Commands;

fn toml(extra: &str) -> String {
    format!("[http]\nlisten = \"127.0.0.1:0\"\n{extra}")
}

fn seed_zombies(con: &mut redis::Connection, conversations: usize) {
    let keys = (0..conversations).map(|c| format!("presence:c{c}:typing"));
    crate::support::seed_keys(con, keys, 1, 1);
}

fn zcard(con: &mut redis::Connection, key: &str) -> u64 {
    con.zcard(key).unwrap()
}

#[test]
fn sub_second_schedule_sweeps_continuously() {
    let server = RedisServer::start();
    let mut con = server.con();
    let d = Binary::spawn(
        &toml("[sweeps.online]\nenabled = false\n[sweeps.typing]\nschedule = \"100ms\"\n"),
        &["--redis-url", &server.url()],
        &[],
    );
    d.wait_ready(Duration::from_secs(10));
    // Each round's keys are new: the schedule's walks find them.
    for round in 0..3 {
        let keys: Vec<String> = (0..5)
            .map(|c| format!("presence:r{round}c{c}:typing"))
            .collect();
        crate::support::seed_keys(&mut con, &keys, 1, 1);
        wait_until(
            &format!("round {round} swept"),
            Duration::from_secs(3),
            || keys.iter().all(|k| zcard(&mut con, k) == 1),
        );
    }
    // Without keyspace notifications the schedule drives the walks: 100 ms apart, well over
    // 10 in 2 s.
    let before = d.walks("typing");
    std::thread::sleep(Duration::from_secs(2));
    let walks = d.walks("typing") - before;
    // 20 at the schedule's pace; a loaded machine runs fewer, never none.
    assert!((5..=22).contains(&walks), "{walks} walks in 2 s");
}

#[test]
fn cron_schedule_runs_through_the_cron_scheduler() {
    let server = RedisServer::start();
    let d = Binary::spawn(
        &toml("[sweeps.typing]\nenabled = false\n[sweeps.online]\nschedule = \"* * * * * *\"\n"),
        &["--redis-url", &server.url()],
        &[],
    );
    // The start-up walk, then one a second.
    d.wait_walks("online", 4, Duration::from_secs(10));
}

#[test]
fn waits_for_redis_at_start_then_sweeps() {
    let dead = DeadPort::new();
    let port = dead.port;
    let url = format!("redis://127.0.0.1:{port}/0");
    let d = Binary::spawn(
        &toml("[sweeps.typing]\nschedule = \"200ms\"\n"),
        &["--redis-url", &url],
        &[],
    );
    d.wait_for_log(
        "Redis is not reachable yet; retrying",
        2,
        Duration::from_secs(10),
    );
    let mut server = RedisServer::unstarted(dead.release(), &[]);
    server.restart();
    let mut con = server.con();
    seed_zombies(&mut con, 3);
    wait_until(
        "zombies swept after Redis came up",
        Duration::from_secs(15),
        || (0..3).all(|c| zcard(&mut con, &format!("presence:c{c}:typing")) == 1),
    );
    assert!(d.log().contains("connected to Redis"));
    // Which file and which Redis, said at start-up; the flag named, its value not repeated.
    let path = d.config_path();
    let said = format!(
        "configuration in effect read=the file {}; flags --redis-url redis={url}",
        path.display()
    );
    assert!(d.log().contains(&said), "{}", d.log());
}

#[test]
fn survives_a_redis_restart_and_reloads_its_script() {
    let mut server = RedisServer::start();
    let mut con = server.con();
    // One zombie per call at most: every key with two goes through the Lua script.
    let d = Binary::spawn(
        &toml("[sweeps.typing]\nschedule = \"200ms\"\n[evict]\nmax_members_per_call = 1\n"),
        &["--redis-url", &server.url()],
        &[],
    );
    let two_zombies = |con: &mut redis::Connection| {
        seed_zombies(con, 2);
        let now = redis_now(con);
        for c in 0..2 {
            let _: () = con
                .zadd(format!("presence:c{c}:typing"), "zombie2", now - 30.0)
                .unwrap();
        }
    };
    two_zombies(&mut con);
    wait_until("first sweep", Duration::from_secs(10), || {
        zcard(&mut con, "presence:c0:typing") == 1
    });

    server.stop();
    d.wait_for_log("Redis stopped answering", 1, Duration::from_secs(10));
    server.restart();
    // A fresh server has an empty script cache: the next calls get NOSCRIPT and must reload.
    let mut con = server.con();
    two_zombies(&mut con);
    wait_until("sweep after the restart", Duration::from_secs(15), || {
        (0..2).all(|c| zcard(&mut con, &format!("presence:c{c}:typing")) == 1)
    });
    let scripts: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(presence_sweeper_redis::evict::EvictScript::new().hash())
        .query(&mut con)
        .unwrap();
    assert_eq!(scripts, [true]);
}

/// While Redis refuses connections the loop asks again at a steady pace, not at every turn:
/// before, a stopped Redis made it spin through some 300,000 failed probes in a second.
#[test]
fn a_stopped_redis_is_asked_at_a_steady_pace() {
    let mut server = RedisServer::start();
    let d = Binary::spawn(
        &toml("[log]\nlevel = \"debug\"\n[sweeps.online]\nenabled = false\n"),
        &["--redis-url", &server.url()],
        &[],
    );
    d.wait_ready(Duration::from_secs(10));
    server.stop();
    let probe = "Redis did not answer TIME";
    d.wait_for_log(probe, 1, Duration::from_secs(10));
    let first = d.count(probe);
    std::thread::sleep(Duration::from_secs(2));
    let probes = d.count(probe) - first;
    // One every 100 ms, give or take the checks' own failures.
    assert!((5..=60).contains(&probes), "{probes} failed probes in 2 s");
}

#[test]
fn sigterm_exits_0_promptly() {
    let server = RedisServer::start();
    let mut d = Binary::spawn(&toml(""), &["--redis-url", &server.url()], &[]);
    d.wait_ready(Duration::from_secs(10));
    let asked = Instant::now();
    d.signal("TERM");
    let status = d
        .wait_exit(Duration::from_secs(5))
        .expect("exited within 5 s");
    assert_eq!(status.code(), Some(0), "{}", d.log());
    assert!(asked.elapsed() < Duration::from_secs(5));
    // The log reader may still be draining the pipe.
    d.wait_for_log("shutting down", 1, Duration::from_secs(2));
}

#[test]
fn sigterm_while_redis_is_down_exits_0() {
    let dead = DeadPort::new();
    let port = dead.port;
    let mut d = Binary::spawn(
        &toml(""),
        &["--redis-url", &format!("redis://127.0.0.1:{port}/0")],
        &[],
    );
    d.wait_for_log("Redis is not reachable yet", 1, Duration::from_secs(10));
    d.signal("INT");
    let status = d
        .wait_exit(Duration::from_secs(5))
        .expect("exited within 5 s");
    assert_eq!(status.code(), Some(0));
}

/// SIGTERM in the middle of long work: calls in flight finish and are announced, no new call
/// starts, and every member removed has its event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_pass_drains_and_announces_everything_removed() {
    let server = RedisServer::start();
    let mut con = server.con();
    let keys = 20_000;
    crate::support::seed_keys(
        &mut con,
        (0..keys).map(|c| format!("presence:c{c}:online")),
        1,
        1,
    );
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;

    // One key per call, one call at a time: work long enough to interrupt. A backlog this big
    // is what the storm guard holds; that is not what this test is about.
    let mut d = Binary::spawn(
        &toml(
            "[sweeps.typing]\nenabled = false\n[sweeps.online]\nschedule = \"100ms\"\n\
             [sweeps.online.storm_guard]\nenabled = false\n\
             [evict]\nbatch_keys = 1\npipeline_depth = 1\n",
        ),
        &["--redis-url", &server.url()],
        &[],
    );
    let sub_count = || sub.received().len();
    let deadline = Instant::now() + Duration::from_secs(20);
    while sub_count() < 500 {
        assert!(Instant::now() < deadline, "no progress: {}", d.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.signal("TERM");
    let status = d
        .wait_exit(Duration::from_secs(5))
        .expect("exited within 5 s");
    assert_eq!(status.code(), Some(0), "{}", d.log());

    let mut remaining = 0u64;
    for c in 0..keys {
        remaining += zcard(&mut con, &format!("presence:c{c}:online"));
    }
    let removed = 2 * keys as u64 - remaining;
    assert!(
        removed < keys as u64,
        "the work was interrupted, not finished"
    );
    let events = sub.wait_for(removed as usize, Duration::from_secs(5)).await;
    assert_eq!(
        events.len() as u64,
        removed,
        "every removed member is announced once"
    );
}

/// The connections `CLIENT LIST` shows, but the one asking: `(name, cmd)` each.
fn other_clients(con: &mut redis::Connection) -> Vec<(String, String)> {
    let me: i64 = redis::cmd("CLIENT").arg("ID").query(con).unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    let field = |line: &str, key: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(key))
            .unwrap_or_default()
            .to_owned()
    };
    list.lines()
        .filter(|l| field(l, "id=") != me.to_string())
        .map(|l| (field(l, "name="), field(l, "cmd=")))
        .collect()
}

#[test]
fn every_connection_of_the_daemon_is_named_for_its_use() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kz"]);
    let mut con = server.con();
    let d = Binary::spawn(
        &toml("[sweeps.online]\nenabled = false\n[sweeps.typing]\nschedule = \"200ms\"\n"),
        &["--redis-url", &server.url()],
        &[],
    );
    d.wait_ready(Duration::from_secs(10));
    seed_zombies(&mut con, 3);
    wait_until("the zombies evicted", Duration::from_secs(10), || {
        zcard(&mut con, "presence:c0:typing") == 1
    });
    wait_until("a subscriber", Duration::from_secs(10), || {
        other_clients(&mut con)
            .iter()
            .any(|(name, _)| name == "presence-sweeper:notify")
    });
    let clients = other_clients(&mut con);
    let names: Vec<&str> = clients.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        clients
            .iter()
            .all(|(n, _)| n.starts_with("presence-sweeper:")),
        "{clients:?}"
    );
    for expected in ["data", "control", "notify"] {
        let name = format!("presence-sweeper:{expected}");
        assert!(names.contains(&name.as_str()), "{clients:?}");
    }
    // The subscriber went on to subscribe under its name.
    assert!(
        clients
            .iter()
            .any(|(n, cmd)| n == "presence-sweeper:notify" && cmd == "psubscribe"),
        "{clients:?}"
    );
}

#[test]
fn a_large_burst_is_logged_at_once_and_the_last_line_says_stopped() {
    let server = RedisServer::start();
    let mut con = server.con();
    let mut d = Binary::spawn(
        &toml("[sweeps.online]\nenabled = false\n[sweeps.typing]\nschedule = \"200ms\"\n"),
        &["--redis-url", &server.url()],
        &[],
    );
    d.wait_ready(Duration::from_secs(10));
    seed_zombies(&mut con, 1_100);
    d.wait_for_log("large eviction burst", 1, Duration::from_secs(20));
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("large eviction burst"))
        .unwrap();
    assert!(
        line.contains("sweep=typing") && line.contains("evicted="),
        "{line}"
    );
    // Counts only, never an id.
    assert!(
        !line.contains("zombie") && !line.contains("presence:c"),
        "{line}"
    );
    // No summary yet: the first comes a minute after start.
    assert_eq!(d.count("summary of the last"), 0);
    d.signal("TERM");
    assert!(d.wait_exit(Duration::from_secs(10)).unwrap().success());
    let log = d.log();
    let last = log.lines().last().unwrap();
    assert!(last.contains("INFO") && last.ends_with("stopped"), "{log}");
}
