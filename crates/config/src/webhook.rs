//! `[webhooks.<name>]`: HTTP endpoints that receive every leave of some sweeps, signed (Standard
//! Webhooks) and delivered at least once from the sweeps' streams.
//!
//! A secret is never shown: not in `check-config`'s output, not in an error. Errors about a
//! secret name its key and say what form it must take, nothing of what was written.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;

use super::duration::{MAX_STREAM_AGE, MAX_TIMEOUT};
use super::error::ConfigError;
use super::secret::{Secret, read_pem, read_secret};
use super::section::{self, Key, Shown};
use super::sweep::Sweep;
use super::tree::{Field, Table};

/// The prefix of a Standard Webhooks secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// The fewest bytes a decoded secret may hold: fewer are guessable.
pub const MIN_SECRET_BYTES: usize = 24;
/// The most bytes a decoded secret may hold (the Standard Webhooks limit).
pub const MAX_SECRET_BYTES: usize = 64;

/// `webhooks.<name>.timeout` unless set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// `webhooks.<name>.retry_for` unless set.
const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(3600);
/// `webhooks.<name>.concurrency` unless set.
const DEFAULT_CONCURRENCY: u32 = 16;

/// `[webhooks.<name>]`: one endpoint. Its `Debug` hides the secrets. Every setting is explained
/// in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    /// The table name: the `webhook` label of its metrics, and part of its keys in Redis.
    pub name: String,
    /// `webhooks.<name>.url`: where events are POSTed (http or https, no credentials).
    pub url: String,
    /// `webhooks.<name>.secret` or the contents of `secret_file`: one or more `whsec_` keys,
    /// each signing every request (several while one is rotated).
    pub secrets: Vec<Secret>,
    /// `webhooks.<name>.secret_file`: where the secrets were read from.
    pub secret_file: Option<PathBuf>,
    /// `webhooks.<name>.sweeps`: the sweeps whose events it receives; each has a stream.
    pub sweeps: Vec<String>,
    /// `webhooks.<name>.timeout`: the longest one attempt may take.
    pub timeout: Duration,
    /// `webhooks.<name>.retry_for`: how long after its leave an event is retried.
    pub retry_for: Duration,
    /// `webhooks.<name>.concurrency`: the most requests in flight.
    pub concurrency: u32,
    /// `webhooks.<name>.ca_file`: the certificates trusted for an https url instead of the
    /// system's.
    pub ca_file: Option<PathBuf>,
    /// The PEM read from `ca_file`.
    pub ca: Option<Vec<u8>>,
    /// `webhooks.<name>.enabled`: false keeps it configured but idle.
    pub enabled: bool,
}

impl Webhook {
    /// Reads every `[webhooks.<name>]` table, ordered by name, against the sweeps read before.
    pub(super) fn read_all(
        webhooks: &mut Table,
        sweeps: &[Sweep],
    ) -> Result<Vec<Self>, ConfigError> {
        let mut names: Vec<String> = webhooks.map.keys().cloned().collect();
        names.sort();
        let mut all = Vec::with_capacity(names.len());
        for name in names {
            let mut t = webhooks.table(&name)?;
            check_name(&name, &t)?;
            let hook = Self::read(name, &mut t)?;
            hook.check_sweeps(&t, sweeps)?;
            t.finish()?;
            all.push(hook);
        }
        Ok(all)
    }

    fn read(name: String, t: &mut Table) -> Result<Self, ConfigError> {
        let mut hook = Self {
            name,
            url: String::new(),
            secrets: Vec::new(),
            secret_file: None,
            sweeps: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            retry_for: DEFAULT_RETRY_FOR,
            concurrency: DEFAULT_CONCURRENCY,
            ca_file: None,
            ca: None,
            enabled: true,
        };
        section::read(t, Self::KEYS, &mut hook)?;
        match (t.was_read("secret"), t.was_read("secret_file")) {
            (false, false) => return Err(t.missing("secret")),
            (true, true) => {
                return Err(t.invalid_key("secret_file", "set `secret` or `secret_file`, not both"));
            }
            _ => {}
        }
        if hook.sweeps.is_empty() {
            return Err(t.invalid_key(
                "sweeps",
                "name at least one sweep (with a `stream`) whose events this endpoint receives",
            ));
        }
        Ok(hook)
    }

    /// Every sweep named exists and has a stream: deliveries come from the stream, and
    /// `retry_for` must not outlast what the stream keeps.
    fn check_sweeps(&self, t: &Table, sweeps: &[Sweep]) -> Result<(), ConfigError> {
        for name in &self.sweeps {
            let Some(sweep) = sweeps.iter().find(|s| &s.name == name) else {
                let known: Vec<&str> = sweeps.iter().map(|s| s.name.as_str()).collect();
                return Err(t.invalid_key(
                    "sweeps",
                    &format!(
                        "no sweep is called `{name}` (configured: {}): name a `[sweeps.<name>]` table",
                        known.join(", ")
                    ),
                ));
            };
            let Some(stream) = &sweep.stream else {
                return Err(t.invalid_key(
                    "sweeps",
                    &format!(
                        "sweep `{name}` has no `stream`, and deliveries come from the stream: set \
                         `sweeps.{name}.stream` (e.g. \"presence:{{hash_tag}}:log\")"
                    ),
                ));
            };
            if let Some(retention) = stream.retention
                && self.retry_for > retention
            {
                return Err(t.invalid_key(
                    "retry_for",
                    &format!(
                        "longer than `sweeps.{name}.stream_retention` ({}): the stream would \
                         drop events still being retried; shorten it or keep the stream longer",
                        humantime::format_duration(retention)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// This endpoint's table in the effective configuration, its secrets redacted.
    pub(super) fn write_toml(&self, out: &mut String) {
        section::write(out, &format!("webhooks.{}", self.name), Self::KEYS, self);
    }

    const KEYS: &[Key<Self>] = &[
        Key {
            name: "url",
            read: |t, k, h| {
                let url = t.string(k)?;
                check_url(&url.value).map_err(|why| url.invalid(why))?;
                h.url = url.value;
                Ok(())
            },
            show: |h| Shown::text(&h.url),
        },
        Key {
            name: "secret",
            read: |t, k, h| {
                let Some(field) = t.optional_string(k)? else {
                    return Ok(());
                };
                h.secrets = parse_secrets(field.value.clone())
                    .map_err(|why| redacted_error(&field, &why))?;
                Ok(())
            },
            show: |h| match h.secret_file {
                Some(_) => Shown::Unset,
                None => Shown::Noted("\"<redacted>\"".into(), "never shown"),
            },
        },
        Key {
            name: "secret_file",
            read: |t, k, h| {
                let Some(path) = t.optional_string(k)? else {
                    return Ok(());
                };
                let text = read_secret(&path.value).map_err(|why| path.invalid(&why))?;
                h.secrets = parse_secrets(text.expose().to_owned()).map_err(|why| {
                    path.invalid(&format!("what the file holds is not usable: {why}"))
                })?;
                h.secret_file = Some(PathBuf::from(path.value));
                Ok(())
            },
            show: |h| Shown::path(h.secret_file.as_ref()).noted("secret: <redacted>"),
        },
        Key {
            name: "sweeps",
            read: |t, k, h| {
                h.sweeps = t.list(k)?.into_iter().map(|f| f.value).collect();
                Ok(())
            },
            show: |h| Shown::list(h.sweeps.iter().cloned()),
        },
        Key {
            name: "timeout",
            read: |t, k, h| {
                let d = t.optional_duration(k, MAX_TIMEOUT)?;
                h.timeout = d.unwrap_or(h.timeout);
                Ok(())
            },
            show: |h| Shown::duration(h.timeout),
        },
        Key {
            name: "retry_for",
            read: |t, k, h| {
                let d = t.optional_duration(k, MAX_STREAM_AGE)?;
                h.retry_for = d.unwrap_or(h.retry_for);
                Ok(())
            },
            show: |h| Shown::duration(h.retry_for),
        },
        Key {
            name: "concurrency",
            read: |t, k, h| {
                let n = t.optional_integer(k, 1, 1024)?;
                h.concurrency = n.map_or(h.concurrency, |n| n as u32);
                Ok(())
            },
            show: |h| Shown::plain(h.concurrency),
        },
        Key {
            name: "ca_file",
            read: |t, k, h| {
                let Some(path) = t.optional_string(k)? else {
                    return Ok(());
                };
                h.ca = Some(read_pem(&path.value).map_err(|why| path.invalid(&why))?);
                h.ca_file = Some(PathBuf::from(path.value));
                Ok(())
            },
            show: |h| Shown::path(h.ca_file.as_ref()),
        },
        Key {
            name: "enabled",
            read: |t, k, h| {
                t.optional_bool(k)
                    .map(|v| h.enabled = v.unwrap_or(h.enabled))
            },
            show: |h| Shown::plain(h.enabled),
        },
    ];
}

/// An endpoint's name is a metric label and part of Redis key names: plain, and no hash tag.
fn check_name(name: &str, t: &Table) -> Result<(), ConfigError> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(t.invalid(
            format!("{name:?}"),
            "webhook names may only hold letters, digits, `_` and `-`",
        ));
    }
    Ok(())
}

/// Why `url` cannot be an endpoint, if it cannot.
fn check_url(url: &str) -> Result<(), &'static str> {
    const HINT: &str = "must be an http:// or https:// URL with a host, e.g. \
                        \"https://app.example.com/hooks/presence\"";
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or(HINT)?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(
            "must not hold credentials (user:password@): the signature authenticates \
                    the sender; put any receiver token in `secret`'s place on the receiver",
        );
    }
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
            if !port.is_empty() && port.parse::<u16>().is_err() {
                return Err("has a port that is not a number from 0 to 65535");
            }
            host
        }
        _ => authority,
    };
    if host.is_empty()
        || url
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(HINT);
    }
    Ok(())
}

/// Space-separated `whsec_<base64>` secrets, each checked. The error never holds any of them.
fn parse_secrets(text: String) -> Result<Vec<Secret>, String> {
    let secrets: Vec<Secret> = text
        .split_ascii_whitespace()
        .map(|s| Secret::new(s.to_owned()))
        .collect();
    if secrets.is_empty() {
        return Err("is empty: one or more `whsec_<base64>` secrets, space-separated".into());
    }
    for (i, s) in secrets.iter().enumerate() {
        let n = i + 1;
        decode_secret(s).map_err(|why| format!("secret {n} of {}: {why}", secrets.len()))?;
    }
    Ok(secrets)
}

/// The key bytes of a `whsec_` secret; the error says what form it must take.
pub fn decode_secret(secret: &Secret) -> Result<Vec<u8>, String> {
    let Some(b64) = secret.expose().strip_prefix(SECRET_PREFIX) else {
        return Err(format!(
            "not of the form `{SECRET_PREFIX}<base64>` (Standard Webhooks); generate one with \
             `printf 'whsec_%s\\n' \"$(head -c 32 /dev/urandom | base64)\"`"
        ));
    };
    let key = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| {
            format!("what follows `{SECRET_PREFIX}` is not standard base64 (A-Z a-z 0-9 + / =)")
        })?;
    if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
        return Err(format!(
            "decodes to {} bytes; a key must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes \
             (32 random bytes, base64-encoded, are usual)",
            key.len()
        ));
    }
    Ok(key)
}

/// An error about a secret key that names the key, never the value.
fn redacted_error(field: &Field<String>, why: &str) -> ConfigError {
    ConfigError::Invalid {
        key: field.key.clone(),
        value: "<redacted>".into(),
        origin: field.origin.clone(),
        reason: why.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Origin;

    #[test]
    fn urls() {
        for ok in [
            "http://127.0.0.1:8080/hooks",
            "https://app.example.com/hooks/presence?x=1",
            "https://[::1]:8443/",
            "http://localhost",
        ] {
            assert_eq!(check_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "ftp://x/",
            "app.example.com/hooks",
            "https:///path",
            "https://user:pw@example.com/",
            "http://example.com:99999/",
            "http://exa mple.com/",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn secrets() {
        let good = "whsec_cHJlc2VuY2Utc3dlZXBlci13ZWJob29rLXRlc3QtazE=";
        assert_eq!(parse_secrets(good.into()).unwrap().len(), 1);
        assert_eq!(parse_secrets(format!("{good}  {good}")).unwrap().len(), 2);
        for bad in [
            "",
            "cHJlc2VuY2Utc3dlZXBlci13ZWJob29rLXRlc3QtazE=",
            "whsec_short",
            "whsec_!!!!",
            "whsec_c2hvcnQ=",
        ] {
            let why = parse_secrets(bad.into()).unwrap_err();
            assert!(bad.is_empty() || !why.contains(bad), "{why}");
        }
    }

    #[test]
    fn a_secret_never_prints_in_debug() {
        let s = Secret::new("whsec_cHJlc2VuY2Utc3dlZXBlci13ZWJob29rLXRlc3QtazE=".into());
        assert!(!format!("{s:?}").contains("whsec"));
    }

    #[test]
    fn origin_is_kept() {
        let f = Field {
            key: "webhooks.crm.secret".into(),
            value: "whsec_x".into(),
            shown: "\"whsec_x\"".into(),
            origin: Origin::File("f.toml".into()),
        };
        let e = redacted_error(&f, "bad").to_string();
        assert!(
            e.contains("webhooks.crm.secret") && !e.contains("whsec_x"),
            "{e}"
        );
    }
}
