//! Webhooks on a Redis Cluster: the due sets live in the streams' slots, so a daemon killed with
//! events undelivered, and a new one that never heard of them, still delivers each once, in
//! order per conversation, from every primary.

use std::collections::HashSet;
use std::time::Duration;

use crate::support::cluster::RedisCluster;
use crate::support::receiver::{Mode, Receiver};
use crate::support::{Binary, seed_keys, wait_until};
use presence_sweeper_webhooks::id::webhook_id;

use super::{SECRET, assert_in_order, deliveries};

/// A cluster daemon: the typing sweep every 100 ms with a stream per conversation, and webhook
/// `crm` to `url`.
fn daemon(cluster: &RedisCluster, url: &str) -> Binary {
    let toml = format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[coordination]\nlease_ttl = \"2s\"\n\
         [sweeps.online]\nenabled = false\n\
         [sweeps.typing]\nschedule = \"100ms\"\nstream = \"presence:{{hash_tag}}:log\"\n\
         channel = \"presence:{{hash_tag}}:events\"\n\
         [webhooks.crm]\nurl = \"{url}\"\nsecret = \"{SECRET}\"\nsweeps = [\"typing\"]\n",
        cluster.redis_toml()
    );
    Binary::spawn(&toml, &[], &[])
}

/// A daemon whose receiver fails, and 60 conversations (`c0`..`c59`, one per hash tag, over
/// every primary) seeded with 2 zombies and a live user each: the receiver, the daemon, the
/// tags and a connection.
fn evicting(
    cluster: &RedisCluster,
) -> (
    Receiver,
    Binary,
    Vec<String>,
    redis::cluster::ClusterConnection,
) {
    let receiver = Receiver::start(Mode::Fail);
    let first = daemon(cluster, &receiver.url());
    first.wait_ready(Duration::from_secs(30));
    let tags: Vec<String> = (0..60).map(|c| format!("c{c}")).collect();
    let mut con = cluster.con();
    for tag in &tags {
        seed_keys(&mut con, [format!("presence:{{{tag}}}:typing")], 2, 1);
    }
    (receiver, first, tags, con)
}

#[test]
fn a_cluster_delivers_every_leave_once_after_a_kill() {
    let cluster = RedisCluster::start(3, 0);
    let (receiver, mut first, tags, mut con) = evicting(&cluster);
    // Heard from this daemon's own evictions: attempts begin at once.
    wait_until("attempts", Duration::from_secs(15), || {
        receiver.hits().len() >= 20
    });
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(5));
    receiver.set(Mode::Accept);
    // A new daemon has heard of nothing: it finds the due slots on every primary.
    let second = daemon(&cluster, &receiver.url());
    let hits = receiver.wait_delivered(120, Duration::from_secs(30));
    let mut expected = HashSet::new();
    for tag in &tags {
        let log = format!("presence:{{{tag}}}:log");
        let entries: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
            .arg(&log)
            .arg("-")
            .arg("+")
            .query(&mut con)
            .unwrap();
        assert_eq!(entries.len(), 2, "{log}");
        expected.extend(entries.iter().map(|(id, _)| webhook_id(log.as_bytes(), id)));
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(format!("presence:{{{tag}}}:typing"))
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .unwrap();
        assert_eq!(members, ["live"], "the live user stays");
    }
    let delivered: HashSet<String> = hits
        .iter()
        .filter(|h| h.status == 200)
        .map(|h| h.id.clone())
        .collect();
    assert_eq!(delivered, expected, "every event, under its own id");
    assert_in_order(&hits);
    wait_until(
        "no delivery state left on any primary",
        Duration::from_secs(10),
        || {
            cluster.nodes.iter().all(|n| {
                let left: Vec<String> = redis::cmd("KEYS")
                    .arg("presence-sweeper:webhooks:*")
                    .query(&mut n.con())
                    .unwrap();
                left.is_empty()
            })
        },
    );
    assert!(deliveries(&second, "delivered") >= 60.0);
}

/// One primary of three down, on a cluster that serves the slots it can
/// (`cluster-require-full-coverage no`): the events of the two live primaries are delivered,
/// the dead one's wait in its due sets. `known`: by the daemon that evicted them, which knows
/// every due slot and whose claims on the dead primary's fail; else by a new daemon, which
/// finds the due slots by discovery.
fn primary_down(known: bool) {
    let mut cluster = RedisCluster::start_with(3, 0, &["--cluster-require-full-coverage", "no"]);
    let (receiver, mut first, tags, mut con) = evicting(&cluster);
    let log = |tag: &str| format!("presence:{{{tag}}}:log");
    wait_until("every zombie evicted", Duration::from_secs(15), || {
        tags.iter().all(|t| {
            redis::cmd("XLEN")
                .arg(log(t))
                .query::<u64>(&mut con)
                .is_ok_and(|n| n == 2)
        })
    });
    wait_until("attempts", Duration::from_secs(15), || {
        receiver.hits().len() >= 20
    });
    if !known {
        first.signal("KILL");
        first.wait_exit(Duration::from_secs(5));
    }
    // The primary to stop, and the events the others hold.
    let (_, victim) = cluster.primaries()[0].clone();
    let mut expected = HashSet::new();
    let mut on_victim = 0;
    for tag in &tags {
        let key = log(tag);
        // A node answers for its own keys only (others are MOVED).
        if redis::cmd("XLEN")
            .arg(&key)
            .query::<u64>(&mut cluster.node(victim).con())
            .is_ok()
        {
            on_victim += 1;
            continue;
        }
        let entries: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
            .arg(&key)
            .arg("-")
            .arg("+")
            .query(&mut con)
            .unwrap();
        expected.extend(entries.iter().map(|(id, _)| webhook_id(key.as_bytes(), id)));
    }
    assert!(
        on_victim > 0 && !expected.is_empty(),
        "tags on every primary"
    );
    drop(con);
    cluster.node(victim).stop();
    receiver.set(Mode::Accept);
    let _second = (!known).then(|| daemon(&cluster, &receiver.url()));
    let delivered =
        || -> HashSet<String> { receiver.delivered().into_iter().map(|h| h.id).collect() };
    wait_until(
        "every event of the live primaries delivered",
        Duration::from_secs(40),
        || delivered().is_superset(&expected),
    );
    if !known {
        // The dead primary's streams cannot be read. (The daemon that knew them may still
        // deliver the entries its workers read before the stop: at least once.)
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(delivered(), expected, "nothing of the dead primary's");
    } else {
        // Its claims on the dead primary fail, those on the others work: that is not Redis
        // back.
        first.wait_for_log(
            "cannot look for events to deliver",
            1,
            Duration::from_secs(5),
        );
        assert_eq!(first.count("looking for events to deliver works again"), 0);
    }
}

#[test]
fn a_primary_down_holds_back_only_its_own_slots_for_the_daemon_that_knows_them() {
    primary_down(true);
}

#[test]
fn a_primary_down_holds_back_only_its_own_slots_for_a_new_daemon() {
    primary_down(false);
}
