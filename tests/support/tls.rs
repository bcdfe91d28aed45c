//! Certificates made with openssl for one test: a CA, a server certificate for 127.0.0.1, a
//! client certificate, and an unrelated CA that trusts neither.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::RedisServer;

/// Set (to anything) where the TLS tests must run for real: there a server binary without TLS
/// fails them instead of skipping them. CI sets it for the pass that covers TLS.
pub const REQUIRE_TLS: &str = "TESTS_REQUIRE_TLS";

/// Whether a server's start-up log says that it was built without TLS. Valkey and Redis 7.2 on
/// say "Failed finding TLS support"; older Redis refuses the `tls-*` directives as unknown.
fn lacks_tls(log: &str) -> bool {
    log.contains("Failed finding TLS support")
        || log.contains("Missing implement of connection type tls")
        || (log.contains("Bad directive") && log.contains("'tls-"))
}

/// A server binary without TLS cannot run the TLS tests, and Rust has no runtime skip: the test
/// says why on stderr and passes, unless [`REQUIRE_TLS`] is set. Written to the process's
/// stderr, not with `eprintln!`, which the test harness captures and shows only for failures:
/// the skip must show in every run.
fn skip_without_tls(log: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a TLS test")
        .to_owned();
    let why = format!(
        "{} was built without TLS (its log: {:?})",
        super::redis_server_binary(),
        log.lines()
            .find(|l| l.contains("TLS") || l.contains("tls-"))
            .unwrap_or(log.trim())
    );
    if std::env::var_os(REQUIRE_TLS).is_some() {
        panic!("{test}: {REQUIRE_TLS} is set but {why}");
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why}; set REDIS_SERVER to a TLS-capable build to run it"
    );
}

/// The files of one test's PKI.
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    /// Generates everything (EC P-256 keys, valid for a day).
    pub fn generate() -> Self {
        let certs = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        certs.ca("ca");
        certs.ca("other-ca");
        certs.leaf(
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        );
        certs.leaf("client", "extendedKeyUsage=clientAuth\n");
        certs
    }

    /// A file of this PKI: `ca.crt`, `server.key`, `client.crt`, `other-ca.crt`...
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("openssl must be installed for the TLS tests");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `openssl req` with a new P-256 key, unencrypted, and `args`.
    fn new_key(&self, args: &[&str]) {
        let mut all = vec![
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        all.extend_from_slice(args);
        self.openssl(&all);
    }

    fn ca(&self, name: &str) {
        self.new_key(&[
            "-x509",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "1",
            "-subj",
            &format!("/CN=presence-sweeper test {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
    }

    fn leaf(&self, name: &str, extensions: &str) {
        let ext = self.path(&format!("{name}.ext"));
        std::fs::write(
            &ext,
            format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n{extensions}"),
        )
        .unwrap();
        self.new_key(&[
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            "1",
            "-extfile",
            &ext.to_string_lossy(),
        ]);
    }

    /// A redis-server speaking only TLS on a free port; `verify_clients` requires a client
    /// certificate signed by the CA. `None` if the server binary was built without TLS (see
    /// [`skip_without_tls`]): the test returns early.
    pub fn server(&self, verify_clients: bool) -> Option<RedisServer> {
        self.server_with(verify_clients, &[])
    }

    /// [`Certs::server`] with extra `redis-server` arguments.
    pub fn server_with(&self, verify_clients: bool, extra: &[&str]) -> Option<RedisServer> {
        let port = super::free_port();
        let p = |name: &str| self.path(name).to_string_lossy().into_owned();
        let args = [
            "--port".to_string(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            p("server.crt"),
            "--tls-key-file".into(),
            p("server.key"),
            "--tls-ca-cert-file".into(),
            p("ca.crt"),
            "--tls-auth-clients".into(),
            if verify_clients { "yes" } else { "no" }.into(),
        ];
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        let mut server = RedisServer::unstarted(port, &args);
        match server.try_restart() {
            Ok(()) => Some(server),
            Err(log) if lacks_tls(&log) => {
                skip_without_tls(&log);
                None
            }
            Err(log) => panic!(
                "the TLS server ({}) exited at start; its log:\n{log}",
                super::redis_server_binary()
            ),
        }
    }

    /// A TLS connection to `server` for seeding and checking, with the client certificate.
    pub fn con(&self, server: &RedisServer) -> redis::Connection {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let read = |name: &str| std::fs::read(self.path(name)).unwrap();
        let client = redis::Client::build_with_tls(
            format!("rediss://127.0.0.1:{}/0", server.port),
            redis::TlsCertificates {
                client_tls: Some(redis::ClientTlsConfig {
                    client_cert: read("client.crt"),
                    client_key: read("client.key"),
                }),
                root_cert: Some(read("ca.crt")),
            },
        )
        .unwrap();
        client.get_connection().expect("TLS connection")
    }
}

/// `[redis.tls]` lines for files of `certs`.
pub fn tls_toml(certs: &Certs, ca: &str, client: bool) -> String {
    let q = |p: &Path| format!("{:?}", p.to_string_lossy());
    let mut toml = format!("[redis.tls]\nca_file = {}\n", q(&certs.path(ca)));
    if client {
        toml += &format!(
            "cert_file = {}\nkey_file = {}\n",
            q(&certs.path("client.crt")),
            q(&certs.path("client.key"))
        );
    }
    toml
}
