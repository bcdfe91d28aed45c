//! Metrics and health endpoints, scraped from a daemon sweeping a real Redis.

use std::time::{Duration, Instant};

use crate::support::{
    Binary, DeadPort, InProcessDaemon, RedisServer, config_file, http_get, http_request, metric,
    redis_now, run_binary, scrape,
};
use redis::Commands;

const TTL: f64 = 45.0;

fn labels_of(samples: &[crate::support::Sample]) -> Vec<String> {
    samples
        .iter()
        .flat_map(|s| s.labels.iter().map(|(_, v)| v.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_is_accounted_exactly() {
    let server = RedisServer::start();
    let mut con = server.con();
    let seeded_at = redis_now(&mut con);
    // 50 keys, 5 live and 3 stale members each: 250 live, 150 stale. Stale member k of key c
    // outlived its window by (c + k + 1) seconds at seeding time.
    let mut expected_lag_at_seed = 0.0;
    for c in 0..50 {
        let key = format!("presence:conv-{c}:online");
        for u in 0..5 {
            let _: () = con.zadd(&key, format!("user-live-{u}"), seeded_at).unwrap();
        }
        for k in 0..3 {
            let outlived = (c + k + 1) as f64;
            let score = seeded_at - TTL - outlived;
            expected_lag_at_seed += outlived;
            let _: () = con.zadd(&key, format!("user-gone-{k}"), score).unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = config_file(
        dir.path(),
        &server.url(),
        "[sweeps.online]\nschedule = \"1h\"\n[sweeps.typing]\nschedule = \"1h\"\n",
    );
    let daemon = InProcessDaemon::start(config, None).await;
    // The first walk finds the keys; their first checks evict the zombies.
    let s = daemon
        .wait_metrics(
            "both first walks and checks",
            Duration::from_secs(10),
            |s| {
                metric(
                    s,
                    "presence_sweeper_sweeps_total",
                    &[("sweep", "online"), ("result", "success")],
                ) == Some(1.0)
                    && metric(
                        s,
                        "presence_sweeper_sweeps_total",
                        &[("sweep", "typing"), ("result", "success")],
                    ) == Some(1.0)
                    && metric(
                        s,
                        "presence_sweeper_deadline_checks_total",
                        &[("sweep", "online")],
                    ) == Some(50.0)
                    && metric(s, "presence_sweeper_members", &[("sweep", "online")]) == Some(250.0)
            },
        )
        .await;
    let swept_by = redis_now(&mut con);
    let online = |name: &str| {
        metric(&s, name, &[("sweep", "online")]).unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(online("presence_sweeper_evicted_total"), 150.0);
    assert_eq!(online("presence_sweeper_events_published_total"), 150.0);
    assert_eq!(online("presence_sweeper_events_failed_total"), 0.0);
    assert_eq!(online("presence_sweeper_keys_scanned_total"), 50.0);
    assert_eq!(online("presence_sweeper_keys"), 50.0);
    assert_eq!(online("presence_sweeper_tracked_keys"), 50.0);
    assert_eq!(online("presence_sweeper_members"), 250.0);
    assert_eq!(online("presence_sweeper_key_cardinality_count"), 50.0);
    assert_eq!(online("presence_sweeper_key_cardinality_sum"), 250.0);
    assert_eq!(online("presence_sweeper_eviction_lag_seconds_count"), 150.0);
    let lag_sum = online("presence_sweeper_eviction_lag_seconds_sum");
    let slack = 150.0 * (swept_by - seeded_at);
    assert!(
        lag_sum >= expected_lag_at_seed - 1e-3 && lag_sum <= expected_lag_at_seed + slack + 1e-3,
        "lag sum {lag_sum} vs seeded {expected_lag_at_seed} (+{slack})"
    );
    // Every lag was at least one second: nothing in the lowest buckets.
    assert_eq!(
        metric(
            &s,
            "presence_sweeper_eviction_lag_seconds_bucket",
            &[("sweep", "online"), ("le", "0.5")]
        ),
        Some(0.0)
    );
    assert_eq!(online("presence_sweeper_sweep_duration_seconds_count"), 1.0);
    assert_eq!(online("presence_sweeper_sweep_interval_seconds"), 3600.0);
    assert_eq!(online("presence_sweeper_sweep_overruns_total"), 0.0);
    assert_eq!(
        metric(
            &s,
            "presence_sweeper_sweeps_total",
            &[("sweep", "online"), ("result", "error")]
        ),
        Some(0.0)
    );
    let last = online("presence_sweeper_last_success_timestamp_seconds");
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((wall - last).abs() < 30.0, "{last} vs {wall}");
    // The typing sweep found nothing, and says so with zeros rather than gaps.
    assert_eq!(
        metric(&s, "presence_sweeper_evicted_total", &[("sweep", "typing")]),
        Some(0.0)
    );
    assert_eq!(
        metric(&s, "presence_sweeper_keys", &[("sweep", "typing")]),
        Some(0.0)
    );
    assert_eq!(metric(&s, "presence_sweeper_redis_up", &[]), Some(1.0));
    assert_eq!(
        metric(
            &s,
            "presence_sweeper_build_info",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", presence_sweeper_cli::version::REVISION),
                ("rustc", presence_sweeper_cli::version::rustc_release()),
            ]
        ),
        Some(1.0)
    );
    assert!(metric(&s, "process_resident_memory_bytes", &[]).unwrap() > 0.0);
    assert!(metric(&s, "process_open_fds", &[]).unwrap() > 0.0);
    // Precise, not whole seconds: a daemon this young has used a fraction of one.
    let cpu = metric(&s, "process_cpu_seconds_total", &[]).unwrap();
    assert!(cpu > 0.0 && cpu.fract() != 0.0, "{cpu}");
    // No label value carries a user id, a conversation id or a key.
    for v in labels_of(&s) {
        assert!(
            !v.contains("user-") && !v.contains("conv-") && !v.contains("presence:"),
            "label value {v:?}"
        );
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_exists_from_start_even_without_redis() {
    let dead = DeadPort::new();
    let port = dead.port;
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = config_file(dir.path(), &format!("redis://127.0.0.1:{port}/0"), "");
    let daemon = InProcessDaemon::start(config, None).await;
    let addr = daemon.addr;
    let (s, ready, live) = tokio::task::spawn_blocking(move || {
        (
            scrape(addr),
            http_get(addr, "/readyz"),
            http_get(addr, "/healthz"),
        )
    })
    .await
    .unwrap();
    assert_eq!(ready.0, 503);
    assert!(
        ready.1.starts_with("Redis is unreachable: ") || ready.1 == "not connected to Redis yet\n",
        "{}",
        ready.1
    );
    assert_eq!(live.0, 200);
    assert_eq!(metric(&s, "presence_sweeper_redis_up", &[]), Some(0.0));
    for sweep in ["online", "typing"] {
        for result in ["success", "error"] {
            assert_eq!(
                metric(
                    &s,
                    "presence_sweeper_sweeps_total",
                    &[("sweep", sweep), ("result", result)]
                ),
                Some(0.0)
            );
        }
        for name in [
            "presence_sweeper_sweep_overruns_total",
            "presence_sweeper_sweep_ticks_total",
            "presence_sweeper_sweep_duration_seconds_count",
            "presence_sweeper_last_success_timestamp_seconds",
            "presence_sweeper_keys_scanned_total",
            "presence_sweeper_keys",
            "presence_sweeper_members",
            "presence_sweeper_key_cardinality_count",
            "presence_sweeper_evicted_total",
            "presence_sweeper_events_published_total",
            "presence_sweeper_eviction_lag_seconds_count",
            "presence_sweeper_storm_holds_total",
        ] {
            assert_eq!(
                metric(&s, name, &[("sweep", sweep)]),
                Some(0.0),
                "{name}{{{sweep}}}"
            );
        }
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_flips_redis_up_and_readiness_but_not_liveness() {
    let mut server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = config_file(
        dir.path(),
        &server.url(),
        "[sweeps.online]\nschedule = \"1h\"\n",
    );
    let daemon = InProcessDaemon::start(config, None).await;
    let addr = daemon.addr;
    daemon
        .wait_metrics("ready", Duration::from_secs(10), |_| {
            http_get(addr, "/readyz").0 == 200
        })
        .await;

    server.stop();
    let killed = Instant::now();
    let (down_after, worst_scrape) = tokio::task::spawn_blocking(move || {
        let mut worst = Duration::ZERO;
        loop {
            assert_eq!(
                http_get(addr, "/healthz").0,
                200,
                "liveness must not depend on Redis"
            );
            let t = Instant::now();
            let s = scrape(addr);
            worst = worst.max(t.elapsed());
            let ready = http_get(addr, "/readyz");
            if metric(&s, "presence_sweeper_redis_up", &[]) == Some(0.0) && ready.0 == 503 {
                assert!(ready.1.starts_with("Redis is unreachable: "), "{}", ready.1);
                // A few more scrapes while Redis stays down.
                for _ in 0..10 {
                    let t = Instant::now();
                    scrape(addr);
                    worst = worst.max(t.elapsed());
                }
                return (killed.elapsed(), worst);
            }
            assert!(
                killed.elapsed() < Duration::from_secs(10),
                "redis_up never went to 0"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    assert!(down_after < Duration::from_secs(6), "took {down_after:?}");
    assert!(
        // Never waits on Redis (a command timeout is 5 s); a loaded machine slows it a little.
        worst_scrape < Duration::from_secs(1),
        "/metrics took {worst_scrape:?}"
    );

    server.restart();
    daemon
        .wait_metrics("Redis back", Duration::from_secs(10), |s| {
            metric(s, "presence_sweeper_redis_up", &[]) == Some(1.0)
                && http_get(addr, "/readyz").0 == 200
                && http_get(addr, "/healthz").0 == 200
        })
        .await;
    daemon.stop().await;
}

#[test]
fn routes_and_methods() {
    let server = RedisServer::start();
    let d = Binary::spawn(
        "[http]\nlisten = \"127.0.0.1:0\"\n",
        &["--redis-url", &server.url()],
        &[],
    );
    let addr = d.http_addr();
    let (status, body) = http_get(addr, "/");
    assert_eq!(status, 200);
    for link in ["/metrics", "/healthz", "/readyz"] {
        assert!(body.contains(&format!("href=\"{link}\"")), "{body}");
    }
    assert_eq!(http_get(addr, "/nope").0, 404);
    assert_eq!(http_get(addr, "/metrics/extra").0, 404);
    assert_eq!(http_request(addr, "POST", "/metrics").0, 405);
    assert_eq!(http_request(addr, "HEAD", "/healthz").0, 200);
    assert_eq!(http_get(addr, "/healthz"), (200, "ok\n".to_string()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_get(addr, "/readyz").0 != 200 {
        assert!(Instant::now() < deadline, "never ready: {}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn healthcheck_command_exit_codes() {
    let server = RedisServer::start();
    let d = Binary::spawn(
        "[http]\nlisten = \"127.0.0.1:0\"\n",
        &["--redis-url", &server.url()],
        &[],
    );
    let addr = d.http_addr().to_string();
    let (code, _, stderr) = run_binary(
        &["healthcheck"],
        &[("PRESENCE_SWEEPER__HTTP__LISTEN", addr.as_str())],
    );
    assert_eq!(code, 0, "{stderr}");

    let dead = DeadPort::new();
    let nothing = format!("127.0.0.1:{}", dead.port);
    let started = Instant::now();
    let (code, _, stderr) = run_binary(
        &["healthcheck", "--timeout", "1s"],
        &[("PRESENCE_SWEEPER__HTTP__LISTEN", nothing.as_str())],
    );
    assert_eq!(code, 1);
    assert!(stderr.contains("unhealthy: cannot connect to"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Without notifications every sweep walks on its own schedule, and one walk serves them all:
/// a typing tick (1s) that meets the walk the online tick (2s) started at the same moment is
/// served by it, not skipped. Before, it counted an overrun at every meeting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_that_meet_another_sweeps_walk_are_not_overruns() {
    let server = RedisServer::start_with(&["--enable-debug-command", "local"]);
    let mut con = server.con();
    // Unrelated keys, so that each walk takes long enough for the other sweep's tick to meet it.
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(100_000)
        .arg("unrelated")
        .arg(8)
        .query(&mut con)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = config_file(
        dir.path(),
        &server.url(),
        "[tracking]\nnotifications = \"off\"\n\
         [sweeps.online]\nschedule = \"2s\"\n[sweeps.typing]\nschedule = \"1s\"\n",
    );
    let daemon = InProcessDaemon::start(config, None).await;
    let s = daemon
        .wait_metrics("six typing ticks", Duration::from_secs(20), |s| {
            metric(
                s,
                "presence_sweeper_sweep_ticks_total",
                &[("sweep", "typing")],
            )
            .is_some_and(|t| t >= 6.0)
        })
        .await;
    for sweep in ["online", "typing"] {
        assert_eq!(
            metric(
                &s,
                "presence_sweeper_sweep_overruns_total",
                &[("sweep", sweep)]
            ),
            Some(0.0),
            "{sweep}"
        );
    }
    assert!(
        metric(
            &s,
            "presence_sweeper_sweep_ticks_total",
            &[("sweep", "online")]
        )
        .is_some_and(|t| t >= 2.0)
    );
    daemon.stop().await;
}

#[test]
fn a_zombie_written_by_hand_is_evicted_but_not_observed_as_lag() {
    use crate::support::wait_until;
    let server = RedisServer::start();
    let mut con = server.con();
    let d = Binary::spawn(
        "[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.online]\nenabled = false\n\
         [sweeps.typing]\nschedule = \"200ms\"\n",
        &["--redis-url", &server.url()],
        &[],
    );
    d.wait_ready(Duration::from_secs(10));
    // The README's zombie by hand (score 1), and one that stopped heartbeating 10 s ago.
    let now = redis_now(&mut con);
    let _: () = con.zadd("presence:c1:typing", "u1", 1).unwrap();
    let _: () = con.zadd("presence:c2:typing", "u2", now - 10.0).unwrap();
    let typing = [("sweep", "typing")];
    wait_until("both evicted", Duration::from_secs(10), || {
        metric(
            &scrape(d.http_addr()),
            "presence_sweeper_evicted_total",
            &typing,
        ) == Some(2.0)
    });
    let s = scrape(d.http_addr());
    let lag = |name: &str| metric(&s, name, &typing).unwrap();
    assert_eq!(lag("presence_sweeper_eviction_lag_seconds_count"), 1.0);
    assert!(lag("presence_sweeper_eviction_lag_seconds_sum") < 60.0);
}

/// The families of `docs/metrics.md`'s tables, each with its label names.
fn documented_families() -> std::collections::BTreeMap<String, Vec<String>> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    doc.lines()
        .filter_map(|line| line.strip_prefix("| `presence_sweeper_"))
        .map(|rest| {
            let name = rest.split('`').next().unwrap();
            let (family, labels) = match name.split_once('{') {
                Some((f, l)) => (f, l.trim_end_matches('}')),
                None => (name, ""),
            };
            let mut labels: Vec<String> = labels
                .split(',')
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect();
            labels.sort();
            (format!("presence_sweeper_{family}"), labels)
        })
        .collect()
}

/// The `presence_sweeper_*` families a scrape shows, each with the label names of its series
/// (a histogram's `le` and suffixes folded into its family).
fn exposed_families(body: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let histograms: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" histogram"))
        .collect();
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for s in crate::support::parse_metrics(body) {
        if !s.name.starts_with("presence_sweeper_") {
            continue;
        }
        let family = histograms
            .iter()
            .find(|h| {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| s.name == format!("{h}{suffix}"))
            })
            .map_or(s.name.clone(), |h| (*h).to_owned());
        let labels = out.entry(family).or_default();
        for (name, _) in s.labels {
            if name != "le" && !labels.contains(&name) {
                labels.push(name);
            }
        }
        labels.sort();
    }
    out
}

/// Every family `docs/metrics.md` lists is on `/metrics` from start-up, with the labels it
/// names, for every sweep and primary the daemon runs; and every family on `/metrics` is in
/// the docs.
#[test]
fn every_series_exists_from_start_up_and_the_docs_list_exactly_them() {
    let server = RedisServer::start();
    let d = Binary::spawn(
        "[http]\nlisten = \"127.0.0.1:0\"\n[coordination]\nlease = true\n\
         [sweeps.typing]\nstream = \"presence:{hash_tag}:log\"\n[webhooks.crm]\n\
         url = \"http://127.0.0.1:9/\"\nsweeps = [\"typing\"]\n\
         secret = \"whsec_cHJlc2VuY2Utc3dlZXBlci13ZWJob29rLXRlc3QtazE=\"\n",
        &["--redis-url", &server.url()],
        &[],
    );
    d.wait_ready(Duration::from_secs(15));
    let (status, body) = http_get(d.http_addr(), "/metrics");
    assert_eq!(status, 200, "{body}");
    let documented = documented_families();
    let exposed = exposed_families(&body);
    let missing: Vec<_> = documented
        .iter()
        .filter(|(f, labels)| exposed.get(*f) != Some(labels))
        .map(|(f, labels)| format!("{f}{labels:?} (exposed: {:?})", exposed.get(f)))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but not exposed as such: {missing:#?}"
    );
    let undocumented: Vec<_> = exposed
        .keys()
        .filter(|f| !documented.contains_key(*f))
        .collect();
    assert!(
        undocumented.is_empty(),
        "exposed but not documented: {undocumented:?}"
    );
    // Each sweep's and each primary's series are there, at start-up.
    let samples = crate::support::parse_metrics(&body);
    let node = format!("127.0.0.1:{}", server.port);
    for (family, labels) in &exposed {
        let present = |label: &str, value: &str| {
            samples.iter().any(|s| {
                (s.name == *family || s.name.starts_with(&format!("{family}_")))
                    && s.labels.iter().any(|(k, v)| k == label && v == value)
            })
        };
        if labels.contains(&"sweep".to_owned()) {
            for sweep in ["online", "typing"] {
                assert!(present("sweep", sweep), "{family} has no series of {sweep}");
            }
        }
        if labels.contains(&"node".to_owned()) {
            assert!(present("node", &node), "{family} has no series of {node}");
        }
        if labels.contains(&"webhook".to_owned()) {
            assert!(
                present("webhook", "crm"),
                "{family} has no series of the webhook"
            );
        }
    }
    let window: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == "presence_sweeper_check_window")
        .map(|s| s.value)
        .collect();
    assert_eq!(window, [4.0], "the window starts at evict.pipeline_depth");
}
