//! Keyspace notifications judged by what arrives, not by what `CONFIG` says: a managed Redis
//! that refuses `CONFIG` but publishes them, and notifications switched off and on at run time.

use std::time::{Duration, Instant};

use crate::faults::{Events, LiveUsers, assert_verdict, daemon};
use crate::support::{Binary, RedisServer, metric, redis_now, scrape, wait_until};

fn gauge(d: &Binary, server: &RedisServer, name: &str) -> f64 {
    let node = format!("127.0.0.1:{}", server.port);
    metric(&scrape(d.http_addr()), name, &[("node", &node)]).unwrap_or(f64::NAN)
}

fn in_use(d: &Binary, server: &RedisServer) -> f64 {
    gauge(d, server, "presence_sweeper_notifications_in_use")
}

/// Warning and error lines in the daemon's log.
fn complaints(d: &Binary) -> Vec<String> {
    d.log()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(str::to_owned)
        .collect()
}

/// The daemon's connections (it names them `presence-sweeper:<purpose>`), as `id name` lines:
/// ids only grow, so a reconnection shows as a new line.
fn daemon_connections(con: &mut redis::Connection) -> Vec<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    let mut out: Vec<String> = list
        .lines()
        .filter_map(|l| {
            let field = |k: &str| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix(&format!("{k}=")))
                    .unwrap_or_default()
                    .to_owned()
            };
            let name = field("name");
            name.starts_with("presence-sweeper")
                .then(|| format!("{} {name}", field("id")))
        })
        .collect();
    out.sort();
    out
}

/// A zombie member in a brand-new key, scored at Redis's now: returns the local instant by
/// which its deadline (score + `ttl`) has passed on Redis's clock. The instant is taken before
/// Redis's clock is read, so lateness measured from it errs long, never short.
fn zombie_in_new_key(con: &mut redis::Connection, key: &str, id: &str, ttl: f64) -> Instant {
    let before = Instant::now();
    let now = redis_now(con);
    let _: () = redis::cmd("ZADD")
        .arg(key)
        .arg(now)
        .arg(id)
        .query(con)
        .unwrap();
    before + Duration::from_secs_f64(ttl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_on_a_server_that_refuses_config_are_used() {
    let server = RedisServer::start_with(&[
        "--rename-command",
        "CONFIG",
        "",
        "--notify-keyspace-events",
        "Kgz",
    ]);
    let mut con = server.con();
    let events = Events::start(&server);
    let mut users = LiveUsers::start(&server, 5, 4, Duration::from_secs(1));
    let started = Instant::now();
    // Both built-in sweeps: the typing one walks every second without notifications.
    let d = Binary::spawn(
        "[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.online]\nttl = \"4s\"\n",
        &["--redis-url", &server.url()],
        &[],
    );
    d.wait_ready(Duration::from_secs(10));
    wait_until("notifications in use", Duration::from_secs(10), || {
        in_use(&d, &server) == 1.0
    });
    assert_eq!(
        gauge(&d, &server, "presence_sweeper_notifications_config_refused"),
        1.0
    );
    let connections = daemon_connections(&mut con);

    let deadline = zombie_in_new_key(&mut con, "presence:brandnew:typing", "zombie-typing", 5.0);
    wait_until(
        "the typing zombie announced",
        Duration::from_secs(10),
        || events.counts().contains_key("zombie-typing"),
    );
    let arrival = events
        .arrivals()
        .into_iter()
        .find(|a| a.user == "zombie-typing")
        .expect("announced");
    let late = arrival.at.saturating_duration_since(deadline);
    eprintln!("typing zombie in a new key announced {late:?} after its deadline");
    // Target 0.5 s; slack for 2 cores shared with other test runs (a walk would be 30 s).
    assert!(late < Duration::from_secs(2), "{late:?}\n{}", d.log());

    // A minute of running: few complaints, no reconnections.
    let minute = started + Duration::from_secs(60);
    tokio::time::sleep(minute.saturating_duration_since(Instant::now())).await;
    assert_eq!(in_use(&d, &server), 1.0, "{}", d.log());
    let complaints = complaints(&d);
    assert!(complaints.len() <= 3, "{complaints:#?}");
    assert_eq!(
        d.count("the server does not offer CONFIG"),
        1,
        "the refusal is said once\n{}",
        d.log()
    );
    assert_eq!(
        daemon_connections(&mut con),
        connections,
        "no reconnection churn"
    );
    assert_verdict(&events, &users.ids(), &["zombie-typing".into()], 1, &d);
    users.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_switched_off_and_on_at_run_time_are_noticed_by_what_arrives() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kgz"]);
    let mut con = server.con();
    let events = Events::start(&server);
    let mut users = LiveUsers::start(&server, 5, 4, Duration::from_secs(1));
    // Reconciliation an hour off: only the notifications' own rules may notice.
    let d = daemon(
        &server,
        "4s",
        "schedule = \"2s\"\n[tracking]\nreconcile_interval = \"1h\"\n",
    );
    wait_until("notifications in use", Duration::from_secs(10), || {
        in_use(&d, &server) == 1.0
    });
    let set = |con: &mut redis::Connection, flags: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg(flags)
            .query(con)
            .unwrap();
    };
    set(&mut con, "");
    let off = Instant::now();
    zombie_in_new_key(&mut con, "presence:whileoff:online", "zombie-off", 4.0);
    wait_until("noticed off", Duration::from_secs(35), || {
        in_use(&d, &server) == 0.0
    });
    let noticed = off.elapsed();
    eprintln!("notifications switched off noticed after {noticed:?}");
    assert!(noticed <= Duration::from_secs(30), "{noticed:?}");
    // Meanwhile zombies in new keys leave by walks on the schedule.
    wait_until(
        "the zombie in a new key left",
        Duration::from_secs(15),
        || events.counts().contains_key("zombie-off"),
    );

    set(&mut con, "Kgz");
    let on = Instant::now();
    wait_until("noticed on", Duration::from_secs(60), || {
        in_use(&d, &server) == 1.0
    });
    eprintln!("notifications switched on noticed after {:?}", on.elapsed());
    d.wait_for_log(
        "notify-keyspace-events was changed",
        1,
        Duration::from_secs(5),
    );
    assert_verdict(&events, &users.ids(), &["zombie-off".into()], 1, &d);
    users.stop();
}
