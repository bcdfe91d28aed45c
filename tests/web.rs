//! The metrics server behind TLS and basic auth (the web config file), reached with a real TLS
//! client (rustls over a TCP socket, HTTP/1.1 on the wire), and moved by `--http-listen`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::support::tls::Certs;
use crate::support::{Binary, RedisServer, free_port, http_get, run_binary, write_file};

/// A TLS client trusting `ca` (a file of `certs`), presenting the client certificate if asked.
fn client(certs: &Certs, ca: &str, with_cert: bool) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(certs.path(ca)).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(if with_cert {
        let chain = CertificateDer::pem_file_iter(certs.path("client.crt"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(certs.path("client.key")).unwrap();
        builder.with_client_auth_cert(chain, key).unwrap()
    } else {
        builder.with_no_client_auth()
    })
}

/// GET `path` over TLS, as `user:password` if given; (status, head, body), or why the
/// connection failed.
fn https_get(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
    user: Option<(&str, &str)>,
) -> Result<(u16, String, String), String> {
    let name = ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(tls.clone(), name).map_err(|e| e.to_string())?;
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, sock);
    let auth = user
        .map(|(u, p)| {
            let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            format!("Authorization: Basic {b64}\r\n")
        })
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    let status = status.ok_or_else(|| format!("no status line in {text:?}"))?;
    Ok((status, head.to_owned(), body.to_owned()))
}

/// A web config file serving `certs`' server certificate; `extra` is added under
/// `tls_server_config`, `users` (name, password) become bcrypt hashes.
fn web_yml(dir: &Path, certs: &Certs, extra: &str, users: &[(&str, &str)]) -> String {
    let mut yml = format!(
        "tls_server_config:\n  cert_file: {:?}\n  key_file: {:?}\n{extra}",
        certs.path("server.crt"),
        certs.path("server.key")
    );
    if !users.is_empty() {
        yml += "basic_auth_users:\n";
        for (name, password) in users {
            // Cost 4, bcrypt's least: the tests are about the protocol, not the cost.
            yml += &format!("  {name}: {:?}\n", bcrypt::hash(password, 4).unwrap());
        }
    }
    write_file(dir, "web.yml", &yml)
        .to_string_lossy()
        .into_owned()
}

fn toml(web_file: &str) -> String {
    format!("[http]\nweb_config_file = {web_file:?}\n[sweeps.typing]\nenabled = false\n")
}

/// The address the daemon logged, once it listens.
fn spawn(server: &RedisServer, web_file: &str, port: u16) -> (Binary, SocketAddr) {
    let listen = format!("127.0.0.1:{port}");
    let d = Binary::spawn(
        &toml(web_file),
        &[
            "--redis-url",
            &server.url(),
            "--web.listen-address",
            &listen,
        ],
        &[],
    );
    let addr = d.http_addr();
    (d, addr)
}

fn healthcheck(d: &Binary, addr: SocketAddr) -> (i32, String) {
    let config = d.config_path();
    let (code, _, stderr) = run_binary(
        &[
            "--config",
            config.to_str().unwrap(),
            "--http-listen",
            &addr.to_string(),
            "healthcheck",
        ],
        &[],
    );
    (code, stderr)
}

#[test]
fn tls_and_basic_auth_with_a_real_client() {
    let server = RedisServer::start();
    let certs = Certs::generate();
    let dir = tempfile::tempdir().unwrap();
    let web = web_yml(dir.path(), &certs, "", &[("alice", "s3cret")]);
    let port = free_port();
    let (d, addr) = spawn(&server, &web, port);
    assert_eq!(
        addr,
        SocketAddr::from(([127, 0, 0, 1], port)),
        "the flag moves it"
    );
    assert!(d.log().contains("TLS, basic auth (1 users)"), "{}", d.log());
    let tls = client(&certs, "ca.crt", false);

    let (status, head, _) = https_get(addr, &tls, "/metrics", None).unwrap();
    assert_eq!(status, 401);
    assert!(
        head.contains("www-authenticate: Basic realm=\"presence-sweeper\""),
        "{head}"
    );
    for (user, password) in [("alice", "wrong"), ("bob", "s3cret"), ("alice", "")] {
        let (status, _, _) = https_get(addr, &tls, "/metrics", Some((user, password))).unwrap();
        assert_eq!(status, 401, "{user}:{password}");
    }
    let (status, _, body) = https_get(addr, &tls, "/metrics", Some(("alice", "s3cret"))).unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("presence_sweeper_"), "{body}");
    // Unknown paths are not told apart from known ones without credentials.
    let (status, _, _) = https_get(addr, &tls, "/nope", None).unwrap();
    assert_eq!(status, 401);

    // Probes answer without credentials; a wrong password is still refused.
    let (status, _, body) = https_get(addr, &tls, "/healthz", None).unwrap();
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, _, _) = https_get(addr, &tls, "/healthz", Some(("alice", "wrong"))).unwrap();
    assert_eq!(status, 401);

    // Plain HTTP on the TLS port is told so; a client trusting another CA fails its handshake.
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 400);
    assert!(body.contains("HTTPS server"), "{body}");
    let stranger = client(&certs, "other-ca.crt", false);
    let e = https_get(addr, &stranger, "/healthz", None).unwrap_err();
    assert!(e.to_lowercase().contains("certificate"), "{e}");

    // The healthcheck reads the same files: TLS, no password needed.
    let (code, stderr) = healthcheck(&d, addr);
    assert_eq!(code, 0, "{stderr}");
    assert!(!d.log().contains("s3cret"));
}

#[test]
fn sighup_reads_the_web_config_again() {
    let server = RedisServer::start();
    let certs = Certs::generate();
    let dir = tempfile::tempdir().unwrap();
    let web = web_yml(dir.path(), &certs, "", &[("alice", "one")]);
    let (d, addr) = spawn(&server, &web, free_port());
    let tls = client(&certs, "ca.crt", false);
    let get = |user, password| {
        https_get(addr, &tls, "/metrics", Some((user, password)))
            .unwrap()
            .0
    };
    assert_eq!(get("alice", "one"), 200);

    web_yml(dir.path(), &certs, "", &[("alice", "two")]);
    d.signal("HUP");
    d.wait_for_log("web config file reloaded", 1, Duration::from_secs(5));
    assert_eq!(get("alice", "one"), 401, "the old password is gone");
    assert_eq!(get("alice", "two"), 200);

    // A broken file on reload keeps what runs.
    write_file(dir.path(), "web.yml", "basic_auth_users:\n  alice: plain\n");
    d.signal("HUP");
    d.wait_for_log("web config file reload rejected", 1, Duration::from_secs(5));
    assert_eq!(get("alice", "two"), 200);
    assert!(!d.log().contains("$2b$"), "no hash in the log");
}

#[test]
fn client_certificates_when_required() {
    let server = RedisServer::start();
    let certs = Certs::generate();
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {:?}\n  min_version: TLS13\n",
        certs.path("ca.crt")
    );
    let web = web_yml(dir.path(), &certs, &extra, &[]);
    let (d, addr) = spawn(&server, &web, free_port());
    let (status, _, body) =
        https_get(addr, &client(&certs, "ca.crt", true), "/metrics", None).unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        https_get(addr, &client(&certs, "ca.crt", false), "/metrics", None).is_err(),
        "no certificate, no answer"
    );
    let (code, stderr) = healthcheck(&d, addr);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("requires client certificates"), "{stderr}");
}

#[test]
fn a_bad_web_config_file_exits_2_naming_the_key_and_the_file() {
    let certs = Certs::generate();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
            "cipher_suites",
        ),
        ("  min_version: TLS10\n", "tls_server_config.min_version"),
        (
            &format!("  client_ca_file: {:?}\n", certs.path("ca.crt")),
            "tls_server_config.client_ca_file",
        ),
        (
            "  client_auth_type: RequireAnyClientCert\n",
            "client_auth_type",
        ),
    ];
    for (extra, key) in cases {
        let web = web_yml(dir.path(), &certs, extra, &[]);
        let config = write_file(dir.path(), "c.toml", &toml(&web));
        for command in ["run", "check-config", "healthcheck"] {
            let (code, _, stderr) = run_binary(
                &[
                    "--config",
                    config.to_str().unwrap(),
                    "--redis-url",
                    "redis://127.0.0.1:1/0",
                    command,
                ],
                &[],
            );
            assert_eq!(code, 2, "{command} {extra}: {stderr}");
            assert!(stderr.contains(key), "{command} {extra}: {stderr}");
            assert!(stderr.contains(&web), "the file is named: {stderr}");
        }
    }
}
