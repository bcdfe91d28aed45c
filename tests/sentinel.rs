//! Sentinel: the sweeper follows the primary across a failover without a restart.

mod support;

use std::time::{Duration, Instant};

use redis::Commands;
use support::sentinel::SentinelSetup;
use support::{Binary, redis_now};

fn seed_zombie(con: &mut redis::Connection, key: &str) {
    let now = redis_now(con);
    let _: () = con
        .zadd_multiple(key, &[(now - 100.0, "zombie"), (now + 60.0, "live")])
        .unwrap();
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn members(con: &mut redis::Connection, key: &str) -> Vec<String> {
    con.zrange(key, 0, -1).unwrap_or_default()
}

#[test]
fn sweeps_continue_on_the_promoted_replica() {
    let mut setup = SentinelSetup::start();
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.online]\nenabled = false\n\
         [sweeps.typing]\nschedule = \"200ms\"\n",
        setup.redis_toml()
    );
    let d = Binary::spawn(&toml, &[], &[]);
    let mut con = setup.primary.con();
    seed_zombie(&mut con, "presence:c1:typing");
    wait_until(
        "swept on the first primary",
        Duration::from_secs(15),
        || members(&mut con, "presence:c1:typing") == ["live"],
    );

    let old = setup.primary.port;
    setup.primary.stop();
    wait_until("the replica promoted", Duration::from_secs(30), || {
        setup.primary_port() == Some(setup.replica.port)
    });
    let mut con = setup.replica.con();
    wait_until(
        "the promoted replica accepts writes",
        Duration::from_secs(10),
        || {
            let now = redis_now(&mut con);
            con.zadd::<_, _, _, ()>("presence:c2:typing", "live", now + 60.0)
                .is_ok()
        },
    );
    seed_zombie(&mut con, "presence:c2:typing");
    wait_until("swept on the new primary", Duration::from_secs(30), || {
        members(&mut con, "presence:c2:typing") == ["live"]
    });
    let log = d.log();
    assert!(log.contains(&format!("primary=127.0.0.1:{old}")), "{log}");
    assert!(
        log.contains(&format!(
            "following the primary Sentinel names primary=127.0.0.1:{}",
            setup.replica.port
        )),
        "{log}"
    );
}

/// A failover that leaves the old primary up, as a replica: the sweeper's connection to it
/// still works, but its writes answer READONLY, which makes the sweeper look the primary up
/// again. Nothing is written to the replica.
#[test]
fn a_readonly_reply_sends_the_sweeper_to_the_new_primary() {
    let setup = SentinelSetup::start();
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.online]\nenabled = false\n\
         [sweeps.typing]\nschedule = \"200ms\"\n",
        setup.redis_toml()
    );
    let d = Binary::spawn(&toml, &[], &[]);
    d.wait_for_log("pass finished", 1, Duration::from_secs(15));
    let sentinel = setup.redis_toml();
    let port: u16 = sentinel
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    let mut s = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(support::sentinel::MASTER_NAME)
        .query(&mut s)
        .unwrap();
    wait_until("the replica promoted", Duration::from_secs(30), || {
        setup.primary_port() == Some(setup.replica.port)
    });
    let mut con = setup.replica.con();
    wait_until(
        "the promoted replica accepts writes",
        Duration::from_secs(10),
        || {
            let now = redis_now(&mut con);
            con.zadd::<_, _, _, ()>("presence:c3:typing", "live", now + 60.0)
                .is_ok()
        },
    );
    seed_zombie(&mut con, "presence:c3:typing");
    wait_until("swept on the new primary", Duration::from_secs(30), || {
        members(&mut con, "presence:c3:typing") == ["live"]
    });
    assert!(
        d.log().contains(&format!(
            "following the primary Sentinel names primary=127.0.0.1:{}",
            setup.replica.port
        )),
        "{}",
        d.log()
    );
}
