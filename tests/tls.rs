//! TLS: `rediss://` with a CA of our own, client certificates, and a wrong CA that fails clearly.
//! The tests that need a TLS server skip (saying so on stderr) where the server binary has no
//! TLS; `TESTS_REQUIRE_TLS=1` makes that a failure instead.

use std::time::Duration;

use crate::support::tls::{Certs, tls_toml};
use crate::support::{Binary, metric, redis_now, run_binary, scrape, wait_until, write_file};
use redis::Commands;

fn seed(con: &mut redis::Connection) {
    crate::support::seed_keys(con, ["presence:c1:online"], 1, 1);
}

fn sweep(server_port: u16, toml: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "c.toml", toml);
    run_binary(
        &[
            "--config",
            file.to_str().unwrap(),
            "--redis-url",
            &format!("rediss://127.0.0.1:{server_port}/0"),
            "sweep",
            "--sweep",
            "online",
        ],
        &[],
    )
}

#[test]
fn rediss_with_our_own_ca() {
    let certs = Certs::generate();
    let Some(server) = certs.server(false) else {
        return;
    };
    let mut con = certs.con(&server);
    seed(&mut con);
    // Over TLS the data path takes redis-rs's connection: the event must come out the same.
    let mut sub_con = certs.con(&server);
    let mut sub = sub_con.as_pubsub();
    sub.subscribe("presence:c1:events").unwrap();
    sub.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let (code, stdout, stderr) = sweep(server.port, &tls_toml(&certs, "ca.crt", false));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("evicted=1 events_published=1"), "{stdout}");
    assert_eq!(
        crate::support::members(&mut con, "presence:c1:online"),
        ["live"]
    );
    let event: serde_json::Value =
        serde_json::from_slice(sub.get_message().unwrap().get_payload_bytes()).unwrap();
    assert_eq!(
        (&event["user_id"], &event["online"], &event["online_count"]),
        (
            &serde_json::json!("zombie"),
            &serde_json::json!(["live"]),
            &serde_json::json!(1)
        )
    );
}

#[test]
fn client_certificates_for_servers_that_verify_clients() {
    let certs = Certs::generate();
    let Some(server) = certs.server(true) else {
        return;
    };
    let mut con = certs.con(&server);
    seed(&mut con);
    let (code, _, stderr) = sweep(server.port, &tls_toml(&certs, "ca.crt", false));
    assert_eq!(code, 1, "refused without a client certificate: {stderr}");
    assert!(
        stderr.contains("cannot connect to Redis at rediss://127.0.0.1:"),
        "{stderr}"
    );
    let (code, stdout, stderr) = sweep(server.port, &tls_toml(&certs, "ca.crt", true));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("evicted=1"), "{stdout}");
}

#[test]
fn a_wrong_ca_fails_clearly() {
    let certs = Certs::generate();
    let Some(server) = certs.server(false) else {
        return;
    };
    let mut con = certs.con(&server);
    seed(&mut con);
    let (code, _, stderr) = sweep(server.port, &tls_toml(&certs, "other-ca.crt", false));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("cannot connect to Redis at rediss://127.0.0.1:"),
        "{stderr}"
    );
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");
    // The target line, then the error in one line.
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert!(
        stderr.starts_with("presence-sweeper: sweeping rediss://"),
        "{stderr}"
    );
    assert_eq!(
        crate::support::members(&mut con, "presence:c1:online").len(),
        2,
        "nothing was touched"
    );
}

#[test]
fn unreadable_or_unpaired_tls_files_are_configuration_errors() {
    let certs = Certs::generate();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[redis.tls]\nca_file = \"/nonexistent/ca.pem\"\n".to_string(),
            "redis.tls.ca_file = \"/nonexistent/ca.pem\"",
        ),
        (
            format!("[redis.tls]\ncert_file = {:?}\n", certs.path("client.crt")),
            "redis.tls.cert_file",
        ),
        (
            format!("[redis.tls]\nca_file = {:?}\n", certs.path("client.ext")),
            "not a PEM file",
        ),
    ];
    for (toml, expected) in cases {
        let file = write_file(dir.path(), "c.toml", &toml);
        let (code, _, stderr) =
            run_binary(&["--config", file.to_str().unwrap(), "check-config"], &[]);
        assert_eq!(code, 2, "{toml}: {stderr}");
        assert!(stderr.contains(expected), "{toml}: {stderr}");
    }
}

/// Keyspace notifications come over TLS like the rest: a new key is tracked at its first ZADD
/// and its member leaves at its deadline.
#[test]
fn keyspace_notifications_over_tls() {
    let certs = Certs::generate();
    let Some(server) = certs.server_with(false, &["--notify-keyspace-events", "KEA"]) else {
        return;
    };
    let mut con = certs.con(&server);
    let toml = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n[sweeps.typing]\nenabled = false\n\
         [sweeps.online]\nttl = \"1s\"\nschedule = \"1h\"\n{}",
        tls_toml(&certs, "ca.crt", false)
    );
    let url = format!("rediss://127.0.0.1:{}/0", server.port);
    let d = Binary::spawn(&toml, &["--redis-url", &url], &[]);
    d.wait_ready(Duration::from_secs(10));
    let node = format!("127.0.0.1:{}", server.port);
    wait_until("notifications in use", Duration::from_secs(5), || {
        let s = scrape(d.http_addr());
        metric(
            &s,
            "presence_sweeper_notifications_in_use",
            &[("node", &node)],
        ) == Some(1.0)
    });
    let now = redis_now(&mut con);
    let _: () = con.zadd("presence:tls:online", "u1", now).unwrap();
    wait_until("swept at its deadline", Duration::from_secs(3), || {
        let n: u64 = con.zcard("presence:tls:online").unwrap();
        n == 0
    });
    assert!(redis_now(&mut con) - now < 2.0, "{}", d.log());
}
