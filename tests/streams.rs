//! Sweeps with a stream (`sweeps.<name>.stream`), batch events and vacated rooms, against real
//! Redis servers: the entries are the events byte for byte, every leave is appended once, and
//! the consumer recipe of docs/events.md (live pub/sub plus catch-up from the stream) loses nothing
//! across a disconnection, a restart with AOF, a trim or a FLUSHALL.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use base64::Engine as _;
use presence_sweeper::pass;
use presence_sweeper_rules::event::owned::{StepInput, encode};
use redis::streams::StreamRangeReply;

use crate::support::cluster::RedisCluster;
use crate::support::{OnePass, RedisServer, Subscriber, config, redis_now, run_binary, write_file};

/// The online sweep alone, with a stream per conversation.
const STREAMED: &str = r#"
[sweeps.typing]
enabled = false
[sweeps.online]
stream = "presence:{hash_tag}:log"
"#;

async fn pass(url: &str, toml: &str) -> pass::Report {
    let cfg = config(url, toml);
    OnePass::connect(&cfg, "online")
        .await
        .run(pass::Options::default())
        .await
        .unwrap()
}

/// The stream of a key under `presence:{hash_tag}:log`.
fn log_of(key: &str) -> String {
    format!("presence:{{{key}}}:log")
}

/// One stream entry: its id and its event's JSON.
#[derive(Debug, Clone)]
struct Entry {
    id: String,
    json: Vec<u8>,
}

impl Entry {
    fn value(&self) -> serde_json::Value {
        serde_json::from_slice(&self.json).expect("an entry is valid JSON")
    }
}

fn entries(con: &mut impl redis::ConnectionLike, stream: &str, after: &str) -> Vec<Entry> {
    let reply: StreamRangeReply = redis::cmd("XRANGE")
        .arg(stream)
        .arg(after)
        .arg("+")
        .query(con)
        .unwrap();
    reply
        .ids
        .into_iter()
        .map(|e| Entry {
            json: match e.map.get("event") {
                Some(redis::Value::BulkString(b)) => b.clone(),
                other => panic!("entry {} has no event: {other:?}", e.id),
            },
            id: e.id,
        })
        .collect()
}

/// An event as published, less its `id`: what its stream entry holds.
fn without_id(payload: &[u8]) -> (Vec<u8>, String) {
    let text = std::str::from_utf8(payload).unwrap_or_else(|_| panic!("{payload:?}"));
    let at = text
        .rfind(r#","id":""#)
        .expect("a published event has an id");
    let id = text[at + 7..text.len() - 2].to_owned();
    let mut entry = text.as_bytes()[..at].to_vec();
    entry.push(b'}');
    (entry, id)
}

/// A little generator of numbers, so that the scores are many and odd but the test repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A score below `below`: timestamps with up to 6 decimals, integers, tiny and huge
    /// magnitudes, powers of two, and doubles of any bits.
    fn score(&mut self, below: f64) -> f64 {
        let r = self.next();
        let x = match r % 6 {
            0 => below - 1.0 - (r >> 8) as f64 % 1e6 - ((r >> 40) % 1_000_000) as f64 / 1e6,
            1 => -(((r >> 8) % 1_000_000_000) as f64),
            2 => -f64::from_bits(r >> 2),
            3 => -(2f64.powi((r >> 8) as i32 % 1000 - 500)),
            4 => ((r >> 8) % 100_000) as f64 / 7.0,
            _ => f64::from_bits(self.next() & !(1 << 63)).min(below - 1.0),
        };
        // Redis keeps no negative zero.
        if x == 0.0 {
            0.0
        } else if x.is_finite() && x < below {
            x
        } else {
            -1.5
        }
    }
}

/// Ids of every kind: plain, escaped, not UTF-8, long.
fn odd_id(i: usize, rng: &mut Rng) -> Vec<u8> {
    match i % 7 {
        0 => format!("user-{i}").into_bytes(),
        1 => format!("q\"uote\\{i}\n\t\u{1}").into_bytes(),
        2 => vec![0xff, 0xfe, b'a', (i % 256) as u8, 0xe2, 0x82],
        3 => format!("é✓\u{2028}{i}").into_bytes(),
        4 => (0..(rng.next() % 40 + 1))
            .map(|_| (rng.next() % 256) as u8)
            .collect(),
        5 => [
            b"\xed\xa0\x80\xf0\x90\x80".as_slice(),
            i.to_string().as_bytes(),
        ]
        .concat(),
        _ => format!("{}{i}", "x".repeat(3000)).into_bytes(),
    }
}

/// What the test needs to know of one key it seeded, to compute its events itself.
struct Seeded {
    key: String,
    zombies: Vec<(Vec<u8>, f64)>,
    live: Vec<Vec<u8>>,
}

/// The stream's entries and the published events are the daemon's own encoder's output, byte
/// for byte, for odd ids and odd scores, in both shapes and both units (the entry being the
/// event less its `id`).
#[tokio::test]
async fn entries_and_events_are_the_daemons_json_byte_for_byte() {
    let server = RedisServer::start();
    let mut con = server.con();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (shape, unit) in [
        ("member", "seconds"),
        ("batch", "seconds"),
        ("batch", "milliseconds"),
    ] {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        let now = redis_now(&mut con);
        let ms = unit == "milliseconds";
        let scale = if ms { 1000.0 } else { 1.0 };
        let below = (now - 3600.0) * scale;
        let mut seeded = Vec::new();
        for k in 0..4 {
            let key = format!("presence:c{k}:online");
            let zombies: Vec<(Vec<u8>, f64)> = (0..[300, 3, 1, 25][k])
                .map(|i| (odd_id(i + 7 * k, &mut rng), rng.score(below)))
                .collect();
            let live: Vec<Vec<u8>> = (0..[5, 0, 0, 120][k])
                .map(|i| [b"live".as_slice(), &odd_id(i + 3, &mut rng)].concat())
                .collect();
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(&key);
            for (m, s) in &zombies {
                zadd.arg(*s).arg(m.as_slice());
            }
            for (i, m) in live.iter().enumerate() {
                zadd.arg((now + 600.0 + i as f64) * scale).arg(m.as_slice());
            }
            let _: () = zadd.query(&mut con).unwrap();
            seeded.push(Seeded { key, zombies, live });
        }
        let toml = format!(
            "{STREAMED}event_shape = \"{shape}\"\nscore_unit = \"{unit}\"\n[events]\nmax_bytes = 8192\n"
        );
        let sub = Subscriber::start(&server.url(), "presence:*:events").await;
        let report = pass(&server.url(), &toml).await;
        assert_eq!(report.counts.evicted, 329, "{shape} {unit}");
        let published = sub
            .wait_for(
                report.counts.events_published as usize,
                Duration::from_secs(5),
            )
            .await;
        assert_eq!(published.len() as u64, report.counts.events_published);
        // Streams of different keys may share ids: an event is known by its channel too.
        let mut by_id: HashMap<(Vec<u8>, String), Vec<u8>> = HashMap::new();
        for p in &published {
            let (entry, id) = without_id(&p.payload);
            p.json();
            by_id.insert((p.channel.clone(), id), entry);
        }
        for s in &seeded {
            let got = entries(&mut con, &log_of(&s.key), "-");
            let channel = s.key.replace(":online", ":events").into_bytes();
            for e in &got {
                let event = by_id.get(&(channel.clone(), e.id.clone()));
                assert_eq!(
                    event,
                    Some(&e.json),
                    "{shape}: the event is its entry and its id"
                );
            }
            let first = got[0].value();
            let mut zombies = s.zombies.clone();
            zombies.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            // Scored in the order written: the roster is most recent first.
            let mut live = s.live.clone();
            live.reverse();
            let step = StepInput {
                event_type: "presence.leave".into(),
                roster_field: "online".into(),
                max_bytes: 8192,
                stream: true,
                conversation_id: s.key.as_bytes()["presence:".len()..s.key.len() - ":online".len()]
                    .to_vec(),
                leaves: zombies
                    .iter()
                    .map(|(m, sc)| (m.clone(), sc / scale))
                    .collect(),
                timestamp: first["timestamp"].as_f64().unwrap(),
                roster: live.iter().take(100).cloned().collect(),
                roster_count: live.len() as u64,
            };
            let prevs: Vec<Option<Vec<u8>>> = std::iter::once("0-0".to_string())
                .chain(got.iter().map(|e| e.id.clone()))
                .map(|p| Some(p.into_bytes()))
                .collect();
            let ours = encode(&step, shape == "batch", &prevs);
            assert_eq!(ours.len(), got.len(), "{shape} {unit} {}", s.key);
            for (ours, theirs) in ours.iter().zip(&got) {
                assert_eq!(
                    String::from_utf8_lossy(ours),
                    String::from_utf8_lossy(&theirs.json),
                    "{shape} {unit}: the script's JSON is the daemon's"
                );
                assert_eq!(ours, &theirs.json);
                assert!(
                    theirs.json.len() + 50 <= 8192 || shape == "member",
                    "within max_bytes"
                );
            }
        }
    }
}

/// A batch of 16 KiB ids that are not UTF-8: valid JSON, within `max_bytes`, every removed
/// member listed with its exact bytes; the set emptied, said once.
#[tokio::test]
async fn hostile_ids_in_a_batch_are_all_listed_within_max_bytes() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    let ids: Vec<Vec<u8>> = (0..40u8)
        .map(|i| {
            // Mostly text, with bytes that are not UTF-8 and one to escape: its JSON and its
            // base64 take about 40 KB (an id whose own encoding exceeds max_bytes makes an
            // event that long: an id is never cut).
            let mut id: Vec<u8> = (0..16 * 1024).map(|j| b'a' + (j % 26) as u8).collect();
            id[0] = i;
            id[100] = b'"';
            for j in (7..id.len()).step_by(97) {
                id[j] = 0xff;
            }
            id
        })
        .collect();
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("presence:h1:online");
    for (i, id) in ids.iter().enumerate() {
        zadd.arg(now - 100.0 - i as f64).arg(id.as_slice());
    }
    let _: () = zadd.query(&mut con).unwrap();
    let toml = format!("{STREAMED}event_shape = \"batch\"\n");
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let report = pass(&server.url(), &toml).await;
    assert_eq!(report.counts.evicted, 40);
    let events = sub
        .wait_for(
            report.counts.events_published as usize,
            Duration::from_secs(5),
        )
        .await;
    let mut listed = Vec::new();
    let mut vacated = 0;
    for e in &events {
        assert!(e.payload.len() <= 65536, "{} bytes", e.payload.len());
        let v = e.json();
        vacated += usize::from(v["vacated"] == true);
        for leave in v["leaves"].as_array().unwrap() {
            let b64 = leave["user_id_base64"].as_str().unwrap();
            listed.push(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap(),
            );
        }
    }
    listed.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(listed, expected, "every removed member, exactly once");
    assert_eq!(vacated, 1);
    // About 40 KB of JSON each: one leave per event fits 64 KiB.
    assert_eq!(events.len(), 40);
}

/// Three sweepers at once on the same keys: every leave is appended (and published) exactly
/// once, and each room that empties is said vacated once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sweepers_append_every_leave_once_and_vacate_once() {
    let server = RedisServer::start();
    let mut con = server.con();
    let keys: Vec<String> = (0..60).map(|c| format!("presence:r{c}:online")).collect();
    for (c, key) in keys.iter().enumerate() {
        crate::support::seed_keys(&mut con, [key], 3, usize::from(c % 2 == 0));
    }
    let url = server.url();
    let toml = format!("{STREAMED}[evict]\nmax_members_per_call = 4\nbatch_keys = 7\n");
    let runs = (0..3).map(|_| {
        let (url, toml) = (url.clone(), toml.clone());
        tokio::spawn(async move { pass(&url, &toml).await })
    });
    let evicted: u64 = futures_util::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| r.unwrap().counts.evicted)
        .sum();
    assert_eq!(evicted, 180);
    let (mut leaves, mut vacated) = (0, 0);
    for (c, key) in keys.iter().enumerate() {
        let got = entries(&mut con, &log_of(key), "-");
        let users: BTreeSet<String> = got
            .iter()
            .map(|e| e.value()["user_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!((got.len(), users.len()), (3, 3), "{key}");
        leaves += got.len();
        let v = got.iter().filter(|e| e.value()["vacated"] == true).count();
        assert_eq!(v, usize::from(c % 2 == 1), "{key}");
        vacated += v;
        // The entries chain: each names the one before it.
        let mut prev = "0-0".to_string();
        for e in &got {
            assert_eq!(e.value()["prev"], prev.as_str());
            prev = e.id.clone();
        }
    }
    assert_eq!((leaves, vacated), (180, 30));
}

/// The consumer of docs/events.md: live events, and a catch-up from the stream whenever an event's
/// `prev` is not the last id applied; a reload of the roster when the stream no longer holds
/// what came after that id.
struct Consumer {
    key: String,
    stream: String,
    /// Who the consumer believes is in the room.
    roster: BTreeSet<String>,
    /// The id of the last entry applied ("0-0": the stream held none at the snapshot).
    cursor: String,
    /// Leaves applied, in order.
    applied: Vec<String>,
    reloads: usize,
}

/// `a` < `b` as stream ids.
fn older(a: &str, b: &str) -> bool {
    let parse = |s: &str| {
        let (ms, seq) = s.split_once('-').unwrap();
        (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap())
    };
    parse(a) < parse(b)
}

impl Consumer {
    /// Subscribes first (the caller did), then takes the roster and the cursor in one
    /// transaction: nothing can fall between them.
    fn new(con: &mut redis::Connection, key: &str) -> Self {
        let mut c = Self {
            key: key.into(),
            stream: log_of(key),
            roster: BTreeSet::new(),
            cursor: String::new(),
            applied: Vec::new(),
            reloads: 0,
        };
        c.snapshot(con);
        c
    }

    fn snapshot(&mut self, con: &mut redis::Connection) {
        let (roster, last): (Vec<String>, StreamRangeReply) = redis::pipe()
            .atomic()
            .cmd("ZRANGE")
            .arg(&self.key)
            .arg(0)
            .arg(-1)
            .cmd("XREVRANGE")
            .arg(&self.stream)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query(con)
            .unwrap();
        self.roster = roster.into_iter().collect();
        self.cursor = last.ids.first().map_or("0-0".into(), |e| e.id.clone());
    }

    fn reload(&mut self, con: &mut redis::Connection) {
        self.reloads += 1;
        self.snapshot(con);
    }

    fn apply(&mut self, event: &serde_json::Value, id: &str) {
        let users = match event["leaves"].as_array() {
            Some(leaves) => leaves.iter().map(|l| l["user_id"].clone()).collect(),
            None => vec![event["user_id"].clone()],
        };
        for user in users {
            let user = user.as_str().unwrap().to_owned();
            self.roster.remove(&user);
            self.applied.push(user);
        }
        self.cursor = id.to_owned();
    }

    /// A live event.
    fn on_event(&mut self, con: &mut redis::Connection, payload: &[u8]) {
        let event: serde_json::Value = serde_json::from_slice(payload).unwrap();
        let id = event["id"].as_str().unwrap().to_owned();
        if !older(&self.cursor, &id) {
            return; // Already applied (a catch-up read it first).
        }
        if event["prev"] == self.cursor.as_str() {
            self.apply(&event, &id);
        } else {
            self.catch_up(con);
        }
    }

    /// After a reconnection, or an event whose `prev` is not the cursor: read what came after
    /// the cursor; reload if the stream no longer reaches back to it.
    fn catch_up(&mut self, con: &mut redis::Connection) {
        if self.cursor == "0-0" {
            return self.reload(con);
        }
        let got = entries(con, &self.stream, &self.cursor);
        let Some(first) = got.first() else {
            return self.reload(con); // Not even the cursor's own entry: the stream is gone.
        };
        let mut rest = &got[..];
        if first.id == self.cursor {
            rest = &got[1..];
        }
        for e in rest {
            let event = e.value();
            if event["prev"] != self.cursor.as_str() {
                return self.reload(con); // Trimmed past the cursor, or a new history.
            }
            self.apply(&event, &e.id);
        }
    }
}

/// Leaves of `key`'s zombies: `n` members last seen long ago.
fn add_zombies(con: &mut redis::Connection, key: &str, from: usize, n: usize) {
    let now = redis_now(con);
    let mut zadd = redis::cmd("ZADD");
    zadd.arg(key);
    for i in from..from + n {
        zadd.arg(now - 100.0).arg(format!("z{i}"));
    }
    let _: () = zadd.query(con).unwrap();
}

fn add_live(con: &mut redis::Connection, key: &str, n: usize) {
    let now = redis_now(con);
    for i in 0..n {
        let _: () = redis::cmd("ZADD")
            .arg(key)
            .arg(now + 3600.0)
            .arg(format!("live{i}"))
            .query(con)
            .unwrap();
    }
}

async fn deliver(
    consumer: &mut Consumer,
    con: &mut redis::Connection,
    sub: &Subscriber,
    seen: &mut usize,
    expect: usize,
) {
    let events = sub.wait_for(*seen + expect, Duration::from_secs(5)).await;
    for e in &events[*seen..] {
        consumer.on_event(con, &e.payload);
    }
    *seen = events.len();
}

/// Offline while leaves happen: the consumer catches up from the stream, every leave once,
/// no reload; then goes on live.
#[tokio::test]
async fn a_consumer_offline_catches_up_from_the_stream() {
    for shape in ["member", "batch"] {
        let server = RedisServer::start();
        let mut con = server.con();
        let key = "presence:c7:online";
        add_live(&mut con, key, 3);
        add_zombies(&mut con, key, 0, 2);
        let toml =
            format!("{STREAMED}event_shape = \"{shape}\"\n[evict]\nmax_members_per_call = 8\n");
        let sub = Subscriber::start(&server.url(), "presence:*:events").await;
        let mut consumer = Consumer::new(&mut con, key);
        assert_eq!(consumer.cursor, "0-0");
        let mut seen = 0;
        pass(&server.url(), &toml).await;
        deliver(&mut consumer, &mut con, &sub, &mut seen, 1).await;
        drop(sub);
        // Offline: 30 leaves in three passes, bigger than one call.
        for round in 0..3 {
            add_zombies(&mut con, key, 10 + 10 * round, 10);
            pass(&server.url(), &toml).await;
        }
        let sub = Subscriber::start(&server.url(), "presence:*:events").await;
        consumer.catch_up(&mut con);
        let mut seen = 0;
        add_zombies(&mut con, key, 100, 2);
        pass(&server.url(), &toml).await;
        deliver(&mut consumer, &mut con, &sub, &mut seen, 1).await;
        let expected: BTreeSet<String> = (0..2)
            .chain(10..40)
            .chain(100..102)
            .map(|i| format!("z{i}"))
            .collect();
        assert_eq!(
            consumer.applied.len(),
            34,
            "{shape}: none twice: {:?}",
            consumer.applied
        );
        assert_eq!(
            consumer.applied.iter().cloned().collect::<BTreeSet<_>>(),
            expected,
            "{shape}"
        );
        assert_eq!(consumer.reloads, 0, "{shape}");
        let live: BTreeSet<String> = (0..3).map(|i| format!("live{i}")).collect();
        assert_eq!(consumer.roster, live, "{shape}");
    }
}

/// A trim past the consumer's id, a FLUSHALL: the consumer learns it from `prev` and the
/// stream, and reloads the roster; a restart with AOF keeps the stream, and it goes on.
#[tokio::test]
async fn trims_flushes_and_restarts_are_told_by_the_contract() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.con();
    let key = "presence:c8:online";
    add_live(&mut con, key, 2);
    add_zombies(&mut con, key, 0, 3);
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let mut consumer = Consumer::new(&mut con, key);
    let mut seen = 0;
    pass(&server.url(), STREAMED).await;
    deliver(&mut consumer, &mut con, &sub, &mut seen, 3).await;
    assert_eq!((consumer.applied.len(), consumer.reloads), (3, 0));
    drop(sub);

    // Restarted with AOF: the stream is still there, and the consumer resumes from its id.
    server.stop();
    server.restart();
    let mut con = server.con();
    add_zombies(&mut con, key, 10, 2);
    pass(&server.url(), STREAMED).await;
    consumer.catch_up(&mut con);
    assert_eq!(
        (consumer.applied.len(), consumer.reloads),
        (5, 0),
        "{:?}",
        consumer.applied
    );

    // Trimmed past the consumer's id while it was away: it reloads.
    add_zombies(&mut con, key, 20, 4);
    pass(&server.url(), STREAMED).await;
    let _: () = redis::cmd("XTRIM")
        .arg(log_of(key))
        .arg("MAXLEN")
        .arg(1)
        .query(&mut con)
        .unwrap();
    consumer.catch_up(&mut con);
    assert_eq!(consumer.reloads, 1, "trimmed past: {:?}", consumer.applied);
    assert_eq!(consumer.roster.len(), 2);

    // FLUSHALL while it listens: the next event starts a new history (prev 0-0).
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let mut seen = 0;
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    add_live(&mut con, key, 1);
    add_zombies(&mut con, key, 30, 1);
    pass(&server.url(), STREAMED).await;
    let events = sub.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(events[0].json()["prev"], "0-0");
    deliver(&mut consumer, &mut con, &sub, &mut seen, 1).await;
    assert_eq!(consumer.reloads, 2, "a new history");
    assert_eq!(consumer.roster, BTreeSet::from(["live0".to_string()]));
}

/// Backend workers on one fixed stream: a consumer group drains it, a worker that died
/// holding entries has them claimed by another (XAUTOCLAIM), every leave acknowledged once.
#[tokio::test]
async fn a_worker_group_drains_a_fixed_stream() {
    let server = RedisServer::start();
    let mut con = server.con();
    let stream = "presence-sweeper:leaves";
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg("workers")
        .arg("$")
        .arg("MKSTREAM")
        .query(&mut con)
        .unwrap();
    for c in 0..10 {
        crate::support::seed_keys(&mut con, [format!("presence:g{c}:online")], 3, 1);
    }
    let toml = r#"
[sweeps.typing]
enabled = false
[sweeps.online]
stream = "presence-sweeper:leaves"
"#;
    assert_eq!(pass(&server.url(), toml).await.counts.evicted, 30);
    let read = |con: &mut redis::Connection, worker: &str| -> Vec<(String, String)> {
        let reply: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("workers")
            .arg(worker)
            .arg("COUNT")
            .arg(12)
            .arg("STREAMS")
            .arg(stream)
            .arg(">")
            .query(con)
            .unwrap();
        reply
            .keys
            .into_iter()
            .flat_map(|k| k.ids)
            .map(|e| {
                let json = match e.map.get("event") {
                    Some(redis::Value::BulkString(b)) => {
                        serde_json::from_slice::<serde_json::Value>(b).unwrap()
                    }
                    other => panic!("{other:?}"),
                };
                let who = format!(
                    "{}/{}",
                    json["conversation_id"].as_str().unwrap(),
                    json["user_id"].as_str().unwrap()
                );
                (e.id, who)
            })
            .collect()
    };
    // Worker a takes 12 and dies; b takes the rest and acknowledges them.
    let lost = read(&mut con, "a");
    let mut done: Vec<String> = Vec::new();
    loop {
        let batch = read(&mut con, "b");
        if batch.is_empty() {
            break;
        }
        for (id, who) in batch {
            let _: () = redis::cmd("XACK")
                .arg(stream)
                .arg("workers")
                .arg(&id)
                .query(&mut con)
                .unwrap();
            done.push(who);
        }
    }
    // b claims what a held (idle 0 ms here; minutes in production) and acknowledges it.
    // Redis 7 adds a third element (deleted ids) to the reply of 6.2.
    let reply: Vec<redis::Value> = redis::cmd("XAUTOCLAIM")
        .arg(stream)
        .arg("workers")
        .arg("b")
        .arg(0)
        .arg("0-0")
        .query(&mut con)
        .unwrap();
    let claimed: StreamRangeReply = redis::from_redis_value(reply[1].clone()).unwrap();
    assert_eq!(claimed.ids.len(), lost.len());
    for e in claimed.ids {
        let _: () = redis::cmd("XACK")
            .arg(stream)
            .arg("workers")
            .arg(&e.id)
            .query(&mut con)
            .unwrap();
        done.push(lost.iter().find(|(id, _)| *id == e.id).unwrap().1.clone());
    }
    done.sort();
    let expected: Vec<String> = {
        let mut v: Vec<String> = (0..10)
            .flat_map(|c| (0..3).map(move |z| format!("g{c}/zombie{z}")))
            .collect();
        v.sort();
        v
    };
    assert_eq!(done, expected, "every leave processed once");
    let pending: (u64, redis::Value, redis::Value, redis::Value) = redis::cmd("XPENDING")
        .arg(stream)
        .arg("workers")
        .query(&mut con)
        .unwrap();
    assert_eq!(pending.0, 0);
}

/// Under maxmemory with noeviction XADD is refused: nothing is removed without its entry, and
/// the pass says why.
#[tokio::test]
async fn a_full_redis_refuses_the_stream_and_nothing_is_removed() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let mut con = server.con();
    crate::support::seed_keys(&mut con, ["presence:m1:online", "presence:m2:online"], 2, 1);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut con)
        .unwrap();
    let cfg = config(&server.url(), STREAMED);
    let err = OnePass::connect(&cfg, "online")
        .await
        .run(pass::Options::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("OOM"), "{err}");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut con)
        .unwrap();
    for key in ["presence:m1:online", "presence:m2:online"] {
        assert_eq!(crate::support::members(&mut con, key).len(), 3, "{key}");
        let exists: bool = redis::cmd("EXISTS")
            .arg(log_of(key))
            .query(&mut con)
            .unwrap();
        assert!(!exists);
    }
}

/// A user that may not XADD is refused before anything is removed.
#[tokio::test]
async fn the_preflight_proves_the_stream_commands() {
    let server = RedisServer::start();
    let mut con = server.con();
    crate::support::seed_keys(&mut con, ["presence:p1:online"], 2, 1);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("sweeper")
        .arg("on")
        .arg(">pw")
        .arg("~presence:*")
        .arg("&*")
        .arg("+@all")
        .arg("-xadd")
        .query(&mut con)
        .unwrap();
    let url = format!("redis://sweeper:pw@127.0.0.1:{}/0", server.port);
    let cfg = config(&url, STREAMED);
    let err = OnePass::connect(&cfg, "online")
        .await
        .run(pass::Options::default())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("XADD") && text.contains("presence:{hash_tag}:log"),
        "{text}"
    );
    assert_eq!(
        crate::support::members(&mut con, "presence:p1:online").len(),
        3
    );
}

/// A 3-primary cluster, hash-tagged keys, a stream per conversation: atomic and exactly once,
/// no live member touched; a fixed stream is refused by check-config, naming the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_streams_each_leave_once_in_the_keys_slot() {
    let cluster = RedisCluster::start(3, 0);
    let mut con = cluster.con();
    let keys: Vec<String> = (0..30)
        .map(|c| format!("presence:{{c{c}}}:online"))
        .collect();
    for key in &keys {
        crate::support::seed_keys(&mut con, [key], 2, 2);
    }
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}\n[sweeps.typing]\nenabled = false\n[sweeps.online]\nstream = \"presence:{{hash_tag}}:log\"\nchannel = \"presence:{{hash_tag}}:events\"\n",
        cluster.redis_toml()
    );
    let file = write_file(dir.path(), "c.toml", &toml);
    let (code, out, err) = run_binary(
        &[
            "--config",
            file.to_str().unwrap(),
            "sweep",
            "--sweep",
            "online",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("evicted=60"), "{out}");
    for key in &keys {
        let tag = &key["presence:".len()..key.len() - ":online".len()];
        let log = format!("presence:{tag}:log");
        let got = entries(&mut con, &log, "-");
        let users: BTreeSet<String> = got
            .iter()
            .map(|e| e.value()["user_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            users,
            BTreeSet::from(["zombie0".into(), "zombie1".into()]),
            "{key}"
        );
        assert_eq!(
            crate::support::members(&mut con, key),
            ["live0", "live1"],
            "no false leave"
        );
    }
    let fixed = toml.replace("presence:{hash_tag}:log", "presence-sweeper:leaves");
    let file = write_file(dir.path(), "fixed.toml", &fixed);
    let (code, out, err) = run_binary(&["--config", file.to_str().unwrap(), "check-config"], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("sweeps.online.stream") && err.contains("{hash_tag}"),
        "{err}"
    );
}

/// Without a stream, through transactions and the bounded script alike: batch events list every
/// leave, member events are today's plus `vacated` on the emptying one, and no `id` or `prev`.
#[tokio::test]
async fn without_a_stream_batches_and_vacated_rooms_are_published_too() {
    let server = RedisServer::start();
    let mut con = server.con();
    for (shape, evict) in [
        ("batch", ""),
        ("batch", "max_members_per_call = 2"),
        ("member", ""),
    ] {
        crate::support::seed_keys(&mut con, ["presence:v1:online"], 5, 0);
        crate::support::seed_keys(&mut con, ["presence:v2:online"], 3, 1);
        let toml = format!(
            "[sweeps.typing]\nenabled = false\n[sweeps.online]\nevent_shape = \"{shape}\"\n[evict]\n{evict}\n"
        );
        let sub = Subscriber::start(&server.url(), "presence:*:events").await;
        let report = pass(&server.url(), &toml).await;
        assert_eq!(report.counts.evicted, 8, "{shape} {evict}");
        let events = sub
            .wait_for(
                report.counts.events_published as usize,
                Duration::from_secs(5),
            )
            .await;
        let (mut leaves, mut vacated) = (0, Vec::new());
        for e in &events {
            let v = e.json();
            assert!(v.get("id").is_none() && v.get("prev").is_none());
            leaves += v["leaves"].as_array().map_or(1, Vec::len);
            if v["vacated"] == true {
                vacated.push(v["conversation_id"].as_str().unwrap().to_owned());
                assert_eq!(v["online_count"], 0);
            }
        }
        assert_eq!(leaves, 8, "{shape} {evict}");
        assert_eq!(vacated, ["v1"], "{shape} {evict}");
        if shape == "batch" && evict.is_empty() {
            assert_eq!(events.len(), 2);
        }
    }
}
