//! Sentinel: the sweeper follows the primary across a failover without a restart.

use std::time::Duration;

use crate::support::sentinel::SentinelSetup;
use crate::support::{Binary, http_get, members, metric, redis_now, scrape, wait_until};
use redis::Commands;

fn seed_zombie(con: &mut redis::Connection, key: &str) {
    crate::support::seed_keys(con, [key], 1, 1);
}

/// A sweeper of the `typing` sweep alone, on `schedule`, behind the setup's sentinels.
fn typing_sweeper(setup: &SentinelSetup, schedule: &str) -> Binary {
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.online]\nenabled = false\n\
         [sweeps.typing]\nschedule = \"{schedule}\"\n",
        setup.redis_toml()
    );
    Binary::spawn(&toml, &[], &[])
}

/// The sweeper's log says it follows the primary on `port`.
fn assert_follows(log: &str, port: u16) {
    assert!(
        log.contains(&format!(
            "following the primary Sentinel names primary=127.0.0.1:{port}"
        )),
        "{log}"
    );
}

/// Waits for the replica's promotion, then for a zombie written to it to be swept there.
fn swept_on_the_promoted_replica(setup: &SentinelSetup, key: &str) {
    wait_until("the replica promoted", Duration::from_secs(30), || {
        setup.primary_port() == Some(setup.replica.port)
    });
    let mut con = setup.replica.con();
    wait_until(
        "the promoted replica accepts writes",
        Duration::from_secs(10),
        || {
            let now = redis_now(&mut con);
            con.zadd::<_, _, _, ()>(key, "live", now + 60.0).is_ok()
        },
    );
    seed_zombie(&mut con, key);
    wait_until("swept on the new primary", Duration::from_secs(30), || {
        members(&mut con, key) == ["live"]
    });
}

#[test]
fn sweeps_continue_on_the_promoted_replica() {
    let mut setup = SentinelSetup::start();
    let d = typing_sweeper(&setup, "200ms");
    let mut con = setup.primary.con();
    seed_zombie(&mut con, "presence:c1:typing");
    wait_until(
        "swept on the first primary",
        Duration::from_secs(15),
        || members(&mut con, "presence:c1:typing") == ["live"],
    );

    let old = setup.primary.port;
    setup.primary.stop();
    swept_on_the_promoted_replica(&setup, "presence:c2:typing");
    let log = d.log();
    assert!(log.contains(&format!("primary=127.0.0.1:{old}")), "{log}");
    assert_follows(&log, setup.replica.port);
}

/// A failover that leaves the old primary up, as a replica: the sweeper's connection to it
/// still works, but its writes answer READONLY, which makes the sweeper look the primary up
/// again. Nothing is written to the replica.
#[test]
fn a_readonly_reply_sends_the_sweeper_to_the_new_primary() {
    let setup = SentinelSetup::start();
    let d = typing_sweeper(&setup, "200ms");
    d.wait_ready(Duration::from_secs(15));
    setup.failover();
    swept_on_the_promoted_replica(&setup, "presence:c3:typing");
    assert_follows(&d.log(), setup.replica.port);
}

/// With keyspace notifications on both servers, the sweeper subscribes on the new primary after
/// a failover: a key written there after the failover is swept within seconds, although the
/// schedule would not walk for an hour.
#[test]
fn notifications_follow_the_primary_across_a_failover() {
    let setup = SentinelSetup::start();
    for server in [&setup.primary, &setup.replica] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg("KEA")
            .query(&mut server.con())
            .unwrap();
    }
    let d = typing_sweeper(&setup, "1h");
    d.wait_ready(Duration::from_secs(15));
    d.wait_for_log("keyspace notifications in use", 1, Duration::from_secs(10));
    setup.failover();
    wait_until("the replica promoted", Duration::from_secs(30), || {
        setup.primary_port() == Some(setup.replica.port)
    });
    // The loop follows the store to the new primary and subscribes there.
    wait_until(
        "subscribed on the new primary",
        Duration::from_secs(30),
        || {
            let log = d.log();
            log.find("the primary moved; following it")
                .is_some_and(|at| log[at..].contains("keyspace notifications in use"))
        },
    );
    // The walk after the new subscription is done: from now on only a notification finds a key.
    std::thread::sleep(Duration::from_secs(1));
    let mut con = setup.replica.con();
    seed_zombie(&mut con, "presence:c4:typing");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while members(&mut con, "presence:c4:typing") != ["live"] {
        assert!(
            std::time::Instant::now() < deadline,
            "not swept through a notification: {}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A split brain: the sentinels name the promoted replica while the old primary still answers
/// as primary (its ROLE is `master`, its writes succeed), so nothing the sweeper sees there
/// says it moved. The sweeper asks the sentinels again on its own and follows them: a zombie
/// written to the primary they name, where the apps now heartbeat, is swept.
#[test]
fn a_split_brain_primary_is_left_for_the_one_the_sentinels_name() {
    let setup = SentinelSetup::start();
    let d = typing_sweeper(&setup, "200ms");
    d.wait_ready(Duration::from_secs(15));
    setup.split();
    let mut old = setup.primary.con();
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut old).unwrap();
    assert_eq!(
        role.first(),
        Some(&redis::Value::BulkString(b"master".to_vec())),
        "the old primary must stay a primary for this test"
    );
    swept_on_the_promoted_replica(&setup, "presence:c5:typing");
    let log = d.log();
    assert!(log.contains("the sentinels name another primary"), "{log}");
    assert_follows(&log, setup.replica.port);
}

/// Sentinels that hang (stopped, so connections open but nothing answers) while the primary
/// answers: the re-check gives up on its own deadline; `redis_up` and `/readyz` never flip, the
/// loss is said once, and zombies are still swept on the primary.
#[test]
fn hanging_sentinels_do_not_make_the_primary_look_down() {
    let setup = SentinelSetup::start();
    let d = typing_sweeper(&setup, "200ms");
    d.wait_ready(Duration::from_secs(15));
    setup.signal_sentinels("STOP");
    let addr = d.http_addr();
    // Two re-checks at least (every 10 s), each waiting on sentinels that never answer.
    let until = std::time::Instant::now() + Duration::from_secs(25);
    while std::time::Instant::now() < until {
        let (status, body) = http_get(addr, "/readyz");
        assert_eq!(status, 200, "readiness flipped: {body}\n{}", d.log());
        let up = metric(&scrape(addr), "presence_sweeper_redis_up", &[]);
        assert_eq!(up, Some(1.0), "{}", d.log());
        std::thread::sleep(Duration::from_millis(250));
    }
    let mut con = setup.primary.con();
    seed_zombie(&mut con, "presence:c6:typing");
    wait_until("swept on the primary", Duration::from_secs(15), || {
        members(&mut con, "presence:c6:typing") == ["live"]
    });
    setup.signal_sentinels("CONT");
    let log = d.log();
    assert_eq!(
        log.matches("cannot ask the sentinels for the primary")
            .count(),
        1,
        "{log}"
    );
    assert!(!log.contains("Redis did not answer"), "{log}");
}
