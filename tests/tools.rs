//! The operator and benchmark tools, run as binaries against real Redis servers (and, for
//! `simulate`, a real daemon): `seed` and `simulate` in `presence-sweeper-tools`, `stats` in the
//! daemon's binary.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::support::cluster::RedisCluster;
use crate::support::{Binary, RedisServer, redis_now, run_binary, run_tools, write_file};
use redis::Commands;

/// Parses `key=value` pairs of a summary line.
fn fields(line: &str) -> std::collections::HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn seed(url: &str, config: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec!["--redis-url", url];
    let file;
    if let Some(toml) = config {
        file = write_file(dir.path(), "c.toml", toml);
        all.extend(["--config", file.to_str().unwrap()]);
    }
    all.push("seed");
    all.extend(args);
    run_tools(&all, &[])
}

fn stale_and_fresh(con: &mut redis::Connection, key: &str, cutoff: f64) -> (u64, u64) {
    let stale: u64 = con.zcount(key, "-inf", format!("({cutoff}")).unwrap();
    let fresh: u64 = con.zcount(key, cutoff, "+inf").unwrap();
    (stale, fresh)
}

#[test]
fn seed_writes_exactly_n_keys_with_the_exact_stale_count() {
    let server = RedisServer::start();
    let (code, stdout, stderr) = seed(
        &server.url(),
        None,
        &[
            "--conversations",
            "300",
            "--members",
            "20",
            "--stale-fraction",
            "0.1",
        ],
    );
    assert_eq!(code, 0, "{stdout} {stderr}");
    let line = stdout.trim();
    assert!(line.starts_with("online: "), "{line}");
    let f = fields(line);
    assert_eq!(f["keys"], "300");
    assert_eq!(f["members"], "6000");
    assert_eq!(f["stale"], "600");
    assert_eq!(f["typing_keys"], "0");
    assert_eq!(f["noise_keys"], "0");
    assert!(f["seconds"].parse::<f64>().is_ok(), "{line}");

    let mut con = server.con();
    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, 300);
    let keys: BTreeSet<String> = con.keys("*").unwrap();
    let expected: BTreeSet<String> = (1..=300).map(|n| format!("presence:c{n}:online")).collect();
    assert_eq!(keys, expected);
    let cutoff = redis_now(&mut con) - 45.0;
    let mut stale_members = BTreeSet::new();
    for key in &keys {
        let card: u64 = con.zcard(key).unwrap();
        assert_eq!(card, 20, "{key}");
        assert_eq!(stale_and_fresh(&mut con, key, cutoff), (2, 18), "{key}");
        let stale: Vec<String> = con
            .zrangebyscore(key, "-inf", format!("({cutoff}"))
            .unwrap();
        stale_members.extend(stale);
    }
    // Different keys lose different users.
    assert_eq!(stale_members.len(), 20, "{stale_members:?}");

    // Half rounds up, and milliseconds are honoured.
    let config = r#"
        [sweeps.cursor]
        match = "cursor:*"
        ttl = "60s"
        schedule = "1s"
        event = "cursor.gone"
        score_unit = "milliseconds"
    "#;
    let (code, stdout, stderr) = seed(
        &server.url(),
        Some(config),
        &[
            "--sweep",
            "cursor",
            "--conversations",
            "50",
            "--members",
            "5",
            "--stale-fraction",
            "0.5",
        ],
    );
    assert_eq!(code, 0, "{stdout} {stderr}");
    let f = fields(&stdout);
    assert_eq!((f["keys"].as_str(), f["stale"].as_str()), ("50", "150"));
    let cutoff_ms = (redis_now(&mut con) - 60.0) * 1000.0;
    for n in 1..=50 {
        let key = format!("cursor:c{n}");
        assert_eq!(stale_and_fresh(&mut con, &key, cutoff_ms), (3, 2), "{key}");
    }
    let newest: Vec<(String, f64)> = con.zrange_withscores("cursor:c1", -1, -1).unwrap();
    assert!(newest[0].1 > 1e12, "milliseconds: {newest:?}");
}

#[test]
fn seed_adds_typing_and_noise_keys_when_asked() {
    let server = RedisServer::start();
    let (code, stdout, stderr) = seed(
        &server.url(),
        None,
        &["--conversations", "100", "--typing", "--noise", "51"],
    );
    assert_eq!(code, 0, "{stdout} {stderr}");
    let f = fields(&stdout);
    assert_eq!(f["keys"], "100");
    assert_eq!(f["typing_keys"], "100");
    assert_eq!(f["typing_members"], "300");
    assert_eq!(f["typing_stale"], "0");
    assert_eq!(f["noise_keys"], "51");

    let mut con = server.con();
    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(dbsize, 251);
    let typing: Vec<String> = con.keys("presence:*:typing").unwrap();
    assert_eq!(typing.len(), 100);
    for key in &typing {
        let members: Vec<String> = con.zrange(key, 0, -1).unwrap();
        let members: BTreeSet<String> = members.into_iter().collect();
        assert_eq!(
            members,
            ["u1", "u2", "u3"].map(String::from).into(),
            "{key}"
        );
    }
    let cache: Vec<String> = con.keys("cache:*").unwrap();
    let session: Vec<String> = con.keys("session:*").unwrap();
    assert_eq!((cache.len(), session.len()), (26, 25));
    let t: String = redis::cmd("TYPE").arg("cache:1").query(&mut con).unwrap();
    assert_eq!(t, "string");
    let t: String = redis::cmd("TYPE").arg("session:2").query(&mut con).unwrap();
    assert_eq!(t, "hash");
}

#[test]
fn writing_tools_refuse_a_redis_elsewhere() {
    for (url, shown) in [
        ("redis://10.255.255.1:6379/0", "redis://10.255.255.1:6379/0"),
        (
            "redis://u:hunter2@redis.example.com:6379/0",
            "redis://u:***@redis.example.com:6379/0",
        ),
    ] {
        for command in ["seed", "simulate"] {
            let started = Instant::now();
            let (code, stdout, stderr) = run_tools(&["--redis-url", url, command], &[]);
            assert_eq!(code, 2, "{command} {url}: {stdout} {stderr}");
            assert!(stdout.is_empty(), "{stdout}");
            assert!(
                stderr.contains(&format!("refusing to write synthetic data to {shown}")),
                "{stderr}"
            );
            assert!(!stderr.contains("hunter2"));
            // Refused before any connection attempt.
            assert!(started.elapsed() < Duration::from_secs(2));
        }
    }
    // `localhost` is this machine.
    let server = RedisServer::start();
    let url = format!("redis://localhost:{}/0", server.port);
    let (code, stdout, stderr) = seed(&url, None, &["--conversations", "3"]);
    assert_eq!(code, 0, "{stdout} {stderr}");
}

/// The one-line help of the global flag `flag` (`--config`, ...), spacing aside.
fn flag_help(help: &str, flag: &str) -> String {
    let line = help
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{flag} ")))
        .unwrap_or_else(|| panic!("no {flag} in {help}"));
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The tools binary reads the daemon's configuration the daemon's way: the same flags, the
/// same file (named by the flag or by `PRESENCE_SWEEPER_CONFIG`), the same environment, the
/// same refusals.
#[test]
fn the_tools_take_the_daemons_configuration() {
    let (_, daemon_help, _) = run_binary(&["-h"], &[]);
    let (code, tools_help, stderr) = run_tools(&["-h"], &[]);
    assert_eq!(code, 0, "{stderr}");
    for flag in ["--config", "--redis-url", "--log-format", "--log-level"] {
        assert_eq!(
            flag_help(&tools_help, flag),
            flag_help(&daemon_help, flag),
            "{flag}"
        );
    }
    for command in ["seed", "simulate"] {
        assert!(
            tools_help.contains(&format!("\n  {command} ")),
            "{tools_help}"
        );
    }
    let (_, daemon_version, _) = run_binary(&["--version"], &[]);
    let (_, tools_version, _) = run_tools(&["--version"], &[]);
    assert_eq!(
        tools_version.replacen("presence-sweeper-tools ", "presence-sweeper ", 1),
        daemon_version
    );

    let (code, stdout, stderr) = run_tools(&["--log-level", "wraning", "seed"], &[]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.starts_with(
            "presence-sweeper-tools: configuration error: log.level = \"wraning\" (from --log-level)"
        ),
        "{stderr}"
    );

    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "c.toml",
        "[sweeps.cursor]\nmatch = \"cursor:*\"\nttl = \"60s\"\nschedule = \"1s\"\nevent = \"gone\"\n",
    );
    let env = [
        ("PRESENCE_SWEEPER_CONFIG", file.to_str().unwrap()),
        ("PRESENCE_SWEEPER__REDIS__URL", &server.url()),
    ];
    let (code, stdout, stderr) = run_tools(&["seed", "--sweep", "nope"], &env);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("unknown sweep `nope`"), "{stderr}");
    let (code, stdout, stderr) =
        run_tools(&["seed", "--sweep", "cursor", "--conversations", "3"], &env);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let keys: BTreeSet<String> = server.con().keys("*").unwrap();
    assert_eq!(
        keys,
        ["cursor:c1", "cursor:c2", "cursor:c3"]
            .map(String::from)
            .into()
    );
}

/// Everything in the database, to prove a command changed nothing.
fn digest(con: &mut redis::Connection) -> (u64, String) {
    let size: u64 = redis::cmd("DBSIZE").query(con).unwrap();
    let digest: String = redis::cmd("DEBUG").arg("DIGEST").query(con).unwrap();
    (size, digest)
}

#[test]
fn stats_reports_exact_numbers_and_changes_nothing() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    // A long typing ttl keeps the seeded typists fresh however slowly the test runs.
    let config = "[sweeps.typing]\nttl = \"60s\"\n";
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "c.toml", config);
    let file = file.to_str().unwrap();
    let (code, stdout, stderr) = seed(
        &server.url(),
        Some(config),
        &["--conversations", "200", "--typing", "--noise", "30"],
    );
    assert_eq!(code, 0, "{stdout} {stderr}");
    let mut con = server.con();
    let now = redis_now(&mut con);
    let big: Vec<(f64, String)> = (0..60).map(|i| (now - 1.0, format!("b{i}"))).collect();
    let _: () = con.zadd_multiple("presence:big:online", &big).unwrap();
    let _: () = con
        .zadd("presence:solo:online", "ghost", now - 1000.0)
        .unwrap();

    let before = digest(&mut con);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    let (code, stdout, stderr) = run_binary(
        &[
            "--redis-url",
            &server.url(),
            "--config",
            file,
            "stats",
            "--json",
            "--top",
            "3",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stdout} {stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    let (text_code, text, text_err) = run_binary(
        &[
            "--redis-url",
            &server.url(),
            "--config",
            file,
            "stats",
            "--sweep",
            "online",
        ],
        &[],
    );
    let commands: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    assert_eq!(digest(&mut con), before, "stats changed the data");

    // Only reads reached Redis (CONFIG RESETSTAT and INFO are the test's own).
    let allowed = [
        "config|resetstat",
        "scan",
        "zcard",
        "zcount",
        "zrange",
        "time",
        "ping",
        "client|setinfo",
        // Its connections name themselves (presence-sweeper:stats): no data changes.
        "client|setname",
        "info",
        "hello",
    ];
    // Before 7.0, INFO commandstats counts a command's subcommands together: CONFIG and CLIENT
    // there stand for the two above (the digest proves all the same that nothing changed).
    let whole = ["config", "client"];
    let old_server = crate::support::server_major_version() < 7;
    for line in commands.lines().filter(|l| l.starts_with("cmdstat_")) {
        let name = &line["cmdstat_".len()..line.find(':').unwrap()];
        assert!(
            allowed.contains(&name) || (old_server && whole.contains(&name)),
            "stats sent {name}: {line}"
        );
    }

    let sweeps = report["sweeps"].as_array().unwrap();
    let names: Vec<&str> = sweeps
        .iter()
        .map(|s| s["sweep"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["online", "typing"]);
    assert!(report["redis_time"].as_f64().unwrap() >= now);
    let online = &sweeps[0];
    assert_eq!(online["match"], "presence:*:online");
    assert_eq!(online["ttl_seconds"], 45.0);
    assert_eq!(online["keys"], 202);
    assert_eq!(online["members"], 200 * 20 + 60 + 1);
    assert_eq!(online["stale_members"], 200 * 2 + 1);
    let age = online["oldest_heartbeat_age_seconds"].as_f64().unwrap();
    assert!((1000.0..1030.0).contains(&age), "{age}");
    // Each bucket its own keys (`from` to `to` members), not cumulative.
    let buckets: Vec<(u64, serde_json::Value, u64)> = online["members_per_key"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let keys = b["keys"].as_u64().unwrap();
            (b["from"].as_u64().unwrap(), b["to"].clone(), keys)
        })
        .collect();
    let expected: Vec<(u64, serde_json::Value, u64)> = vec![
        (1, 1.into(), 1),
        (2, 2.into(), 0),
        (3, 5.into(), 0),
        (6, 10.into(), 0),
        (11, 20.into(), 200),
        (21, 50.into(), 0),
        (51, 100.into(), 1),
        (101, 200.into(), 0),
        (201, 500.into(), 0),
        (501, 1000.into(), 0),
        (1001, serde_json::Value::Null, 0),
    ];
    assert_eq!(buckets, expected);
    assert_eq!(online["members_per_key"]["max"], 60);
    let top: Vec<(&str, u64)> = online["largest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["conversation_id"].as_str().unwrap(),
                c["members"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(top, [("big", 60), ("c1", 20), ("c10", 20)]);

    let typing = &sweeps[1];
    assert_eq!(typing["keys"], 200);
    assert_eq!(typing["members"], 600);
    assert_eq!(typing["stale_members"], 0);

    assert_eq!(text_code, 0, "{text} {text_err}");
    assert!(
        text.starts_with("online (presence:*:online, ttl 45s)\n"),
        "{text}"
    );
    for expected in [
        "  keys                        202\n",
        "  members                    4061\n",
        "  stale members               401  (",
        "    11-20                     200  keys\n",
        "    big                        60  members\n",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    assert!(!text.contains("typing ("), "only the named sweep: {text}");
}

#[test]
fn stats_of_an_unknown_sweep_exits_2() {
    let (code, _, stderr) = run_binary(
        &[
            "--redis-url",
            "redis://127.0.0.1:1/0",
            "stats",
            "--sweep",
            "nope",
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown sweep `nope`"), "{stderr}");
}

/// A quick sweep: 2 s window, a pass every 500 ms; the built-in sweeps are off except typing,
/// quickened too.
const SIM_TOML: &str = r#"
[http]
listen = "127.0.0.1:0"

[sweeps.online]
enabled = false

[sweeps.typing]
ttl = "3s"
schedule = "500ms"

[sweeps.sim]
match = "simtest:*:online"
ttl = "2s"
schedule = "500ms"
event = "presence.leave"
"#;

fn simulate(url: &str, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "c.toml", SIM_TOML);
    let mut all = vec![
        "--redis-url",
        url,
        "--config",
        file.to_str().unwrap(),
        "simulate",
        "--sweep",
        "sim",
        "--conversations",
        "20",
        "--users",
        "5",
        // Well inside the 2 s window, so a busy test machine cannot make live users look dead.
        "--heartbeat",
        "500ms",
        "--vanish-rate",
        "1",
    ];
    all.extend(args);
    run_tools(&all, &[])
}

/// `simulate --sweep sim` with the configuration file `config` and more `args`.
fn simulate_sim(config: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec![
        "--config",
        config.to_str().unwrap(),
        "simulate",
        "--sweep",
        "sim",
    ];
    all.extend(args);
    run_tools(&all, &[])
}

/// Keys in the database, but for the daemon's own canary.
fn dbsize(con: &mut redis::Connection) -> u64 {
    crate::support::keys_but_the_canary(con)
}

#[test]
fn simulate_against_a_running_sweeper_is_clean() {
    let server = RedisServer::start();
    let daemon = Binary::spawn(
        SIM_TOML,
        &["run"],
        &[("PRESENCE_SWEEPER__REDIS__URL", &server.url())],
    );
    daemon.wait_ready(Duration::from_secs(10));

    let (code, stdout, stderr) =
        simulate(&server.url(), &["--duration", "8s", "--typing", "--json"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}\n{}", daemon.log());
    let r: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(r["ok"], true, "{r:#}");
    assert_eq!(r["interrupted"], false);
    assert_eq!(r["grace_seconds"], 3.0);
    // 100 users, a share of 1 per minute, for 8 s: about 13 vanish.
    let vanished = r["users_vanished"].as_u64().unwrap();
    assert!((8..=16).contains(&vanished), "{r:#}");
    assert_eq!(r["evictions"], vanished, "every zombie announced: {r:#}");
    assert_eq!(r["false_evictions"], 0);
    assert_eq!(r["duplicate_events"], 0);
    assert_eq!(r["missed_zombies"], 0);
    assert_eq!(r["pending_zombies"], 0);
    assert_eq!(r["unexpected_events"], 0);
    assert_eq!(r["no_sweeper_answered"], false);
    assert!(r["events_received"].as_u64().unwrap() >= vanished, "{r:#}");
    assert!(r["heartbeats"].as_u64().unwrap() > 1000, "{r:#}");
    let lag = &r["eviction_lag_seconds"];
    // Evicted by the first pass after the window closed: within a schedule, plus pass time.
    assert!(lag["p50"].as_f64().unwrap() >= 0.0, "{r:#}");
    assert!(lag["max"].as_f64().unwrap() < 1.5, "{r:#}");
    let typing = &r["typing"];
    assert_eq!(typing["false_stops"], 0, "{r:#}");
    assert_eq!(typing["duplicate_stops"], 0);
    assert_eq!(typing["missed_stops"], 0);
    assert_eq!(typing["stops"], typing["bursts"]);

    // It deleted what it wrote.
    assert_eq!(dbsize(&mut server.con()), 0);
}

/// On a 3-primary cluster (the capacity benchmarks' topology): the run's conversations land on
/// every primary, the daemon sweeps them all, every zombie is announced once, and the run
/// deletes its keys from every node.
#[test]
fn simulate_against_a_sweeper_on_a_cluster_is_clean() {
    let cluster = RedisCluster::start(3, 0);
    let toml = format!("{}{SIM_TOML}", cluster.redis_toml());
    let daemon = Binary::spawn(&toml, &["run"], &[]);
    daemon.wait_ready(Duration::from_secs(20));
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "c.toml", &toml);
    let (code, stdout, stderr) = simulate_sim(
        &file,
        &[
            "--conversations",
            "60",
            "--users",
            "3",
            "--heartbeat",
            "500ms",
            "--vanish-rate",
            "1",
            "--duration",
            "8s",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}\n{}", daemon.log());
    let r: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(r["ok"], true, "{r:#}");
    let vanished = r["users_vanished"].as_u64().unwrap();
    assert!(vanished >= 10, "{r:#}");
    assert_eq!(r["evictions"], vanished, "every zombie announced: {r:#}");
    assert_eq!(r["false_evictions"], 0);
    assert_eq!(r["duplicate_events"], 0);
    assert_eq!(r["missed_zombies"], 0);
    assert_eq!(r["failed_heartbeat_calls"], 0, "{r:#}");
    assert_eq!(r["keys_deleted"], true, "{r:#}");
    // 60 conversations spread over the slots: every primary held some, and none is left.
    for node in &cluster.nodes {
        let mut con = node.con();
        assert_eq!(dbsize(&mut con), 0, "node {}", node.port);
        let calls: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut con)
            .unwrap();
        assert!(
            calls.contains("cmdstat_evalsha") || calls.contains("cmdstat_eval:"),
            "node {}: {calls}",
            node.port
        );
    }
    // `seed` fills one server only; a cluster node off this machine is refused by name.
    let (code, _, stderr) = run_tools(&["--config", file.to_str().unwrap(), "seed"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("redis.mode = \"cluster\""), "{stderr}");
    let remote = write_file(
        dir.path(),
        "remote.toml",
        &format!(
            "[redis]\nmode = \"cluster\"\nnodes = [\"redis://127.0.0.1:1\", \"redis://10.255.255.1:7000\"]\n{SIM_TOML}"
        ),
    );
    let (code, _, stderr) = simulate_sim(&remote, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("refusing to write synthetic data to redis://10.255.255.1:7000"),
        "{stderr}"
    );
}

#[test]
fn simulate_without_a_sweeper_reports_missed_zombies() {
    let server = RedisServer::start();
    let (code, stdout, stderr) = simulate(&server.url(), &["--duration", "3s"]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let line = |name: &str| -> u64 {
        let l = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name:?} in {stdout}"));
        l.split_whitespace().last().unwrap().parse().unwrap()
    };
    let vanished = line("users vanished");
    assert!(vanished >= 2, "{stdout}");
    assert_eq!(line("missed zombies"), vanished, "{stdout}");
    assert_eq!(line("evictions observed"), 0);
    assert_eq!(line("false evictions"), 0);
    assert!(stdout.contains("  result               FAILED"), "{stdout}");
    // Said plainly: not a slow sweeper, none at all.
    assert!(
        stdout.contains("  no sweeper answered: not one event came on sweep \"sim\"'s channel"),
        "{stdout}"
    );
    assert_eq!(dbsize(&mut server.con()), 0);
}

#[test]
fn simulate_stops_on_ctrl_c_and_cleans_up() {
    let server = RedisServer::start();
    let mut sim = Binary::spawn_tools(
        SIM_TOML,
        &[
            "simulate",
            "--sweep",
            "sim",
            "--conversations",
            "30",
            "--users",
            "4",
            "--heartbeat",
            "500ms",
            "--duration",
            "1m",
        ],
        &[("PRESENCE_SWEEPER__REDIS__URL", &server.url())],
    );
    sim.wait_for_log("simulation started", 1, Duration::from_secs(10));
    let mut con = server.con();
    let deadline = Instant::now() + Duration::from_secs(10);
    while dbsize(&mut con) < 30 {
        assert!(Instant::now() < deadline, "no heartbeats: {}", sim.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    sim.signal("INT");
    let status = sim
        .wait_exit(Duration::from_secs(10))
        .expect("exits after Ctrl-C");
    assert!(matches!(status.code(), Some(0 | 1)), "{status:?}");
    sim.wait_for_log("(interrupted)", 1, Duration::from_secs(5));
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// The pid of the demo's redis-server, from its first line.
fn demo_server_pid(log: &str) -> u32 {
    let line = log
        .lines()
        .find(|l| l.starts_with("Redis: "))
        .expect("the demo's first line");
    let pid = line.split("(pid ").nth(1).and_then(|r| r.split(')').next());
    pid.and_then(|p| p.parse().ok()).expect("a pid")
}

fn running(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The demo runs on its own (a private server, the daemon, users who vanish), says what
/// happened, and leaves no process behind.
#[test]
fn the_demo_shows_leaves_and_leaves_nothing_behind() {
    let (code, stdout, stderr) = crate::support::run_tools(
        &[
            "demo",
            "--redis-server",
            crate::support::redis_server_binary(),
            "--duration",
            "8s",
            "--conversations",
            "10",
            "--users",
            "5",
            "--vanish-rate",
            "1",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary: {stdout}"));
    assert!(
        summary.contains("0 false leaves, 0 duplicates, 0 missed zombies; lag p50"),
        "{summary}"
    );
    let vanished: u64 = summary["summary: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        vanished > 0,
        "nobody vanished in 8 s at a rate of 1: {stdout}"
    );
    let leaves = stdout
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(" left "))
        .count() as u64;
    assert_eq!(leaves, vanished, "each leave printed as it came: {stdout}");
    assert!(
        !running(demo_server_pid(&stdout)),
        "the demo's server outlived it"
    );
}

/// Ctrl-C ends the demo at once, with the same clean-up.
#[test]
fn the_demo_stops_on_ctrl_c_and_leaves_nothing_behind() {
    let mut demo = Binary::spawn_tools(
        "",
        &[
            "demo",
            "--redis-server",
            crate::support::redis_server_binary(),
            "--duration",
            "1m",
        ],
        &[],
    );
    demo.wait_for_log("presence-sweeper: sweeping", 1, Duration::from_secs(20));
    let pid = demo_server_pid(&demo.log());
    assert!(running(pid));
    demo.signal("INT");
    let status = demo
        .wait_exit(Duration::from_secs(15))
        .expect("exits after Ctrl-C");
    assert!(matches!(status.code(), Some(0 | 1)), "{status:?}");
    demo.wait_for_log("summary: ", 1, Duration::from_secs(5));
    assert!(!running(pid), "the demo's server outlived it");
}

/// Without a redis-server the demo says how to get one, with exit 2.
#[test]
fn the_demo_without_a_server_says_how_to_get_one() {
    let (code, _, stderr) = crate::support::run_tools(
        &["demo", "--redis-server", "/nonexistent/redis-server"],
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("cannot run /nonexistent/redis-server"),
        "{stderr}"
    );
    let (code, _, stderr) = crate::support::run_tools(&["demo"], &[("PATH", "/nonexistent")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no redis-server on PATH"), "{stderr}");
}
