//! Several sweeper replicas: without a lease they share the work; with leases, on one Redis only
//! the holder sweeps and a standby takes over when it dies, and on a cluster each replica holds
//! its share of the primaries. Either way each zombie is announced once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::{Binary, RedisServer, Subscriber, http_get, metric, scrape, wait_until};
use redis::Commands;

fn seed_wave(server: &RedisServer, wave: usize, conversations: usize) {
    let keys = (0..conversations).map(|c| format!("presence:w{wave}c{c}:typing"));
    crate::support::seed_keys(&mut server.con(), keys, 1, 1);
}

fn all_swept(server: &RedisServer, waves: usize, conversations: usize) -> bool {
    let mut con = server.con();
    (0..waves).all(|w| {
        (0..conversations).all(|c| {
            let n: u64 = con.zcard(format!("presence:w{w}c{c}:typing")).unwrap();
            n == 1
        })
    })
}

fn replicas(server: &RedisServer, n: usize, extra: &str) -> Vec<Binary> {
    let toml = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.online]\nenabled = false\n\
         [sweeps.typing]\nschedule = \"100ms\"\n{extra}"
    );
    (0..n)
        .map(|_| Binary::spawn(&toml, &["--redis-url", &server.url()], &[]))
        .collect()
}

fn assert_each_once(events: &[crate::support::Received], expected: usize) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for e in events {
        let ev = e.json();
        assert_eq!(ev["user_id"], "zombie", "{ev}");
        *seen
            .entry(ev["conversation_id"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    assert_eq!(seen.len(), expected, "every zombie announced");
    assert!(seen.values().all(|&n| n == 1), "none announced twice");
}

async fn share_the_work(n: usize) {
    let daemons = share_the_work_on(RedisServer::start(), n).await;
    // Without notifications each replica walks on the schedule.
    for d in &daemons {
        assert!(
            d.walks("typing") > 3,
            "every replica sweeps without a lease"
        );
    }
}

/// Zombies in fresh keys, swept by `n` replicas without a lease: each announced once.
async fn share_the_work_on(server: RedisServer, n: usize) -> Vec<Binary> {
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let daemons = replicas(&server, n, "");
    for d in &daemons {
        d.wait_ready(Duration::from_secs(10));
    }
    for wave in 0..3 {
        seed_wave(&server, wave, 100);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while !all_swept(&server, 3, 100) {
        assert!(Instant::now() < deadline, "not all swept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = sub.wait_for(300, Duration::from_secs(5)).await;
    assert_each_once(&events, 300);
    daemons
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_without_a_lease_share_the_work() {
    share_the_work(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_without_a_lease_share_the_work() {
    share_the_work(3).await;
}

/// With keyspace notifications every replica tracks every key and checks it at the same
/// deadline: the transactions race, and only the one that removed a member announces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_with_notifications_announce_each_zombie_once() {
    let daemons = share_the_work_on(
        RedisServer::start_with(&["--notify-keyspace-events", "KEA"]),
        2,
    )
    .await;
    for d in &daemons {
        let s = crate::support::scrape(d.http_addr());
        assert!(
            metric(
                &s,
                "presence_sweeper_deadline_checks_total",
                &[("sweep", "typing")]
            )
            .unwrap()
                >= 300.0,
            "every replica checks every key"
        );
    }
}

fn holders(daemons: &[Option<Binary>]) -> Vec<usize> {
    daemons
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let d = d.as_ref()?;
            let s = scrape(d.http_addr());
            (metric(&s, "presence_sweeper_lease_held", &[("sweep", "typing")]) == Some(1.0))
                .then_some(i)
        })
        .collect()
}

/// `n` replicas with a lease (`extra` follows `[coordination]`), once one holds it: the
/// replicas (`None` once a test stops one) and which holds it.
fn leased(server: &RedisServer, n: usize, extra: &str) -> (Vec<Option<Binary>>, usize) {
    let daemons: Vec<Option<Binary>> =
        replicas(server, n, &format!("[coordination]\nlease = true\n{extra}"))
            .into_iter()
            .map(Some)
            .collect();
    tokio::task::block_in_place(|| {
        wait_until("one holder", Duration::from_secs(10), || {
            holders(&daemons).len() == 1
        })
    });
    let holder = holders(&daemons)[0];
    (daemons, holder)
}

fn successes(d: &Binary) -> f64 {
    let s = scrape(d.http_addr());
    metric(
        &s,
        "presence_sweeper_sweeps_total",
        &[("sweep", "typing"), ("result", "success")],
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_lease_one_replica_sweeps_and_a_standby_takes_over() {
    let server = RedisServer::start();
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let ttl = Duration::from_secs(2);
    let (mut daemons, holder) = leased(&server, 3, "lease_ttl = \"2s\"\n");
    // Every replica is ready: the holder once it walked, the others because standing by is
    // their job (as sidecars, a replica that is not ready takes its app out of service).
    tokio::task::block_in_place(|| {
        for d in daemons.iter().flatten() {
            d.wait_ready(Duration::from_secs(10));
        }
    });
    // Only the holder sweeps.
    let before: Vec<f64> = daemons
        .iter()
        .map(|d| successes(d.as_ref().unwrap()))
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (i, d) in daemons.iter().enumerate() {
        let now = successes(d.as_ref().unwrap());
        if i == holder {
            assert!(now >= before[i] + 5.0, "the holder sweeps every 100 ms");
        } else {
            assert_eq!(now, 0.0, "replica {i} stands by");
        }
    }
    seed_wave(&server, 0, 100);
    tokio::task::block_in_place(|| {
        wait_until("swept by the holder", Duration::from_secs(10), || {
            all_swept(&server, 1, 100)
        })
    });
    // Its events are published after the transaction that removed their members: killed in
    // between, they would be lost (events are at most once without a stream).
    assert_eq!(sub.wait_for(100, Duration::from_secs(5)).await.len(), 100);

    // The holder dies without releasing its lease: a standby takes over once it expires.
    let killed = Instant::now();
    daemons[holder].as_ref().unwrap().signal("KILL");
    daemons[holder] = None;
    tokio::task::block_in_place(|| {
        wait_until("a new holder", ttl * 3, || holders(&daemons).len() == 1)
    });
    let took = killed.elapsed();
    assert!(
        took <= ttl + Duration::from_secs(2),
        "took over after {took:?}"
    );
    for d in daemons.iter().flatten() {
        let (status, body) = http_get(d.http_addr(), "/readyz");
        assert_eq!(status, 200, "ready through the takeover: {body}");
    }
    seed_wave(&server, 1, 100);
    tokio::task::block_in_place(|| {
        wait_until("swept by the new holder", Duration::from_secs(10), || {
            all_swept(&server, 2, 100)
        })
    });
    let events = sub.wait_for(200, Duration::from_secs(5)).await;
    assert_each_once(&events, 200);
}

/// A standby holds no sweep on its primary. Its loop used to take the reconciliation that came
/// due with nothing to walk as due again at every turn, and spun a core from then on; so did
/// every replica once Redis went away and their leases with it. Their CPU, over a few seconds,
/// several reconciliation intervals after they started, and again while Redis is away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_idle_without_spinning_on_standby_and_while_redis_is_away() {
    let mut server = RedisServer::start();
    let (daemons, holder) = leased(&server, 2, "[tracking]\nreconcile_interval = \"1s\"\n");
    let standby = daemons[1 - holder].as_ref().unwrap();
    // Past the first reconciliation's instant (1 s after start).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let share = cpu_share(&[standby], Duration::from_secs(3)).await;
    // Idle, a daemon uses next to nothing; spinning, it took a whole core. The bounds are far
    // from both.
    assert!(
        share[0] < 0.25,
        "the standby used {:.0} % of a core",
        share[0] * 100.0
    );

    server.stop();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all: Vec<&Binary> = daemons.iter().flatten().collect();
    let share = cpu_share(&all, Duration::from_secs(3)).await;
    assert!(
        share.iter().all(|&s| s < 0.25),
        "with Redis away the replicas used {share:?} of a core"
    );
}

/// The share of a core each of `daemons` used over `seconds`.
async fn cpu_share(daemons: &[&Binary], seconds: Duration) -> Vec<f64> {
    let before: Vec<f64> = daemons.iter().map(|d| d.cpu_seconds()).collect();
    let at = Instant::now();
    tokio::time::sleep(seconds).await;
    let elapsed = at.elapsed().as_secs_f64();
    daemons
        .iter()
        .zip(before)
        .map(|(d, b)| (d.cpu_seconds() - b) / elapsed)
        .collect()
}

/// The primaries whose `typing` lease `d` holds.
fn held_primaries(d: &Binary) -> Vec<String> {
    scrape(d.http_addr())
        .into_iter()
        .filter(|s| {
            s.name == "presence_sweeper_lease_held"
                && s.value == 1.0
                && s.labels.iter().any(|(k, v)| k == "sweep" && v == "typing")
        })
        .filter_map(|s| {
            s.labels
                .into_iter()
                .find(|(k, _)| k == "node")
                .map(|(_, v)| v)
        })
        .collect()
}

fn cluster_all_swept(con: &mut redis::cluster::ClusterConnection, wave: usize, n: usize) -> bool {
    (0..n).all(|c| {
        let left: u64 = con
            .zcard(format!("presence:{{w{wave}c{c}}}:typing"))
            .unwrap();
        left == 1
    })
}

/// With leases on a 3-primary cluster, 3 replicas share the primaries, one each; when one
/// dies, its primary is taken over within about a lease ttl; every zombie is announced once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_a_three_primary_cluster() {
    let cluster = crate::support::cluster::RedisCluster::start(3, 0);
    let sub = Subscriber::start(&cluster.seeds()[0], "presence:*:events").await;
    let ttl = Duration::from_secs(2);
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[coordination]\nlease = true\nlease_ttl = \"2s\"\n\
         [sweeps.online]\nenabled = false\n[sweeps.typing]\nschedule = \"100ms\"\n",
        cluster.redis_toml()
    );
    let shares = |daemons: &[Option<Binary>]| -> Vec<Vec<String>> {
        daemons.iter().flatten().map(held_primaries).collect()
    };
    let covered = |held: &[Vec<String>]| {
        let mut all: Vec<&String> = held.iter().flatten().collect();
        all.sort();
        all.dedup();
        all.len() == 3
    };
    // Two replicas first: all three primaries between them.
    let mut daemons: Vec<Option<Binary>> = (0..2)
        .map(|_| Some(Binary::spawn(&toml, &[], &[])))
        .collect();
    tokio::task::block_in_place(|| {
        for d in daemons.iter().flatten() {
            d.wait_ready(Duration::from_secs(20));
        }
        wait_until("two replicas hold all three", ttl * 3, || {
            let held = shares(&daemons);
            covered(&held) && held.iter().all(|h| !h.is_empty())
        });
    });
    // A third joins: it gets its share, one primary, within three lease ttls.
    daemons.push(Some(Binary::spawn(&toml, &[], &[])));
    tokio::task::block_in_place(|| {
        daemons[2]
            .as_ref()
            .unwrap()
            .wait_ready(Duration::from_secs(20));
        let joined = Instant::now();
        wait_until("one primary each", ttl * 3, || {
            let held = shares(&daemons);
            held.iter().all(|h| h.len() == 1) && covered(&held)
        });
        assert!(joined.elapsed() <= ttl * 3, "{:?}", joined.elapsed());
    });
    let mut con = cluster.con();
    let seed = |con: &mut redis::cluster::ClusterConnection, wave: usize| {
        for c in 0..60 {
            crate::support::seed_keys(con, [format!("presence:{{w{wave}c{c}}}:typing")], 1, 1);
        }
    };
    seed(&mut con, 0);
    tokio::task::block_in_place(|| {
        wait_until("wave 0 swept", Duration::from_secs(10), || {
            cluster_all_swept(&mut con, 0, 60)
        })
    });
    // The last PUBLISHes follow the ZREMs; killing a replica before they land would lose them
    // (events are at most once), which is not what this test is about.
    assert_eq!(sub.wait_for(60, Duration::from_secs(5)).await.len(), 60);
    // A replica dies holding its primary: the others take it over once its lease ends.
    let victim = 1;
    let orphan = held_primaries(daemons[victim].as_ref().unwrap()).remove(0);
    daemons[victim].as_ref().unwrap().signal("KILL");
    daemons[victim] = None;
    let killed = Instant::now();
    tokio::task::block_in_place(|| {
        wait_until("the orphan taken over", ttl * 4, || {
            daemons
                .iter()
                .flatten()
                .any(|d| held_primaries(d).contains(&orphan))
        })
    });
    let took = killed.elapsed();
    assert!(
        took <= ttl + Duration::from_secs(2),
        "taken over after {took:?}"
    );
    for d in daemons.iter().flatten() {
        let (status, body) = http_get(d.http_addr(), "/readyz");
        assert_eq!(status, 200, "ready through the takeover: {body}");
    }
    seed(&mut con, 1);
    tokio::task::block_in_place(|| {
        wait_until("wave 1 swept", Duration::from_secs(10), || {
            cluster_all_swept(&mut con, 1, 60)
        })
    });
    let events = sub.wait_for(120, Duration::from_secs(5)).await;
    assert_each_once(&events, 120);
}
