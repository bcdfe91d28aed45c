//! `[sweeps.<name>]`: what a sweep matches, how long its window is, when it runs, what it
//! announces.

use std::time::Duration;

use super::ConfigError;
use super::tree::Table;
use crate::config::pattern::{ChannelTemplate, KeyPattern};
use crate::tracking::schedule::Schedule;

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
    /// `[sweeps.<name>.storm_guard]`: holding mass evictions.
    pub storm_guard: StormGuardConfig,
}

/// `[sweeps.<name>.storm_guard]`: when the evictions due within one ttl would remove more than
/// `share` of the sweep's members (and at least `min_members`), they are held for `hold`.
#[derive(Debug, Clone, PartialEq)]
pub struct StormGuardConfig {
    /// `enabled` (default `true`): whether the guard watches this sweep.
    pub enabled: bool,
    /// `share` (default `0.5`): the share of the sweep's members whose eviction within one
    /// ttl trips the guard.
    pub share: f64,
    /// `min_members` (default `100`): below this many members evicted at once the guard never
    /// trips; a small sweep emptying is not a storm.
    pub min_members: u64,
    /// `hold` (default: the sweep's `ttl`): how long evictions wait once the guard tripped.
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

impl StormGuardConfig {
    fn from_table(t: &mut Table) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            enabled: t.optional_bool("enabled")?.unwrap_or(d.enabled),
            share: t.optional_number("share", 0.0, 1.0)?.unwrap_or(d.share),
            min_members: t
                .optional_integer("min_members", 0, i64::MAX)?
                .map_or(d.min_members, |n| n as u64),
            hold: t.optional_duration("hold")?,
        })
    }
}

impl SweepConfig {
    pub(super) fn from_table(name: String, t: &mut Table) -> Result<Self, ConfigError> {
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
        let storm_guard = {
            let mut g = t.table("storm_guard")?;
            let cfg = StormGuardConfig::from_table(&mut g)?;
            g.finish()?;
            cfg
        };
        Ok(SweepConfig {
            name,
            pattern,
            ttl,
            schedule,
            event: event.value,
            channel,
            score_unit,
            enabled,
            storm_guard,
        })
    }
}
