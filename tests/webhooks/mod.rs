//! Webhooks: every leave POSTed to a receiver this test runs, signed as Standard Webhooks, at
//! least once from the stream: retried on failures, timeouts and `Retry-After`, dropped and
//! counted once expired or trimmed, never lost to a `kill -9`, posted once by one of several
//! replicas, and over TLS with a CA file.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use redis::Commands;

use crate::support::receiver::{Hit, Mode, Receiver, verify};
use crate::support::{
    Binary, RedisServer, Subscriber, metric, run_binary, scrape, seed_keys, wait_until,
};
use presence_sweeper_webhooks::id::webhook_id;

mod batch;
mod cluster;
mod recovery;
mod restart;
mod scale;

const SECRET: &str = "whsec_cHJlc2VuY2Utc3dlZXBlci13ZWJob29rLXRlc3QtazE=";
const PER_CONVERSATION: &str = "presence:{hash_tag}:log";
const FIXED: &str = "presence-sweeper:leaves";
const DUE: &str = "presence-sweeper:webhooks:crm:due";

/// A daemon config: the typing sweep every 100 ms with `stream`, and webhook `crm` to `url`.
fn toml(stream: &str, url: &str, hook: &str) -> String {
    format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[coordination]\nlease_ttl = \"2s\"\n\
         [sweeps.online]\nenabled = false\n\
         [sweeps.typing]\nschedule = \"100ms\"\nstream = \"{stream}\"\n\
         [webhooks.crm]\nurl = \"{url}\"\nsecret = \"{SECRET}\"\nsweeps = [\"typing\"]\n{hook}"
    )
}

fn daemon(server: &RedisServer, toml: &str) -> Binary {
    Binary::spawn(toml, &["--redis-url", &server.url()], &[])
}

fn conversations(n: usize) -> Vec<String> {
    (0..n).map(|c| format!("presence:c{c}:typing")).collect()
}

/// The stream of `key` with a stream per conversation.
fn stream_of(key: &str) -> String {
    format!("presence:{{{key}}}:log")
}

/// The webhook ids of every entry of `streams`.
fn ids_in(con: &mut redis::Connection, streams: &[String]) -> HashSet<String> {
    let mut ids = HashSet::new();
    for s in streams {
        let entries: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
            .arg(s)
            .arg("-")
            .arg("+")
            .query(con)
            .unwrap();
        ids.extend(entries.iter().map(|(id, _)| webhook_id(s.as_bytes(), id)));
    }
    ids
}

/// Once everything is delivered, nothing of the delivery state is left in Redis.
fn wait_state_gone(server: &RedisServer) {
    let mut con = server.con();
    wait_until("the due set to empty", Duration::from_secs(10), || {
        let due: u64 = con.zcard(DUE).unwrap();
        let states: Vec<String> = con.keys("presence-sweeper:webhooks:crm:at:*").unwrap();
        due == 0 && states.is_empty()
    });
}

fn deliveries(d: &Binary, outcome: &str) -> f64 {
    let s = scrape(d.http_addr());
    metric(
        &s,
        "presence_sweeper_webhook_deliveries_total",
        &[("webhook", "crm"), ("outcome", outcome)],
    )
    .unwrap_or(0.0)
}

fn dropped(d: &Binary, reason: &str) -> f64 {
    let s = scrape(d.http_addr());
    metric(
        &s,
        "presence_sweeper_webhook_dropped_total",
        &[("webhook", "crm"), ("reason", reason)],
    )
    .unwrap_or(0.0)
}

/// Each conversation's deliveries, in the order they arrived.
fn by_conversation(hits: &[Hit]) -> BTreeMap<String, Vec<serde_json::Value>> {
    let mut out: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for h in hits {
        let ev = h.json();
        let c = ev["conversation_id"].as_str().unwrap().to_owned();
        out.entry(c).or_default().push(ev);
    }
    out
}

/// In every conversation the events arrived in stream order, each naming the one before.
fn assert_in_order(hits: &[Hit]) {
    for (c, events) in by_conversation(hits) {
        for pair in events.windows(2) {
            assert_eq!(pair[1]["prev"], pair[0]["id"], "{c}: {events:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_leave_arrives_once_signed_and_as_published() {
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Accept);
    let d = daemon(&server, &toml(PER_CONVERSATION, &receiver.url(), ""));
    d.wait_ready(Duration::from_secs(20));
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let keys = conversations(20);
    seed_keys(&mut server.con(), &keys, 2, 1);
    let published = sub.wait_for(40, Duration::from_secs(20)).await;
    let hits = tokio::task::spawn_blocking(move || {
        let hits = receiver.wait_delivered(40, Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(300));
        (hits, receiver.hits().len())
    })
    .await
    .unwrap();
    let (hits, requests) = hits;
    assert_eq!(
        requests, 40,
        "each event posted once to a receiver that accepts"
    );
    for h in &hits {
        assert!(verify(SECRET, h), "a valid signature: {h:?}");
        assert_eq!(h.content_type, "application/json");
        let age =
            crate::support::redis_now(&mut server.con()) - h.timestamp.parse::<f64>().unwrap();
        assert!(age.abs() < 60.0, "a fresh timestamp: {h:?}");
    }
    let bodies: HashSet<Vec<u8>> = hits.iter().map(|h| h.body.clone()).collect();
    let payloads: HashSet<Vec<u8>> = published.iter().map(|p| p.payload.clone()).collect();
    assert_eq!(
        bodies, payloads,
        "each body is the event as published, byte for byte"
    );
    let streams: Vec<String> = keys.iter().map(|k| stream_of(k)).collect();
    let ids: HashSet<String> = hits.iter().map(|h| h.id.clone()).collect();
    assert_eq!(
        ids,
        ids_in(&mut server.con(), &streams),
        "webhook-id: stream and entry"
    );
    assert_in_order(&hits);
    wait_state_gone(&server);
    assert_eq!(deliveries(&d, "delivered"), 40.0);
    assert_eq!(deliveries(&d, "retried"), 0.0);
}

#[test]
fn a_fixed_stream_delivers_each_conversation_in_order() {
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Accept);
    let d = daemon(&server, &toml(FIXED, &receiver.url(), "concurrency = 4\n"));
    d.wait_ready(Duration::from_secs(20));
    seed_keys(&mut server.con(), conversations(30), 3, 1);
    let hits = receiver.wait_delivered(90, Duration::from_secs(20));
    assert_eq!(hits.len(), 90);
    assert!(hits.iter().all(|h| verify(SECRET, h)));
    let ids: HashSet<String> = hits.iter().map(|h| h.id.clone()).collect();
    assert_eq!(ids, ids_in(&mut server.con(), &[FIXED.to_owned()]));
    assert_in_order(&hits);
    assert_eq!(by_conversation(&hits).len(), 30);
    wait_state_gone(&server);
}

#[test]
fn a_failing_receiver_gets_each_event_again_with_the_same_id() {
    let server = RedisServer::start();
    // A 4xx: this event refused, not the receiver down, so no other event's delivery wakes
    // its retry (recovery.rs) and the waits are the backoff's.
    let receiver = Receiver::deciding(|_, before| {
        if before < 2 {
            Mode::Reject
        } else {
            Mode::Accept
        }
    });
    let d = daemon(&server, &toml(PER_CONVERSATION, &receiver.url(), ""));
    d.wait_ready(Duration::from_secs(20));
    seed_keys(&mut server.con(), conversations(10), 2, 1);
    receiver.wait_delivered(20, Duration::from_secs(30));
    let hits = receiver.hits();
    let mut attempts: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in &hits {
        attempts.entry(h.id.as_str()).or_default().push(h);
    }
    assert_eq!(attempts.len(), 20);
    for (id, tries) in &attempts {
        assert_eq!(tries.len(), 3, "{id}: two failures, then a delivery");
        assert!(
            tries
                .iter()
                .all(|h| h.body == tries[0].body && verify(SECRET, h))
        );
        // Exponential backoff with jitter: 0.25-0.5 s, then 0.5-1 s.
        let gaps: Vec<Duration> = tries.windows(2).map(|w| w[1].at - w[0].at).collect();
        assert!(gaps[0] >= Duration::from_millis(200), "{gaps:?}");
        assert!(gaps[1] >= Duration::from_millis(450), "{gaps:?}");
    }
    assert_in_order(&receiver.delivered());
    assert_eq!(deliveries(&d, "retried"), 40.0);
    assert_eq!(deliveries(&d, "delivered"), 20.0);
    wait_state_gone(&server);
}

#[test]
fn retry_after_is_honoured() {
    let server = RedisServer::start();
    let receiver = Receiver::deciding(|_, before| {
        if before == 0 {
            Mode::Busy
        } else {
            Mode::Accept
        }
    });
    let d = daemon(&server, &toml(PER_CONVERSATION, &receiver.url(), ""));
    d.wait_ready(Duration::from_secs(20));
    seed_keys(&mut server.con(), conversations(3), 1, 1);
    receiver.wait_delivered(3, Duration::from_secs(20));
    let hits = receiver.hits();
    for h in hits.iter().filter(|h| h.status == 503) {
        let next = hits
            .iter()
            .find(|n| n.id == h.id && n.status == 200)
            .expect("delivered after");
        assert!(
            next.at - h.at >= Duration::from_millis(1950),
            "Retry-After: 2 was not waited for: {:?}",
            next.at - h.at
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_times_out_is_retried_and_holds_up_no_eviction() {
    let server = RedisServer::start();
    let receiver = Receiver::deciding(|_, before| {
        if before == 0 {
            Mode::Hang
        } else {
            Mode::Accept
        }
    });
    let d = daemon(
        &server,
        &toml(PER_CONVERSATION, &receiver.url(), "timeout = \"500ms\"\n"),
    );
    d.wait_ready(Duration::from_secs(20));
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let seeded = Instant::now();
    seed_keys(&mut server.con(), conversations(5), 1, 1);
    let published = sub.wait_for(5, Duration::from_secs(10)).await;
    assert_eq!(published.len(), 5);
    assert!(
        seeded.elapsed() < Duration::from_secs(3),
        "pub/sub went out while the receiver hung"
    );
    let hits = tokio::task::spawn_blocking(move || {
        receiver.wait_delivered(5, Duration::from_secs(20));
        receiver.hits()
    })
    .await
    .unwrap();
    for h in hits.iter().filter(|h| h.status == 0) {
        let next = hits
            .iter()
            .find(|n| n.id == h.id && n.status == 200)
            .unwrap();
        assert!(
            next.at - h.at >= Duration::from_millis(500),
            "{:?}",
            next.at - h.at
        );
    }
    let s = scrape(d.http_addr());
    let timeouts = metric(
        &s,
        "presence_sweeper_webhook_attempts_total",
        &[("webhook", "crm"), ("result", "timeout")],
    );
    assert_eq!(timeouts, Some(5.0));
}

/// An event for `conversation` as the stream script writes it, after `prev`.
fn entry(conversation: &str, prev: &str) -> String {
    format!(
        r#"{{"type":"typing.stop","conversation_id":"{conversation}","user_id":"u","prev":"{prev}"}}"#
    )
}

#[test]
fn trimmed_and_expired_events_are_dropped_and_counted() {
    let server = RedisServer::start();
    let mut con = server.con();
    let now_ms = (crate::support::redis_now(&mut con) * 1000.0) as u64;
    // Older than retry_for: its id says it was appended in 1970.
    let old = "presence:{old}:log";
    let _: String = con
        .xadd(old, "1000-0", &[("event", entry("old", "0-0"))])
        .unwrap();
    let _: () = con.zadd(DUE, old, 1000).unwrap();
    // Marked due, but the stream is gone (expired, deleted) before it was read.
    let _: () = con.zadd(DUE, "presence:{gone}:log", now_ms).unwrap();
    // The entry after the cursor was trimmed: the next one names it, not the cursor.
    let gap = "presence:{gap}:log";
    let a: String = con
        .xadd(gap, "*", &[("event", entry("gap", "0-0"))])
        .unwrap();
    let b: String = con.xadd(gap, "*", &[("event", entry("gap", &a))]).unwrap();
    let c: String = con.xadd(gap, "*", &[("event", entry("gap", &b))]).unwrap();
    let _: () = con.xdel(gap, &[&b]).unwrap();
    let _: () = con
        .hset(
            format!("presence-sweeper:webhooks:crm:at:{gap}"),
            "cursor",
            &a,
        )
        .unwrap();
    let _: () = con.zadd(DUE, gap, now_ms).unwrap();
    let receiver = Receiver::start(Mode::Accept);
    let d = daemon(&server, &toml(PER_CONVERSATION, &receiver.url(), ""));
    d.wait_ready(Duration::from_secs(20));
    let hits = receiver.wait_delivered(1, Duration::from_secs(10));
    wait_state_gone(&server);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].id, webhook_id(gap.as_bytes(), &c));
    assert_eq!(hits[0].json()["id"], c.as_str());
    assert_eq!(dropped(&d, "expired"), 1.0);
    assert_eq!(dropped(&d, "trimmed"), 2.0);
    assert_eq!(deliveries(&d, "dropped"), 3.0);
    assert!(d.log().contains("dropped"), "{}", d.log());
    assert!(
        !d.log().contains("{gap}") && !d.log().contains(&c),
        "no ids in the log"
    );
}

#[test]
fn an_event_past_retry_for_is_dropped_while_the_receiver_fails() {
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Fail);
    let d = daemon(
        &server,
        &toml(PER_CONVERSATION, &receiver.url(), "retry_for = \"2s\"\n"),
    );
    d.wait_ready(Duration::from_secs(20));
    seed_keys(&mut server.con(), conversations(3), 1, 1);
    wait_until("three expired", Duration::from_secs(15), || {
        dropped(&d, "expired") == 3.0
    });
    wait_state_gone(&server);
    assert!(receiver.hits().len() >= 6, "retried meanwhile");
}

#[test]
fn a_killed_daemon_loses_nothing() {
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Fail);
    let config = toml(PER_CONVERSATION, &receiver.url(), "");
    let mut first = daemon(&server, &config);
    first.wait_ready(Duration::from_secs(20));
    let keys = conversations(30);
    seed_keys(&mut server.con(), &keys, 1, 1);
    let mut con = server.con();
    wait_until("every leave appended", Duration::from_secs(10), || {
        let due: u64 = con.zcard(DUE).unwrap();
        due == 30
    });
    wait_until("attempts", Duration::from_secs(10), || {
        !receiver.hits().is_empty()
    });
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(5));
    receiver.set(Mode::Accept);
    let second = daemon(&server, &config);
    let hits = receiver.wait_delivered(30, Duration::from_secs(20));
    let streams: Vec<String> = keys.iter().map(|k| stream_of(k)).collect();
    let ids: HashSet<String> = hits.iter().map(|h| h.id.clone()).collect();
    assert_eq!(
        ids,
        ids_in(&mut con, &streams),
        "every event, under its own id"
    );
    wait_state_gone(&server);
    drop(second);
}

#[test]
fn two_replicas_post_each_event_once() {
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Accept);
    let config = toml(PER_CONVERSATION, &receiver.url(), "");
    let a = daemon(&server, &config);
    let b = daemon(&server, &config);
    a.wait_ready(Duration::from_secs(20));
    b.wait_ready(Duration::from_secs(20));
    seed_keys(&mut server.con(), conversations(100), 1, 1);
    receiver.wait_delivered(100, Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        receiver.hits().len(),
        100,
        "each event posted by one replica"
    );
    wait_state_gone(&server);
    let total = deliveries(&a, "delivered") + deliveries(&b, "delivered");
    assert_eq!(total, 100.0);
}

#[test]
fn a_dead_replicas_streams_are_taken_over_within_a_lease() {
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Hang);
    let config = toml(PER_CONVERSATION, &receiver.url(), "timeout = \"1s\"\n");
    let mut a = daemon(&server, &config);
    a.wait_ready(Duration::from_secs(20));
    seed_keys(&mut server.con(), conversations(10), 1, 1);
    wait_until(
        "the first replica's attempts",
        Duration::from_secs(10),
        || receiver.hits().len() >= 10,
    );
    let b = daemon(&server, &config);
    b.wait_ready(Duration::from_secs(20));
    a.signal("KILL");
    a.wait_exit(Duration::from_secs(5));
    let killed = Instant::now();
    receiver.set(Mode::Accept);
    receiver.wait_delivered(10, Duration::from_secs(20));
    assert!(
        killed.elapsed() < Duration::from_secs(8),
        "taken over within about a lease (2 s): {:?}",
        killed.elapsed()
    );
    assert!(deliveries(&b, "delivered") >= 10.0);
    wait_state_gone(&server);
}

#[test]
fn over_tls_with_a_ca_file() {
    let certs = crate::support::tls::Certs::generate();
    let receiver = Receiver::start_tls(&certs.path("server.crt"), &certs.path("server.key"));
    let server = RedisServer::start();
    let url = format!("https://127.0.0.1:{}/hooks", receiver.addr.port());
    let ca = |file: &str| format!("ca_file = \"{}\"\n", certs.path(file).display());
    let wrong = daemon(&server, &toml(PER_CONVERSATION, &url, &ca("other-ca.crt")));
    wrong.wait_ready(Duration::from_secs(20));
    seed_keys(&mut server.con(), conversations(3), 1, 1);
    let s = || scrape(wrong.http_addr());
    wait_until("refused handshakes", Duration::from_secs(10), || {
        metric(
            &s(),
            "presence_sweeper_webhook_attempts_total",
            &[("webhook", "crm"), ("result", "error")],
        )
        .unwrap_or(0.0)
            > 0.0
    });
    assert!(
        receiver.hits().is_empty(),
        "nothing sent to a server the CA does not vouch for"
    );
    drop(wrong);
    let right = daemon(&server, &toml(PER_CONVERSATION, &url, &ca("ca.crt")));
    let hits = receiver.wait_delivered(3, Duration::from_secs(20));
    assert!(hits.iter().all(|h| verify(SECRET, h)));
    drop(right);
}

#[test]
fn check_config_refuses_bad_webhooks_and_never_shows_a_secret() {
    let base = [
        ("PRESENCE_SWEEPER__SWEEPS__ONLINE__STREAM", PER_CONVERSATION),
        (
            "PRESENCE_SWEEPER__WEBHOOKS__CRM__URL",
            "https://crm.example.com/hooks",
        ),
        ("PRESENCE_SWEEPER__WEBHOOKS__CRM__SECRET", SECRET),
        ("PRESENCE_SWEEPER__WEBHOOKS__CRM__SWEEPS", "online"),
    ];
    let with = |key: &str, value: &str| {
        let mut env: Vec<(&str, String)> = base.iter().map(|(k, v)| (*k, v.to_string())).collect();
        env.retain(|(k, _)| *k != key);
        env.push((Box::leak(key.to_owned().into_boxed_str()), value.to_owned()));
        env
    };
    let run = |env: &[(&str, String)]| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_binary(&["check-config"], &env)
    };
    let (code, stdout, stderr) = run(&with("X", ""));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("[webhooks.crm]") && !stdout.contains(SECRET) && !stderr.contains(SECRET)
    );
    let leaked = "whsec_c2hvcnQtYW5kLXNlY3JldA==";
    let cases = [
        (
            "PRESENCE_SWEEPER__WEBHOOKS__CRM__SWEEPS",
            "typing",
            "webhooks.crm.sweeps",
            "sweeps.typing.stream",
        ),
        (
            "PRESENCE_SWEEPER__WEBHOOKS__CRM__SWEEPS",
            "nope",
            "webhooks.crm.sweeps",
            "no sweep is called `nope`",
        ),
        (
            "PRESENCE_SWEEPER__WEBHOOKS__CRM__URL",
            "ftp://crm.example.com/",
            "webhooks.crm.url",
            "https://",
        ),
        (
            "PRESENCE_SWEEPER__WEBHOOKS__CRM__SECRET",
            "hunter2-is-not-a-key",
            "webhooks.crm.secret",
            "whsec_",
        ),
        (
            "PRESENCE_SWEEPER__WEBHOOKS__CRM__SECRET",
            &format!("{SECRET} {leaked}"),
            "webhooks.crm.secret",
            "secret 2 of 2",
        ),
    ];
    for (var, value, key, fix) in cases {
        let (code, stdout, stderr) = run(&with(var, value));
        assert_eq!(code, 2, "{var}={value}: {stdout}{stderr}");
        assert!(stderr.contains(key) && stderr.contains(fix), "{stderr}");
        for secret in [SECRET, leaked, "hunter2"] {
            assert!(
                !stderr.contains(secret) && !stdout.contains(secret),
                "{stderr}"
            );
        }
    }
}

/// The Python receiver of docs/webhooks.md, run on a real delivery with the `standardwebhooks`
/// package: by `WEBHOOKS_PYTHON` if set, else `python3`. Without the package the test says so
/// on stderr and passes (it is not a dependency of the build), unless
/// `TESTS_REQUIRE_STANDARDWEBHOOKS=1` (CI, which fetches it: `.ci/servers standardwebhooks`).
#[test]
fn the_documented_python_receiver_verifies() {
    let python = std::env::var("WEBHOOKS_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_package = std::process::Command::new(&python)
        .args(["-c", "import standardwebhooks"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_package {
        assert!(
            std::env::var("TESTS_REQUIRE_STANDARDWEBHOOKS").as_deref() != Ok("1"),
            "{python} has no standardwebhooks package, and TESTS_REQUIRE_STANDARDWEBHOOKS=1"
        );
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED the_documented_python_receiver_verifies: {python} has no standardwebhooks \
             package (pip install standardwebhooks, or set WEBHOOKS_PYTHON)"
        );
        return;
    }
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/webhooks.md")).unwrap();
    let snippet = docs
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a python block in docs/webhooks.md");
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Accept);
    let _d = daemon(&server, &toml(PER_CONVERSATION, &receiver.url(), ""));
    seed_keys(&mut server.con(), conversations(1), 1, 1);
    let hit = receiver
        .wait_delivered(1, Duration::from_secs(20))
        .remove(0);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("receive.py");
    let harness = format!(
        "import json, sys\nSECRET = sys.argv[1]\n{snippet}\n\
         seen, applied = set(), []\n\
         def seen_before(i): return i in seen\n\
         def remember(i): seen.add(i)\n\
         def apply(e): applied.append(e)\n\
         data = json.load(open(sys.argv[2]))\n\
         print(receive(data['headers'], data['body'].encode()), applied[0]['id'] if applied else '')\n\
         print(receive(data['headers'], data['body'].encode()), len(applied))\n\
         data['headers']['webhook-signature'] = 'v1,' + 'A' * 44\n\
         print(receive(data['headers'], data['body'].encode()))\n"
    );
    std::fs::write(&script, harness).unwrap();
    let request = dir.path().join("request.json");
    let json = serde_json::json!({
        "headers": {
            "webhook-id": hit.id,
            "webhook-timestamp": hit.timestamp,
            "webhook-signature": hit.signature,
        },
        "body": String::from_utf8(hit.body.clone()).unwrap(),
    });
    std::fs::write(&request, json.to_string()).unwrap();
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(SECRET)
        .arg(&request)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = hit.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        stdout,
        format!("200 {id}\n200 1\n400\n"),
        "verified, deduplicated, refused"
    );
}

/// A Redis user who may write the streams but not the webhooks' keys: the preflight refuses the
/// sweep before anything is removed, naming the keys (a refusal inside the script would leave
/// entries no webhook hears of).
#[test]
fn without_the_webhooks_keys_nothing_is_evicted_and_the_error_says_why() {
    let server = RedisServer::start();
    let mut con = server.con();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("nohooks")
        .arg("reset")
        .arg("resetchannels")
        .arg("on")
        .arg(">user-secret")
        .arg("~presence:*")
        .arg("&presence:*")
        .arg("+@all")
        .query(&mut con)
        .unwrap();
    seed_keys(&mut con, conversations(3), 1, 1);
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "user-secret\n").unwrap();
    let file = dir.path().join("c.toml");
    let config = format!(
        "[redis]\nusername = \"nohooks\"\npassword_file = {:?}\n{}",
        pw.to_str().unwrap(),
        toml(PER_CONVERSATION, "http://127.0.0.1:9/", "")
    );
    std::fs::write(&file, config).unwrap();
    let (code, stdout, stderr) = run_binary(
        &[
            "--config",
            file.to_str().unwrap(),
            "--redis-url",
            &server.url(),
            "sweep",
            "--sweep",
            "typing",
        ],
        &[],
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("may not run ZADD on the webhooks' keys presence-sweeper:webhooks:*"),
        "{stderr}"
    );
    for key in conversations(3) {
        let n: u64 = con.zcard(&key).unwrap();
        assert_eq!(n, 2, "nothing removed");
    }
}

/// The figures of docs/webhooks.md's "Measured": deliveries per second to a local receiver that
/// keeps connections alive (2,000 conversations with one leave each, every stream its own and
/// one fixed stream), and how long after its pub/sub event a webhook arrives at 100 leaves a
/// second. Run with `BENCH_BINARY=target/release/presence-sweeper cargo test --test tests --
/// --ignored --nocapture webhooks::measure` (the debug binary otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check: run it by hand"]
async fn measure() {
    let binary =
        std::env::var("BENCH_BINARY").unwrap_or_else(|_| crate::support::binary_path().into());
    for stream in [PER_CONVERSATION, FIXED] {
        let server = RedisServer::start();
        let receiver = std::sync::Arc::new(Receiver::start(Mode::Accept));
        let config = toml(stream, &receiver.url(), "");
        let _d =
            Binary::spawn_program(&binary, &config, &["--redis-url", &server.url()], &[], None);
        let sub = Subscriber::start(&server.url(), "presence:*:events").await;
        let n = 2000;
        let keys: Vec<String> = (0..n).map(|c| format!("presence:b{c}:typing")).collect();
        seed_keys(&mut server.con(), &keys, 1, 1);
        let r = receiver.clone();
        let hits =
            tokio::task::spawn_blocking(move || r.wait_delivered(n, Duration::from_secs(120)))
                .await
                .unwrap();
        let published = sub.wait_for(n, Duration::from_secs(10)).await;
        let first = hits.iter().map(|h| h.at).min().unwrap();
        let last = hits.iter().map(|h| h.at).max().unwrap();
        let rate = n as f64 / (last - first).as_secs_f64();
        println!(
            "{stream}: {n} deliveries in {:?} ({rate:.0}/s); {} pub/sub events; {} requests",
            last - first,
            published.len(),
            receiver.hits().len()
        );
    }
    // 100 leaves a second for 10 s: webhook arrival after the pub/sub event.
    let server = RedisServer::start();
    let receiver = std::sync::Arc::new(Receiver::start(Mode::Accept));
    let _d = Binary::spawn_program(
        &binary,
        &toml(PER_CONVERSATION, &receiver.url(), ""),
        &["--redis-url", &server.url()],
        &[],
        None,
    );
    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.psubscribe("presence:*:events").await.unwrap();
    let arrivals = std::sync::Arc::new(std::sync::Mutex::new(HashMap::<String, Instant>::new()));
    let sink = arrivals.clone();
    let task = tokio::spawn(async move {
        use futures_util::StreamExt as _;
        let mut stream = pubsub.into_on_message();
        while let Some(msg) = stream.next().await {
            let ev: serde_json::Value = serde_json::from_slice(msg.get_payload_bytes()).unwrap();
            sink.lock()
                .unwrap()
                .insert(ev["id"].as_str().unwrap().to_owned(), Instant::now());
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut con = server.con();
    for tick in 0..100 {
        let keys: Vec<String> = (0..10)
            .map(|c| format!("presence:t{tick}x{c}:typing"))
            .collect();
        seed_keys(&mut con, &keys, 1, 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = receiver.clone();
    let hits = tokio::task::spawn_blocking(move || r.wait_delivered(1000, Duration::from_secs(60)))
        .await
        .unwrap();
    task.abort();
    let arrivals = arrivals.lock().unwrap();
    let mut delays: Vec<f64> = hits
        .iter()
        .filter_map(|h| {
            let published = arrivals.get(h.json()["id"].as_str().unwrap())?;
            Some(h.at.saturating_duration_since(*published).as_secs_f64() * 1000.0)
        })
        .collect();
    delays.sort_by(f64::total_cmp);
    let p = |q: f64| delays[((delays.len() as f64 * q) as usize).min(delays.len() - 1)];
    println!(
        "100 leaves/s for 10 s: {} matched; webhook after pub/sub p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        delays.len(),
        p(0.5),
        p(0.99),
        p(1.0)
    );
}

/// Behind Sentinel: events appended before a failover are delivered from the new primary, which
/// holds the streams and the delivery state the old one replicated to it.
#[test]
fn a_sentinel_failover_loses_nothing() {
    let setup = crate::support::sentinel::SentinelSetup::start();
    let receiver = Receiver::start(Mode::Fail);
    let config = format!(
        "{}{}",
        setup.redis_toml(),
        toml(PER_CONVERSATION, &receiver.url(), "")
    );
    let d = Binary::spawn(&config, &[], &[]);
    d.wait_ready(Duration::from_secs(20));
    let keys = conversations(20);
    seed_keys(&mut setup.primary.con(), &keys, 1, 1);
    let mut replica = setup.replica.con();
    wait_until("the leaves replicated", Duration::from_secs(10), || {
        let due: u64 = replica.zcard(DUE).unwrap();
        due == 20
    });
    setup.failover();
    wait_until("the replica promoted", Duration::from_secs(30), || {
        setup.primary_port() == Some(setup.replica.port)
    });
    receiver.set(Mode::Accept);
    let hits = receiver.wait_delivered(20, Duration::from_secs(30));
    let streams: Vec<String> = keys.iter().map(|k| stream_of(k)).collect();
    let ids: HashSet<String> = hits.iter().map(|h| h.id.clone()).collect();
    assert_eq!(ids, ids_in(&mut setup.replica.con(), &streams));
    wait_state_gone(&setup.replica);
}
