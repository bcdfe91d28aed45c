//! The webhooks' full-scale figures, measured by hand with the release binary (a measurement,
//! not a check: each runs for minutes):
//!
//! ```text
//! cargo build --release
//! BENCH_BINARY=target/release/presence-sweeper cargo test --test tests -- \
//!     --ignored --nocapture webhooks::scale
//! ```
//!
//! - `outage`: 500 zombies leave among 250 live users, each user heartbeating once a second on
//!   its own phase, while the receiver is healthy, answers 503 for 60 s, or hangs for 60 s; then
//!   it answers 2xx. Side by side in one run: a daemon without a webhook.
//! - `replicas`: 10,000 leaves through two replicas, one of them killed and started again
//!   halfway.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::receiver::{Hit, Mode, Receiver};
use crate::support::{Binary, RedisServer};

use super::SECRET;

const TTL: f64 = 5.0;
const OUTAGE: Duration = Duration::from_secs(60);

fn binary() -> String {
    std::env::var("BENCH_BINARY").unwrap_or_else(|_| crate::support::binary_path().into())
}

fn unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The typing sweep every 100 ms with a stream per conversation, and webhook `crm` to `url`
/// when there is one.
fn config(url: Option<&str>, timeout: &str) -> String {
    let mut toml = "[http]\nlisten = \"127.0.0.1:0\"\n[coordination]\nlease_ttl = \"2s\"\n\
                    [sweeps.online]\nenabled = false\n\
                    [sweeps.typing]\nschedule = \"100ms\"\nttl = \"5s\"\n\
                    stream = \"presence:{hash_tag}:log\"\n"
        .to_owned();
    if let Some(url) = url {
        toml.push_str(&format!(
            "[webhooks.crm]\nurl = \"{url}\"\nsecret = \"{SECRET}\"\nsweeps = [\"typing\"]\n\
             timeout = \"{timeout}\"\n"
        ));
    }
    toml
}

/// A deterministic spread in [0, 1) for user `i`.
fn spread(i: u64, salt: u64) -> f64 {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt;
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    (x % 1_000_000) as f64 / 1_000_000.0
}

/// One user of the load: its key, its id, and when it stops heartbeating (never for a live one).
struct User {
    key: String,
    id: String,
    phase: f64,
    stops: Option<f64>,
}

/// 250 conversations, each with one live user and two who vanish at different times within
/// the first 52 s; everyone heartbeats once a second on a phase of its own.
fn users(start: f64) -> Vec<User> {
    let mut out = Vec::new();
    for c in 0..250u64 {
        let key = format!("presence:o{c}:typing");
        out.push(User {
            key: key.clone(),
            id: format!("live{c}"),
            phase: spread(c, 1),
            stops: None,
        });
        for z in 0..2u64 {
            out.push(User {
                key: key.clone(),
                id: format!("zombie{c}x{z}"),
                phase: spread(c * 2 + z, 2),
                stops: Some(start + 2.0 + 50.0 * spread(c * 2 + z, 3)),
            });
        }
    }
    out
}

/// Heartbeats every user on its phase until `stop`, pipelining each 20 ms tick's ZADDs.
fn heartbeat(server_url: String, users: Vec<User>, stop: Arc<AtomicBool>) {
    let mut con = redis::Client::open(server_url)
        .unwrap()
        .get_connection()
        .unwrap();
    let mut next: Vec<f64> = users.iter().map(|u| unix().floor() + u.phase).collect();
    while !stop.load(Ordering::Relaxed) {
        let now = unix();
        let mut pipe = redis::pipe();
        for (u, at) in users.iter().zip(next.iter_mut()) {
            if *at <= now {
                if u.stops.is_none_or(|s| now < s) {
                    pipe.cmd("ZADD").arg(&u.key).arg(now).arg(&u.id).ignore();
                }
                *at += 1.0;
            }
        }
        let _: () = pipe.query(&mut con).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every pub/sub event, with when it arrived (Unix seconds).
fn listen(server_url: String, stop: Arc<AtomicBool>) -> Arc<Mutex<Vec<(f64, serde_json::Value)>>> {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    std::thread::spawn(move || {
        let mut con = redis::Client::open(server_url)
            .unwrap()
            .get_connection()
            .unwrap();
        let mut pubsub = con.as_pubsub();
        pubsub
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        pubsub.psubscribe("presence:*:events").unwrap();
        while !stop.load(Ordering::Relaxed) {
            if let Ok(msg) = pubsub.get_message() {
                let ev: serde_json::Value =
                    serde_json::from_slice(msg.get_payload_bytes()).unwrap();
                sink.lock().unwrap().push((unix(), ev));
            }
        }
    });
    events
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// One run: the load for 60 s with the receiver in `mode` (no webhook for `None`), then 2xx.
fn outage_run(label: &str, mode: Option<Mode>) {
    let server = RedisServer::start();
    let receiver = Receiver::start(mode.unwrap_or(Mode::Accept));
    let url = receiver.url();
    let d = Binary::spawn_program(
        &binary(),
        &config(mode.map(|_| url.as_str()), "10s"),
        &["--redis-url", &server.url()],
        &[],
        None,
    );
    d.wait_ready(Duration::from_secs(20));
    let stop = Arc::new(AtomicBool::new(false));
    let events = listen(server.url(), stop.clone());
    let start = unix();
    let load = users(start);
    let zombies: HashSet<String> = load
        .iter()
        .filter(|u| u.stops.is_some())
        .map(|u| u.id.clone())
        .collect();
    let beats = std::thread::spawn({
        let (url, stop) = (server.url(), stop.clone());
        move || heartbeat(url, load, stop)
    });
    let began = Instant::now();
    let mut rss_max = 0;
    while began.elapsed() < OUTAGE {
        rss_max = rss_max.max(rss_kb(d.pid()));
        std::thread::sleep(Duration::from_millis(500));
    }
    receiver.set(Mode::Accept);
    let recovered = Instant::now();
    let mut drained = None;
    if mode.is_some() {
        while recovered.elapsed() < Duration::from_secs(150) {
            rss_max = rss_max.max(rss_kb(d.pid()));
            let ids: HashSet<String> = receiver.delivered().iter().map(|h| h.id.clone()).collect();
            if ids.len() >= zombies.len() {
                drained = Some(recovered.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    stop.store(true, Ordering::Relaxed);
    beats.join().unwrap();
    let events = events.lock().unwrap().clone();
    let mut lags: Vec<f64> = events
        .iter()
        .map(|(at, ev)| (at - ev["last_seen"].as_f64().unwrap() - TTL) * 1000.0)
        .collect();
    lags.sort_by(f64::total_cmp);
    let left: Vec<&str> = events
        .iter()
        .map(|(_, ev)| ev["user_id"].as_str().unwrap())
        .collect();
    let false_leaves = left.iter().filter(|u| !zombies.contains(**u)).count();
    let announced: HashSet<&str> = left.iter().copied().collect();
    println!(
        "{label}: {} pub/sub events for {} zombies ({} missed, {false_leaves} false), \
         pub/sub lag p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; daemon RSS max {:.1} MB",
        events.len(),
        zombies.len(),
        zombies
            .iter()
            .filter(|z| !announced.contains(z.as_str()))
            .count(),
        quantile(&lags, 0.5),
        quantile(&lags, 0.99),
        quantile(&lags, 1.0),
        rss_max as f64 / 1024.0
    );
    if mode.is_some() {
        report_deliveries(&receiver.hits(), &zombies, drained);
    }
}

/// Deliveries: each zombie's once, in order per conversation, and how long the backlog took.
fn report_deliveries(hits: &[Hit], zombies: &HashSet<String>, drained: Option<Duration>) {
    let delivered: Vec<&Hit> = hits.iter().filter(|h| h.status == 200).collect();
    let ids: HashSet<&str> = delivered.iter().map(|h| h.id.as_str()).collect();
    let users: HashSet<String> = delivered
        .iter()
        .map(|h| h.json()["user_id"].as_str().unwrap().to_owned())
        .collect();
    let mut by_conversation: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for h in &delivered {
        let ev = h.json();
        by_conversation
            .entry(ev["conversation_id"].as_str().unwrap().to_owned())
            .or_default()
            .push(ev);
    }
    let out_of_order = by_conversation
        .values()
        .flat_map(|evs| evs.windows(2))
        .filter(|w| w[1]["prev"] != w[0]["id"])
        .count();
    println!(
        "  webhook: {} of {} zombies delivered ({} of a live user), {} requests in all, \
         {} 2xx for {} ids, {out_of_order} out of order; backlog delivered {:?} after the receiver recovered",
        users.intersection(zombies).count(),
        zombies.len(),
        users.difference(zombies).count(),
        hits.len(),
        delivered.len(),
        ids.len(),
        drained
    );
}

#[test]
#[ignore = "a measurement, not a check: run it by hand"]
fn outage() {
    outage_run("no webhook", None);
    outage_run("receiver healthy", Some(Mode::Accept));
    outage_run("503 for 60 s", Some(Mode::Unavailable));
    outage_run("hangs for 60 s", Some(Mode::Hang));
}

#[test]
#[ignore = "a measurement, not a check: run it by hand"]
fn replicas() {
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Accept);
    let toml = config(Some(&receiver.url()), "10s");
    let spawn =
        || Binary::spawn_program(&binary(), &toml, &["--redis-url", &server.url()], &[], None);
    let mut a = spawn();
    let b = spawn();
    a.wait_ready(Duration::from_secs(20));
    b.wait_ready(Duration::from_secs(20));
    let mut con = server.con();
    let started = Instant::now();
    let mut restarted = None;
    for wave in 0..20 {
        let keys: Vec<String> = (0..500)
            .map(|c| format!("presence:w{wave}x{c}:typing"))
            .collect();
        crate::support::seed_keys(&mut con, &keys, 1, 1);
        std::thread::sleep(Duration::from_millis(500));
        if wave == 10 {
            a.signal("KILL");
            a.wait_exit(Duration::from_secs(5));
            restarted = Some(spawn());
        }
    }
    let hits = receiver.wait_delivered(10_000, Duration::from_secs(120));
    let took = started.elapsed();
    std::thread::sleep(Duration::from_secs(3));
    let all = receiver.hits();
    let ok: Vec<&Hit> = all.iter().filter(|h| h.status == 200).collect();
    let mut per_id: HashMap<&str, usize> = HashMap::new();
    for h in &ok {
        *per_id.entry(h.id.as_str()).or_default() += 1;
    }
    let duplicates = ok.len() - per_id.len();
    println!(
        "two replicas, 10,000 leaves in 10 s, one killed -9 and restarted at 5 s: {} delivered \
         ({} distinct), {duplicates} duplicates ({:.3} %), all within {took:?}",
        hits.len(),
        per_id.len(),
        duplicates as f64 * 100.0 / 10_000.0
    );
    drop(restarted);
}

/// Redis CPU seconds (main thread, user + system) of every node of `cluster`, from `INFO cpu`.
fn cluster_cpu(cluster: &crate::support::cluster::RedisCluster) -> f64 {
    cluster
        .nodes
        .iter()
        .map(|n| {
            let info: String = redis::cmd("INFO").arg("cpu").query(&mut n.con()).unwrap();
            info.lines()
                .filter_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    matches!(k, "used_cpu_sys_main_thread" | "used_cpu_user_main_thread")
                        .then(|| v.trim().parse::<f64>().ok())?
                })
                .sum::<f64>()
        })
        .sum()
}

/// What looking for due slots costs an idle 3-primary cluster: its Redis CPU over 30 s with a
/// webhook configured and without, side by side.
#[test]
#[ignore = "a measurement, not a check: run it by hand"]
fn cluster_discovery() {
    let cluster = crate::support::cluster::RedisCluster::start(3, 0);
    let receiver = Receiver::start(Mode::Accept);
    for hook in [false, true] {
        let mut toml = format!(
            "{}{}",
            cluster.redis_toml(),
            config(hook.then(|| receiver.url()).as_deref(), "10s")
        );
        toml = toml.replace(
            "stream = \"presence:{hash_tag}:log\"\n",
            "stream = \"presence:{hash_tag}:log\"\nchannel = \"presence:{hash_tag}:events\"\n",
        );
        let d = Binary::spawn_program(&binary(), &toml, &[], &[], None);
        d.wait_ready(Duration::from_secs(30));
        std::thread::sleep(Duration::from_secs(5));
        let c0 = cluster_cpu(&cluster);
        std::thread::sleep(Duration::from_secs(30));
        let used = cluster_cpu(&cluster) - c0;
        println!(
            "3-primary cluster, idle, {}: {:.3} s of Redis CPU in 30 s ({:.2} % of a core, all primaries)",
            if hook { "a webhook" } else { "no webhook" },
            used,
            used / 30.0 * 100.0
        );
        drop(d);
    }
}
