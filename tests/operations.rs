//! Running it as a service: systemd notifications, reload on SIGHUP, secrets.

use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{
    Binary, DeadPort, RedisServer, Subscriber, metric, redis_now, run_binary, scrape, wait_until,
};
use redis::Commands;

/// A NOTIFY_SOCKET owned by the test, collecting every datagram.
struct NotifySocket {
    _dir: tempfile::TempDir,
    path: String,
    messages: Arc<Mutex<Vec<String>>>,
}

impl NotifySocket {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let sink = messages.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            loop {
                match sock.recv(&mut buf) {
                    Ok(n) => sink
                        .lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(_) => return,
                }
                if Arc::strong_count(&sink) == 1 {
                    return;
                }
            }
        });
        Self {
            path: path.to_string_lossy().into_owned(),
            _dir: dir,
            messages,
        }
    }

    /// Every `KEY=value` line received so far, in order.
    fn lines(&self) -> Vec<String> {
        self.messages
            .lock()
            .unwrap()
            .iter()
            .flat_map(|m| m.lines().map(str::to_owned).collect::<Vec<_>>())
            .collect()
    }

    fn position(&self, line: &str, after: usize) -> Option<usize> {
        self.lines()
            .iter()
            .enumerate()
            .skip(after)
            .find(|(_, l)| l.as_str() == line)
            .map(|(i, _)| i)
    }

    fn wait_for(&self, line: &str, after: usize, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.position(line, after) {
                return i;
            }
            assert!(
                Instant::now() < deadline,
                "no {line:?} after #{after}; got {:?}",
                self.lines()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

const LOCAL_HTTP: &str = "[http]\nlisten = \"127.0.0.1:0\"\n";

#[test]
fn notifies_ready_then_watchdog_then_stopping() {
    let server = RedisServer::start();
    let notify = NotifySocket::new();
    let mut d = Binary::spawn(
        LOCAL_HTTP,
        &["--redis-url", &server.url()],
        &[("NOTIFY_SOCKET", &notify.path), ("WATCHDOG_USEC", "400000")],
    );
    let ready = notify.wait_for("READY=1", 0, Duration::from_secs(10));
    // Pings keep coming while the sweeps turn.
    let first = notify.wait_for("WATCHDOG=1", ready, Duration::from_secs(3));
    notify.wait_for("WATCHDOG=1", first + 1, Duration::from_secs(3));
    d.signal("TERM");
    let stopping = notify.wait_for("STOPPING=1", first, Duration::from_secs(5));
    assert!(stopping > first);
    let status = d.wait_exit(Duration::from_secs(5)).expect("exits");
    assert_eq!(status.code(), Some(0));
    assert!(
        notify
            .lines()
            .iter()
            .any(|l| l.starts_with("STATUS=sweeping")),
        "{:?}",
        notify.lines()
    );
}

#[test]
fn ready_waits_for_redis() {
    let dead = DeadPort::new();
    let port = dead.port;
    let notify = NotifySocket::new();
    let _d = Binary::spawn(
        LOCAL_HTTP,
        &["--redis-url", &format!("redis://127.0.0.1:{port}/0")],
        &[
            ("NOTIFY_SOCKET", &notify.path),
            ("WATCHDOG_USEC", "2000000"),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !notify
        .lines()
        .iter()
        .any(|l| l.starts_with("STATUS=waiting for Redis at redis://127.0.0.1:"))
    {
        assert!(Instant::now() < deadline, "{:?}", notify.lines());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let lines = notify.lines();
    assert!(!lines.contains(&"READY=1".to_string()), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("EXTEND_TIMEOUT_USEC=")),
        "start-up asks for more time while it waits: {lines:?}"
    );
    let mut server = RedisServer::unstarted(dead.release(), &[]);
    server.restart();
    notify.wait_for("READY=1", 0, Duration::from_secs(15));
}

fn write_config(d: &Binary, toml: &str) {
    std::fs::write(d.config_path(), format!("{LOCAL_HTTP}{toml}")).unwrap();
}

fn typing_member_present(con: &mut redis::Connection, member: &str) -> bool {
    let score: Option<f64> = con.zscore("presence:c1:typing", member).unwrap();
    score.is_some()
}

#[test]
fn sighup_applies_a_new_ttl_and_rejects_a_broken_file() {
    let server = RedisServer::start();
    let mut con = server.con();
    let base = "[sweeps.online]\nenabled = false\n[sweeps.typing]\nschedule = \"100ms\"\n";
    let d = Binary::spawn(
        &format!("{LOCAL_HTTP}{base}ttl = \"60s\"\n"),
        &["--redis-url", &server.url()],
        &[],
    );
    let addr = d.http_addr();
    let now = redis_now(&mut con);
    let _: () = con
        .zadd("presence:c1:typing", "ten-seconds-quiet", now - 10.0)
        .unwrap();
    d.wait_walks("typing", 5, Duration::from_secs(10));
    assert!(
        typing_member_present(&mut con, "ten-seconds-quiet"),
        "ttl is 60 s"
    );

    write_config(&d, &format!("{base}ttl = \"5s\"\n"));
    d.signal("HUP");
    d.wait_for_log("configuration reloaded", 1, Duration::from_secs(10));
    wait_until("eviction under the new ttl", Duration::from_secs(5), || {
        !typing_member_present(&mut con, "ten-seconds-quiet")
    });
    // The changed sweep starts its index again, but its first walk was at start.
    d.wait_walks("typing", 8, Duration::from_secs(10));
    assert_eq!(d.count("first walk done"), 1, "{}", d.log());

    write_config(&d, &format!("{base}ttl = \"0s\"\n"));
    d.signal("HUP");
    d.wait_for_log("configuration reload rejected", 1, Duration::from_secs(10));
    assert!(
        d.log().contains("sweeps.typing.ttl = \"0s\""),
        "{}",
        d.log()
    );
    // The 5 s ttl stays in force.
    let now = redis_now(&mut con);
    let _: () = con
        .zadd_multiple(
            "presence:c1:typing",
            &[(now - 10.0, "quiet-again"), (now - 1.0, "typing-now")],
        )
        .unwrap();
    wait_until(
        "eviction under the kept ttl",
        Duration::from_secs(5),
        || !typing_member_present(&mut con, "quiet-again"),
    );
    assert!(typing_member_present(&mut con, "typing-now"));

    let s = scrape(addr);
    assert_eq!(
        metric(
            &s,
            "presence_sweeper_config_reloads_total",
            &[("result", "success")]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &s,
            "presence_sweeper_config_reloads_total",
            &[("result", "error")]
        ),
        Some(1.0)
    );
}

#[test]
fn sighup_adds_and_removes_sweeps_and_flags_restart_only_settings() {
    let server = RedisServer::start();
    let mut con = server.con();
    let d = Binary::spawn(
        &format!(
            "{LOCAL_HTTP}[sweeps.online]\nenabled = false\n[sweeps.typing]\nschedule = \"100ms\"\n"
        ),
        &["--redis-url", &server.url()],
        &[],
    );
    let addr = d.http_addr();
    d.wait_ready(Duration::from_secs(10));

    write_config(
        &d,
        "[sweeps.online]\nenabled = false\n[sweeps.typing]\nenabled = false\n\
         [sweeps.cursor]\nmatch = \"cursor:*\"\nttl = \"1s\"\nschedule = \"100ms\"\nevent = \"cursor.gone\"\n\
         [log]\nformat = \"json\"\n",
    );
    d.signal("HUP");
    d.wait_for_log("configuration reloaded", 1, Duration::from_secs(10));
    assert!(
        d.log().contains("only take effect after a restart"),
        "{}",
        d.log()
    );
    let now = redis_now(&mut con);
    let _: () = con.zadd("cursor:doc1", "gone", now - 5.0).unwrap();
    let _: () = con
        .zadd("presence:c1:typing", "not-swept-any-more", now - 60.0)
        .unwrap();
    wait_until("the new sweep runs", Duration::from_secs(5), || {
        let n: u64 = con.zcard("cursor:doc1").unwrap();
        n == 0
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(typing_member_present(&mut con, "not-swept-any-more"));

    let s = scrape(addr);
    assert!(metric(&s, "presence_sweeper_keys", &[("sweep", "cursor")]).is_some());
    assert!(metric(&s, "presence_sweeper_keys", &[("sweep", "typing")]).is_none());
}

/// A reload that changes a sweep lets its checks in flight finish, and the new sweep takes the
/// rest: nothing is cut short and every zombie is announced exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_does_not_interrupt_a_pass_in_flight() {
    let server = RedisServer::start();
    let mut con = server.con();
    let keys = 3000;
    let now = redis_now(&mut con);
    let mut pipe = redis::pipe();
    for c in 0..keys {
        pipe.zadd(format!("presence:c{c}:online"), "zombie", now - 100.0)
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    // Every member a zombie: the storm guard would hold them, which is not what is tested here.
    let slow = "[sweeps.typing]\nenabled = false\n[evict]\nbatch_keys = 1\npipeline_depth = 1\n\
                [sweeps.online.storm_guard]\nenabled = false\n[sweeps.online]\nschedule = \"1h\"\n";
    let d = Binary::spawn(
        &format!("{LOCAL_HTTP}{slow}ttl = \"45s\"\n"),
        &["--redis-url", &server.url()],
        &[],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while sub.received().len() < 100 {
        assert!(Instant::now() < deadline, "{}", d.log());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    write_config(&d, &format!("{slow}ttl = \"40s\"\n"));
    d.signal("HUP");
    let events = sub.wait_for(keys, Duration::from_secs(30)).await;
    d.wait_for_log("configuration reloaded", 1, Duration::from_secs(10));
    assert_eq!(events.len(), keys, "{}", d.log());
    let unique: std::collections::HashSet<_> = events.iter().map(|e| e.channel.clone()).collect();
    assert_eq!(unique.len(), keys);
}

#[test]
fn the_password_never_shows() {
    let password = "pw-7c1e4f0a9b";
    let server = RedisServer::start_with(&["--requirepass", password]);
    let dir = tempfile::tempdir().unwrap();
    let pw_file =
        crate::support::write_file(dir.path(), "redis-password", &format!("{password}\n"));
    let toml = format!(
        "{LOCAL_HTTP}[redis]\npassword_file = {:?}\n",
        pw_file.to_str().unwrap()
    );
    let d = Binary::spawn(
        &toml,
        &["--redis-url", &server.url(), "--log-level", "debug"],
        &[],
    );
    let addr = d.http_addr();
    d.wait_walks("online", 2, Duration::from_secs(10));
    let (_, metrics_text) = crate::support::http_get(addr, "/metrics");
    let (code, stdout, stderr) = run_binary(
        &[
            "--config",
            d.config_path().to_str().unwrap(),
            "check-config",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    for (what, text) in [
        ("log", d.log()),
        ("metrics", metrics_text),
        ("check-config", stdout + &stderr),
    ] {
        assert!(
            !text.contains(password),
            "the password leaked into the {what}"
        );
    }
    // The same password in the URL is redacted too.
    let url = format!("redis://:{password}@127.0.0.1:{}/0", server.port);
    let (code, stdout, stderr) = run_binary(&["--redis-url", &url, "check-config"], &[]);
    assert_eq!(code, 0);
    assert!(!stdout.contains(password) && !stderr.contains(password));
    let (code, stdout, stderr) = run_binary(
        &[
            "--redis-url",
            &format!("redis://:wrong-{password}@127.0.0.1:{}/0", server.port),
            "sweep",
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(
        !stdout.contains(password) && !stderr.contains(password),
        "{stderr}"
    );
}

#[test]
fn credentials_directory_is_expanded() {
    let server = RedisServer::start_with(&["--requirepass", "cred-pw"]);
    let creds = tempfile::tempdir().unwrap();
    crate::support::write_file(creds.path(), "redis-password", "cred-pw\n");
    let (code, stdout, stderr) = run_binary(
        &["--redis-url", &server.url(), "sweep"],
        &[
            ("CREDENTIALS_DIRECTORY", creds.path().to_str().unwrap()),
            (
                "PRESENCE_SWEEPER__REDIS__PASSWORD_FILE",
                "$CREDENTIALS_DIRECTORY/redis-password",
            ),
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
}
