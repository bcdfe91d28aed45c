//! Every duration key at its documented bound runs; above it, every way of loading a
//! configuration refuses it (exit 2), naming the key, the value and its source.

use std::time::{Duration, Instant};

use crate::support::{
    Binary, RedisServer, http_get, redis_now, run_binary, wait_until, write_file,
};
use redis::Commands;

/// Every duration key (sweep keys as those of `online`) and its longest value, as
/// docs/configuration.md states them.
const AT_THE_BOUND: &[(&str, &str, &str)] = &[
    ("redis", "connect_timeout", "1h"),
    ("redis", "command_timeout", "1h"),
    ("redis", "eviction_timeout", "1h"),
    ("tracking", "reconcile_interval", "1day"),
    ("coordination", "lease_ttl", "1day"),
    ("sweeps.online", "ttl", "7days"),
    ("sweeps.online", "schedule", "1day"),
    ("sweeps.online.storm_guard", "hold", "7days"),
];

#[test]
fn every_duration_key_at_its_bound_runs_sweeps_and_stays_healthy() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kzg"]);
    let mut con = server.con();
    let mut toml = String::from("[http]\nlisten = \"127.0.0.1:0\"\n");
    let mut last = "";
    for (table, key, bound) in AT_THE_BOUND {
        if *table != last {
            toml.push_str(&format!("[{table}]\n"));
            last = table;
        }
        toml.push_str(&format!("{key} = \"{bound}\"\n"));
        if *key == "lease_ttl" {
            // A lease, so that its ttl is used.
            toml.push_str("lease = true\n");
        }
    }
    // The typing sweep keeps its 5 s ttl, so that a zombie leaves within the test, but walks
    // once a day at most: only the notification of its key can bring it to the daemon.
    toml.push_str("[sweeps.typing]\nschedule = \"1day\"\n");
    toml.push_str("[sweeps.typing.storm_guard]\nhold = \"7days\"\n");
    let mut d = Binary::spawn(&toml, &["--redis-url", &server.url()], &[]);
    d.wait_ready(Duration::from_secs(15));

    // The loop turns: a zombie written after start is found through its notification and leaves.
    let now = redis_now(&mut con);
    let _: () = con
        .zadd_multiple(
            "presence:c1:typing",
            &[(now - 60.0, "gone"), (now, "typing")],
        )
        .unwrap();
    wait_until(
        "the zombie written after start leaves",
        Duration::from_secs(10),
        || {
            let score: Option<f64> = con.zscore("presence:c1:typing", "gone").unwrap();
            score.is_none()
        },
    );
    let score: Option<f64> = con.zscore("presence:c1:typing", "typing").unwrap();
    assert!(score.is_some(), "the live typist stays");

    // The lease lasts the day asked for, not a wrapped number of milliseconds.
    let pttl: i64 = redis::cmd("PTTL")
        .arg("presence-sweeper:lease:online")
        .query(&mut con)
        .unwrap();
    assert!((86_000_000..=86_400_000).contains(&pttl), "PTTL {pttl}");

    // Healthy over a few seconds, and alive.
    let addr = d.http_addr();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let (status, body) = http_get(addr, "/healthz");
        assert_eq!(status, 200, "{body}\n{}", d.log());
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(d.wait_exit(Duration::ZERO).is_none(), "{}", d.log());

    // A reload above a bound is refused and the running configuration stays.
    std::fs::write(
        d.config_path(),
        toml.replace("ttl = \"7days\"", "ttl = \"8days\""),
    )
    .unwrap();
    d.signal("HUP");
    d.wait_for_log("configuration reload rejected", 1, Duration::from_secs(10));
    let log = d.log();
    let said = log
        .lines()
        .find(|l| l.contains("configuration reload rejected"))
        .unwrap();
    assert!(
        said.contains("error=sweeps.online.ttl = \"8days\" (in "),
        "{said}"
    );
    assert!(said.ends_with("): must be at most 7days"), "{said}");
    assert_eq!(http_get(addr, "/healthz").0, 200);
    assert!(!d.log().contains("panicked"), "{}", d.log());
}

#[test]
fn a_duration_above_its_bound_exits_2_naming_key_value_and_source() {
    let dir = tempfile::tempdir().unwrap();
    for (table, key, bound) in AT_THE_BOUND {
        let above = format!("{bound} 1ms");
        let dotted = format!("{table}.{key}");
        let file = write_file(
            dir.path(),
            "c.toml",
            &format!("[{table}]\n{key} = \"{above}\"\n"),
        );
        let variable = format!(
            "PRESENCE_SWEEPER__{}",
            dotted.replace('.', "__").to_uppercase()
        );
        let from_file = (
            vec!["--config", file.to_str().unwrap()],
            vec![],
            format!("(in {})", file.display()),
        );
        let from_env = (
            vec![],
            vec![(variable.as_str(), above.as_str())],
            format!("(from {variable})"),
        );
        for (args, env, source) in [from_file, from_env] {
            // check-config, and start-up: refused before anything connects.
            for command in ["check-config", "run"] {
                let mut args = args.clone();
                args.push(command);
                let (code, _, stderr) = run_binary(&args, &env);
                assert_eq!(code, 2, "{args:?} {env:?}: {stderr}");
                assert_eq!(
                    stderr.trim_end(),
                    format!(
                        "presence-sweeper: configuration error: {dotted} = \"{above}\" {source}: \
                         must be at most {bound}"
                    ),
                );
            }
        }
    }
}
