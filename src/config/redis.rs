//! `[redis]`: where Redis is (one server, a cluster, or behind Sentinel) and how to
//! authenticate, including the secrets and certificates read from files at start.

use std::fmt;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ConfigError;
use super::tree::{Field, Table, q};

/// `[redis]`: the connection. Its `Debug` hides passwords, also inside URLs.
#[derive(Clone, PartialEq)]
pub struct RedisConfig {
    /// `redis.mode`.
    pub mode: RedisMode,
    /// `redis.url`: the server in standalone mode: `redis://[user:password@]host:port/db`,
    /// `rediss://...` or `unix://path`.
    pub url: String,
    /// `redis.nodes`: seed addresses of a cluster (`redis://host:port` or `rediss://...`).
    pub nodes: Vec<String>,
    /// `redis.sentinels`: Sentinel addresses (`redis://host:26379`; `rediss://` for TLS to the
    /// sentinels and to the primary).
    pub sentinels: Vec<String>,
    /// `redis.master_name`: the primary's name in Sentinel.
    pub master_name: Option<String>,
    /// `redis.username`: an ACL user, overriding one in the URLs.
    pub username: Option<String>,
    /// `redis.password_file`: where the password was read from.
    pub password_file: Option<PathBuf>,
    /// The password read from `password_file`; it overrides one in the URLs.
    pub password: Option<Secret>,
    /// `redis.sentinel_password_file`: where the Sentinel password was read from.
    pub sentinel_password_file: Option<PathBuf>,
    /// The password for the sentinels themselves (`requirepass` in sentinel.conf).
    pub sentinel_password: Option<Secret>,
    /// `redis.connect_timeout`: limit of one connection attempt.
    pub connect_timeout: Duration,
    /// `redis.command_timeout`: limit of the wait for one reply.
    pub command_timeout: Duration,
    /// `redis.sharded_pubsub`: publish with SPUBLISH (Redis 7) instead of PUBLISH.
    pub sharded_pubsub: bool,
    /// `[redis.tls]`: certificates for `rediss://` connections.
    pub tls: TlsConfig,
}

/// `redis.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisMode {
    /// One server at `redis.url`.
    Standalone,
    /// A Redis Cluster reached through `redis.nodes`.
    Cluster,
    /// The primary that `redis.sentinels` name for `redis.master_name`.
    Sentinel,
}

impl RedisMode {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Standalone => "standalone",
            Self::Cluster => "cluster",
            Self::Sentinel => "sentinel",
        }
    }
}

/// `[redis.tls]`: what to trust and how to present ourselves; read at start.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TlsConfig {
    /// `redis.tls.ca_file`: PEM certificates to trust instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// `redis.tls.cert_file`: PEM client certificate, for servers that verify clients.
    pub cert_file: Option<PathBuf>,
    /// `redis.tls.key_file`: the client certificate's PEM private key.
    pub key_file: Option<PathBuf>,
    /// The CA certificates read from `ca_file`.
    pub ca: Option<Vec<u8>>,
    /// The client certificate and key read from `cert_file` and `key_file`.
    pub client: Option<(Vec<u8>, Secret)>,
}

impl TlsConfig {
    /// The certificates in the form the Redis client takes.
    pub fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.expose().as_bytes().to_vec(),
                }),
            root_cert: self.ca.clone(),
        }
    }

    /// Whether anything beyond the system roots is configured.
    pub fn is_custom(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }
}

impl RedisConfig {
    /// Where the daemon connects, as messages name it (passwords redacted): the URL, the
    /// cluster's seeds or the primary and its sentinels.
    pub fn describe(&self) -> String {
        let join = |urls: &[String]| {
            urls.iter()
                .map(|u| redact_url(u))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.mode {
            RedisMode::Standalone => redact_url(&self.url),
            RedisMode::Cluster => format!("cluster {}", join(&self.nodes)),
            RedisMode::Sentinel => format!(
                "primary {:?} via sentinels {}",
                self.master_name.as_deref().unwrap_or_default(),
                join(&self.sentinels)
            ),
        }
    }

    pub(super) fn from_table(t: &mut Table) -> Result<Self, ConfigError> {
        let mode_field = t.string("mode")?;
        let mode = match mode_field.value.as_str() {
            "standalone" => RedisMode::Standalone,
            "cluster" => RedisMode::Cluster,
            "sentinel" => RedisMode::Sentinel,
            _ => {
                return Err(
                    mode_field.invalid("must be \"standalone\", \"cluster\" or \"sentinel\"")
                );
            }
        };
        let url = t.string("url")?;
        validate_redis_url(&url)?;
        let nodes = t.list("nodes")?;
        for n in &nodes {
            validate_redis_url(n)?;
        }
        let sentinels = t.list("sentinels")?;
        for s in &sentinels {
            validate_redis_url(s)?;
        }
        let master_name = t.optional_string("master_name")?;
        match mode {
            RedisMode::Cluster if nodes.is_empty() => {
                return Err(mode_field.invalid("cluster mode needs `redis.nodes` (seed addresses)"));
            }
            RedisMode::Sentinel if sentinels.is_empty() => {
                return Err(mode_field.invalid("sentinel mode needs `redis.sentinels`"));
            }
            RedisMode::Sentinel if master_name.as_ref().is_none_or(|m| m.value.is_empty()) => {
                return Err(mode_field.invalid("sentinel mode needs `redis.master_name`"));
            }
            _ => {}
        }
        let username = t.optional_string("username")?;
        let password_file = t.optional_string("password_file")?;
        let password = password_file.as_ref().map(read_secret).transpose()?;
        let sentinel_password_file = t.optional_string("sentinel_password_file")?;
        let sentinel_password = sentinel_password_file
            .as_ref()
            .map(read_secret)
            .transpose()?;
        let connect_timeout = t.duration("connect_timeout")?;
        let command_timeout = t.duration("command_timeout")?;
        let sharded_pubsub = t.optional_bool("sharded_pubsub")?.unwrap_or(false);
        let tls = {
            let mut tls = t.table("tls")?;
            let cfg = TlsConfig::from_table(&mut tls)?;
            tls.finish()?;
            cfg
        };
        Ok(Self {
            mode,
            url: url.value,
            nodes: nodes.into_iter().map(|n| n.value).collect(),
            sentinels: sentinels.into_iter().map(|s| s.value).collect(),
            master_name: master_name.map(|m| m.value),
            username: username.map(|u| u.value).filter(|u| !u.is_empty()),
            password_file: password_file.map(|p| PathBuf::from(p.value)),
            password,
            sentinel_password_file: sentinel_password_file.map(|p| PathBuf::from(p.value)),
            sentinel_password,
            connect_timeout,
            command_timeout,
            sharded_pubsub,
            tls,
        })
    }

    /// The `[redis]` section of the effective configuration, secrets redacted.
    pub(super) fn write_toml(&self, out: &mut String) {
        let d = |d: Duration| q(&humantime::format_duration(d).to_string());
        let list = |items: &[String]| {
            let items: Vec<String> = items.iter().map(|u| q(&redact_url(u))).collect();
            format!("[{}]", items.join(", "))
        };
        let path = |p: &Path| q(&p.to_string_lossy());
        let _ = writeln!(out, "[redis]\nmode = {}", q(self.mode.as_str()));
        let _ = writeln!(out, "url = {}", q(&redact_url(&self.url)));
        let _ = writeln!(out, "nodes = {}", list(&self.nodes));
        let _ = writeln!(out, "sentinels = {}", list(&self.sentinels));
        if let Some(m) = &self.master_name {
            let _ = writeln!(out, "master_name = {}", q(m));
        }
        if let Some(u) = &self.username {
            let _ = writeln!(out, "username = {}", q(u));
        }
        if let Some(p) = &self.password_file {
            let _ = writeln!(out, "password_file = {}  # password: <redacted>", path(p));
        }
        if let Some(p) = &self.sentinel_password_file {
            let _ = writeln!(out, "sentinel_password_file = {}  # <redacted>", path(p));
        }
        let _ = writeln!(
            out,
            "connect_timeout = {}\ncommand_timeout = {}\nsharded_pubsub = {}",
            d(self.connect_timeout),
            d(self.command_timeout),
            self.sharded_pubsub
        );
        let _ = writeln!(out, "\n[redis.tls]");
        for (key, value) in [
            ("ca_file", &self.tls.ca_file),
            ("cert_file", &self.tls.cert_file),
            ("key_file", &self.tls.key_file),
        ] {
            if let Some(p) = value {
                let _ = writeln!(out, "{key} = {}", path(p));
            }
        }
        out.push('\n');
    }
}

impl TlsConfig {
    fn from_table(t: &mut Table) -> Result<Self, ConfigError> {
        let ca_file = t.optional_string("ca_file")?;
        let cert_file = t.optional_string("cert_file")?;
        let key_file = t.optional_string("key_file")?;
        let ca = ca_file.as_ref().map(read_pem).transpose()?;
        let client = match (&cert_file, &key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((
                read_pem(cert)?,
                Secret::new(String::from_utf8_lossy(&read_pem(key)?).into_owned()),
            )),
            (Some(only), None) | (None, Some(only)) => {
                return Err(only.invalid(
                    "`redis.tls.cert_file` and `redis.tls.key_file` go together: set both or neither",
                ));
            }
        };
        Ok(Self {
            ca_file: ca_file.map(|f| PathBuf::from(f.value)),
            cert_file: cert_file.map(|f| PathBuf::from(f.value)),
            key_file: key_file.map(|f| PathBuf::from(f.value)),
            ca,
            client,
        })
    }
}

/// A secret that never prints itself.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

fn validate_redis_url(url: &Field<String>) -> Result<(), ConfigError> {
    redis::IntoConnectionInfo::into_connection_info(url.value.as_str())
        .map(drop)
        .map_err(|_| ConfigError::Invalid {
            key: url.key.clone(),
            value: q(&redact_url(&url.value)),
            origin: url.origin.clone(),
            reason: "not a Redis URL (redis://host:port/db, rediss://..., unix:///path)".into(),
        })
}

fn read_secret(path: &Field<String>) -> Result<Secret, ConfigError> {
    let resolved = expand_credentials_dir(&path.value);
    let text = std::fs::read_to_string(&resolved)
        .map_err(|e| path.invalid(&format!("cannot read the password file: {e}")))?;
    let password = text.strip_suffix('\n').unwrap_or(&text);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() {
        return Err(path.invalid("the password file is empty"));
    }
    Ok(Secret::new(password.to_owned()))
}

fn read_pem(path: &Field<String>) -> Result<Vec<u8>, ConfigError> {
    let resolved = expand_credentials_dir(&path.value);
    let pem = std::fs::read(&resolved)
        .map_err(|e| path.invalid(&format!("cannot read the file: {e}")))?;
    if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(path.invalid("not a PEM file (no -----BEGIN line)"));
    }
    Ok(pem)
}

/// Expands a leading `$CREDENTIALS_DIRECTORY` / `${CREDENTIALS_DIRECTORY}`, where systemd's
/// `LoadCredential=` puts secrets; the directory is only known once the service starts.
fn expand_credentials_dir(path: &str) -> PathBuf {
    for var in ["${CREDENTIALS_DIRECTORY}", "$CREDENTIALS_DIRECTORY"] {
        if let Some(rest) = path.strip_prefix(var)
            && let Ok(dir) = std::env::var("CREDENTIALS_DIRECTORY")
        {
            return Path::new(&dir).join(rest.trim_start_matches('/'));
        }
    }
    PathBuf::from(path)
}

/// Hides the password in a Redis URL: `redis://user:secret@host` becomes `redis://user:***@host`,
/// and a `pass`/`password` query parameter (`unix:///sock?pass=secret`) becomes `***`. The
/// userinfo runs to the last `@`, so a password with an unescaped `/`, `?` or `#` is hidden too.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let (head, rest) = url.split_at(scheme_end + 3);
    let rest = match rest.rfind('@') {
        None => rest.to_owned(),
        Some(at) => {
            let userinfo = &rest[..at];
            let hidden = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                // `redis://secret@host` puts the password in the user position.
                None => "***".to_owned(),
            };
            format!("{hidden}{}", &rest[at..])
        }
    };
    let Some((path, query)) = rest.split_once('?') else {
        return format!("{head}{rest}");
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _))
                if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
            {
                format!("{k}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{head}{path}?{}", query.join("&"))
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |urls: &[String]| urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>();
        f.debug_struct("RedisConfig")
            .field("mode", &self.mode)
            .field("url", &redact_url(&self.url))
            .field("nodes", &redact(&self.nodes))
            .field("sentinels", &redact(&self.sentinels))
            .field("master_name", &self.master_name)
            .field("username", &self.username)
            .field("password_file", &self.password_file)
            .field("password", &self.password)
            .field("sentinel_password", &self.sentinel_password)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("sharded_pubsub", &self.sharded_pubsub)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}
