//! `[redis]`: where Redis is (one server, a cluster, or behind Sentinel) and how to
//! authenticate, including the secrets and certificates read from files at start.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::duration::MAX_TIMEOUT;
use super::error::ConfigError;
use super::secret::{Secret, read_pem, read_secret, redact_url};
use super::section::{self, Key, Shown};
use super::tree::{Field, Table, q};

/// `[redis]`: the connection. Its `Debug` hides passwords, also inside URLs. Every setting is
/// explained in the shipped `config/presence-sweeper.toml`.
#[derive(Clone, Default, PartialEq)]
pub struct Redis {
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
    /// `redis.eviction_timeout`: limit of the wait for an eviction's reply (at least
    /// `command_timeout`). Redis may run an eviction late, after a stall; only a reply that is
    /// read lets its removals be announced.
    pub eviction_timeout: Duration,
    /// `redis.sharded_pubsub`: publish with SPUBLISH (Redis 7) instead of PUBLISH.
    pub sharded_pubsub: bool,
    /// `[redis.tls]`: certificates for `rediss://` connections.
    pub tls: Tls,
}

/// `redis.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RedisMode {
    /// One server at `redis.url`.
    #[default]
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
pub struct Tls {
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

impl Tls {
    /// Whether anything beyond the system roots is configured.
    pub fn is_custom(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }
}

impl Redis {
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

    /// Reads `[redis]` and its `[redis.tls]`, checking what the mode needs.
    pub(super) fn read(t: &mut Table) -> Result<Self, ConfigError> {
        let mut cfg = Self::default();
        section::read(t, Self::KEYS, &mut cfg)?;
        let needs = match cfg.mode {
            RedisMode::Cluster if cfg.nodes.is_empty() => {
                Some("cluster mode needs `redis.nodes` (seed addresses)")
            }
            RedisMode::Sentinel if cfg.sentinels.is_empty() => {
                Some("sentinel mode needs `redis.sentinels`")
            }
            RedisMode::Sentinel if cfg.master_name.as_ref().is_none_or(String::is_empty) => {
                Some("sentinel mode needs `redis.master_name`")
            }
            _ => None,
        };
        if let Some(why) = needs {
            return Err(t.invalid_key("mode", why));
        }
        let mut tls = t.table("tls")?;
        cfg.tls = Tls::read(&mut tls)?;
        tls.finish()?;
        Ok(cfg)
    }

    /// The `[redis]` section of the effective configuration, secrets redacted.
    pub(super) fn write_toml(&self, out: &mut String) {
        section::write(out, "redis", Self::KEYS, self);
        section::write(out, "redis.tls", Tls::KEYS, &self.tls);
    }

    const KEYS: &[Key<Self>] = &[
        Key {
            name: "mode",
            read: |t, k, c| {
                let mode = t.string(k)?;
                c.mode = match mode.value.as_str() {
                    "standalone" => RedisMode::Standalone,
                    "cluster" => RedisMode::Cluster,
                    "sentinel" => RedisMode::Sentinel,
                    _ => {
                        return Err(
                            mode.invalid("must be \"standalone\", \"cluster\" or \"sentinel\"")
                        );
                    }
                };
                Ok(())
            },
            show: |c| Shown::text(c.mode.as_str()),
        },
        Key {
            name: "url",
            read: |t, k, c| {
                let url = t.string(k)?;
                validate_redis_url(&url)?;
                c.url = url.value;
                Ok(())
            },
            show: |c| Shown::text(&redact_url(&c.url)),
        },
        Key {
            name: "nodes",
            read: |t, k, c| read_urls(t, k).map(|v| c.nodes = v),
            show: |c| Shown::list(c.nodes.iter().map(|u| redact_url(u))),
        },
        Key {
            name: "sentinels",
            read: |t, k, c| read_urls(t, k).map(|v| c.sentinels = v),
            show: |c| Shown::list(c.sentinels.iter().map(|u| redact_url(u))),
        },
        Key {
            name: "master_name",
            read: |t, k, c| {
                t.optional_string(k)
                    .map(|m| c.master_name = m.map(|m| m.value))
            },
            show: |c| Shown::optional(c.master_name.as_deref()),
        },
        Key {
            name: "username",
            read: |t, k, c| {
                let user = t.optional_string(k)?;
                c.username = user.map(|u| u.value).filter(|u| !u.is_empty());
                Ok(())
            },
            show: |c| Shown::optional(c.username.as_deref()),
        },
        Key {
            name: "password_file",
            read: |t, k, c| {
                (c.password_file, c.password) = read_secret_file(t, k)?;
                Ok(())
            },
            show: |c| redacted(c.password_file.as_ref()),
        },
        Key {
            name: "sentinel_password_file",
            read: |t, k, c| {
                (c.sentinel_password_file, c.sentinel_password) = read_secret_file(t, k)?;
                Ok(())
            },
            show: |c| redacted(c.sentinel_password_file.as_ref()),
        },
        Key {
            name: "connect_timeout",
            read: |t, k, c| t.duration(k, MAX_TIMEOUT).map(|d| c.connect_timeout = d),
            show: |c| Shown::duration(c.connect_timeout),
        },
        Key {
            name: "command_timeout",
            read: |t, k, c| t.duration(k, MAX_TIMEOUT).map(|d| c.command_timeout = d),
            show: |c| Shown::duration(c.command_timeout),
        },
        Key {
            name: "eviction_timeout",
            read: |t, k, c| t.duration(k, MAX_TIMEOUT).map(|d| c.eviction_timeout = d),
            show: |c| Shown::duration(c.eviction_timeout),
        },
        Key {
            name: "sharded_pubsub",
            read: |t, k, c| t.bool(k).map(|v| c.sharded_pubsub = v),
            show: |c| Shown::plain(c.sharded_pubsub),
        },
    ];
}

impl Tls {
    fn read(t: &mut Table) -> Result<Self, ConfigError> {
        let mut cfg = Self::default();
        section::read(t, Self::KEYS, &mut cfg)?;
        let pem = |name: &str, path: &PathBuf| {
            read_pem(&path.to_string_lossy()).map_err(|why| t.invalid_key(name, &why))
        };
        cfg.client = match (&cfg.cert_file, &cfg.key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((
                pem("cert_file", cert)?,
                Secret::new(String::from_utf8_lossy(&pem("key_file", key)?).into_owned()),
            )),
            (cert, _) => {
                return Err(t.invalid_key(
                    if cert.is_some() { "cert_file" } else { "key_file" },
                    "`redis.tls.cert_file` and `redis.tls.key_file` go together: set both or neither",
                ));
            }
        };
        Ok(cfg)
    }

    const KEYS: &[Key<Self>] = &[
        Key {
            name: "ca_file",
            read: |t, k, c| {
                let Some(path) = t.optional_string(k)? else {
                    return Ok(());
                };
                c.ca = Some(read_pem(&path.value).map_err(|why| path.invalid(&why))?);
                c.ca_file = Some(PathBuf::from(path.value));
                Ok(())
            },
            show: |c| Shown::path(c.ca_file.as_ref()),
        },
        Key {
            name: "cert_file",
            read: |t, k, c| optional_path(t, k).map(|p| c.cert_file = p),
            show: |c| Shown::path(c.cert_file.as_ref()),
        },
        Key {
            name: "key_file",
            read: |t, k, c| optional_path(t, k).map(|p| c.key_file = p),
            show: |c| Shown::path(c.key_file.as_ref()),
        },
    ];
}

fn optional_path(t: &mut Table, name: &str) -> Result<Option<PathBuf>, ConfigError> {
    Ok(t.optional_string(name)?.map(|p| PathBuf::from(p.value)))
}

/// A list of Redis URLs, each checked.
fn read_urls(t: &mut Table, name: &str) -> Result<Vec<String>, ConfigError> {
    let urls = t.list(name)?;
    urls.iter().try_for_each(validate_redis_url)?;
    Ok(urls.into_iter().map(|u| u.value).collect())
}

/// A password file, if set, and the password read from it.
fn read_secret_file(
    t: &mut Table,
    name: &str,
) -> Result<(Option<PathBuf>, Option<Secret>), ConfigError> {
    let Some(path) = t.optional_string(name)? else {
        return Ok((None, None));
    };
    let secret = read_secret(&path.value).map_err(|why| path.invalid(&why))?;
    Ok((Some(PathBuf::from(path.value)), Some(secret)))
}

/// A password file's path, with a note that what it holds is never shown.
fn redacted(path: Option<&PathBuf>) -> Shown {
    Shown::path(path).noted("password: <redacted>")
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

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |urls: &[String]| urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>();
        f.debug_struct("Redis")
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
            .field("eviction_timeout", &self.eviction_timeout)
            .field("sharded_pubsub", &self.sharded_pubsub)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}
