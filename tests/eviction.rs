//! Eviction semantics against a real Redis: what is removed, what is kept, what is announced.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::support::{OnePass, RedisServer, Subscriber, config, members, redis_now};
use presence_sweeper::pass;
use presence_sweeper_redis::scan::FIRST_PAGE_SHARE;
use redis::Commands;
use tokio_util::sync::CancellationToken;

const ONLY_ONLINE: &str = "[sweeps.typing]\nenabled = false\n";

async fn pass(server: &RedisServer, toml: &str, sweep: &str, opts: pass::Options) -> pass::Report {
    pass_at(&server.url(), toml, sweep, opts).await
}

async fn pass_at(url: &str, toml: &str, sweep: &str, opts: pass::Options) -> pass::Report {
    let cfg = config(url, toml);
    OnePass::connect(&cfg, sweep).await.run(opts).await.unwrap()
}

/// A pass that judges staleness at `now` (Unix seconds) rather than at Redis's clock: the
/// `test-hooks` feature's hook, so that members can sit exactly on the boundary.
fn judged_at(now: f64) -> pass::Options {
    pass::Options {
        judge_at: Some(now),
        ..pass::Options::default()
    }
}

/// `payload` with its `timestamp` shown as `T`, once checked to lie between `from` and `to`:
/// events are stamped with Redis `TIME` at the eviction, whatever instant staleness was judged at.
fn stamped_between(payload: &[u8], from: f64, to: f64) -> String {
    let text = String::from_utf8(payload.to_vec()).unwrap();
    let start = text.find(r#""timestamp":"#).expect("a timestamp") + r#""timestamp":"#.len();
    let end = start + text[start..].find(',').expect("more fields");
    let stamp: f64 = text[start..end].parse().unwrap();
    assert!((from..=to).contains(&stamp), "{stamp} not in {from}..{to}");
    format!("{}T{}", &text[..start], &text[end..])
}

#[tokio::test]
async fn stale_members_go_fresh_ones_stay_on_redis_clock() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    let _: () = con
        .zadd_multiple(
            "presence:c1:online",
            &[
                (now - 3600.0, "gone-long-ago"),
                (now - 46.0, "just-gone"),
                (now - 40.0, "quiet"),
                (now, "live"),
            ],
        )
        .unwrap();
    let report = pass(&server, ONLY_ONLINE, "online", pass::Options::default()).await;
    assert_eq!(members(&mut con, "presence:c1:online"), ["live", "quiet"]);
    assert_eq!(
        (
            report.keys_scanned,
            report.counts.keys,
            report.counts.members,
            report.counts.evicted
        ),
        (1, 1, 2, 2)
    );
    assert_eq!(report.counts.events_published, 2);
    assert!(report.complete);
}

#[tokio::test]
async fn exact_boundary_is_kept() {
    exact_boundary(ONLY_ONLINE).await;
}

#[tokio::test]
async fn exact_boundary_is_kept_by_the_script_too() {
    exact_boundary(&format!("{ONLY_ONLINE}{SCRIPT_PATH}")).await;
}

/// Forces every key with two or more zombies through the Lua script instead of a transaction.
const SCRIPT_PATH: &str = "[evict]\nmax_members_per_call = 1\n";

async fn exact_boundary(toml: &str) {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = 1_764_460_045.0;
    // ttl 45 s: the cutoff is exactly 1764460000.
    let _: () = con
        .zadd_multiple(
            "presence:c1:online",
            &[
                (1_764_460_000.0, "at-cutoff"),
                (1_764_459_999.999, "just-below"),
                (1_764_460_000.001, "just-above"),
                (1_764_459_000.0, "long-gone"),
            ],
        )
        .unwrap();
    let report = pass(&server, toml, "online", judged_at(now)).await;
    assert_eq!(
        members(&mut con, "presence:c1:online"),
        ["at-cutoff", "just-above"]
    );
    assert_eq!(report.counts.evicted, 2);
}

#[tokio::test]
async fn online_event_payload_is_exact() {
    let server = RedisServer::start();
    let mut con = server.con();
    let _: () = con
        .zadd_multiple(
            "presence:c42:online",
            &[
                (1_764_460_000.25, "u7"),
                (1_764_460_040.0, "u1"),
                (1_764_460_041.0, "u2"),
            ],
        )
        .unwrap();
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let before = redis_now(&mut con);
    pass(&server, ONLY_ONLINE, "online", judged_at(1_764_460_046.5)).await;
    let after = redis_now(&mut con);
    let got = sub.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].channel, b"presence:c42:events");
    assert_eq!(
        stamped_between(&got[0].payload, before, after),
        r#"{"type":"presence.leave","conversation_id":"c42","user_id":"u7","reason":"expired","last_seen":1764460000.25,"timestamp":T,"online":["u2","u1"],"online_count":2}"#
    );
}

#[tokio::test]
async fn typing_event_payload_is_exact() {
    let server = RedisServer::start();
    let mut con = server.con();
    let _: () = con
        .zadd_multiple(
            "presence:c42:typing",
            &[(1_764_460_040.5, "u7"), (1_764_460_045.0, "u1")],
        )
        .unwrap();
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let toml = "[sweeps.online]\nenabled = false\n";
    let before = redis_now(&mut con);
    pass(&server, toml, "typing", judged_at(1_764_460_046.0)).await;
    let after = redis_now(&mut con);
    let got = sub.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(
        stamped_between(&got[0].payload, before, after),
        r#"{"type":"typing.stop","conversation_id":"c42","user_id":"u7","reason":"expired","last_seen":1764460040.5,"timestamp":T,"typing":["u1"],"typing_count":1}"#
    );
}

/// The only sweep: `cursor:*`, scored in milliseconds, ttl 2 s.
const CURSOR_MS: &str = r#"
        [sweeps.online]
        enabled = false
        [sweeps.typing]
        enabled = false
        [sweeps.cursor]
        match = "cursor:*"
        ttl = "2s"
        schedule = "1s"
        event = "cursor.gone"
        channel = "cursor-events"
        score_unit = "milliseconds"
"#;

#[tokio::test]
async fn millisecond_scores() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now_ms = redis_now(&mut con) * 1000.0;
    let _: () = con
        .zadd_multiple(
            "cursor:c1",
            &[
                (now_ms - 2500.0, "stale"),
                (now_ms - 500.0, "fresh"),
                (now_ms + 10.0, "future"),
            ],
        )
        .unwrap();
    let sub = Subscriber::start(&server.url(), "cursor-events").await;
    let report = pass(&server, CURSOR_MS, "cursor", pass::Options::default()).await;
    assert_eq!(report.counts.evicted, 1);
    assert_eq!(members(&mut con, "cursor:c1"), ["fresh", "future"]);
    let got = sub.wait_for(1, Duration::from_secs(5)).await;
    let ev = got[0].json();
    assert_eq!(ev["type"], "cursor.gone");
    assert_eq!(ev["user_id"], "stale");
    // Seconds on the wire, whatever the score unit.
    let last_seen = ev["last_seen"].as_f64().unwrap();
    assert!(
        (last_seen - (now_ms - 2500.0) / 1000.0).abs() < 1e-6,
        "{ev}"
    );
    let ts = ev["timestamp"].as_f64().unwrap();
    assert!((ts - now_ms / 1000.0).abs() < 5.0, "{ev}");
    assert_eq!(ev["cursor_count"], 2);
}

/// A pass in milliseconds over keys some apps write in seconds: every member of those reads as
/// a zombie, and only a sample of the stale keys before each eviction shows why. Whichever batch
/// they come in, none of their members goes. SCAN's order follows the server's random hash
/// seed and the keys' names, so each round names its keys anew: a pass that sampled only before
/// its first eviction lost them in the first round.
#[tokio::test]
async fn a_pass_in_milliseconds_removes_nothing_apps_write_in_seconds() {
    let server = RedisServer::start();
    let mut con = server.con();
    let toml = format!("[evict]\nbatch_keys = 5\npipeline_depth = 1\n{CURSOR_MS}");
    for round in 0..4 {
        let now = redis_now(&mut con);
        let mut pipe = redis::pipe();
        for i in 0..60 {
            let key = format!("cursor:r{round}-ms-{i}");
            pipe.zadd(&key, "gone", now * 1000.0 - 10_000.0).ignore();
            pipe.zadd(&key, "here", now * 1000.0).ignore();
        }
        for i in 0..3 {
            pipe.zadd(format!("cursor:r{round}-s-{i}"), "here", now)
                .ignore();
        }
        let () = pipe.query(&mut con).unwrap();
        let report = pass(&server, &toml, "cursor", pass::Options::default()).await;
        assert!(report.counts.evicted <= 60, "round {round}: {report:?}");
        for i in 0..3 {
            assert_eq!(
                members(&mut con, &format!("cursor:r{round}-s-{i}")),
                ["here"],
                "round {round}: a member written in seconds was evicted ({report:?})"
            );
        }
        let () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    }
}

#[tokio::test]
async fn odd_conversation_ids_non_zset_keys_and_binary_members() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    let odd_ids = [
        "team:a:b", "*", "x?y", "[abc]", "quo\"te", "sp ace", "{c42}",
    ];
    crate::support::seed_keys(
        &mut con,
        odd_ids.iter().map(|id| format!("presence:{id}:online")),
        1,
        1,
    );
    // A string and a hash under the pattern: SCAN's TYPE filter skips them, and they survive.
    let _: () = con.set("presence:str:online", "not a zset").unwrap();
    let _: () = con.hset("presence:hash:online", "u1", "x").unwrap();
    // A member that is not UTF-8.
    let binary_member: &[u8] = b"\xff\xfeuser";
    let _: () = redis::cmd("ZADD")
        .arg("presence:bin:online")
        .arg(now - 100.0)
        .arg(binary_member)
        .query(&mut con)
        .unwrap();

    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let report = pass(&server, ONLY_ONLINE, "online", pass::Options::default()).await;
    assert_eq!(report.counts.keys, odd_ids.len() as u64 + 1);
    assert_eq!(report.counts.evicted, odd_ids.len() as u64 + 1);

    let got = sub
        .wait_for(odd_ids.len() + 1, Duration::from_secs(5))
        .await;
    assert_eq!(got.len(), odd_ids.len() + 1);
    let mut seen = HashSet::new();
    for r in &got {
        let ev = r.json();
        let conv = ev["conversation_id"].as_str().unwrap().to_owned();
        let expected_channel = format!("presence:{conv}:events");
        if conv == "bin" {
            assert_eq!(ev["user_id"], "\u{fffd}\u{fffd}user");
            assert_eq!(ev["user_id_base64"], "//51c2Vy");
        } else {
            assert_eq!(ev["user_id"], "zombie");
            assert_eq!(r.channel, expected_channel.as_bytes());
        }
        seen.insert(conv);
    }
    for id in odd_ids {
        assert!(seen.contains(id), "no event for conversation {id:?}");
        assert_eq!(
            members(&mut con, &format!("presence:{id}:online")),
            ["live"]
        );
    }
    let s: String = con.get("presence:str:online").unwrap();
    assert_eq!(s, "not a zset");
    let h: String = con.hget("presence:hash:online", "u1").unwrap();
    assert_eq!(h, "x");
    let exists: bool = con.exists("presence:bin:online").unwrap();
    assert!(!exists, "a set whose last member was evicted is gone");
}

#[tokio::test]
async fn dry_run_changes_and_publishes_nothing() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    for c in 0..20 {
        let _: () = con
            .zadd_multiple(
                format!("presence:c{c}:online"),
                &[(now - 100.0, "a"), (now - 90.0, "b"), (now, "c")],
            )
            .unwrap();
    }
    let before: Vec<(String, f64)> = con.zrange_withscores("presence:c3:online", 0, -1).unwrap();
    let sub = Subscriber::start(&server.url(), "*").await;
    let opts = pass::Options {
        dry_run: true,
        ..pass::Options::default()
    };
    let report = pass(&server, ONLY_ONLINE, "online", opts).await;
    assert_eq!(
        (
            report.counts.keys,
            report.counts.evicted,
            report.counts.members
        ),
        (20, 40, 20)
    );
    assert_eq!(report.counts.events_published, 0);
    let after: Vec<(String, f64)> = con.zrange_withscores("presence:c3:online", 0, -1).unwrap();
    assert_eq!(before, after);
    for c in 0..20 {
        let n: u64 = con.zcard(format!("presence:c{c}:online")).unwrap();
        assert_eq!(n, 3);
    }
    assert!(sub.wait_for(1, Duration::from_millis(300)).await.is_empty());
}

#[tokio::test]
async fn big_set_is_swept_in_short_commands() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    // 200k members, half of them stale.
    for chunk in 0..200 {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg("presence:big:online");
        for i in 0..1000 {
            let n = chunk * 1000 + i;
            let score = if n % 2 == 0 { now - 100.0 } else { now };
            cmd.arg(score).arg(format!("user-{n}"));
        }
        let _: () = cmd.query(&mut con).unwrap();
    }
    // A wide net: on a machine other runs load, even a bounded command may take tens of
    // milliseconds; the bound itself is shown by the number of calls below.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(500_000)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();

    let report = pass(&server, ONLY_ONLINE, "online", pass::Options::default()).await;
    assert_eq!(report.counts.evicted, 100_000);
    assert_eq!(report.counts.events_published, 100_000);
    let card: u64 = con.zcard("presence:big:online").unwrap();
    assert_eq!(card, 100_000);
    // 100,000 zombies, at most 500 per call (evict.max_members_per_call): at least 200 calls.
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    let calls = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        calls >= 200,
        "{calls} script calls for 100,000 zombies:\n{stats}"
    );
    let slow: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query(&mut con)
        .unwrap();
    assert!(slow.is_empty(), "commands over 500 ms: {slow:?}");
}

#[tokio::test]
async fn three_sweepers_announce_each_zombie_exactly_once() {
    // Small batches maximise interleaving between the three.
    three_sweepers("[evict]\nbatch_keys = 2\n").await;
}

#[tokio::test]
async fn three_sweepers_through_the_script_announce_each_zombie_exactly_once() {
    three_sweepers("[evict]\nbatch_keys = 2\nmax_members_per_call = 3\n").await;
}

async fn three_sweepers(evict: &str) {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    let (keys, stale_per_key) = (300, 5);
    for c in 0..keys {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(format!("presence:c{c}:online"));
        for u in 0..stale_per_key {
            cmd.arg(now - 100.0 - u as f64).arg(format!("zombie{u}"));
            cmd.arg(now).arg(format!("live{u}"));
        }
        let _: () = cmd.query(&mut con).unwrap();
    }
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let toml = format!("{ONLY_ONLINE}{evict}");
    let mut reports = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..3 {
        let cfg = config(&server.url(), &toml);
        handles.push(tokio::spawn(async move {
            let sweeper = OnePass::connect(&cfg, "online").await;
            let mut total = 0;
            for _ in 0..3 {
                total += sweeper
                    .run(pass::Options::default())
                    .await
                    .unwrap()
                    .counts
                    .evicted;
            }
            total
        }));
    }
    for h in handles {
        reports.push(h.await.unwrap());
    }
    let expected = keys * stale_per_key;
    assert_eq!(reports.iter().sum::<u64>(), expected as u64, "{reports:?}");
    let got = sub.wait_for(expected, Duration::from_secs(10)).await;
    assert_eq!(got.len(), expected);
    let mut seen = HashMap::new();
    for r in &got {
        let ev = r.json();
        let id = (
            ev["conversation_id"].as_str().unwrap().to_owned(),
            ev["user_id"].as_str().unwrap().to_owned(),
        );
        assert!(
            id.1.starts_with("zombie"),
            "a live member was announced: {ev}"
        );
        *seen.entry(id).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), expected);
    assert!(seen.values().all(|&n| n == 1));
    for c in 0..keys {
        let m = members(&mut con, &format!("presence:c{c}:online"));
        assert_eq!(m.len(), stale_per_key);
        assert!(m.iter().all(|u| u.starts_with("live")));
    }
}

/// A heartbeat racing sweeps is never lost to a stale read.
///
/// Members flip between live and stale all the time (heartbeats every 20-80 ms against a 50 ms
/// window), three sweepers pass every millisecond or so, and afterwards every announced eviction
/// is checked against the heartbeat log: the score it reports must be the member's latest
/// heartbeat before the eviction instant, and stale at that instant. Removing a member whose
/// heartbeat had landed would break the first; evicting a live member would break the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_heartbeats_are_never_evicted() {
    racing_heartbeats("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_heartbeats_are_never_evicted_by_the_script() {
    racing_heartbeats(SCRIPT_PATH).await;
}

async fn racing_heartbeats(evict: &str) {
    let server = RedisServer::start();
    let base = r#"
        [sweeps.online]
        enabled = false
        [sweeps.typing]
        enabled = false
        [sweeps.hb]
        match = "hb:*"
        ttl = "1s"
        schedule = "1s"
        event = "leave"
        channel = "hb-events"
        score_unit = "milliseconds"
    "#;
    let toml = &format!("{base}{evict}");
    let sub = Subscriber::start(&server.url(), "hb-events").await;
    let stop = CancellationToken::new();
    let key = "hb:room";
    // Many users, each heartbeating every 0.4 to 1.6 s around the 1 s window: at every moment
    // some are on the boundary while passes evict.
    let users = 200;

    // Heartbeats stamp the score with Redis's clock inside a script, as an app should.
    let heartbeat = redis::Script::new(
        "local t = redis.call('TIME') \
         local s = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 \
         local added = redis.call('ZADD', KEYS[1], s, ARGV[1]) \
         return { string.format('%.17g', s), added }",
    );
    let mut beaters = Vec::new();
    for u in 0..users {
        let client = server.client();
        let heartbeat = heartbeat.clone();
        let stop = stop.clone();
        beaters.push(tokio::spawn(async move {
            let mut con = client.get_multiplexed_async_connection().await.unwrap();
            let mut log = Vec::new();
            let mut step = u as u64;
            while !stop.is_cancelled() {
                let (s, added): (String, u8) = heartbeat
                    .key(key)
                    .arg(format!("u{u}"))
                    .invoke_async(&mut con)
                    .await
                    .unwrap();
                log.push((s.parse::<f64>().unwrap(), added == 1));
                step = step
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                tokio::time::sleep(Duration::from_millis(400 + (step >> 33) % 1201)).await;
            }
            (format!("u{u}"), log)
        }));
    }
    let mut sweepers = Vec::new();
    let done = Arc::new(AtomicU64::new(0));
    for _ in 0..3 {
        let cfg = config(&server.url(), toml);
        let stop = stop.clone();
        let done = done.clone();
        sweepers.push(tokio::spawn(async move {
            let sweeper = OnePass::connect(&cfg, "hb").await;
            let mut passes = 0u64;
            while !stop.is_cancelled() {
                sweeper.run(pass::Options::default()).await.unwrap();
                passes += 1;
                done.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            passes
        }));
    }
    // 3 s, and longer if the race has not yet run 300 passes (a busy machine: three test passes
    // side by side on 2 cores), 30 s at most.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(27);
    while done.load(Ordering::Relaxed) <= 300 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    let mut heartbeats: HashMap<String, Vec<(f64, bool)>> = HashMap::new();
    for b in beaters {
        let (user, log) = b.await.unwrap();
        heartbeats.insert(user, log);
    }
    let mut passes = 0;
    for s in sweepers {
        passes += s.await.unwrap();
    }
    let events = sub.wait_for(0, Duration::from_millis(100)).await;
    assert!(passes > 300, "only {passes} passes ran");
    assert!(
        events.len() > 20,
        "too few evictions to exercise the race: {}",
        events.len()
    );

    let mut announced = HashSet::new();
    for r in &events {
        let ev = r.json();
        let user = ev["user_id"].as_str().unwrap();
        let last_seen_ms = ev["last_seen"].as_f64().unwrap() * 1000.0;
        let evicted_at_ms = ev["timestamp"].as_f64().unwrap() * 1000.0;
        assert!(
            last_seen_ms < evicted_at_ms - 1000.0 + 1e-3,
            "{user} evicted while live: {ev}"
        );
        let log = &heartbeats[user];
        let j = log
            .iter()
            .rposition(|&(h, _)| h <= evicted_at_ms)
            .expect("evicted before its first heartbeat");
        assert!(
            (log[j].0 - last_seen_ms).abs() < 1e-3,
            "{user}: the eviction at {evicted_at_ms} reports last_seen {last_seen_ms}, but the \
             latest heartbeat before it was {}: a heartbeat was lost",
            log[j].0
        );
        // The removal really took the member with that score: the next heartbeat found it gone.
        if let Some(&(next, added)) = log.get(j + 1) {
            assert!(
                added,
                "{user}: evicted at {last_seen_ms}, yet the heartbeat at {next} updated it"
            );
        }
        assert!(
            announced.insert((user.to_owned(), j)),
            "{user} announced twice for one heartbeat"
        );
    }
    // Conversely, every time a heartbeat found its member gone, that removal was announced with
    // the score it removed.
    for (user, log) in &heartbeats {
        for (i, &(_, added)) in log.iter().enumerate().skip(1) {
            if added {
                assert!(
                    announced.contains(&(user.clone(), i - 1)),
                    "{user} was removed after its heartbeat at {} without an announcement",
                    log[i - 1].0
                );
            }
        }
    }
}

/// Logs every command from now on (SLOWLOG at 0 us).
fn log_every_command(con: &mut redis::Connection) {
    let _: () = redis::pipe()
        .cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg(100_000)
        .ignore()
        .cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .ignore()
        .cmd("SLOWLOG")
        .arg("RESET")
        .ignore()
        .query(con)
        .unwrap();
}

/// The arguments of the logged commands named `name`, oldest first.
fn logged(con: &mut redis::Connection, name: &str) -> Vec<Vec<String>> {
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100_000)
        .query(con)
        .unwrap();
    log.into_iter()
        .rev()
        .map(|entry| {
            let redis::Value::Array(fields) = entry else {
                panic!("a SLOWLOG entry that is not an array");
            };
            redis::from_redis_value::<Vec<String>>(fields[3].clone()).unwrap()
        })
        .filter(|args| args[0].eq_ignore_ascii_case(name))
        .collect()
}

/// `start`, then twice the one before, up to `most`: `len` of them.
fn doubling(start: u32, most: u32, len: usize) -> Vec<u32> {
    let mut v = vec![start];
    while v.len() < len {
        v.push((v[v.len() - 1] * 2).min(most));
    }
    v
}

/// `n` online keys `presence:c0:online`, ... with one fresh member each.
fn fresh_keys(con: &mut redis::Connection, n: usize) {
    let now = redis_now(con);
    let mut pipe = redis::pipe();
    for c in 0..n {
        pipe.zadd(format!("presence:c{c}:online"), "u", now)
            .ignore();
    }
    let _: () = pipe.query(con).unwrap();
}

#[tokio::test]
async fn max_keys_per_second_paces_discovery() {
    let server = RedisServer::start();
    let mut con = server.con();
    fresh_keys(&mut con, 3000);
    let toml = format!("{ONLY_ONLINE}[scan]\ncount = 100\nmax_keys_per_second = 2000\n");
    let report = pass(&server, &toml, "online", pass::Options::default()).await;
    assert_eq!(report.counts.keys, 3000);
    // 3000 keys at 2000 a second: everything but the last page waits its turn.
    assert!(
        report.duration >= Duration::from_millis(1200),
        "{:?}",
        report.duration
    );
}

/// A pass starts with small SCAN pages and doubles them up to `scan.count`, so that the first
/// commands to meet a Redis that has been idle stay short. Read back from Redis's own log of
/// every command.
#[tokio::test]
async fn discovery_starts_with_small_pages() {
    let server = RedisServer::start();
    let mut con = server.con();
    fresh_keys(&mut con, 5000);
    log_every_command(&mut con);
    let report = pass(&server, ONLY_ONLINE, "online", pass::Options::default()).await;
    assert_eq!(report.counts.keys, 5000);
    // The sweep's SCANs (the preflight's has no MATCH), with their COUNT.
    let counts: Vec<u32> = logged(&mut con, "SCAN")
        .iter()
        .filter(|args| args.len() > 6)
        .map(|args| args[5].parse().unwrap())
        .collect();
    assert!(counts.len() > 6, "{counts:?}");
    // The default scan.count is 1000: 62, 124, 248, 496, 992, then 1000 to the end.
    assert_eq!(
        counts,
        doubling(1000 / FIRST_PAGE_SHARE, 1000, counts.len())
    );
    assert_eq!(counts[..2], [62, 124]);
}

/// A full pass reads no ids before it evicts: it looks at a stale key's lowest member first, so
/// that 300 zombies of 16 KiB (about 5 MB) are not asked for in one transaction's reply but go
/// to the script, in calls sized to about 4 MiB, starting small.
#[tokio::test]
async fn a_full_pass_sizes_its_first_calls_by_the_ids_it_meets() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    let mut cmd = redis::cmd("ZADD");
    cmd.arg("presence:long:online");
    for n in 0..300 {
        cmd.arg(now - 100.0)
            .arg(format!("gone{n:04}-{}", "x".repeat(16 * 1024)));
    }
    cmd.arg(now).arg("here");
    let _: () = cmd.query(&mut con).unwrap();
    log_every_command(&mut con);
    let report = pass(&server, ONLY_ONLINE, "online", pass::Options::default()).await;
    assert_eq!(report.counts.evicted, 300);
    assert_eq!(members(&mut con, "presence:long:online"), ["here"]);
    let calls: Vec<Vec<String>> = logged(&mut con, "EVALSHA")
        .into_iter()
        .filter(|args| args.get(7).is_some_and(|b| b != "0"))
        .collect();
    assert!(!calls.is_empty(), "the key went to the script");
    // The script reads zombies a LIMIT at a time; a transaction would have asked for all.
    let unbounded = logged(&mut con, "ZRANGE").into_iter().any(|args| {
        let has = |word: &str| args.iter().any(|a| a.eq_ignore_ascii_case(word));
        has("BYSCORE") && !has("LIMIT")
    });
    assert!(!unbounded, "no transaction asked for the zombies at once");
}

/// A key with more zombies than one call may remove is swept by script calls whose budgets start
/// small and double up to `evict.max_members_per_call`, for the same reason.
#[tokio::test]
async fn script_calls_on_a_big_key_start_small() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    let mut cmd = redis::cmd("ZADD");
    cmd.arg("presence:big:online");
    for n in 0..5000 {
        let score = if n < 4000 { now - 100.0 } else { now };
        cmd.arg(score).arg(format!("user-{n}"));
    }
    let _: () = cmd.query(&mut con).unwrap();
    log_every_command(&mut con);
    let report = pass(&server, ONLY_ONLINE, "online", pass::Options::default()).await;
    assert_eq!(report.counts.evicted, 4000);
    // EVALSHA sha numkeys key ttl unit chunk budget ...: the budget of each call that ran (the
    // preflight's probe has a budget of 0).
    let mut budgets: Vec<u32> = logged(&mut con, "EVALSHA")
        .iter()
        .map(|args| args[7].parse().unwrap())
        .filter(|&budget| budget > 0)
        .collect();
    // The first call is refused NOSCRIPT on a fresh server and sent again once the script is
    // loaded.
    if budgets.len() > 1 && budgets[0] == budgets[1] {
        budgets.remove(0);
    }
    assert!(budgets.len() > 6, "{budgets:?}");
    assert_eq!(
        budgets,
        doubling(500 / FIRST_PAGE_SHARE, 500, budgets.len())
    );
}

#[tokio::test]
async fn a_big_room_lists_100_members_and_counts_them_all() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    let mut cmd = redis::cmd("ZADD");
    cmd.arg("presence:big-room:online");
    for u in 0..150 {
        cmd.arg(now - u as f64 * 0.01).arg(format!("live{u:03}"));
    }
    cmd.arg(now - 100.0).arg("zombie");
    let _: () = cmd.query(&mut con).unwrap();
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let report = pass(&server, ONLY_ONLINE, "online", pass::Options::default()).await;
    assert_eq!((report.counts.evicted, report.counts.members), (1, 150));
    let got = sub.wait_for(1, Duration::from_secs(5)).await;
    let ev = got[0].json();
    assert_eq!(ev["online_count"], 150);
    let roster = ev["online"].as_array().unwrap();
    assert_eq!(roster.len(), 100);
    // Most recently seen first.
    assert_eq!(roster[0], "live000");
    assert_eq!(roster[99], "live099");
}

/// The roster is read oldest first and reversed by the sweeper: members with equal scores must
/// still come in exactly the order `ZRANGE ... REV` gives, for a small set and past 100 members.
#[tokio::test]
async fn rosters_with_tied_scores_are_in_zrange_rev_order() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now = redis_now(&mut con);
    for (key, size) in [("presence:small:online", 7), ("presence:large:online", 130)] {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(key);
        for u in 0..size {
            // Three members per score: ties broken by member name, in both directions.
            cmd.arg(now - (u / 3) as f64)
                .arg(format!("m{:03}", (u * 37) % size));
        }
        cmd.arg(now - 100.0).arg("zombie");
        let _: () = cmd.query(&mut con).unwrap();
    }
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let report = pass(&server, ONLY_ONLINE, "online", pass::Options::default()).await;
    assert_eq!(report.counts.evicted, 2);
    let got = sub.wait_for(2, Duration::from_secs(5)).await;
    for event in got {
        let ev = event.json();
        let key = format!(
            "presence:{}:online",
            ev["conversation_id"].as_str().unwrap()
        );
        let expected: Vec<String> = redis::cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(99)
            .arg("REV")
            .query(&mut con)
            .unwrap();
        let roster: Vec<String> = serde_json::from_value(ev["online"].clone()).unwrap();
        assert_eq!(roster, expected, "{key}");
    }
}

/// The data path's own connection must select the configured database, over TCP and over a unix
/// socket alike, and touch no other.
#[tokio::test]
async fn only_the_configured_database_is_swept_over_tcp_and_unix_sockets() {
    let socket_dir = tempfile::tempdir().unwrap();
    let socket = socket_dir.path().join("redis.sock");
    let socket_arg = socket.to_string_lossy().into_owned();
    let server = RedisServer::start_with(&["--unixsocket", &socket_arg, "--unixsocketperm", "700"]);
    let base = server.url();
    let base = base.trim_end_matches("/0");
    for (db, url) in [
        (3, format!("{base}/3")),
        (2, format!("unix://{socket_arg}?db=2")),
    ] {
        let mut con = server.con();
        let now = redis_now(&mut con);
        for d in [0, db] {
            redis::cmd("SELECT").arg(d).exec(&mut con).unwrap();
            let _: () = con
                .zadd_multiple(
                    "presence:c1:online",
                    &[(now - 100.0, "gone"), (now, "here")],
                )
                .unwrap();
        }
        let report = pass_at(&url, ONLY_ONLINE, "online", pass::Options::default()).await;
        assert_eq!((report.counts.keys, report.counts.evicted), (1, 1), "{url}");
        redis::cmd("SELECT").arg(db).exec(&mut con).unwrap();
        assert_eq!(members(&mut con, "presence:c1:online"), ["here"], "{url}");
        redis::cmd("SELECT").arg(0).exec(&mut con).unwrap();
        assert_eq!(
            members(&mut con, "presence:c1:online"),
            ["gone", "here"],
            "db 0 untouched by {url}"
        );
        redis::cmd("FLUSHALL").exec(&mut con).unwrap();
    }
}
