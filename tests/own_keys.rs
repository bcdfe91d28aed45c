//! The daemon's own keys (its canary, leases, streams) are out of every sweep's reach, however
//! broad its `match`; a broad `match` is a warning that shows a safer one; `stats` shows what a
//! `match` reaches.

use std::time::{Duration, Instant};

use crate::support::{Binary, RedisServer, Subscriber, run_binary, seed_keys, write_file};
use redis::Commands;

const CANARY: &str = "presence-sweeper:canary:{0}";

/// A broad `match = "presence*"` with a stream and leases: a real zombie leaves, and nothing of
/// the daemon's own is evicted, announced or taken for a reset of Redis's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broad_match_leaves_the_daemons_own_keys_alone() {
    let server = RedisServer::start();
    let mut con = server.con();
    let sub = Subscriber::start(&server.url(), "*").await;
    let d = Binary::spawn(
        "[http]\nlisten = \"127.0.0.1:0\"\n[coordination]\nlease = true\n\
         [sweeps.typing]\nenabled = false\n\
         [sweeps.online]\nmatch = \"presence*\"\nschedule = \"200ms\"\n\
         stream = \"presence:{hash_tag}:log\"\n",
        &["--redis-url", &server.url()],
        &[],
    );
    d.wait_ready(Duration::from_secs(10));
    seed_keys(&mut con, ["presence:{c1}:online"], 1, 1);

    // The canary's counter is at 1 or more from the start; several increments later (about
    // one a second), with walks every 200 ms in between, it must still be counting up.
    let beat = |con: &mut redis::Connection| -> Option<f64> { con.zscore(CANARY, "beat").unwrap() };
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        if let Some(b) = beat(&mut con) {
            break b;
        }
        assert!(Instant::now() < deadline, "no canary: {}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut last = first;
    while last < first + 3.0 {
        assert!(
            Instant::now() < deadline,
            "the canary stopped at {last} (from {first}): {}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
        let now = beat(&mut con).unwrap_or_else(|| panic!("the canary was removed: {}", d.log()));
        assert!(now >= last, "the canary went back from {last} to {now}");
        last = now;
    }

    // The real zombie left, once, and it is the only event.
    let events = sub.wait_for(1, Duration::from_secs(5)).await;
    let ids: Vec<String> = events
        .iter()
        .map(|e| e.json()["conversation_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [":{c1}:online"], "{}", d.log());
    let left: Vec<String> = con.zrange("presence:{c1}:online", 0, -1).unwrap();
    assert_eq!(left, ["live"]);
    // Its stream entry and the sweep's lease are where they were put.
    let entries: u64 = con.xlen("presence:{c1}:log").unwrap();
    assert_eq!(entries, 1);
    let lease: Option<String> = con.get("presence-sweeper:lease:online").unwrap();
    assert!(lease.is_some(), "the lease is held");

    let log = d.log();
    assert!(!log.contains("reset or rewound"), "{log}");
    assert!(log.contains("has nothing literal after its `*`"), "{log}");
    assert!(log.contains("fits the daemon's own keys"), "{log}");
}

#[test]
fn check_config_warns_of_a_broad_match_and_names_the_own_keys_it_fits() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "c.toml",
        "[sweeps.online]\nmatch = \"presence*\"\n[sweeps.typing]\nmatch = \"*\"\n",
    );
    let (code, stdout, stderr) =
        run_binary(&["--config", file.to_str().unwrap(), "check-config"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("match = \"presence*\""), "{stdout}");
    let line = |start: &str| {
        stderr
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?}: {stderr}"))
            .to_owned()
    };
    let online = line("presence-sweeper: warning: sweeps.online.match = \"presence*\"");
    assert!(
        online.contains("every sorted set whose name starts with \"presence\""),
        "{online}"
    );
    assert!(online.contains("such as \"presence:*:online\""), "{online}");
    let typing = line("presence-sweeper: warning: sweeps.typing.match = \"*\"");
    assert!(
        typing.contains("every sorted set in the database"),
        "{typing}"
    );
    for sweep in ["online", "typing"] {
        let note = line(&format!("presence-sweeper: note: sweeps.{sweep}.match"));
        assert!(
            note.contains("presence-sweeper:*: its canary, leases and webhook delivery state"),
            "{note}"
        );
    }
    assert!(
        stderr
            .lines()
            .last()
            .unwrap()
            .contains("configuration is valid"),
        "{stderr}"
    );

    // The shipped patterns need no advice.
    let file = write_file(dir.path(), "d.toml", "");
    let (code, _, stderr) = run_binary(&["--config", file.to_str().unwrap(), "check-config"], &[]);
    assert_eq!(code, 0);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn a_match_inside_the_daemons_namespace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "c.toml",
        "[sweeps.online]\nmatch = \"presence-sweeper:*:online\"\n",
    );
    let (code, _, stderr) = run_binary(&["--config", file.to_str().unwrap(), "check-config"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("sweeps.online.match"), "{stderr}");
    assert!(stderr.contains("the daemon's own"), "{stderr}");
}

/// `stats` shows the keys a `match` reaches (not the daemon's own), and a one-shot `sweep`
/// leaves the canary as the daemon does.
#[test]
fn stats_samples_the_keys_a_match_reaches_and_a_pass_spares_the_canary() {
    let server = RedisServer::start();
    let mut con = server.con();
    let keys: Vec<String> = (0..4).map(|c| format!("presence:c{c}:online")).collect();
    seed_keys(&mut con, &keys, 1, 1);
    // An unrelated sorted set that a broad match reaches, and the canary of a daemon.
    let _: () = con.zadd("presence:leaderboard", "ann", 7).unwrap();
    let _: f64 = con.zincr(CANARY, "beat", 1).unwrap();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "c.toml",
        "[sweeps.typing]\nenabled = false\n[sweeps.online]\nmatch = \"presence*\"\n",
    );
    let config = file.to_str().unwrap();

    let (code, stdout, stderr) = run_binary(
        &[
            "--config",
            config,
            "--redis-url",
            &url,
            "stats",
            "--sample",
            "10",
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let online = &report["sweeps"][0];
    assert_eq!(online["keys"], 5, "{online}");
    let mut sample: Vec<String> = online["sample_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    sample.sort();
    let mut expected = keys.clone();
    expected.push("presence:leaderboard".into());
    expected.sort();
    assert_eq!(sample, expected);
    assert!(
        stderr.contains("has nothing literal after its `*`"),
        "{stderr}"
    );

    let (code, stdout, stderr) = run_binary(
        &[
            "--config",
            config,
            "--redis-url",
            &url,
            "stats",
            "--sample",
            "2",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let listed: Vec<&str> = stdout
        .lines()
        .skip_while(|l| l.trim() != "sample keys")
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(str::trim)
        .collect();
    assert_eq!(listed.len(), 2, "{stdout}");
    assert!(
        listed.iter().all(|k| expected.iter().any(|e| e == k)),
        "{stdout}"
    );

    let (code, stdout, stderr) =
        run_binary(&["--config", config, "--redis-url", &url, "sweep"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(" keys=5 "), "{stdout}");
    let beat: Option<f64> = con.zscore(CANARY, "beat").unwrap();
    assert_eq!(beat, Some(1.0), "the canary is untouched");
}
