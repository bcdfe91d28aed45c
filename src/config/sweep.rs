//! `[sweeps.<name>]`: what a sweep matches, how long its window is, when it runs, what it
//! announces.

use std::time::Duration;

use super::duration::MAX_TTL;
use super::error::ConfigError;
use super::schedule::Schedule;
use super::section::{self, Key, Shown};
use super::tree::Table;
use crate::config::pattern::{ChannelTemplate, KeyPattern};

/// Fields of every event, which a sweep's name (its roster field) must not shadow.
const RESERVED_NAMES: &[&str] = &[
    "type",
    "conversation_id",
    "user_id",
    "reason",
    "last_seen",
    "timestamp",
];

/// Where a sweep publishes unless its `channel` says otherwise.
const DEFAULT_CHANNEL: &str = "presence:{conversation_id}:events";

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

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Seconds => "seconds",
            Self::Milliseconds => "milliseconds",
        }
    }
}

/// `[sweeps.<name>]`: one kind of presence set and what to do with its zombies. Every setting
/// is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepConfig {
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
    /// `sweeps.<name>.enabled`: false keeps the sweep configured but idle.
    pub enabled: bool,
    /// `[sweeps.<name>.storm_guard]`: holding mass evictions.
    pub storm_guard: StormGuardConfig,
}

/// `[sweeps.<name>.storm_guard]`: holding mass evictions. Every setting is explained in the
/// shipped `config/presence-sweeper.toml`; the defaults here serve sweeps a file adds.
#[derive(Debug, Clone, PartialEq)]
pub struct StormGuardConfig {
    /// `sweeps.<name>.storm_guard.enabled`: whether the guard watches this sweep.
    pub enabled: bool,
    /// `sweeps.<name>.storm_guard.share`: the share of the sweep's members whose eviction
    /// within one ttl trips the guard.
    pub share: f64,
    /// `sweeps.<name>.storm_guard.min_members`: fewer evicted members never trip the guard.
    pub min_members: u64,
    /// `sweeps.<name>.storm_guard.hold`: how long evictions wait once it tripped; `None`
    /// follows the sweep's `ttl`.
    pub hold: Option<Duration>,
}

impl Default for StormGuardConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            share: 0.5,
            min_members: 100,
            hold: None,
        }
    }
}

impl SweepConfig {
    /// Reads every `[sweeps.<name>]` table, ordered by name.
    pub(super) fn read_all(sweeps: &mut Table) -> Result<Vec<Self>, ConfigError> {
        let mut names: Vec<String> = sweeps.map.keys().cloned().collect();
        names.sort();
        let mut all = Vec::with_capacity(names.len());
        for name in names {
            let mut t = sweeps.table(&name)?;
            check_name(&name, &t)?;
            all.push(Self::read(name, &mut t)?);
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
            enabled: true,
            storm_guard: StormGuardConfig::default(),
        };
        section::read(t, Self::KEYS, &mut cfg)?;
        let mut guard = t.table("storm_guard")?;
        section::read(&mut guard, Self::STORM_GUARD_KEYS, &mut cfg)?;
        guard.finish()?;
        Ok(cfg)
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
            read: |t, k, s| t.duration(k, MAX_TTL).map(|d| s.ttl = d),
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
