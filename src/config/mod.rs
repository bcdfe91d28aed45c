//! Configuration: built-in defaults < TOML file < environment < command-line flags.
//!
//! The `config` crate merges the layers; this module then walks the merged tree itself rather
//! than deserializing it, so that every rejection names the full key, the offending value and the
//! layer it came from, and so that any key nobody reads is reported instead of ignored.

pub(crate) mod pattern;
mod redis;
mod sweep;
mod tree;

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{FileFormat, Map};

pub use self::redis::{RedisConfig, RedisMode, Secret, TlsConfig, redact_url};
pub use self::sweep::{ScoreUnit, StormGuardConfig, SweepConfig};
use self::tree::{Table, one_line, q};

/// The built-in defaults, which are also the shipped, commented example file.
pub const DEFAULTS_TOML: &str = include_str!("../../config/presence-sweeper.toml");

/// Fields of every event, which a sweep's name (its roster field) must not shadow.
const RESERVED_NAMES: &[&str] = &[
    "type",
    "conversation_id",
    "user_id",
    "reason",
    "last_seen",
    "timestamp",
];

/// Environment variable prefix: `PRESENCE_SWEEPER__REDIS__URL` sets `redis.url`.
pub const ENV_PREFIX: &str = "PRESENCE_SWEEPER";
/// The built-in sweep of typing indicators, whose keys `seed --typing` and `simulate --typing`
/// write.
pub const TYPING_SWEEP: &str = "typing";
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
    /// The events published.
    pub events: EventsConfig,
    /// How keys are tracked between walks.
    pub tracking: TrackingConfig,
    /// How several replicas share the work.
    pub coordination: CoordinationConfig,
    /// The metrics and health server.
    pub http: HttpConfig,
    /// Logging.
    pub log: LogConfig,
    /// Every configured sweep, enabled or not, ordered by name.
    pub sweeps: Vec<SweepConfig>,
    /// The configuration file that was read, if any.
    pub file: Option<PathBuf>,
}

/// `[scan]`: discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanConfig {
    /// `scan.count`: the COUNT hint of each SCAN call (a pass's first pages ask for less and
    /// double up to it).
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

/// `[events]`: the events published for evicted members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsConfig {
    /// `events.max_bytes`: the longest event: the roster is cut to fit (and the event says so);
    /// the removed member's id is always whole.
    pub max_bytes: usize,
}

/// `[tracking]`: the deadline index, and how it learns of keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackingConfig {
    /// `tracking.notifications`: use keyspace notifications to learn of new keys at once:
    /// `auto` (where the server has them on), `on` (expected everywhere: warn and alert where
    /// not), `off`.
    pub notifications: NotificationMode,
    /// `tracking.configure_notifications`: turn keyspace notifications on where they are off
    /// (`CONFIG SET notify-keyspace-events`, adding `Kzg` to what the server has). Off by
    /// default: the daemon never changes the server's configuration unless told to.
    pub configure_notifications: bool,
    /// `tracking.reconcile_interval`: with notifications in use, how often a walk of each
    /// primary checks the index against the keyspace (notifications are fire-and-forget).
    pub reconcile_interval: Duration,
    /// `tracking.max_keys`: most keys tracked in all; past it, keys are left to walks on each
    /// sweep's schedule. 0 tracks nothing: every walk checks every key, as a full pass.
    pub max_keys: usize,
}

/// `[coordination]`: several sweeper replicas on one Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinationConfig {
    /// `coordination.lease`: only the replica holding a sweep's lease sweeps it.
    pub lease: bool,
    /// `coordination.lease_ttl`: how long a lease outlives its holder's last renewal.
    pub lease_ttl: Duration,
    /// `coordination.key_prefix`: lease keys are this prefix followed by the sweep name.
    pub key_prefix: String,
}

/// `[http]`: the metrics and health server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// `http.listen`: the address to bind; port 0 picks a free port.
    pub listen: SocketAddr,
    /// `http.web_config_file`: the exporter toolkit's web configuration file (YAML: TLS and
    /// basic auth), read by `serve::web_config`; unset or empty: plain HTTP, no auth.
    pub web_config_file: Option<PathBuf>,
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
    /// `--http-listen`.
    pub http_listen: Option<String>,
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

/// `tracking.notifications`: whether to use keyspace notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationMode {
    /// Where the server has them on; report per primary whether they are in use.
    Auto,
    /// Expected on every primary: a primary without them is logged as a warning and alerted
    /// on (`presence_sweeper_notifications_expected`), and walks follow the schedule there.
    On,
    /// Never: walks follow each sweep's schedule.
    Off,
}

impl NotificationMode {
    /// The configuration value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

/// Why the configuration was rejected. Each message names the key and, where there is one, the
/// value and the layer it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named by `--config` could not be read.
    #[error("cannot read config file {path}: {cause}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why (part of the message, so not also a `source()`).
        cause: std::io::Error,
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
                .map_err(|cause| ConfigError::ReadFile {
                    path: path.clone(),
                    cause,
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
            .and_then(|b| b.set_override_option("http.listen", o.http_listen.clone()))
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
        let mut redis_table = root.table("redis")?;
        let redis = RedisConfig::from_table(&mut redis_table)?;
        redis_table.finish()?;

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

        let mut events = root.table("events")?;
        let events_cfg = EventsConfig {
            max_bytes: events.integer("max_bytes", 1024, 512 * 1024 * 1024)? as usize,
        };
        events.finish()?;

        let mut tracking = root.table("tracking")?;
        let notifications = tracking.string("notifications")?;
        let tracking_cfg = TrackingConfig {
            notifications: match notifications.value.as_str() {
                "auto" => NotificationMode::Auto,
                "on" => NotificationMode::On,
                "off" => NotificationMode::Off,
                _ => return Err(notifications.invalid("must be \"auto\", \"on\" or \"off\"")),
            },
            configure_notifications: tracking
                .optional_bool("configure_notifications")?
                .unwrap_or(false),
            reconcile_interval: {
                let d = tracking.duration_field("reconcile_interval")?;
                if d.value < Duration::from_secs(1) {
                    return Err(d.invalid("must be at least 1s"));
                }
                d.value
            },
            max_keys: tracking.integer("max_keys", 0, 1_000_000_000)? as usize,
        };
        tracking.finish()?;

        let mut coordination = root.table("coordination")?;
        let lease = coordination.optional_bool("lease")?.unwrap_or(false);
        let lease_ttl = coordination.duration_field("lease_ttl")?;
        if lease_ttl.value < Duration::from_secs(1) {
            return Err(
                lease_ttl.invalid("must be at least 1s (it is renewed a third of the way through)")
            );
        }
        let lease_ttl = lease_ttl.value;
        let coordination_cfg = CoordinationConfig {
            lease,
            lease_ttl,
            key_prefix: coordination.string("key_prefix")?.value,
        };
        coordination.finish()?;

        let mut http = root.table("http")?;
        let listen = http.string("listen")?;
        let http_cfg = HttpConfig {
            listen: listen.value.parse().map_err(|_| {
                listen.invalid("not a socket address like \"0.0.0.0:9750\" or \"[::1]:9750\"")
            })?,
            web_config_file: http
                .optional_string("web_config_file")?
                .map(|f| f.value)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
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
                return Err(t.invalid(
                    format!("{name:?}"),
                    "sweep names may only hold letters, digits, `_` and `-`",
                ));
            }
            if RESERVED_NAMES.contains(&name.as_str()) || name.ends_with("_base64") {
                return Err(t.invalid(
                    format!("{name:?}"),
                    "the sweep name is its events' roster field, and this one is already an event field",
                ));
            }
            sweeps.push(SweepConfig::from_table(name, &mut t)?);
            t.finish()?;
        }
        sweeps_table.finish()?;
        root.finish()?;

        Ok(Self {
            redis,
            scan: scan_cfg,
            evict: evict_cfg,
            events: events_cfg,
            tracking: tracking_cfg,
            coordination: coordination_cfg,
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

    /// The sweeps a command runs: the named ones, enabled or not, or else every enabled one.
    pub fn select_sweeps(&self, names: &[String]) -> Result<Vec<&SweepConfig>, UnknownSweep> {
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

    /// The effective configuration as TOML, with every secret redacted.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        let d = |d: Duration| q(&humantime::format_duration(d).to_string());
        if let Some(file) = &self.file {
            let _ = writeln!(out, "# file: {}", file.display());
        }
        self.redis.write_toml(&mut out);
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
        let _ = writeln!(out, "[events]\nmax_bytes = {}\n", self.events.max_bytes);
        let t = &self.tracking;
        let _ = writeln!(
            out,
            "[tracking]\nnotifications = {}\nconfigure_notifications = {}\nreconcile_interval = {}\nmax_keys = {}\n",
            q(t.notifications.as_str()),
            t.configure_notifications,
            d(t.reconcile_interval),
            t.max_keys
        );
        let c = &self.coordination;
        let _ = writeln!(
            out,
            "[coordination]\nlease = {}\nlease_ttl = {}\nkey_prefix = {}\n",
            c.lease,
            d(c.lease_ttl),
            q(&c.key_prefix)
        );
        let _ = writeln!(out, "[http]\nlisten = {}", q(&self.http.listen.to_string()));
        if let Some(file) = &self.http.web_config_file {
            let _ = writeln!(out, "web_config_file = {}", q(&file.to_string_lossy()));
        }
        out.push('\n');
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
            let g = &s.storm_guard;
            let _ = writeln!(
                out,
                "\n[sweeps.{}.storm_guard]\nenabled = {}\nshare = {:?}\nmin_members = {}",
                s.name, g.enabled, g.share, g.min_members
            );
            if let Some(hold) = g.hold {
                let _ = writeln!(out, "hold = {}", d(hold));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracking::schedule::Schedule;

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
            (
                "[coordination]\nlease_ttl = \"500ms\"",
                "coordination.lease_ttl = \"500ms\" (in ",
            ),
            (
                "[sweeps.user_id]\nmatch = \"u:*\"\nttl = \"1s\"\nschedule = \"1s\"\nevent = \"e\"",
                "sweeps.user_id = \"user_id\"",
            ),
            (
                "[sweeps.online_base64]\nmatch = \"u:*\"\nttl = \"1s\"\nschedule = \"1s\"\nevent = \"e\"",
                "already an event field",
            ),
            ("[sweeps.\"a b\"]\nmatch = \"u:*\"", "letters, digits"),
        ];
        for (text, expected) in cases {
            let msg = load_with(Some(text), &[]).unwrap_err().to_string();
            assert!(msg.contains(expected), "{text:?} gave {msg:?}");
            assert!(!msg.contains('\n'), "one line: {msg:?}");
        }
    }

    #[test]
    fn scale_out_settings() {
        let c = load_with(
            Some(
                "[redis]\nmode = \"cluster\"\nnodes = [\"redis://a:7000\", \"redis://b:7001\"]\n\
                 [coordination]\nlease = true\nlease_ttl = \"3s\"\n",
            ),
            &[],
        )
        .unwrap();
        assert_eq!(c.redis.mode, RedisMode::Cluster);
        assert_eq!(c.redis.nodes, ["redis://a:7000", "redis://b:7001"]);
        assert!(c.coordination.lease);
        assert_eq!(c.coordination.lease_ttl, Duration::from_secs(3));
        // Lists from the environment are comma-separated.
        let c = load_with(
            None,
            &[
                ("PRESENCE_SWEEPER__REDIS__MODE", "sentinel"),
                (
                    "PRESENCE_SWEEPER__REDIS__SENTINELS",
                    "redis://s1:26379, redis://s2:26379",
                ),
                ("PRESENCE_SWEEPER__REDIS__MASTER_NAME", "mymaster"),
            ],
        )
        .unwrap();
        assert_eq!(c.redis.sentinels, ["redis://s1:26379", "redis://s2:26379"]);
        assert_eq!(c.redis.master_name.as_deref(), Some("mymaster"));
    }

    #[test]
    fn scale_out_mistakes_are_named() {
        let cases = [
            (
                "[redis]\nmode = \"cluster\"\n",
                "cluster mode needs `redis.nodes`",
            ),
            (
                "[redis]\nmode = \"sentinel\"\nsentinels = [\"redis://s:26379\"]\n",
                "needs `redis.master_name`",
            ),
            (
                "[redis]\nmode = \"replicated\"\n",
                "redis.mode = \"replicated\"",
            ),
            (
                "[redis]\nnodes = [\"http://x\"]\n",
                "redis.nodes[0] = \"http://x\"",
            ),
            (
                "[coordination]\nlease_ttl = \"0s\"\n",
                "coordination.lease_ttl = \"0s\"",
            ),
        ];
        for (text, expected) in cases {
            let msg = load_with(Some(text), &[]).unwrap_err().to_string();
            assert!(msg.contains(expected), "{text:?} gave {msg:?}");
        }
    }

    #[test]
    fn redacts_url_passwords() {
        assert_eq!(redact_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("redis://pw@h:1"), "redis://***@h:1");
        assert_eq!(redact_url("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(redact_url("redis://u:p/a?s#s@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(
            redact_url("unix:///run/redis.sock?db=1&pass=hunter2"),
            "unix:///run/redis.sock?db=1&pass=***"
        );
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
