//! The network between the daemon and Redis holds Redis's replies for longer than
//! `redis.command_timeout` (a congested or flapping link, a stalled proxy). Redis ran the
//! eviction at once; the daemon hears of it only late. Every member it removed is still
//! announced, once, and no live user is. Past `redis.eviction_timeout` the removal cannot be
//! announced any more: it is counted and said instead.
//!
//! The same happens, by chance, when Redis itself stalls (SIGSTOP, a frozen VM) just as an
//! eviction reaches it: it runs the call once it resumes (`bad_day`'s stall tests). A proxy
//! that holds the replies of the one connection that sent the eviction makes it happen every
//! time.

use std::time::Duration;

use crate::faults::{Events, LiveUsers, assert_gauges_follow, assert_verdict, write_zombies};
use crate::support::proxy::Proxy;
use crate::support::{Binary, RedisServer, metric, redis_now, scrape, wait_until};

const TTL: &str = "4s";
const PERIOD: Duration = Duration::from_secs(2);
/// Replies are held this long once the eviction went out.
const HOLD: Duration = Duration::from_secs(3);

/// Writes `per_room` zombies (scored 10 s ago) into each of `rooms` conversations of their own:
/// `presence:l<tag><c>:online`, members `zombie-<tag>-<c>-<z>`.
fn zombie_rooms(server: &RedisServer, tag: &str, rooms: usize, per_room: usize) -> Vec<String> {
    let mut con = server.con();
    let now = redis_now(&mut con);
    let mut ids = Vec::new();
    for c in 0..rooms {
        for z in 0..per_room {
            let id = format!("zombie-{tag}-{c}-{z}");
            let _: () = redis::cmd("ZADD")
                .arg(format!("presence:l{tag}{c}:online"))
                .arg(now - 10.0)
                .arg(&id)
                .query(&mut con)
                .unwrap();
            ids.push(id);
        }
    }
    ids
}

/// Whether `id` is still a member of any `presence:*:online` key.
fn still_held(server: &RedisServer, id: &str) -> bool {
    let mut con = server.con();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("presence:*:online")
        .query(&mut con)
        .unwrap();
    keys.iter().any(|k| {
        redis::cmd("ZSCORE")
            .arg(k)
            .arg(id)
            .query::<Option<f64>>(&mut con)
            .unwrap()
            .is_some()
    })
}

/// A server, a proxy in front of it that the daemon goes through, live users and an events
/// subscriber on the server itself, and a daemon (ttl 4 s, `command_timeout` 1 s, the storm
/// guard off so that the rules alone must spare the live users) that has evicted a first round
/// of zombies (so its permissions were proven, and the next call that `command` names is an
/// eviction).
struct Setup {
    server: RedisServer,
    proxy: Proxy,
    events: Events,
    users: LiveUsers,
    d: Binary,
}

fn setup(extra: &str) -> Setup {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kgz"]);
    let proxy = Proxy::start(server.port);
    let events = Events::start(&server);
    let users = LiveUsers::start(&server, 6, 5, PERIOD);
    let toml = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[redis]\ncommand_timeout = \"1s\"\n{extra}\
         [sweeps.typing]\nenabled = false\n[sweeps.online]\nttl = \"{TTL}\"\n\
         [sweeps.online.storm_guard]\nenabled = false\n"
    );
    // The wire's debug line says when an eviction was answered after the command timeout.
    let d = Binary::spawn(
        &toml,
        &[
            "--redis-url",
            &proxy.url(),
            "--log-level",
            "info,presence_sweeper_redis::wire=debug",
        ],
        &[],
    );
    d.wait_ready(Duration::from_secs(10));
    let warm = zombie_rooms(&server, "warm", 2, 3);
    wait_until(
        "the first zombies announced",
        Duration::from_secs(10),
        || events.announced_all(&warm),
    );
    Setup {
        server,
        proxy,
        events,
        users,
        d,
    }
}

fn counter(d: &Binary, name: &str) -> f64 {
    metric(&scrape(d.http_addr()), name, &[("sweep", "online")]).unwrap_or(-1.0)
}

/// The data connection's name (`CLIENT SETNAME`): the one that carries evictions.
const DATA: &str = "presence-sweeper:data";

/// Holds the replies of the data connection after its next `command` for [`HOLD`], writes
/// `zombies` (which must bring that command), waits out the hold, then until every zombie has
/// left Redis and `done` holds, and a second more for any duplicate.
fn hold_and_wait(
    s: &Setup,
    command: &str,
    zombies: impl FnOnce() -> Vec<String>,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    s.proxy.hold_replies_after(DATA, command, HOLD, 1);
    let zombies = zombies();
    wait_until(
        "an eviction's replies held",
        Duration::from_secs(10),
        || s.proxy.held() == 1,
    );
    std::thread::sleep(HOLD);
    wait_until(
        "every zombie gone from Redis, and announced",
        Duration::from_secs(20),
        || zombies.iter().all(|z| !still_held(&s.server, z)) && done(&zombies),
    );
    std::thread::sleep(Duration::from_secs(1));
    zombies
}

/// Asserts that the daemon heard an eviction after the command timeout, announced everyone it
/// removed, and counted nothing as lost.
fn assert_heard_late(s: &Setup) {
    assert!(
        s.d.log()
            .contains("Redis answered a call that changes data after the command timeout"),
        "{}",
        s.d.log()
    );
    assert_eq!(
        counter(&s.d, "presence_sweeper_evictions_unanswered_total"),
        0.0,
        "{}",
        s.d.log()
    );
    assert_eq!(counter(&s.d, "presence_sweeper_events_failed_total"), 0.0);
}

/// With the daemon's `extra` settings, the data connection's replies are held after its next
/// `command` while `zombies` are written: every zombie is announced once the reply comes, no
/// live user is, and nothing counts as lost.
fn a_late_reply_is_announced(
    extra: &str,
    command: &str,
    zombies: impl FnOnce(&RedisServer) -> Vec<String>,
) {
    let s = setup(extra);
    let zombies = hold_and_wait(
        &s,
        command,
        || zombies(&s.server),
        |z| s.events.announced_all(z),
    );
    assert_verdict(&s.events, &s.users.ids(), &zombies, 1, &s.d);
    assert_heard_late(&s);
    assert_gauges_follow(&s.server, &s.d, Duration::from_secs(10));
}

/// A transaction's reply held for 3 s, past the 1 s command timeout: what it removed is
/// announced when the reply comes, once.
#[test]
fn a_transaction_answered_after_the_command_timeout_is_announced() {
    a_late_reply_is_announced("", "EXEC", |server| {
        let mut z = write_zombies(server, "held", 8, 3, 10.0);
        z.extend(zombie_rooms(server, "tx", 4, 1));
        z
    });
}

/// The same through the bounded script (rooms with more zombies than one call may take).
#[test]
fn a_script_call_answered_after_the_command_timeout_is_announced() {
    a_late_reply_is_announced("[evict]\nmax_members_per_call = 2\n", "EVALSHA", |server| {
        zombie_rooms(server, "big", 6, 5)
    });
}

/// Replies held past `redis.eviction_timeout` (2 s here): the daemon gives the call up. Redis
/// removed those members, and nothing can announce them any more: the call is counted in
/// `presence_sweeper_evictions_unanswered_total` and said in the log, and every other zombie
/// is still announced, once.
#[test]
fn an_eviction_answered_after_the_eviction_timeout_is_counted_as_unanswered() {
    let s = setup("eviction_timeout = \"2s\"\n");
    let zombies = hold_and_wait(
        &s,
        "EXEC",
        || zombie_rooms(&s.server, "lost", 10, 1),
        |_| counter(&s.d, "presence_sweeper_evictions_unanswered_total") >= 1.0,
    );
    let counts = s.events.counts();
    let lost = zombies.iter().filter(|z| !counts.contains_key(*z)).count();
    assert!(lost > 0, "the held call's members went unannounced");
    let live = s.users.ids();
    assert!(
        live.iter().all(|u| !counts.contains_key(u)),
        "no live user announced"
    );
    assert!(counts.values().all(|&n| n == 1), "none twice");
    assert!(
        s.d.log().contains("an eviction got no reply"),
        "said: {}",
        s.d.log()
    );
    assert_gauges_follow(&s.server, &s.d, Duration::from_secs(10));
}
