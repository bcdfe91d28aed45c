//! Configuration: built-in defaults < TOML file < environment < command-line flags.
//!
//! The `config` crate merges the layers; this module then walks the merged tree itself rather
//! than deserializing it, so that every rejection names the full key, the offending value and the
//! layer it came from, and so that any key nobody reads is reported instead of ignored.
//!
//! One file per section, each holding its struct and the table of its keys (`section`): a key's
//! name, how it is read and how `check-config` prints it, side by side. What each setting means
//! is written once, in the shipped `config/presence-sweeper.toml`, from which
//! `docs/configuration.md` is generated. [`advice`] is what a valid configuration may still
//! get wrong (a broad `match`), said but not refused.

pub mod advice;
mod coordination;
mod duration;
mod env;
mod error;
mod events;
mod evict;
mod http;
mod layers;
mod log;
mod redis;
mod scan;
mod schedule;
mod secret;
mod section;
mod sweep;
mod tracking;
mod tree;
mod webhook;

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::path::PathBuf;

use config::FileFormat;

pub use self::coordination::Coordination;
pub use self::duration::{
    MAX_INTERVAL, MAX_LEASE_TTL, MAX_STREAM_AGE, MAX_TIMEOUT, MAX_TTL, MIN_TTL,
};
pub use self::env::{CONFIG_VAR, ENV_PREFIX, ENV_SEPARATOR, UnknownVariable};
pub use self::error::{ConfigError, Origin};
pub use self::events::Events;
pub use self::evict::Evict;
pub use self::http::Http;
use self::layers::{EnvLayer, FileLayer, FlagLayer};
pub use self::log::{Log, LogFormat};
pub use self::redis::{Redis, RedisMode, Tls};
pub use self::scan::Scan;
pub use self::schedule::{Schedule, ScheduleError};
pub use self::secret::{Secret, redact_url};
use self::section::Key;
pub use self::sweep::{EventShape, Stream, Sweep};
pub use self::tracking::{NotificationMode, Tracking};
use self::tree::{Table, one_line};
pub use self::webhook::{
    MAX_SECRET_BYTES, MIN_SECRET_BYTES, SECRET_PREFIX, Webhook, decode_secret,
};
pub use presence_sweeper_rules::pattern::{CONVERSATION_ID, ChannelTemplate, HASH_TAG, KeyPattern};
pub use presence_sweeper_rules::score::ScoreUnit;

/// The built-in defaults: the shipped example file `config/presence-sweeper.toml`, without its
/// comments (`build.rs`).
const DEFAULTS_TOML: &str = include_str!(concat!(env!("OUT_DIR"), "/defaults.toml"));

/// The built-in sweep of typing indicators, whose keys `seed --typing` and `simulate --typing`
/// write.
pub const TYPING_SWEEP: &str = "typing";

/// The validated configuration of the daemon. Each section's settings are explained in the
/// shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[redis]`: how to reach Redis.
    pub redis: Redis,
    /// `[scan]`: how walks discover keys.
    pub scan: Scan,
    /// `[evict]`: how eviction work is cut into bounded batches and calls.
    pub evict: Evict,
    /// `[events]`: the events published.
    pub events: Events,
    /// `[tracking]`: how keys are tracked between walks.
    pub tracking: Tracking,
    /// `[coordination]`: how several replicas share the work.
    pub coordination: Coordination,
    /// `[http]`: the metrics and health server.
    pub http: Http,
    /// `[log]`: logging.
    pub log: Log,
    /// `[sweeps.<name>]`: every configured sweep, enabled or not, ordered by name.
    pub sweeps: Vec<Sweep>,
    /// `[webhooks.<name>]`: every configured endpoint, enabled or not, ordered by name.
    pub webhooks: Vec<Webhook>,
    /// What the configuration was read from.
    pub provenance: Provenance,
}

/// What a configuration was read from, by name: never a value (a variable may hold a
/// password).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    /// The file read, as given; `None`: the built-in defaults, under the variables and flags.
    pub file: Option<PathBuf>,
    /// `file` is the system's configuration, read because nothing named another.
    pub system_file: bool,
    /// The `PRESENCE_SWEEPER__*` variables that set keys.
    pub variables: Vec<String>,
    /// The command-line flags that set keys.
    pub flags: Vec<&'static str>,
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.system_file) {
            (Some(file), true) => write!(
                f,
                "the system's file {} (--config or {CONFIG_VAR} names another)",
                file.display()
            )?,
            (Some(file), false) => write!(f, "the file {}", file.display())?,
            (None, _) => f.write_str("no file: the built-in defaults")?,
        }
        if !self.variables.is_empty() {
            write!(f, "; variables {}", self.variables.join(", "))?;
        }
        if !self.flags.is_empty() {
            write!(f, "; flags {}", self.flags.join(", "))?;
        }
        Ok(())
    }
}

/// Where configuration comes from; the caller passes the environment in so tests control it.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The TOML file (`--config` / `PRESENCE_SWEEPER_CONFIG`, or the system's), if any.
    pub file: Option<PathBuf>,
    /// `file` is the system's configuration, read because nothing named another.
    pub system_file: bool,
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
    /// `--http-listen`.
    pub http_listen: Option<String>,
}

impl Overrides {
    /// The flags given, as a layer: each value's origin is its flag.
    fn layer(&self) -> FlagLayer {
        let flags = [
            ("redis.url", "--redis-url", &self.redis_url),
            ("log.format", "--log-format", &self.log_format),
            ("log.level", "--log-level", &self.log_level),
            ("http.listen", "--http-listen", &self.http_listen),
        ];
        FlagLayer(
            flags
                .into_iter()
                .filter_map(|(key, flag, value)| Some((key, flag, value.clone()?)))
                .collect(),
        )
    }
}

/// A `--sweep` name that is not configured.
#[derive(Debug, thiserror::Error)]
#[error("unknown sweep `{name}` (configured: {known})")]
pub struct UnknownSweep {
    /// The name asked for.
    pub name: String,
    /// The configured names.
    pub known: String,
}

impl Config {
    /// Loads, merges and validates every layer.
    pub fn load(sources: &Sources) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder()
            .add_source(config::File::from_str(DEFAULTS_TOML, FileFormat::Toml));
        if let Some(path) = &sources.file {
            builder = builder.add_source(FileLayer::read(path)?);
        }
        let env = EnvLayer::read(&sources.env)?;
        let flags = sources.overrides.layer();
        let provenance = Provenance {
            file: sources.file.clone(),
            system_file: sources.system_file,
            variables: env.names(),
            flags: flags.names(),
        };
        let merged = builder
            .add_source(env)
            .add_source(flags)
            .build()
            .map_err(|e| match e {
                config::ConfigError::FileParse { uri, cause } => ConfigError::Syntax(format!(
                    "{}: {}",
                    uri.unwrap_or_default(),
                    one_line(&cause.to_string())
                )),
                other => ConfigError::Syntax(one_line(&other.to_string())),
            })?;
        let root =
            config::Source::collect(&merged).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let mut config = Self::from_tree(Table::new(String::new(), root))?;
        config.provenance = provenance;
        Ok(config)
    }

    fn from_tree(mut root: Table) -> Result<Self, ConfigError> {
        let mut redis = root.table("redis")?;
        let mut sweeps = root.table("sweeps")?;
        let mut webhooks = root.table("webhooks")?;
        let redis_config = Redis::read(&mut redis)?;
        let mut all_sweeps = Sweep::read_all(&mut sweeps, &redis_config)?;
        let hooks = Webhook::read_all(&mut webhooks, &all_sweeps)?;
        for sweep in &mut all_sweeps {
            if let Some(stream) = &mut sweep.stream {
                stream.webhooks = hooks
                    .iter()
                    .filter(|h| h.enabled && h.sweeps.contains(&sweep.name))
                    .map(|h| h.name.clone())
                    .collect();
            }
        }
        let config = Self {
            sweeps: all_sweeps,
            webhooks: hooks,
            redis: redis_config,
            scan: read_section(&mut root, "scan", Scan::KEYS)?,
            evict: read_section(&mut root, "evict", Evict::KEYS)?,
            events: read_section(&mut root, "events", Events::KEYS)?,
            tracking: read_section(&mut root, "tracking", Tracking::KEYS)?,
            coordination: read_section(&mut root, "coordination", Coordination::KEYS)?,
            http: read_section(&mut root, "http", Http::KEYS)?,
            log: read_section(&mut root, "log", Log::KEYS)?,
            provenance: Provenance::default(),
        };
        redis.finish()?;
        sweeps.finish()?;
        webhooks.finish()?;
        root.finish()?;
        Ok(config)
    }

    /// The webhooks that run.
    pub fn enabled_webhooks(&self) -> impl Iterator<Item = &Webhook> {
        self.webhooks.iter().filter(|h| h.enabled)
    }

    /// The sweeps that run.
    pub fn enabled_sweeps(&self) -> impl Iterator<Item = &Sweep> {
        self.sweeps.iter().filter(|s| s.enabled)
    }

    /// The sweep called `name`, enabled or not.
    pub fn sweep(&self, name: &str) -> Option<&Sweep> {
        self.sweeps.iter().find(|s| s.name == name)
    }

    /// The sweeps a command runs: the named ones, enabled or not, or else every enabled one.
    pub fn select_sweeps(&self, names: &[String]) -> Result<Vec<&Sweep>, UnknownSweep> {
        if names.is_empty() {
            return Ok(self.enabled_sweeps().collect());
        }
        names
            .iter()
            .map(|name| {
                self.sweep(name).ok_or_else(|| UnknownSweep {
                    name: name.clone(),
                    known: self
                        .sweeps
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            })
            .collect()
    }

    /// `PRESENCE_SWEEPER*` variables of `env` that set nothing, each with the variable probably
    /// meant. `check-config` refuses them; the other commands warn.
    pub fn unknown_variables(&self, env: &HashMap<String, String>) -> Vec<UnknownVariable> {
        env::unknown_variables(env, || {
            self.to_toml()
                .lines()
                .scan(String::new(), |table, line| {
                    Some(effective_key(table, line))
                })
                .flatten()
                .collect()
        })
    }

    /// The effective configuration as TOML, every key in effect included (unset ones as
    /// comments), with every secret redacted.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# read: {}", self.provenance);
        self.redis.write_toml(&mut out);
        section::write(&mut out, "scan", Scan::KEYS, &self.scan);
        section::write(&mut out, "evict", Evict::KEYS, &self.evict);
        section::write(&mut out, "events", Events::KEYS, &self.events);
        section::write(&mut out, "tracking", Tracking::KEYS, &self.tracking);
        let coordination = &self.coordination;
        section::write(&mut out, "coordination", Coordination::KEYS, coordination);
        section::write(&mut out, "http", Http::KEYS, &self.http);
        section::write(&mut out, "log", Log::KEYS, &self.log);
        for sweep in &self.sweeps {
            sweep.write_toml(&mut out);
        }
        for hook in &self.webhooks {
            hook.write_toml(&mut out);
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    }
}

/// Reads the section `name` of `root`, which must hold every key of `keys`.
fn read_section<S: Default>(
    root: &mut Table,
    name: &str,
    keys: &[Key<S>],
) -> Result<S, ConfigError> {
    let mut table = root.table(name)?;
    let mut section = S::default();
    section::read(&mut table, keys, &mut section)?;
    table.finish()?;
    Ok(section)
}

/// The dotted key a line of [`Config::to_toml`] sets or shows unset, if it is one; `table`
/// follows the `[table]` lines.
pub(crate) fn effective_key(table: &mut String, line: &str) -> Option<String> {
    if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
        *table = name.to_owned();
        return None;
    }
    let name = match line.strip_prefix("# ") {
        Some(unset) => unset.strip_suffix(": unset")?,
        None => line.split_once(" = ")?.0,
    };
    Some(format!("{table}.{name}"))
}

#[cfg(test)]
mod tests;
