//! A failover to a lagging replica: in a Redis Cluster, the replica R of the primary P holding
//! every live user's key (one hash tag) stops hearing P while the apps' heartbeats go on there;
//! P dies; R is promoted with what it had, scores older than the apps last wrote (older than the
//! ttl, for every live user). The daemon follows the failover: no live user may be announced as
//! left, every zombie is announced once, `/healthz` stays 200, and the gauges follow.

use std::time::{Duration, Instant};

use crate::cluster::owner;
use crate::faults::{
    Events, HealthWatch, LiveUsers, assert_gauges_follow_truth, assert_verdict, truth_on,
    write_zombies_in,
};
use crate::support::cluster::RedisCluster;
use crate::support::{Binary, redis_now, wait_until};

/// Every key of the scenario lives on P.
const TAG: &str = "{fo}";
const CONVERSATIONS: usize = 60;
const USERS: usize = 5;
const PERIOD: Duration = Duration::from_secs(2);
const TTL: f64 = 6.0;
/// How long R sleeps: the link to P is cut at its start, so R's scores are at least this old
/// when it is promoted, longer than the ttl.
const LAG: u64 = 8;

/// The port of the replica of the primary `primary` (by node id), from `CLUSTER NODES`.
fn replica_of(cluster: &RedisCluster, primary: &str) -> u16 {
    let node = cluster.nodes.iter().find(|n| n.is_running()).unwrap();
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut node.con())
        .unwrap();
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f[2].contains("slave") && f[3] == primary)
        .map(|f| f[1].split(['@', ':']).nth(1).unwrap().parse().unwrap())
        .expect("P has a replica")
}

/// Every live user's score in `con`'s node (a replica once `READONLY`), by member.
fn live_scores(con: &mut redis::Connection) -> std::collections::HashMap<String, f64> {
    let mut scores = std::collections::HashMap::new();
    for c in 0..CONVERSATIONS {
        let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(format!("presence:{TAG}f{c}:online"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(con)
            .unwrap();
        scores.extend(members.into_iter().filter(|(m, _)| m.starts_with("live")));
    }
    scores
}

#[test]
fn a_failover_to_a_lagging_replica_announces_no_live_user() {
    failover_to_a_lagging_replica(OldPrimary::Dies);
}

/// The replica takes over while the old primary still answers: it learns of the takeover from
/// the cluster's gossip and turns replica, answering redirections to the apps and the daemon,
/// and its data is R's once it resyncs. The daemon follows R, announces no live user from P's
/// data or R's lagging one, and every zombie once.
#[test]
fn a_takeover_while_the_old_primary_still_answers_announces_no_live_user() {
    failover_to_a_lagging_replica(OldPrimary::StillAnswers);
}

/// What becomes of P at the failover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OldPrimary {
    Dies,
    StillAnswers,
}

fn failover_to_a_lagging_replica(old: OldPrimary) {
    let mut cluster = RedisCluster::start_with(
        3,
        1,
        &[
            "--enable-debug-command",
            "local",
            "--notify-keyspace-events",
            "Kgz",
        ],
    );
    let p = owner(&cluster, &format!("presence:{TAG}f0:online"));
    let p_id = cluster
        .primaries()
        .into_iter()
        .find(|(_, port)| *port == p)
        .unwrap()
        .0;
    let r = replica_of(&cluster, &p_id);
    let server = |cluster: &RedisCluster, port: u16| {
        cluster.nodes.iter().position(|n| n.port == port).unwrap()
    };
    let (pi, ri) = (server(&cluster, p), server(&cluster, r));
    // PUBLISH reaches every node of a cluster: listen on one that neither dies nor sleeps.
    let listener = cluster
        .nodes
        .iter()
        .find(|n| n.port != p && n.port != r)
        .unwrap();
    let events = Events::start(listener);
    let mut users = LiveUsers::start_on(
        &[&cluster.nodes[pi], &cluster.nodes[ri]],
        TAG,
        CONVERSATIONS,
        USERS,
        PERIOD,
    );
    // The storm guard is off: the credit alone must spare the live users.
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n\
         [sweeps.online]\nttl = \"{TTL}s\"\n[sweeps.online.storm_guard]\nenabled = false\n",
        cluster.redis_toml()
    );
    let d = Binary::spawn(&toml, &[], &[]);
    d.wait_ready(Duration::from_secs(20));
    let health = HealthWatch::start(&d);
    std::thread::sleep(PERIOD + Duration::from_secs(1));

    // Zombies announced before anything happens, so R holds their removal too.
    let early = write_zombies_in(&cluster.nodes[pi], TAG, "early", 20, 10, 1.0);
    wait_until(
        "the early zombies announced",
        Duration::from_secs(30),
        || events.announced_all(&early),
    );
    // Zombies due well after P dies (never evicted there), which R holds (WAIT): announced
    // once, a ttl after the failover.
    let late = write_zombies_in(&cluster.nodes[pi], TAG, "late", 20, 10, -4.0);
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut cluster.nodes[pi].con())
        .unwrap();
    assert_eq!(acked, 1, "R holds the late zombies");

    // R sleeps, and P drops its link to R; R's credentials for P are wrong (the link up now
    // does not use them again), so once awake it cannot resync: it stays at what it had. R
    // never promotes itself (the apps would rewrite their scores on it before the test reads
    // them): the takeover below is the one promotion, as an operator's would be.
    for (name, value) in [
        ("masteruser", "nobody"),
        ("masterauth", "wrong"),
        ("cluster-replica-no-failover", "yes"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut cluster.nodes[ri].con())
            .unwrap();
    }
    let sleeper = {
        let client = cluster.nodes[ri].client();
        std::thread::spawn(move || {
            let mut con = client.get_connection().unwrap();
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(LAG)
                .query(&mut con)
                .unwrap();
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut cluster.nodes[pi].con())
        .unwrap();
    // Heartbeats go on on P while R sleeps; then P crashes, or stays.
    std::thread::sleep(Duration::from_secs(3));
    let on_p = live_scores(&mut cluster.nodes[pi].con());
    if old == OldPrimary::Dies {
        cluster.nodes[pi].stop();
    }
    sleeper.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut con = cluster.nodes[ri].con();
    // R sees the cluster down (P failed): let it answer this test's reads meanwhile.
    let reads_when_down = |con: &mut redis::Connection, on: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-allow-reads-when-down")
            .arg(on)
            .query(con)
            .unwrap();
    };
    let _: () = redis::cmd("READONLY").query(&mut con).unwrap();
    reads_when_down(&mut con, "yes");
    let on_r = live_scores(&mut con);
    reads_when_down(&mut con, "no");

    // R wakes to a dead primary: promote it at once with what it has (it may now elect itself
    // too: either way it is promoted with the scores just read).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-replica-no-failover")
        .arg("no")
        .query(&mut con)
        .unwrap();
    let takeover: redis::RedisResult<()> = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut con);
    wait_until("R promoted", Duration::from_secs(30), || {
        let primaries = cluster.primaries();
        primaries.iter().any(|(_, port)| *port == r) && primaries.iter().all(|(_, port)| *port != p)
    });
    cluster.wait_ok(Duration::from_secs(30));
    let promoted = Instant::now();
    let now = redis_now(&mut con);

    // The scenario bites: R's scores are older than the apps last wrote, and older than the ttl:
    // without a credit from R's first answer, every live user would be announced as left.
    let ids = users.ids();
    let behind = ids
        .iter()
        .filter(|u| on_r.get(*u).unwrap_or(&0.0) < on_p.get(*u).unwrap_or(&0.0))
        .count();
    let stale = ids
        .iter()
        .filter(|u| now - on_r.get(*u).unwrap_or(&0.0) > TTL)
        .count();
    eprintln!(
        "failover to a lagging replica, P {old:?} (takeover: {takeover:?}): {behind} of {} live \
         users' scores on R older than on P, {stale} older than the ttl ({TTL} s) at the promotion",
        ids.len()
    );
    assert_eq!(behind, ids.len(), "R lags P for every live user");
    assert_eq!(stale, ids.len(), "every live user looks stale on R");

    // A ttl of credit from R's answer, then the late zombies' evictions, with room.
    std::thread::sleep(Duration::from_secs_f64(2.0 * TTL + 4.0));
    let zombies: Vec<String> = early.iter().chain(&late).cloned().collect();
    assert_verdict(&events, &ids, &zombies, 1, &d);
    events.assert_announced_after(&late, promoted, "the failover");
    // The truth is every current primary's own keys.
    let truth = || {
        cluster
            .primaries()
            .iter()
            .map(|(_, port)| {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).unwrap();
                truth_on(&mut client.get_connection().unwrap())
            })
            .fold((0, 0), |(k, m), (k2, m2)| (k + k2, m + m2))
    };
    assert_gauges_follow_truth(truth, &d, Duration::from_secs(10));
    users.stop();
    health.assert_always_live();
}
