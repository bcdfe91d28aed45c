//! `[sweeps.<name>]`: what a sweep matches, how long its window is, when it runs, what it
//! announces.

use std::time::Duration;

use super::duration::{MAX_STREAM_AGE, MAX_TTL, MIN_TTL};
use super::error::ConfigError;
use super::redis::{Redis, RedisMode};
use super::schedule::Schedule;
use super::section::{self, Key, Shown};
use super::tree::Table;
use presence_sweeper_rules::pattern::{ChannelTemplate, KeyPattern, same_slot};
use presence_sweeper_rules::score::ScoreUnit;
use presence_sweeper_rules::storm;

/// Fields of every event, which a sweep's name (its roster field) must not shadow.
const RESERVED_NAMES: &[&str] = &[
    "type",
    "conversation_id",
    "user_id",
    "reason",
    "last_seen",
    "timestamp",
    "leaves",
    "vacated",
    "id",
    "prev",
];

/// How long a per-conversation stream outlives its last append unless `stream_ttl` or
/// `stream_retention` says otherwise.
const DEFAULT_STREAM_TTL: Duration = Duration::from_secs(24 * 3600);

/// `sweeps.<name>.event_shape`: one event per removed member, or one per eviction step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EventShape {
    /// One event per removed member (the default).
    #[default]
    Member,
    /// One event per key and eviction step, listing every member it removed in `leaves`
    /// (split to stay within `events.max_bytes`).
    Batch,
}

impl EventShape {
    fn as_str(self) -> &'static str {
        match self {
            Self::Member => "member",
            Self::Batch => "batch",
        }
    }
}

/// `sweeps.<name>.stream` and what goes with it: a durable log of the sweep's events, written
/// in the same atomic step as the removal.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    /// `sweeps.<name>.stream`: the stream key template (placeholders as in `channel`).
    pub key: ChannelTemplate,
    /// `sweeps.<name>.stream_maxlen`: `XADD ... MAXLEN ~`; 0 trims by length never.
    pub maxlen: u64,
    /// `sweeps.<name>.stream_retention`: `XTRIM ... MINID ~` that long before Redis's now.
    pub retention: Option<Duration>,
    /// `sweeps.<name>.stream_ttl`: the key TTL refreshed at each append, as configured.
    pub ttl: Option<Duration>,
    /// The enabled `[webhooks.<name>]` that receive this sweep's events, by name: each append
    /// marks its stream due for each of them, in the same script call.
    pub webhooks: Vec<String>,
}

impl Stream {
    /// The key TTL in effect: `stream_ttl`; else, for a per-conversation stream, the retention
    /// or a day; a fixed stream (whose consumer groups live in it) gets none.
    pub fn effective_ttl(&self) -> Option<Duration> {
        match (self.ttl, self.key.is_fixed()) {
            (Some(ttl), _) => Some(ttl),
            (None, true) => None,
            (None, false) => Some(self.retention.unwrap_or(DEFAULT_STREAM_TTL)),
        }
    }
}

/// `sweeps.<name>.stream_maxlen` unless set.
const DEFAULT_STREAM_MAXLEN: u64 = 10_000;

/// Where a sweep publishes unless its `channel` says otherwise.
const DEFAULT_CHANNEL: &str = "presence:{conversation_id}:events";

/// `[sweeps.<name>]`: one kind of presence set and what to do with its zombies. Every setting
/// is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The table name; also the metric label and the roster field of events.
    pub name: String,
    /// `sweeps.<name>.match`: SCAN glob whose single `*` is the conversation id.
    pub pattern: KeyPattern,
    /// `sweeps.<name>.ttl`: how old a score may get before its member is a zombie.
    pub ttl: Duration,
    /// `sweeps.<name>.schedule`: when walks run where notifications are not in use.
    pub schedule: Schedule,
    /// `sweeps.<name>.event`: the `type` of published events.
    pub event: String,
    /// `sweeps.<name>.channel`: where events are published.
    pub channel: ChannelTemplate,
    /// `sweeps.<name>.score_unit`: the unit of the scores the application writes.
    pub score_unit: ScoreUnit,
    /// `sweeps.<name>.event_shape`: one event per member, or per eviction step.
    pub event_shape: EventShape,
    /// `sweeps.<name>.stream` and its settings; `None` publishes on the channel only.
    pub stream: Option<Stream>,
    /// `sweeps.<name>.enabled`: false keeps the sweep configured but idle.
    pub enabled: bool,
    /// `[sweeps.<name>.storm_guard]`: holding mass evictions.
    pub storm_guard: storm::Settings,
}

impl Sweep {
    /// Reads every `[sweeps.<name>]` table, ordered by name.
    pub(super) fn read_all(sweeps: &mut Table, redis: &Redis) -> Result<Vec<Self>, ConfigError> {
        let mut names: Vec<String> = sweeps.map.keys().cloned().collect();
        names.sort();
        let mut all = Vec::with_capacity(names.len());
        for name in names {
            let mut t = sweeps.table(&name)?;
            check_name(&name, &t)?;
            let sweep = Self::read(name, &mut t)?;
            sweep.check_slots(&t, redis)?;
            all.push(sweep);
            t.finish()?;
        }
        Ok(all)
    }

    fn read(name: String, t: &mut Table) -> Result<Self, ConfigError> {
        let mut cfg = Self {
            name,
            // Placeholders for the required keys, which reading sets or refuses as missing.
            pattern: KeyPattern::parse("*").expect("one star"),
            ttl: Duration::ZERO,
            schedule: Schedule::Every(Duration::ZERO),
            event: String::new(),
            // Defaults for the optional keys of a sweep a file adds.
            channel: ChannelTemplate::new(DEFAULT_CHANNEL),
            score_unit: ScoreUnit::Seconds,
            event_shape: EventShape::Member,
            stream: None,
            enabled: true,
            storm_guard: storm::Settings::default(),
        };
        section::read(t, Self::KEYS, &mut cfg)?;
        if cfg.stream.is_none() {
            for key in ["stream_maxlen", "stream_retention", "stream_ttl"] {
                if t.was_read(key) {
                    return Err(t.invalid_key(key, "needs `stream` to be set"));
                }
            }
        }
        let mut guard = t.table("storm_guard")?;
        section::read(&mut guard, Self::STORM_GUARD_KEYS, &mut cfg)?;
        guard.finish()?;
        Ok(cfg)
    }

    /// In a cluster, one script call removes members and appends to the stream (and, with
    /// `redis.sharded_pubsub`, publishes), so all of it must share the key's slot.
    fn check_slots(&self, t: &Table, redis: &Redis) -> Result<(), ConfigError> {
        let Some(stream) = &self.stream else {
            return Ok(());
        };
        if redis.mode != RedisMode::Cluster {
            return Ok(());
        }
        same_slot(&self.pattern, &stream.key).map_err(|e| t.invalid_key("stream", &e))?;
        if redis.sharded_pubsub {
            same_slot(&self.pattern, &self.channel).map_err(|e| {
                t.invalid_key(
                    "channel",
                    &format!("with a stream and redis.sharded_pubsub the script publishes: {e}"),
                )
            })?;
        }
        Ok(())
    }

    /// This sweep's tables in the effective configuration.
    pub(super) fn write_toml(&self, out: &mut String) {
        section::write(out, &format!("sweeps.{}", self.name), Self::KEYS, self);
        let header = format!("sweeps.{}.storm_guard", self.name);
        section::write(out, &header, Self::STORM_GUARD_KEYS, self);
    }

    const KEYS: &[Key<Self>] = &[
        Key {
            name: "match",
            read: |t, k, s| {
                let glob = t.string(k)?;
                s.pattern =
                    KeyPattern::parse(&glob.value).map_err(|e| glob.invalid(&e.to_string()))?;
                Ok(())
            },
            show: |s| Shown::text(s.pattern.glob()),
        },
        Key {
            name: "ttl",
            read: |t, k, s| {
                let ttl = t.duration_field(k, MAX_TTL)?;
                if ttl.value < MIN_TTL {
                    return Err(ttl.invalid(
                        "must be at least 1s: within a shorter window a heartbeat's round trip, \
                         a busy Redis or the check's own batching would make users who are \
                         there look gone",
                    ));
                }
                s.ttl = ttl.value;
                Ok(())
            },
            show: |s| Shown::duration(s.ttl),
        },
        Key {
            name: "schedule",
            read: |t, k, s| {
                let text = t.string(k)?;
                s.schedule =
                    Schedule::parse(&text.value).map_err(|e| text.invalid(&e.to_string()))?;
                Ok(())
            },
            show: |s| Shown::text(&s.schedule.to_string()),
        },
        Key {
            name: "event",
            read: |t, k, s| {
                let event = t.string(k)?;
                if event.value.is_empty() {
                    return Err(event.invalid("must not be empty"));
                }
                s.event = event.value;
                Ok(())
            },
            show: |s| Shown::text(&s.event),
        },
        Key {
            name: "channel",
            read: |t, k, s| {
                match t.optional_string(k)? {
                    Some(c) if c.value.is_empty() => return Err(c.invalid("must not be empty")),
                    Some(c) => s.channel = ChannelTemplate::new(&c.value),
                    None => {}
                }
                Ok(())
            },
            show: |s| Shown::text(&s.channel.to_string()),
        },
        Key {
            name: "score_unit",
            read: |t, k, s| {
                let Some(unit) = t.optional_string(k)? else {
                    return Ok(());
                };
                s.score_unit = match unit.value.as_str() {
                    "seconds" | "s" => ScoreUnit::Seconds,
                    "milliseconds" | "ms" => ScoreUnit::Milliseconds,
                    _ => {
                        return Err(unit.invalid(
                            "must be \"seconds\" (or \"s\") or \"milliseconds\" (or \"ms\")",
                        ));
                    }
                };
                Ok(())
            },
            show: |s| Shown::text(s.score_unit.as_str()),
        },
        Key {
            name: "event_shape",
            read: |t, k, s| {
                let Some(shape) = t.optional_string(k)? else {
                    return Ok(());
                };
                s.event_shape = match shape.value.as_str() {
                    "member" => EventShape::Member,
                    "batch" => EventShape::Batch,
                    _ => return Err(shape.invalid("must be \"member\" or \"batch\"")),
                };
                Ok(())
            },
            show: |s| Shown::text(s.event_shape.as_str()),
        },
        Key {
            name: "stream",
            read: |t, k, s| {
                match t.optional_string(k)? {
                    Some(c) if c.value.is_empty() => return Err(c.invalid("must not be empty")),
                    Some(c) => {
                        s.stream = Some(Stream {
                            key: ChannelTemplate::new(&c.value),
                            maxlen: DEFAULT_STREAM_MAXLEN,
                            retention: None,
                            ttl: None,
                            webhooks: Vec::new(),
                        });
                    }
                    None => {}
                }
                Ok(())
            },
            show: |s| Shown::optional(s.stream.as_ref().map(|c| c.key.to_string()).as_deref()),
        },
        Key {
            name: "stream_maxlen",
            read: |t, k, s| {
                let n = t.optional_integer(k, 0, 1_000_000_000)?;
                if let (Some(n), Some(stream)) = (n, &mut s.stream) {
                    stream.maxlen = n as u64;
                }
                Ok(())
            },
            show: |s| match &s.stream {
                Some(stream) => Shown::plain(stream.maxlen),
                None => Shown::Unset,
            },
        },
        Key {
            name: "stream_retention",
            read: |t, k, s| {
                let d = t.optional_duration(k, MAX_STREAM_AGE)?;
                if let Some(stream) = &mut s.stream {
                    stream.retention = d;
                }
                Ok(())
            },
            show: |s| match s.stream.as_ref().and_then(|c| c.retention) {
                Some(d) => Shown::duration(d),
                None => Shown::Unset,
            },
        },
        Key {
            name: "stream_ttl",
            read: |t, k, s| {
                let d = t.optional_duration(k, MAX_STREAM_AGE)?;
                if let Some(stream) = &mut s.stream {
                    stream.ttl = d;
                }
                Ok(())
            },
            show: |s| match &s.stream {
                Some(c) => match (c.ttl, c.effective_ttl()) {
                    (Some(d), _) => Shown::duration(d),
                    (None, Some(d)) => {
                        Shown::duration(d).noted("a per-conversation stream's default")
                    }
                    (None, None) => Shown::Unset,
                },
                None => Shown::Unset,
            },
        },
        Key {
            name: "enabled",
            read: |t, k, s| {
                t.optional_bool(k)
                    .map(|v| s.enabled = v.unwrap_or(s.enabled))
            },
            show: |s| Shown::plain(s.enabled),
        },
    ];

    /// The keys of `[sweeps.<name>.storm_guard]`, read into the sweep, whose `ttl` the guard's
    /// `hold` follows unless set.
    const STORM_GUARD_KEYS: &[Key<Self>] = &[
        Key {
            name: "enabled",
            read: |t, k, s| {
                let g = &mut s.storm_guard;
                t.optional_bool(k)
                    .map(|v| g.enabled = v.unwrap_or(g.enabled))
            },
            show: |s| Shown::plain(s.storm_guard.enabled),
        },
        Key {
            name: "share",
            read: |t, k, s| {
                let g = &mut s.storm_guard;
                t.optional_number(k, 0.0, 1.0)
                    .map(|v| g.share = v.unwrap_or(g.share))
            },
            show: |s| Shown::Value(format!("{:?}", s.storm_guard.share)),
        },
        Key {
            name: "min_members",
            read: |t, k, s| {
                let g = &mut s.storm_guard;
                t.optional_integer(k, 0, i64::MAX)
                    .map(|v| g.min_members = v.map_or(g.min_members, |n| n as u64))
            },
            show: |s| Shown::plain(s.storm_guard.min_members),
        },
        Key {
            name: "hold",
            read: |t, k, s| {
                t.optional_duration(k, MAX_TTL)
                    .map(|d| s.storm_guard.hold = d)
            },
            show: |s| match s.storm_guard.hold {
                Some(hold) => Shown::duration(hold),
                None => Shown::duration(s.ttl).noted("the sweep's ttl"),
            },
        },
    ];
}

/// A sweep's name is a metric label and its events' roster field: plain, and no event field's.
fn check_name(name: &str, t: &Table) -> Result<(), ConfigError> {
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
    if RESERVED_NAMES.contains(&name) || name.ends_with("_base64") {
        return Err(t.invalid(
            format!("{name:?}"),
            "the sweep name is its events' roster field, and this one is already an event field",
        ));
    }
    Ok(())
}
