//! ACL users: the minimal permissions docs/operations.md documents are enough, and a missing one is
//! refused before anything is evicted.

use std::time::Duration;

use crate::support::{RedisServer, Subscriber, redis_now, run_binary, write_file};
use redis::Commands;

/// The minimal ACL of docs/operations.md (Redis permissions), for a standalone sweeper without a lease.
const MINIMAL: &str = "+ping +scan +time +zcount +zcard +zrange +zremrangebyscore \
                       +zremrangebyrank +multi +exec +discard +publish +evalsha +script|load";

fn create_user(server: &RedisServer, name: &str, commands: &str) {
    let mut con = server.con();
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(name)
        .arg("reset")
        // Redis 6.2 gives a reset user every channel (acl-pubsub-default); 7.0 on, none.
        .arg("resetchannels")
        .arg("on")
        .arg(">user-secret")
        .arg("~presence:*")
        .arg("&presence:*");
    for c in commands.split_whitespace() {
        cmd.arg(c);
    }
    let _: () = cmd.query(&mut con).unwrap();
}

fn seed(server: &RedisServer) {
    let mut con = server.con();
    crate::support::seed_keys(
        &mut con,
        (0..3).map(|c| format!("presence:c{c}:online")),
        1,
        1,
    );
    let now = redis_now(&mut con);
    // One key with more zombies than one call may remove: it goes through the script.
    let mut cmd = redis::cmd("ZADD");
    cmd.arg("presence:big:online");
    for u in 0..50 {
        cmd.arg(now - 100.0).arg(format!("zombie{u}"));
    }
    let _: () = cmd.query(&mut con).unwrap();
}

fn sweep_as(server: &RedisServer, user: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let pw = write_file(dir.path(), "pw", "user-secret\n");
    let toml = format!(
        "[redis]\nusername = \"{user}\"\npassword_file = {:?}\n[evict]\nmax_members_per_call = 10\n",
        pw.to_str().unwrap()
    );
    let file = write_file(dir.path(), "c.toml", &toml);
    run_binary(
        &[
            "--config",
            file.to_str().unwrap(),
            "--redis-url",
            &server.url(),
            "sweep",
            "--sweep",
            "online",
        ],
        &[],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_acl_is_enough() {
    let server = RedisServer::start();
    create_user(&server, "sweeper", MINIMAL);
    seed(&server);
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    let (code, stdout, stderr) = sweep_as(&server, "sweeper");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("keys=4 members=3 evicted=53 events_published=53"),
        "{stdout}"
    );
    assert_eq!(sub.wait_for(53, Duration::from_secs(5)).await.len(), 53);
    // Also as a URL with the user in it.
    seed(&server);
    let url = format!("redis://sweeper:user-secret@127.0.0.1:{}/0", server.port);
    let (code, stdout, stderr) =
        run_binary(&["--redis-url", &url, "sweep", "--sweep", "online"], &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("evicted=53"), "{stdout}");
}

#[test]
fn without_publish_nothing_is_evicted_and_the_error_says_why() {
    let server = RedisServer::start();
    create_user(&server, "mute", &MINIMAL.replace("+publish", ""));
    seed(&server);
    let (code, stdout, stderr) = sweep_as(&server, "mute");
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(
            "the Redis user may not run PUBLISH on the channel presence:{conversation_id}:events"
        ) && stderr.contains("NOPERM"),
        "{stderr}"
    );
    let mut con = server.con();
    for c in 0..3 {
        let n: u64 = con.zcard(format!("presence:c{c}:online")).unwrap();
        assert_eq!(n, 2, "no member was removed without its event");
    }
    let n: u64 = con.zcard("presence:big:online").unwrap();
    assert_eq!(n, 50);
}

#[test]
fn without_a_key_pattern_the_error_names_the_pattern_not_a_key() {
    let server = RedisServer::start();
    let mut con = server.con();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("elsewhere")
        .arg("reset")
        .arg("resetchannels")
        .arg("on")
        .arg(">user-secret")
        .arg("~other:*")
        .arg("&presence:*")
        .arg("+@all")
        .query(&mut con)
        .unwrap();
    seed(&server);
    let (code, _, stderr) = sweep_as(&server, "elsewhere");
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("may not run ZCOUNT on the keys presence:*:online"),
        "{stderr}"
    );
    // Conversation ids stay out of error lines.
    assert!(!stderr.contains("presence:c"), "{stderr}");
}

/// Refused MULTI: the preflight stops before sending anything else, so none of its probes run
/// for real (no member removed, nothing published), and the error says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_multi_nothing_runs_and_the_error_says_why() {
    let server = RedisServer::start();
    create_user(&server, "no-multi", &MINIMAL.replace("+multi", ""));
    seed(&server);
    let sub = Subscriber::start(&server.url(), "*").await;
    let (code, stdout, stderr) = sweep_as(&server, "no-multi");
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("the Redis user may not run MULTI") && stderr.contains("NOPERM"),
        "{stderr}"
    );
    let mut con = server.con();
    for c in 0..3 {
        let n: u64 = con.zcard(format!("presence:c{c}:online")).unwrap();
        assert_eq!(n, 2, "nothing was removed");
    }
    let n: u64 = con.zcard("presence:big:online").unwrap();
    assert_eq!(n, 50);
    assert!(
        sub.wait_for(1, Duration::from_millis(300)).await.is_empty(),
        "nothing was published"
    );
}

/// MULTI taken away after the preflight passed (it is trusted for a minute): the transaction's
/// commands then run one by one. Members they removed cannot be announced exactly, and the pass
/// must say so rather than report that nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_taken_away_after_the_preflight_reports_what_was_removed() {
    use presence_sweeper::pass;

    let server = RedisServer::start();
    create_user(&server, "sweeper", MINIMAL);
    let url = format!("redis://sweeper:user-secret@127.0.0.1:{}/0", server.port);
    let cfg = crate::support::config(&url, "[sweeps.typing]\nenabled = false\n");
    let sweeper = crate::support::OnePass::connect(&cfg, "online").await;
    seed(&server);
    let report = sweeper.run(pass::Options::default()).await.unwrap();
    assert_eq!(report.counts.evicted, 53);

    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("sweeper")
        .arg("-multi")
        .query(&mut server.con())
        .unwrap();
    seed(&server);
    let failed = sweeper.run(pass::Options::default()).await.unwrap_err();
    let message = failed.error.to_string();
    assert!(
        message.contains("MULTI was refused") && message.contains("removed outside a transaction"),
        "{message}"
    );
}

/// Keyspace notifications need two more permissions: `+config|get` (is the server publishing
/// them?) and `+psubscribe` on each sweep's keyspace channel, literally. Without them the daemon
/// says why and walks on the schedule instead.
#[test]
fn notifications_need_the_keyspace_channels_not_config() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "KEA"]);
    create_user(&server, "sweeper", MINIMAL);
    // The documented line for notifications, as it stands.
    create_user(
        &server,
        "listener",
        &format!(
            "{MINIMAL} +config|get +psubscribe &__keyevent@0__:new \
             &__keyspace@0__:presence:*:online &__keyspace@0__:presence:*:typing"
        ),
    );
    // A managed Redis's user: no CONFIG, the channels granted. Notices prove them on.
    create_user(
        &server,
        "managed",
        &format!(
            "{MINIMAL} +psubscribe &__keyspace@0__:presence:*:online \
             &__keyspace@0__:presence:*:typing"
        ),
    );
    create_user(
        &server,
        "deaf",
        &format!("{MINIMAL} +config|get &__keyspace@0__:presence:*:online"),
    );
    create_user(
        &server,
        "elsewhere",
        &format!("{MINIMAL} +config|get +psubscribe"),
    );
    let port = server.port;
    let node = format!("127.0.0.1:{port}");
    let channel = "may not PSUBSCRIBE __keyspace@0__:presence:*:online \
                   (add each to its ACL as a channel: &__keyspace@0__:presence:*:online)";
    for (user, in_use, says) in [
        ("sweeper", 0.0, channel),
        ("listener", 1.0, "keyspace notifications in use"),
        ("managed", 1.0, "keyspace notifications in use"),
        ("deaf", 0.0, channel),
        ("elsewhere", 0.0, channel),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let pw = write_file(dir.path(), "pw", "user-secret\n");
        // Both built-in sweeps for the documented user, the online one alone for the others.
        let typing = if user == "listener" {
            ""
        } else {
            "[sweeps.typing]\nenabled = false\n"
        };
        let toml = format!(
            "[http]\nlisten = \"127.0.0.1:0\"\n{typing}\
             [redis]\nusername = \"{user}\"\npassword_file = {:?}\n",
            pw.to_str().unwrap()
        );
        let d = crate::support::Binary::spawn(&toml, &["--redis-url", &server.url()], &[]);
        d.wait_ready(Duration::from_secs(10));
        // A heartbeat: where CONFIG is refused, its notice is what proves notifications on.
        let mut con = server.con();
        let now = crate::support::redis_now(&mut con);
        let _: () = redis::cmd("ZADD")
            .arg("presence:acl:online")
            .arg(now)
            .arg("u1")
            .query(&mut con)
            .unwrap();
        d.wait_for_log(says, 1, Duration::from_secs(5));
        assert_eq!(in_use_on(&d, &node), Some(in_use), "{user}: {}", d.log());
    }
}

/// `presence_sweeper_notifications_in_use` for `node`, as the daemon exports it now.
fn in_use_on(d: &crate::support::Binary, node: &str) -> Option<f64> {
    let s = crate::support::scrape(d.http_addr());
    crate::support::metric(
        &s,
        "presence_sweeper_notifications_in_use",
        &[("node", node)],
    )
}

/// The documented ACL grants the new keys' channel, on which `En` (the cheapest flags) publishes.
/// A user granted only the sweeps' keyspace channels (the ACL of earlier releases) still hears
/// new keys where the server publishes both: over the keyspace channels, told once what to add,
/// and without subscribing again at each look. Where the server publishes new keys alone, it
/// is told what to add and walks instead.
#[test]
fn a_user_refused_the_new_keys_channel_falls_back_to_the_keyspace_channels() {
    if !crate::new_keys::has_new_keys() {
        return;
    }
    // Not `KEAn`: Redis reads `n` back without it beside `A`.
    let server = RedisServer::start_with(&["--notify-keyspace-events", "KzgEn"]);
    let keyspace = "&__keyspace@0__:presence:*:online";
    let documented = format!("{MINIMAL} +config|get +psubscribe &__keyevent@0__:new {keyspace}");
    create_user(&server, "documented", &documented);
    create_user(
        &server,
        "earlier",
        &format!("{MINIMAL} +config|get +psubscribe {keyspace}"),
    );
    let node = format!("127.0.0.1:{}", server.port);
    let fallback = "may not PSUBSCRIBE __keyevent@0__:new: listening to the sweeps' keyspace \
                    channels instead, which hear every heartbeat (add &__keyevent@0__:new to its ACL)";
    let refused = "may not PSUBSCRIBE __keyevent@0__:new \
                   (add each to its ACL as a channel: &__keyevent@0__:new)";
    for (flags, user, in_use, says) in [
        ("KzgEn", "documented", 1.0, "keyspace notifications in use"),
        ("KzgEn", "earlier", 1.0, fallback),
        ("En", "documented", 1.0, "keyspace notifications in use"),
        ("En", "earlier", 0.0, refused),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg(flags)
            .query(&mut server.con())
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let pw = write_file(dir.path(), "pw", "user-secret\n");
        // A reconciliation each second: each looks at the server's flags again.
        let toml = format!(
            "[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n\
             [tracking]\nreconcile_interval = \"1s\"\n\
             [redis]\nusername = \"{user}\"\npassword_file = {:?}\n",
            pw.to_str().unwrap()
        );
        let d = crate::support::Binary::spawn(&toml, &["--redis-url", &server.url()], &[]);
        d.wait_ready(Duration::from_secs(10));
        let mut con = server.con();
        let now = redis_now(&mut con);
        let _: () = redis::cmd("ZADD")
            .arg(format!("presence:{user}-{flags}:online"))
            .arg(now)
            .arg("u1")
            .query(&mut con)
            .unwrap();
        d.wait_for_log(says, 1, Duration::from_secs(5));
        // Several looks later: still subscribed once, still in use.
        std::thread::sleep(Duration::from_secs(4));
        let what = format!("{user} on {flags}: {}", d.log());
        assert_eq!(in_use_on(&d, &node), Some(in_use), "{what}");
        assert_eq!(d.count(says), 1, "{what}");
        if in_use == 1.0 {
            let s = crate::support::scrape(d.http_addr());
            let notices =
                crate::support::metric(&s, "presence_sweeper_notices_total", &[("node", &node)]);
            assert!(notices.unwrap_or(0.0) >= 1.0, "{notices:?} {what}");
        }
    }
}

/// A running daemon whose user may not PUBLISH: it evicts nothing it could not announce,
/// `/readyz` names the refusal, `redis_failures_total{kind="permission"}` counts it, and once
/// the ACL grants PUBLISH the daemon proves it within seconds and sweeps on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_refused_a_command_names_it_on_readyz_and_recovers_once_granted() {
    let server = RedisServer::start();
    create_user(&server, "mute", &MINIMAL.replace("+publish", ""));
    let dir = tempfile::tempdir().unwrap();
    let pw = write_file(dir.path(), "pw", "user-secret\n");
    let toml = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[redis]\nusername = \"mute\"\npassword_file = {:?}\n\
         [sweeps.typing]\nenabled = false\n[sweeps.online]\nschedule = \"500ms\"\n",
        pw.to_str().unwrap()
    );
    let d = crate::support::Binary::spawn(&toml, &["--redis-url", &server.url()], &[]);
    seed(&server);
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    crate::support::wait_until("/readyz names the refusal", Duration::from_secs(15), || {
        let (code, body) = crate::support::http_get(d.http_addr(), "/readyz");
        code == 503 && body.contains("may not run PUBLISH")
    });
    let mut con = server.con();
    let n: u64 = con.zcard("presence:c0:online").unwrap();
    assert_eq!(n, 2, "nothing removed without its event");
    let s = crate::support::scrape(d.http_addr());
    let refused = crate::support::metric(
        &s,
        "presence_sweeper_redis_failures_total",
        &[("kind", "permission")],
    );
    assert!(refused.unwrap_or(0.0) >= 1.0, "{refused:?}");

    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("mute")
        .arg("+publish")
        .query(&mut con)
        .unwrap();
    crate::support::wait_until("ready again", Duration::from_secs(15), || {
        crate::support::http_get(d.http_addr(), "/readyz").0 == 200
    });
    assert_eq!(
        sub.wait_for(53, Duration::from_secs(15)).await.len(),
        53,
        "{}",
        d.log()
    );
    assert!(
        d.log()
            .contains("the Redis user may now run everything the checks need"),
        "{}",
        d.log()
    );
}

/// The minimal ACL lacks what the daemon can do without: `ZINCRBY` on its canary (the evidence
/// of a flush, a rewind or refused writes) and `PTTL` (a key that ends by its own TTL). Both are
/// said once, before the first eviction for the canary, and the daemon sweeps on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_canary_and_pttl_the_daemon_says_so_once_and_sweeps() {
    let server = RedisServer::start();
    create_user(&server, "minimal", MINIMAL);
    let dir = tempfile::tempdir().unwrap();
    let pw = write_file(dir.path(), "pw", "user-secret\n");
    let toml = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[redis]\nusername = \"minimal\"\npassword_file = {:?}\n\
         [sweeps.typing]\nenabled = false\n",
        pw.to_str().unwrap()
    );
    let sub = Subscriber::start(&server.url(), "presence:*:events").await;
    seed(&server);
    let d = crate::support::Binary::spawn(&toml, &["--redis-url", &server.url()], &[]);
    d.wait_ready(Duration::from_secs(10));
    assert_eq!(
        sub.wait_for(53, Duration::from_secs(15)).await.len(),
        53,
        "{}",
        d.log()
    );
    let canary = "may not ZINCRBY the canary";
    let pttl = "may not run PTTL";
    let log = d.log();
    let first_eviction = log.find("evict").unwrap_or(log.len());
    assert!(
        log.find(canary).is_some_and(|at| at < first_eviction),
        "the canary's refusal is said before anything is evicted:\n{log}"
    );
    assert_eq!(d.count(canary), 1, "{log}");
    assert_eq!(d.count(pttl), 1, "{log}");
    let s = crate::support::scrape(d.http_addr());
    let refused = crate::support::metric(
        &s,
        "presence_sweeper_redis_failures_total",
        &[("kind", "permission")],
    );
    assert!(
        refused.unwrap_or(0.0) >= 1.0,
        "the refused PTTL is counted: {refused:?}"
    );
    assert_eq!(crate::support::http_get(d.http_addr(), "/readyz").0, 200);
}
