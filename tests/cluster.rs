//! Redis Cluster: every primary scanned, every zombie announced once, through failovers and
//! reshardings.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::cluster::RedisCluster;
use crate::support::{
    Binary, Received, ShardedSubscriber, Subscriber, run_binary, wait_until, write_file,
};
use redis::Commands;

fn cluster_now(cluster: &RedisCluster) -> f64 {
    crate::support::redis_now(&mut cluster.con())
}

/// `conversations` keys spread over the slots, each with `zombies` stale and `live` fresh members.
/// One key per command: a cluster pipeline may not span slots.
fn seed(cluster: &RedisCluster, prefix: &str, conversations: usize, zombies: usize, live: usize) {
    let mut con = cluster.con();
    for c in 0..conversations {
        crate::support::seed_keys(
            &mut con,
            [format!("presence:{prefix}{c}:online")],
            zombies,
            live,
        );
    }
}

/// Each (conversation, user) of the events, with how often it was announced.
fn tally(events: &[Received]) -> HashMap<(String, String), usize> {
    let mut seen = HashMap::new();
    for e in events {
        let ev = e.json();
        *seen
            .entry((
                ev["conversation_id"].as_str().unwrap().to_owned(),
                ev["user_id"].as_str().unwrap().to_owned(),
            ))
            .or_insert(0) += 1;
    }
    seen
}

/// Runs `sweep --sweep online` with `toml` as the configuration and `extra` flags before it.
fn sweep_online(toml: &str, extra: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "c.toml", toml);
    let mut args = vec!["--config", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["sweep", "--sweep", "online"]);
    run_binary(&args, &[])
}

fn remaining(cluster: &RedisCluster, prefix: &str, conversations: usize) -> (usize, usize) {
    let mut con = cluster.con();
    let (mut zombies, mut live) = (0, 0);
    for c in 0..conversations {
        let members = crate::support::members(&mut con, &format!("presence:{prefix}{c}:online"));
        zombies += members.iter().filter(|m| m.starts_with("zombie")).count();
        live += members.iter().filter(|m| m.starts_with("live")).count();
    }
    (zombies, live)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primary_is_swept_and_each_zombie_announced_once() {
    let cluster = RedisCluster::start(3, 0);
    seed(&cluster, "c", 300, 2, 3);
    // Hash-tagged keys: one conversation's online and typing sets share a slot.
    let mut con = cluster.con();
    crate::support::seed_keys(&mut con, ["presence:{c42}:online"], 1, 1);
    crate::support::seed_keys(&mut con, ["presence:{c42}:typing"], 1, 1);
    let sub = Subscriber::start(
        &format!("redis://127.0.0.1:{}/0", cluster.nodes[0].port),
        "*",
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    // `presence:{*}:typing` keeps the braces out of the conversation id; plain `*` keeps them in.
    let toml = format!(
        "{}[sweeps.typing]\nmatch = \"presence:{{*}}:typing\"\n",
        cluster.redis_toml()
    );
    let file = write_file(dir.path(), "c.toml", &toml);
    let (code, stdout, stderr) = run_binary(&["--config", file.to_str().unwrap(), "sweep"], &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // Each key counted once, though three primaries were scanned.
    assert!(
        stdout.contains(
            "online: keys_scanned=301 keys=301 members=901 evicted=601 events_published=601"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("typing: keys_scanned=1 keys=1 members=1 evicted=1 events_published=1"),
        "{stdout}"
    );
    assert_eq!(remaining(&cluster, "c", 300), (0, 900));

    let events = sub.wait_for(602, Duration::from_secs(10)).await;
    let seen = tally(&events);
    assert_eq!(events.len(), 602);
    assert!(seen.values().all(|&n| n == 1));
    assert_eq!(
        seen.get(&("{c42}".into(), "zombie".into())),
        Some(&1),
        "online: braces kept"
    );
    let typing: Vec<_> = events
        .iter()
        .map(|e| e.json())
        .filter(|e| e["type"] == "typing.stop")
        .collect();
    assert_eq!(typing.len(), 1);
    assert_eq!(
        typing[0]["conversation_id"], "c42",
        "typing: braces in the pattern"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_dies_its_replica_takes_over_and_nothing_is_announced_twice() {
    let mut cluster = RedisCluster::start(3, 1);
    seed(&cluster, "a", 200, 2, 2);
    let sub = Subscriber::start(
        &format!("redis://127.0.0.1:{}/0", cluster.nodes[0].port),
        "presence:*",
    )
    .await;
    // Half of every seeded key is zombies, twice over: the storm guard would hold them, which
    // is not what this test is about.
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n[sweeps.online]\nschedule = \"200ms\"\n\
         [sweeps.online.storm_guard]\nenabled = false\n",
        cluster.redis_toml()
    );
    let d = Binary::spawn(&toml, &[], &[]);
    wait_until("first zombies swept", Duration::from_secs(20), || {
        remaining(&cluster, "a", 200).0 == 0
    });
    // The last PUBLISHes follow the ZREMs; killing a node before they land would lose them
    // (events are at most once), which is not what this test is about.
    assert_eq!(sub.wait_for(400, Duration::from_secs(10)).await.len(), 400);

    // Kill a primary mid-run; its replica is promoted after the node timeout.
    // Not the node the subscriber listens on.
    fail_over(&mut cluster, &d);
    seed(&cluster, "b", 200, 2, 2);
    // A failover gives every member a full ttl (45 s) from the new primary's first answer: the
    // replica may have lagged.
    wait_until(
        "zombies swept after the failover",
        Duration::from_secs(80),
        || remaining(&cluster, "b", 200).0 == 0,
    );
    assert_eq!(remaining(&cluster, "a", 200), (0, 400));
    assert_eq!(remaining(&cluster, "b", 200), (0, 400));

    let events = sub.wait_for(800, Duration::from_secs(10)).await;
    let seen = tally(&events);
    assert_eq!(seen.len(), 800, "every zombie announced: {}", d.log());
    assert!(seen.values().all(|&n| n == 1), "nothing announced twice");
    assert!(seen.keys().all(|(_, u)| u.starts_with("zombie")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resharding_during_the_work_misses_nothing_and_duplicates_nothing() {
    let cluster = RedisCluster::start(3, 0);
    let conversations = 3000;
    seed(&cluster, "r", conversations, 1, 1);
    let sub = Subscriber::start(
        &format!("redis://127.0.0.1:{}/0", cluster.nodes[0].port),
        "presence:*",
    )
    .await;
    // Slow work (one key per call, one call at a time) so that slots move while it runs. Half
    // of every seeded key is a zombie: the storm guard may hold them (its share is judged on the
    // keys checked so far), which is not what this test is about.
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n\
         [sweeps.online]\nschedule = \"100ms\"\n[sweeps.online.storm_guard]\nenabled = false\n\
         [evict]\nbatch_keys = 1\npipeline_depth = 1\n",
        cluster.redis_toml()
    );
    let d = Binary::spawn(&toml, &[], &[]);
    // Start moving slots once the work is under way.
    let deadline = Instant::now() + Duration::from_secs(20);
    while sub.received().len() < 100 {
        assert!(Instant::now() < deadline, "{}", d.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let primaries = cluster.primaries();
    let (from, _) = &primaries[0];
    let (to, to_port) = &primaries[1];
    let reshard = std::process::Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{to_port}")])
        .args(["--cluster-from", from, "--cluster-to", to])
        .args([
            "--cluster-slots",
            "3000",
            "--cluster-yes",
            "--cluster-pipeline",
            "10",
        ])
        .output()
        .expect("run redis-cli --cluster reshard");
    assert!(
        reshard.status.success(),
        "reshard failed: {}",
        String::from_utf8_lossy(&reshard.stderr)
    );
    cluster.wait_ok(Duration::from_secs(30));
    // A key that moved is forgotten by its old primary at its first check there, and found by
    // its new primary's next walk.
    wait_until("every zombie swept", Duration::from_secs(60), || {
        remaining(&cluster, "r", conversations).0 == 0
    });
    assert_eq!(remaining(&cluster, "r", conversations), (0, conversations));

    let events = sub.wait_for(conversations, Duration::from_secs(10)).await;
    let seen = tally(&events);
    assert_eq!(seen.len(), conversations);
    assert!(seen.values().all(|&n| n == 1), "nothing announced twice");
}

/// The port of the primary serving `slot`, from `CLUSTER SLOTS`.
pub fn owner(cluster: &RedisCluster, key: &str) -> u16 {
    let node = cluster.nodes.iter().find(|n| n.is_running()).unwrap();
    let mut con = node.con();
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut con)
        .unwrap();
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).unwrap();
    for r in ranges {
        let redis::Value::Array(f) = r else { continue };
        let (redis::Value::Int(lo), redis::Value::Int(hi)) = (&f[0], &f[1]) else {
            continue;
        };
        if (*lo..=*hi).contains(&slot) {
            let redis::Value::Array(primary) = &f[2] else {
                continue;
            };
            if let redis::Value::Int(port) = primary[1] {
                return port as u16;
            }
        }
    }
    panic!("no owner for slot {slot}");
}

#[test]
fn sharded_pubsub_reaches_the_shard_of_each_channel() {
    let cluster = RedisCluster::start(3, 0);
    let conversations = 12;
    seed(&cluster, "s", conversations, 1, 1);
    let toml = cluster.redis_toml().replace(
        "mode = \"cluster\"",
        "mode = \"cluster\"\nsharded_pubsub = true",
    );
    if crate::support::server_major_version() < 7 {
        return sharded_pubsub_is_refused_before_redis_7(&cluster, &toml, conversations);
    }
    // One SSUBSCRIBE per channel (one command may not span slots), on the shard owning it.
    let channels: Vec<(u16, String)> = (0..conversations)
        .map(|c| {
            let channel = format!("presence:s{c}:events");
            (owner(&cluster, &channel), channel)
        })
        .collect();
    let shards: std::collections::HashSet<u16> = channels.iter().map(|(p, _)| *p).collect();
    assert!(shards.len() > 1, "the channels span several shards");
    let subs: Vec<ShardedSubscriber> = channels
        .iter()
        .map(|(port, channel)| ShardedSubscriber::start(*port, std::slice::from_ref(channel)))
        .collect();
    let (code, stdout, stderr) = sweep_online(&toml, &["--log-level", "debug,redis=warn"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("evicted=12 events_published=12"),
        "{stdout}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let total = || subs.iter().map(|s| s.received().len()).sum::<usize>();
    while total() < conversations && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(total(), conversations);
    for sub in &subs {
        for (channel, payload) in sub.received() {
            let ev: serde_json::Value = serde_json::from_str(&payload).unwrap();
            assert_eq!(
                channel,
                format!(
                    "presence:{}:events",
                    ev["conversation_id"].as_str().unwrap()
                )
            );
        }
    }
}

/// Redis 6.2 has no SPUBLISH (7.0 brought it): the preflight says so, naming the setting, and
/// nothing is evicted, so no member goes unannounced.
fn sharded_pubsub_is_refused_before_redis_7(
    cluster: &RedisCluster,
    toml: &str,
    conversations: usize,
) {
    let (code, stdout, stderr) = sweep_online(toml, &[]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(
            "the server does not know the command SPUBLISH \
             (redis.sharded_pubsub needs Redis 7.0 or later)"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("presence:s"),
        "a conversation named: {stderr}"
    );
    assert_eq!(
        remaining(cluster, "s", conversations),
        (conversations, conversations)
    );
}

/// The password only in the seed URLs: every node's own connections (the data path, the
/// preflight) must use it too.
#[test]
fn a_password_in_the_seed_urls_reaches_every_node() {
    let cluster = RedisCluster::start(3, 0);
    seed(&cluster, "c", 60, 1, 2);
    for node in &cluster.nodes {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg("seed-secret")
            .query(&mut node.con())
            .unwrap();
    }
    let seeds: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("\"redis://:seed-secret@127.0.0.1:{}\"", n.port))
        .collect();
    let toml = format!(
        "[redis]\nmode = \"cluster\"\nnodes = [{}]\n[sweeps.typing]\nenabled = false\n",
        seeds.join(", ")
    );
    let (code, stdout, stderr) = sweep_online(&toml, &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("keys_scanned=60 keys=60 members=120 evicted=60 events_published=60"),
        "{stdout}"
    );
}

/// Keyspace notifications on every primary: each primary's loop subscribes to its own node's
/// events (a node publishes only its own keys'), zombies leave at their deadlines, and after a
/// failover the promoted replica is subscribed to in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_on_every_primary_through_a_failover() {
    let mut cluster = RedisCluster::start_with(3, 1, &["--notify-keyspace-events", "KEA"]);
    let sub = Subscriber::start(
        &format!("redis://127.0.0.1:{}/0", cluster.nodes[0].port),
        "presence:*",
    )
    .await;
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n\
         [sweeps.online]\nttl = \"2s\"\nschedule = \"1h\"\n",
        cluster.redis_toml()
    );
    let d = Binary::spawn(&toml, &[], &[]);
    d.wait_ready(Duration::from_secs(20));
    let subscribed = |cluster: &RedisCluster| {
        let s = crate::support::scrape(d.http_addr());
        cluster.primaries().iter().all(|(_, port)| {
            let node = format!("127.0.0.1:{port}");
            crate::support::metric(
                &s,
                "presence_sweeper_notifications_in_use",
                &[("node", &node)],
            ) == Some(1.0)
        })
    };
    wait_until("every primary subscribed", Duration::from_secs(10), || {
        subscribed(&cluster)
    });

    // Members that go stale in 2 s, in keys all over the slots, written after the walks: only
    // notifications tell the daemon of them.
    let due = |cluster: &RedisCluster, prefix: &str| {
        let now = cluster_now(cluster);
        let mut con = cluster.con();
        for c in 0..30 {
            let key = format!("presence:{prefix}{c}:online");
            let _: () = con
                .zadd_multiple(&key, &[(now, "zombie"), (now + 600.0, "live")])
                .unwrap();
        }
    };
    due(&cluster, "a");
    let events = sub.wait_for(30, Duration::from_secs(6)).await;
    assert_eq!(tally(&events).len(), 30, "{}", d.log());
    for e in &events {
        let v = e.json();
        let lag = v["timestamp"].as_f64().unwrap() - v["last_seen"].as_f64().unwrap() - 2.0;
        // At its deadline, not at a walk; bounds wide enough for a loaded machine.
        assert!((0.0..1.0).contains(&lag), "lag {lag:.3} s: {v}");
    }

    kill_a_primary(&mut cluster);
    wait_until(
        "the promoted replica subscribed",
        Duration::from_secs(15),
        || subscribed(&cluster),
    );
    due(&cluster, "b");
    let events = sub.wait_for(60, Duration::from_secs(8)).await;
    let seen = tally(&events);
    assert_eq!(seen.len(), 60, "every zombie announced: {}", d.log());
    assert!(seen.values().all(|&n| n == 1), "nothing announced twice");
}

/// Kills a primary (not the first node, where the tests' subscribers listen) and waits for its
/// replica's promotion and for the daemon to stop the dead primary's loop.
fn fail_over(cluster: &mut RedisCluster, d: &Binary) {
    let victim = kill_a_primary(cluster);
    d.wait_for_log(
        &format!("no longer a primary; its loop stops node=127.0.0.1:{victim}"),
        1,
        Duration::from_secs(20),
    );
}

/// Kills a primary (not the first node, where the tests' subscribers listen) and waits for its
/// replica's promotion; returns the dead primary's port.
fn kill_a_primary(cluster: &mut RedisCluster) -> u16 {
    let listener = cluster.nodes[0].port;
    let victim = cluster
        .primaries()
        .into_iter()
        .map(|(_, port)| port)
        .find(|&port| port != listener)
        .unwrap();
    // Its replica must hold every write first: a write the replica never got is lost by Redis's
    // failover (replication is asynchronous), which is not what these tests are about. A CI run
    // once lost a third of a test's keys that way.
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(&mut cluster.node(victim).con())
        .unwrap();
    assert_eq!(
        acked, 1,
        "the replica of 127.0.0.1:{victim} acknowledged its writes"
    );
    cluster.node(victim).stop();
    wait_until("the replica promoted", Duration::from_secs(30), || {
        let primaries = cluster.primaries();
        primaries.len() == 3 && primaries.iter().all(|(_, p)| *p != victim)
    });
    cluster.wait_ok(Duration::from_secs(30));
    victim
}

/// A primary dies while the apps heartbeat: until its replica is promoted they cannot write to
/// its slots. The loop that takes those keys over starts after the failover, so it must inherit
/// the outage from the loop it replaces, or every member of those slots would be announced as
/// left. The storm guard is off: the credit alone must spare them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_longer_than_the_ttl_makes_no_false_leaves() {
    let mut cluster = RedisCluster::start(3, 1);
    let sub = Subscriber::start(
        &format!("redis://127.0.0.1:{}/0", cluster.nodes[0].port),
        "presence:*",
    )
    .await;
    let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    // One app thread per primary's keys, so that the keys of the dead one do not hold up the
    // others' heartbeats.
    let mut by_primary: HashMap<u16, Vec<String>> = HashMap::new();
    for c in 0..60 {
        let key = format!("presence:h{c}:online");
        by_primary
            .entry(owner(&cluster, &key))
            .or_default()
            .push(key);
    }
    let apps: Vec<_> = by_primary
        .into_values()
        .map(|keys| {
            let (seeds, running) = (cluster.seeds(), running.clone());
            std::thread::spawn(move || heartbeat_cluster(&seeds, &keys, 3, &running))
        })
        .collect();
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n\
         [sweeps.online]\nttl = \"4s\"\nschedule = \"500ms\"\n\
         [sweeps.online.storm_guard]\nenabled = false\n",
        cluster.redis_toml()
    );
    let d = Binary::spawn(&toml, &[], &[]);
    d.wait_ready(Duration::from_secs(20));
    tokio::time::sleep(Duration::from_secs(4)).await;

    fail_over(&mut cluster, &d);
    // Heartbeats resume; two ttls more for anything falsely judged stale to show.
    tokio::time::sleep(Duration::from_secs(6)).await;
    running.store(false, std::sync::atomic::Ordering::Relaxed);
    for app in apps {
        app.join().unwrap();
    }

    let events = sub.received();
    assert!(
        events.is_empty(),
        "{} live users announced as left: {}",
        events.len(),
        d.log()
    );
    assert!(
        d.log().contains("Redis did not answer for a while"),
        "the new primary's loop took the outage over: {}",
        d.log()
    );
}

/// Heartbeats `users` members (`<key>-u<n>`) of each of `keys` (scores from Redis TIME) every
/// 500 ms through a cluster connection, until `running` is cleared; a write that fails (a
/// primary down) is tried again on the next round.
fn heartbeat_cluster(
    seeds: &[String],
    keys: &[String],
    users: usize,
    running: &std::sync::atomic::AtomicBool,
) {
    let script = redis::Script::new(
        "local t = redis.call('TIME') \
         local now = tonumber(t[1]) + tonumber(t[2]) / 1000000 \
         for i = 1, #ARGV do redis.call('ZADD', KEYS[1], 'GT', now, ARGV[i]) end \
         return 1",
    );
    let client = redis::cluster::ClusterClient::builder(seeds.to_vec())
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let mut con = None;
    let mut failed = false;
    while running.load(std::sync::atomic::Ordering::Relaxed) {
        let started = Instant::now();
        if con.is_none() {
            con = client.get_connection().ok();
            if con.is_some() && failed {
                // Apps take a while to find the new primary: its members' windows close
                // meanwhile, which only the inherited outage explains.
                std::thread::sleep(Duration::from_secs(1));
                failed = false;
            }
        }
        if let Some(c) = con.as_mut() {
            for key in keys {
                let mut call = script.key(key);
                for u in 0..users {
                    call.arg(format!("{key}-u{u}"));
                }
                if call.invoke::<i64>(c).is_err() {
                    // Lost a primary: a new connection reads the slots anew.
                    con = None;
                    failed = true;
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(500).saturating_sub(started.elapsed()));
    }
}
