//! Configuration: built-in defaults < TOML file < environment < command-line flags.
//!
//! The `config` crate merges the layers; this module then walks the merged tree itself rather
//! than deserializing it, so that every rejection names the full key, the offending value and the
//! layer it came from, and so that any key nobody reads is reported instead of ignored.

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{FileFormat, Map, Value, ValueKind};

use crate::pattern::{ChannelTemplate, KeyPattern};
use crate::schedule::Schedule;

/// The built-in defaults, which are also the shipped, commented example file.
pub const DEFAULTS_TOML: &str = include_str!("../config/presence-sweeper.toml");

/// Environment variable prefix: `PRESENCE_SWEEPER__REDIS__URL` sets `redis.url`.
pub const ENV_PREFIX: &str = "PRESENCE_SWEEPER";
/// Separator between the prefix and each key segment in environment variable names.
pub const ENV_SEPARATOR: &str = "__";

/// The validated configuration of the daemon.
#[derive(Debug, Clone)]
pub struct Config {
    /// How to reach Redis.
    pub redis: RedisConfig,
    /// How keys are discovered.
    pub scan: ScanConfig,
    /// How eviction work is cut into bounded script calls.
    pub evict: EvictConfig,
    /// The metrics and health server.
    pub http: HttpConfig,
    /// Logging.
    pub log: LogConfig,
    /// Every configured sweep, enabled or not, ordered by name.
    pub sweeps: Vec<SweepConfig>,
    /// The configuration file that was read, if any.
    pub file: Option<PathBuf>,
}

/// `[redis]`: the connection.
#[derive(Debug, Clone, PartialEq)]
pub struct RedisConfig {
    /// `redis.url`: `redis://[user:password@]host:port/db`, `rediss://...` or `unix://path`.
    pub url: String,
    /// `redis.password_file`: where the password was read from.
    pub password_file: Option<PathBuf>,
    /// The password read from `password_file`; it overrides one in the URL.
    pub password: Option<Secret>,
    /// `redis.connect_timeout`: limit of one connection attempt.
    pub connect_timeout: Duration,
    /// `redis.command_timeout`: limit of the wait for one reply.
    pub command_timeout: Duration,
}

/// `[scan]`: discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanConfig {
    /// `scan.count`: the COUNT hint of each SCAN call.
    pub count: u32,
    /// `scan.max_keys_per_second`: cap on the keys a pass discovers per second (0 = no cap),
    /// to keep the sweeper gentle on a busy Redis.
    pub max_keys_per_second: u32,
}

/// `[evict]`: bounds on the eviction script calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictConfig {
    /// `evict.batch_keys`: keys per script call.
    pub batch_keys: usize,
    /// `evict.max_members_per_call`: members one call removes at most, over all its keys.
    pub max_members_per_call: usize,
    /// `evict.pipeline_depth`: script calls in flight at once per sweep.
    pub pipeline_depth: usize,
}

/// `[http]`: the metrics and health server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// `http.listen`: the address to bind; port 0 picks a free port.
    pub listen: SocketAddr,
}

/// `[log]`: logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `log.format`.
    pub format: LogFormat,
    /// `log.level`: a level or a `tracing` filter directive.
    pub level: String,
}

/// `log.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
        }
    }
}

/// `sweeps.<name>.score_unit`: the unit of the scores the application writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreUnit {
    /// Unix seconds, fractions allowed.
    Seconds,
    /// Unix milliseconds.
    Milliseconds,
}

impl ScoreUnit {
    /// Converts a score to seconds.
    pub fn to_seconds(self, score: f64) -> f64 {
        match self {
            Self::Seconds => score,
            Self::Milliseconds => score / 1000.0,
        }
    }

    /// Converts Unix seconds to this unit.
    pub fn from_seconds(self, secs: f64) -> f64 {
        match self {
            Self::Seconds => secs,
            Self::Milliseconds => secs * 1000.0,
        }
    }

    /// Expresses a duration in this unit.
    pub fn from_duration(self, d: Duration) -> f64 {
        match self {
            Self::Seconds => d.as_secs_f64(),
            Self::Milliseconds => d.as_secs_f64() * 1000.0,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Seconds => "seconds",
            Self::Milliseconds => "milliseconds",
        }
    }
}

/// `[sweeps.<name>]`: one kind of presence set and what to do with its zombies.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepConfig {
    /// The table name; also the metric label and the roster field of events.
    pub name: String,
    /// `match`: SCAN glob whose single `*` is the conversation id.
    pub pattern: KeyPattern,
    /// `ttl`: how old a score may get before its member is a zombie.
    pub ttl: Duration,
    /// `schedule`: when passes run.
    pub schedule: Schedule,
    /// `event`: the `type` of published events.
    pub event: String,
    /// `channel`: where events are published.
    pub channel: ChannelTemplate,
    /// `score_unit`: seconds or milliseconds.
    pub score_unit: ScoreUnit,
    /// `enabled`: false keeps the sweep configured but idle.
    pub enabled: bool,
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

/// Where configuration comes from; the caller passes the environment in so tests control it.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The TOML file (`--config` / `PRESENCE_SWEEPER_CONFIG`), if any.
    pub file: Option<PathBuf>,
    /// Environment variables; only `PRESENCE_SWEEPER__*` ones are read.
    pub env: HashMap<String, String>,
    /// Command-line flags, the top layer.
    pub overrides: Overrides,
}

/// Command-line flags that override configuration keys.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--redis-url`.
    pub redis_url: Option<String>,
    /// `--log-format`.
    pub log_format: Option<String>,
    /// `--log-level`.
    pub log_level: Option<String>,
}

/// Why the configuration was rejected. Each message names the key and, where there is one, the
/// value and the layer it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named by `--config` could not be read.
    #[error("cannot read config file {path}: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A layer could not be parsed (TOML syntax, for instance).
    #[error("{0}")]
    Syntax(String),
    /// A key that no part of presence-sweeper reads, probably a typo.
    #[error("unknown configuration key `{key}`{origin}")]
    UnknownKey {
        /// Full dotted key.
        key: String,
        /// The layer that set it.
        origin: Origin,
    },
    /// A required key is missing.
    #[error("missing configuration key `{key}`")]
    Missing {
        /// Full dotted key.
        key: String,
    },
    /// A value that does not parse or is out of range.
    #[error("{key} = {value}{origin}: {reason}")]
    Invalid {
        /// Full dotted key.
        key: String,
        /// The value as given (redacted where secret).
        value: String,
        /// The layer that set it.
        origin: Origin,
        /// What is wrong with it.
        reason: String,
    },
}

/// The layer a value came from, shown after it in error messages.
#[derive(Debug, Clone, Default)]
pub struct Origin(Option<String>);

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(o) if o == "the environment" => f.write_str(" (from the environment)"),
            Some(o) => write!(f, " (in {o})"),
            None => Ok(()),
        }
    }
}

impl Config {
    /// Loads, merges and validates every layer.
    pub fn load(sources: &Sources) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder()
            .add_source(config::File::from_str(DEFAULTS_TOML, FileFormat::Toml));
        if let Some(path) = &sources.file {
            // Read it ourselves first: the config crate would otherwise also try `path.toml`,
            // `path.json`... and an unreadable file deserves its own clear message.
            std::fs::metadata(path)
                .and_then(|m| {
                    if m.is_file() {
                        Ok(())
                    } else {
                        Err(std::io::Error::other("not a regular file"))
                    }
                })
                .and_then(|()| std::fs::File::open(path).map(drop))
                .map_err(|source| ConfigError::ReadFile {
                    path: path.clone(),
                    source,
                })?;
            builder =
                builder.add_source(config::File::new(&path.to_string_lossy(), FileFormat::Toml));
        }
        let env: Map<String, String> = sources
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        builder = builder.add_source(
            config::Environment::with_prefix(ENV_PREFIX)
                .separator(ENV_SEPARATOR)
                .try_parsing(true)
                .source(Some(env)),
        );
        let o = &sources.overrides;
        builder = builder
            .set_override_option("redis.url", o.redis_url.clone())
            .and_then(|b| b.set_override_option("log.format", o.log_format.clone()))
            .and_then(|b| b.set_override_option("log.level", o.log_level.clone()))
            .map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let merged = builder.build().map_err(|e| match e {
            config::ConfigError::FileParse { cause, .. } => ConfigError::Syntax(format!(
                "{}: {}",
                sources.file.as_deref().unwrap_or(Path::new("?")).display(),
                one_line(&cause.to_string())
            )),
            other => ConfigError::Syntax(one_line(&other.to_string())),
        })?;
        let root =
            config::Source::collect(&merged).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let mut config = Self::from_tree(Table::new(String::new(), root))?;
        config.file = sources.file.clone();
        Ok(config)
    }

    fn from_tree(mut root: Table) -> Result<Self, ConfigError> {
        let mut redis = root.table("redis")?;
        let url = redis.string("url")?;
        validate_redis_url(&url)?;
        let password_file = redis.optional_string("password_file")?;
        let password = match &password_file {
            Some(path) => Some(read_password(path)?),
            None => None,
        };
        let redis = {
            let cfg = RedisConfig {
                url: url.value,
                password_file: password_file.map(|p| PathBuf::from(p.value)),
                password,
                connect_timeout: redis.duration("connect_timeout")?,
                command_timeout: redis.duration("command_timeout")?,
            };
            redis.finish()?;
            cfg
        };

        let mut scan = root.table("scan")?;
        let scan_cfg = ScanConfig {
            count: scan.integer("count", 1, 1_000_000)? as u32,
            max_keys_per_second: scan.integer("max_keys_per_second", 0, 100_000_000)? as u32,
        };
        scan.finish()?;

        let mut evict = root.table("evict")?;
        let evict_cfg = EvictConfig {
            batch_keys: evict.integer("batch_keys", 1, 10_000)? as usize,
            max_members_per_call: evict.integer("max_members_per_call", 1, 100_000)? as usize,
            pipeline_depth: evict.integer("pipeline_depth", 1, 256)? as usize,
        };
        evict.finish()?;

        let mut http = root.table("http")?;
        let listen = http.string("listen")?;
        let http_cfg = HttpConfig {
            listen: listen.value.parse().map_err(|_| {
                listen.invalid("not a socket address like \"0.0.0.0:9750\" or \"[::1]:9750\"")
            })?,
        };
        http.finish()?;

        let mut log = root.table("log")?;
        let format = log.string("format")?;
        let log_cfg = LogConfig {
            format: match format.value.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => return Err(format.invalid("must be \"text\" or \"json\"")),
            },
            level: {
                let level = log.string("level")?;
                tracing_subscriber::EnvFilter::builder()
                    .parse(&level.value)
                    .map_err(|e| level.invalid(&format!("not a level or tracing filter: {e}")))?;
                level.value
            },
        };
        log.finish()?;

        let mut sweeps_table = root.table("sweeps")?;
        let mut names: Vec<String> = sweeps_table.map.keys().cloned().collect();
        names.sort();
        let mut sweeps = Vec::with_capacity(names.len());
        for name in names {
            let mut t = sweeps_table.table(&name)?;
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(ConfigError::Invalid {
                    key: t.path.clone(),
                    value: format!("{name:?}"),
                    origin: Origin::default(),
                    reason: "sweep names may only hold letters, digits, `_` and `-`".into(),
                });
            }
            sweeps.push(sweep_from_table(name, &mut t)?);
            t.finish()?;
        }
        sweeps_table.finish()?;
        root.finish()?;

        Ok(Self {
            redis,
            scan: scan_cfg,
            evict: evict_cfg,
            http: http_cfg,
            log: log_cfg,
            sweeps,
            file: None,
        })
    }

    /// The sweeps that run.
    pub fn enabled_sweeps(&self) -> impl Iterator<Item = &SweepConfig> {
        self.sweeps.iter().filter(|s| s.enabled)
    }

    /// The sweep called `name`, enabled or not.
    pub fn sweep(&self, name: &str) -> Option<&SweepConfig> {
        self.sweeps.iter().find(|s| s.name == name)
    }

    /// The effective configuration as TOML, with every secret redacted.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        let q = |s: &str| serde_json::to_string(s).expect("strings always serialize");
        let d = |d: Duration| q(&humantime::format_duration(d).to_string());
        if let Some(file) = &self.file {
            let _ = writeln!(out, "# file: {}", file.display());
        }
        let r = &self.redis;
        let _ = writeln!(out, "[redis]\nurl = {}", q(&redact_url(&r.url)));
        if let Some(p) = &r.password_file {
            let _ = writeln!(
                out,
                "password_file = {}  # password: <redacted>",
                q(&p.to_string_lossy())
            );
        }
        let _ = writeln!(
            out,
            "connect_timeout = {}\ncommand_timeout = {}\n",
            d(r.connect_timeout),
            d(r.command_timeout)
        );
        let _ = writeln!(
            out,
            "[scan]\ncount = {}\nmax_keys_per_second = {}\n",
            self.scan.count, self.scan.max_keys_per_second
        );
        let e = &self.evict;
        let _ = writeln!(
            out,
            "[evict]\nbatch_keys = {}\nmax_members_per_call = {}\npipeline_depth = {}\n",
            e.batch_keys, e.max_members_per_call, e.pipeline_depth
        );
        let _ = writeln!(
            out,
            "[http]\nlisten = {}\n",
            q(&self.http.listen.to_string())
        );
        let _ = writeln!(
            out,
            "[log]\nformat = {}\nlevel = {}",
            q(self.log.format.as_str()),
            q(&self.log.level)
        );
        for s in &self.sweeps {
            let _ = writeln!(
                out,
                "\n[sweeps.{}]\nmatch = {}\nttl = {}\nschedule = {}\nevent = {}\nchannel = {}\nscore_unit = {}\nenabled = {}",
                s.name,
                q(s.pattern.glob()),
                d(s.ttl),
                q(&s.schedule.to_string()),
                q(&s.event),
                q(&s.channel.to_string()),
                q(s.score_unit.as_str()),
                s.enabled
            );
        }
        out
    }
}

fn sweep_from_table(name: String, t: &mut Table) -> Result<SweepConfig, ConfigError> {
    let pattern = {
        let glob = t.string("match")?;
        KeyPattern::parse(&glob.value).map_err(|e| glob.invalid(&e.to_string()))?
    };
    let ttl = t.duration("ttl")?;
    let schedule = {
        let text = t.string("schedule")?;
        Schedule::parse(&text.value).map_err(|e| text.invalid(&e.to_string()))?
    };
    let event = t.string("event")?;
    if event.value.is_empty() {
        return Err(event.invalid("must not be empty"));
    }
    let channel = match t.optional_string("channel")? {
        Some(c) if c.value.is_empty() => return Err(c.invalid("must not be empty")),
        Some(c) => ChannelTemplate::new(&c.value),
        None => ChannelTemplate::new("presence:{conversation_id}:events"),
    };
    let score_unit = match t.optional_string("score_unit")? {
        None => ScoreUnit::Seconds,
        Some(u) => match u.value.as_str() {
            "seconds" | "s" => ScoreUnit::Seconds,
            "milliseconds" | "ms" => ScoreUnit::Milliseconds,
            _ => return Err(u.invalid("must be \"seconds\" or \"milliseconds\"")),
        },
    };
    let enabled = t.optional_bool("enabled")?.unwrap_or(true);
    Ok(SweepConfig {
        name,
        pattern,
        ttl,
        schedule,
        event: event.value,
        channel,
        score_unit,
        enabled,
    })
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

fn read_password(path: &Field<String>) -> Result<Secret, ConfigError> {
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

/// Hides the password in a Redis URL: `redis://user:secret@host` becomes `redis://user:***@host`.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let user = userinfo.split(':').next().unwrap_or("");
    let hidden = if userinfo.contains(':') {
        format!("{user}:***")
    } else {
        // `redis://secret@host` puts the password in the user position.
        "***".to_owned()
    };
    format!("{}{}{}", &url[..scheme_end + 3], hidden, &rest[at..])
}

/// Folds a multi-line parser message (with its source snippet) into one line.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| {
            let snippet = l
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start();
            !l.is_empty() && !snippet.starts_with('|')
        })
        .collect::<Vec<_>>()
        .join(": ")
}

fn q(s: &str) -> String {
    serde_json::to_string(s).expect("strings always serialize")
}

/// A value read from the tree, with what is needed to complain about it.
struct Field<T> {
    key: String,
    value: T,
    shown: String,
    origin: Origin,
}

impl<T> Field<T> {
    fn invalid(&self, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            key: self.key.clone(),
            value: self.shown.clone(),
            origin: self.origin.clone(),
            reason: reason.to_owned(),
        }
    }
}

/// A table of the merged tree; keys are removed as they are read, so what is left is unknown.
struct Table {
    path: String,
    map: Map<String, Value>,
    origin: Origin,
}

impl Table {
    fn new(path: String, map: Map<String, Value>) -> Self {
        Self {
            path,
            map,
            origin: Origin::default(),
        }
    }

    fn key(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    fn take(&mut self, name: &str) -> Option<(String, Value)> {
        self.map.remove(name).map(|v| (self.key(name), v))
    }

    fn table(&mut self, name: &str) -> Result<Table, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Ok(Table::new(self.key(name), Map::new()));
        };
        let origin = Origin(value.origin().map(str::to_owned));
        match value.kind {
            ValueKind::Table(map) => Ok(Table {
                path: key,
                map,
                origin,
            }),
            other => Err(ConfigError::Invalid {
                key,
                value: show(&other),
                origin,
                reason: "must be a table".into(),
            }),
        }
    }

    fn optional_string(&mut self, name: &str) -> Result<Option<Field<String>>, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Ok(None);
        };
        let origin = Origin(value.origin().map(str::to_owned));
        let shown = show(&value.kind);
        match value.kind {
            ValueKind::String(s) => Ok(Some(Field {
                key,
                value: s,
                shown,
                origin,
            })),
            ValueKind::I64(_) | ValueKind::U64(_) | ValueKind::Float(_) | ValueKind::Boolean(_) => {
                let s = shown.clone();
                Ok(Some(Field {
                    key,
                    value: s,
                    shown,
                    origin,
                }))
            }
            _ => Err(ConfigError::Invalid {
                key,
                value: shown,
                origin,
                reason: "must be a string".into(),
            }),
        }
    }

    fn string(&mut self, name: &str) -> Result<Field<String>, ConfigError> {
        self.optional_string(name)?
            .ok_or_else(|| ConfigError::Missing {
                key: self.key(name),
            })
    }

    fn duration(&mut self, name: &str) -> Result<Duration, ConfigError> {
        let text = self.string(name)?;
        let d = humantime::parse_duration(text.value.trim())
            .map_err(|e| text.invalid(&format!("not a duration like \"45s\" or \"250ms\": {e}")))?;
        if d.is_zero() {
            return Err(text.invalid("must be greater than zero"));
        }
        Ok(d)
    }

    fn integer(&mut self, name: &str, min: i64, max: i64) -> Result<i64, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Err(ConfigError::Missing {
                key: self.key(name),
            });
        };
        let origin = Origin(value.origin().map(str::to_owned));
        let shown = show(&value.kind);
        let n = value.into_int().map_err(|_| ConfigError::Invalid {
            key: key.clone(),
            value: shown.clone(),
            origin: origin.clone(),
            reason: "must be a whole number".into(),
        })?;
        if n < min || n > max {
            return Err(ConfigError::Invalid {
                key,
                value: shown,
                origin,
                reason: format!("must be between {min} and {max}"),
            });
        }
        Ok(n)
    }

    fn optional_bool(&mut self, name: &str) -> Result<Option<bool>, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Ok(None);
        };
        let origin = Origin(value.origin().map(str::to_owned));
        let shown = show(&value.kind);
        match value.kind {
            ValueKind::Boolean(b) => Ok(Some(b)),
            _ => Err(ConfigError::Invalid {
                key,
                value: shown,
                origin,
                reason: "must be true or false".into(),
            }),
        }
    }

    /// Fails on the first (alphabetically) key that nothing read.
    fn finish(self) -> Result<(), ConfigError> {
        let unknown: BTreeMap<String, Value> = self.map.into_iter().collect();
        match unknown.into_iter().next() {
            None => Ok(()),
            Some((name, value)) => Err(ConfigError::UnknownKey {
                key: if self.path.is_empty() {
                    name
                } else {
                    format!("{}.{name}", self.path)
                },
                origin: match value.origin() {
                    Some(o) => Origin(Some(o.to_owned())),
                    None => self.origin,
                },
            }),
        }
    }
}

fn show(kind: &ValueKind) -> String {
    match kind {
        ValueKind::String(s) => q(s),
        ValueKind::Nil => "nothing".into(),
        ValueKind::Boolean(b) => b.to_string(),
        ValueKind::I64(n) => n.to_string(),
        ValueKind::I128(n) => n.to_string(),
        ValueKind::U64(n) => n.to_string(),
        ValueKind::U128(n) => n.to_string(),
        ValueKind::Float(n) => n.to_string(),
        ValueKind::Table(_) => "a table".into(),
        ValueKind::Array(_) => "a list".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_with(file_text: Option<&str>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir().join(format!(
            "presence-sweeper-config-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let file = file_text.map(|t| {
            let p = dir.join("c.toml");
            std::fs::write(&p, t).unwrap();
            p
        });
        let r = Config::load(&Sources {
            file,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            overrides: Overrides::default(),
        });
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }

    #[test]
    fn defaults_are_the_two_builtin_sweeps() {
        let c = load_with(None, &[]).unwrap();
        assert_eq!(c.redis.url, "redis://127.0.0.1:6379/0");
        assert_eq!(c.scan.count, 1000);
        let names: Vec<_> = c.sweeps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["online", "typing"]);
        let online = c.sweep("online").unwrap();
        assert_eq!(online.ttl, Duration::from_secs(45));
        assert_eq!(online.schedule, Schedule::Every(Duration::from_secs(30)));
        assert_eq!(online.event, "presence.leave");
        let typing = c.sweep("typing").unwrap();
        assert_eq!(typing.ttl, Duration::from_secs(5));
        assert_eq!(typing.event, "typing.stop");
    }

    #[test]
    fn file_overrides_disables_and_adds() {
        let c = load_with(
            Some(
                r#"
                [sweeps.typing]
                enabled = false
                [sweeps.online]
                ttl = "60s"
                [sweeps.cursor]
                match = "cursor:*"
                ttl = "2s"
                schedule = "500ms"
                event = "cursor.gone"
                score_unit = "milliseconds"
                "#,
            ),
            &[],
        )
        .unwrap();
        assert!(!c.sweep("typing").unwrap().enabled);
        assert_eq!(c.sweep("online").unwrap().ttl, Duration::from_secs(60));
        let cursor = c.sweep("cursor").unwrap();
        assert_eq!(cursor.score_unit, ScoreUnit::Milliseconds);
        assert_eq!(
            cursor.channel.to_string(),
            "presence:{conversation_id}:events"
        );
        assert_eq!(c.enabled_sweeps().count(), 2);
    }

    #[test]
    fn environment_beats_file() {
        let c = load_with(
            Some("[redis]\nurl = \"redis://file:1/0\"\n[scan]\ncount = 10\n"),
            &[
                ("PRESENCE_SWEEPER__REDIS__URL", "redis://env:2/0"),
                ("PRESENCE_SWEEPER__SWEEPS__ONLINE__TTL", "90s"),
                ("PRESENCE_SWEEPER__SWEEPS__TYPING__ENABLED", "false"),
                ("PRESENCE_SWEEPER_CONFIG", "ignored"),
            ],
        )
        .unwrap();
        assert_eq!(c.redis.url, "redis://env:2/0");
        assert_eq!(c.scan.count, 10);
        assert_eq!(c.sweep("online").unwrap().ttl, Duration::from_secs(90));
        assert!(!c.sweep("typing").unwrap().enabled);
    }

    #[test]
    fn unknown_keys_are_named_with_their_layer() {
        let e = load_with(Some("[redis]\nulr = \"x\"\n"), &[]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("unknown configuration key `redis.ulr` (in "),
            "{msg}"
        );
        let e = load_with(None, &[("PRESENCE_SWEEPER__SWEEPS__ONLINE__TLL", "4s")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown configuration key `sweeps.online.tll` (from the environment)"
        );
        let e = load_with(Some("[metrics]\nport = 1\n"), &[]).unwrap_err();
        assert!(e.to_string().contains("`metrics`"), "{e}");
    }

    #[test]
    fn bad_values_name_key_and_value() {
        let cases = [
            (
                "[sweeps.online]\nmatch = \"presence:online\"",
                "sweeps.online.match = \"presence:online\"",
            ),
            ("[sweeps.online]\nmatch = \"a:*:*\"", "exactly one `*`"),
            (
                "[sweeps.online]\nttl = \"0s\"",
                "sweeps.online.ttl = \"0s\"",
            ),
            (
                "[sweeps.online]\nttl = \"soon\"",
                "sweeps.online.ttl = \"soon\"",
            ),
            (
                "[sweeps.online]\nschedule = \"0 99 * * * *\"",
                "sweeps.online.schedule = \"0 99 * * * *\"",
            ),
            (
                "[sweeps.online]\nscore_unit = \"hours\"",
                "sweeps.online.score_unit = \"hours\"",
            ),
            (
                "[http]\nlisten = \"localhost\"",
                "http.listen = \"localhost\"",
            ),
            ("[log]\nformat = \"xml\"", "log.format = \"xml\""),
            ("[scan]\ncount = 0", "scan.count = 0"),
            ("[redis]\nurl = \"http://x\"", "redis.url = \"http://x\""),
            (
                "[redis]\npassword_file = \"/nonexistent/pw\"",
                "redis.password_file = \"/nonexistent/pw\"",
            ),
            (
                "[sweeps.x]\nttl = \"1s\"",
                "missing configuration key `sweeps.x.match`",
            ),
        ];
        for (text, expected) in cases {
            let msg = load_with(Some(text), &[]).unwrap_err().to_string();
            assert!(msg.contains(expected), "{text:?} gave {msg:?}");
            assert!(!msg.contains('\n'), "one line: {msg:?}");
        }
    }

    #[test]
    fn redacts_url_passwords() {
        assert_eq!(redact_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("redis://pw@h:1"), "redis://***@h:1");
        assert_eq!(redact_url("redis://h:1/0"), "redis://h:1/0");
        let c = load_with(
            None,
            &[("PRESENCE_SWEEPER__REDIS__URL", "redis://u:hunter2@h:1/0")],
        )
        .unwrap();
        assert!(!c.to_toml().contains("hunter2"));
    }

    #[test]
    fn effective_config_round_trips() {
        let c = load_with(None, &[]).unwrap();
        let mut again = load_with(Some(&c.to_toml()), &[]).unwrap();
        again.file = None;
        assert_eq!(again.to_toml(), c.to_toml());
    }
}
