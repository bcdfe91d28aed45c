//! What a `simulate` run is: its options as given, checked against the configuration into a
//! [`Scenario`] (which sweep, how many users, how long, the grace a zombie gets).

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use presence_sweeper_config as config;
use presence_sweeper_config::{Config, UnknownSweep};

use crate::loopback::{self, NotLoopback};

/// Longest `--duration`: the run must end on its own.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// What to simulate, resolved from the `simulate` command's arguments.
#[derive(Debug, Clone)]
pub(crate) struct SimulateOptions {
    /// Conversations.
    pub(crate) conversations: u32,
    /// Live users per conversation.
    pub(crate) users: u32,
    /// Heartbeat period of every live user.
    pub(crate) heartbeat: Duration,
    /// Share of live users who vanish per minute without a leave (they stop heartbeating).
    pub(crate) vanish_rate: f64,
    /// Vanished users do not come back; by default they return as new user ids, so the
    /// population stays steady.
    pub(crate) rejoin: bool,
    /// Conversations opened per minute while users vanish, each a key that did not exist: its
    /// first user heartbeats once and leaves at once (a zombie in a brand-new key, judged on its
    /// own: `new_key_eviction_lag_seconds`), the others stay like any user.
    pub(crate) new_conversations: f64,
    /// Some users also type in bursts (a keystroke a second for a few seconds) on the `typing`
    /// sweep's keys.
    pub(crate) typing: bool,
    /// How long users vanish; the grace period follows.
    pub(crate) duration: Duration,
    /// Time a zombie is given from its last heartbeat before it counts as missed; also how long
    /// the run goes on after `--duration` (with `--typing`, at least the typing sweep's ttl + 2 x
    /// schedule). Default: the sweep's ttl + 2 x schedule.
    pub(crate) grace: Option<Duration>,
    /// The sweep whose keys, ttl, score unit and channel are used.
    pub(crate) sweep: String,
}

/// Why the simulation was refused before anything was written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SimulateError {
    /// `--sweep` names no configured sweep.
    #[error(transparent)]
    UnknownSweep(#[from] UnknownSweep),
    /// `--typing` without a sweep called `typing`.
    #[error(
        "--typing writes the `typing` sweep's keys, but no sweep called `typing` is configured"
    )]
    NoTypingSweep,
    /// An option out of range.
    #[error("{0}")]
    Invalid(String),
    /// The Redis is not on this machine.
    #[error(transparent)]
    NotLoopback(#[from] NotLoopback),
}

/// A validated simulation.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub(super) sweep: config::Sweep,
    pub(super) typing: Option<config::Sweep>,
    pub(super) conversations: u32,
    pub(super) users: u32,
    pub(super) heartbeat: Duration,
    pub(super) vanish_rate: f64,
    pub(super) rejoin: bool,
    pub(super) new_conversations: f64,
    pub(super) duration: Duration,
    pub(super) grace: Duration,
    pub(super) typing_grace: Duration,
    pub(super) run_id: String,
}

impl Scenario {
    /// How long the run goes on after `--duration`: enough for every zombie's verdict.
    pub(crate) fn tail(&self) -> Duration {
        match &self.typing {
            Some(_) => self.grace.max(self.typing_grace),
            None => self.grace,
        }
    }

    /// The conversation id prefix of this run, `sim-<run>-`.
    pub(crate) fn prefix(&self) -> String {
        format!("sim-{}-", self.run_id)
    }
}

/// Checks the options against the configuration; refuses a Redis that is not on this machine.
pub(crate) fn plan(config: &Config, opts: &SimulateOptions) -> Result<Scenario, SimulateError> {
    let invalid = |s: String| Err(SimulateError::Invalid(s));
    if !(0.0..=1.0).contains(&opts.vanish_rate) {
        return invalid(format!(
            "--vanish-rate must be between 0 and 1 (got {})",
            opts.vanish_rate
        ));
    }
    if opts.duration.is_zero() || opts.duration > MAX_DURATION {
        return invalid("--duration must be more than 0 and at most 24h".into());
    }
    if opts.heartbeat.is_zero() {
        return invalid("--heartbeat must be more than 0".into());
    }
    if !(0.0..=60_000.0).contains(&opts.new_conversations) {
        return invalid(format!(
            "--new-conversations must be between 0 and 60000 a minute (got {})",
            opts.new_conversations
        ));
    }
    let sweep = config.select_sweeps(std::slice::from_ref(&opts.sweep))?[0].clone();
    let typing = match opts.typing {
        true => Some(
            config
                .sweep(presence_sweeper_config::TYPING_SWEEP)
                .ok_or(SimulateError::NoTypingSweep)?
                .clone(),
        ),
        false => None,
    };
    let grace = match opts.grace {
        Some(g) => g,
        None => default_grace(&sweep).ok_or_else(|| {
            SimulateError::Invalid(format!(
                "sweep `{}` has a schedule that never runs again: give --grace",
                sweep.name
            ))
        })?,
    };
    if grace <= sweep.ttl {
        return invalid(format!(
            "--grace ({}) must be longer than the sweep's ttl ({}): it counts from the last heartbeat",
            humantime::format_duration(grace),
            humantime::format_duration(sweep.ttl)
        ));
    }
    let typing_grace = typing
        .as_ref()
        .map_or(Some(Duration::ZERO), default_grace)
        .ok_or_else(|| {
            SimulateError::Invalid("the `typing` sweep's schedule never runs again".into())
        })?;
    loopback::require(&config.redis, loopback::Topologies::StandaloneOrCluster)?;
    if config.redis.mode == presence_sweeper_config::RedisMode::Cluster
        && config.redis.sharded_pubsub
    {
        // Events published with SPUBLISH reach only the subscribers of their own channel on
        // their shard; the run listens with one PSUBSCRIBE, which hears cluster-wide PUBLISH.
        return Err(SimulateError::Invalid(
            "redis.sharded_pubsub = true in a cluster: simulate hears events published with \
             PUBLISH only"
                .into(),
        ));
    }
    Ok(Scenario {
        sweep,
        typing,
        conversations: opts.conversations,
        users: opts.users,
        heartbeat: opts.heartbeat,
        vanish_rate: opts.vanish_rate,
        rejoin: opts.rejoin,
        new_conversations: opts.new_conversations,
        duration: opts.duration,
        grace,
        typing_grace,
        run_id: format!("{:06x}", random_u64() & 0xff_ffff),
    })
}

/// ttl + 2 x schedule: the window, then a pass that may just have missed it, then the next.
fn default_grace(sweep: &config::Sweep) -> Option<Duration> {
    Some(sweep.ttl + 2 * sweep.schedule.interval()?)
}

/// A random seed from the standard library's per-process hash keys.
pub(crate) fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}
