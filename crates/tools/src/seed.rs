//! `presence-sweeper-tools seed`: fills a Redis on this machine with a synthetic presence
//! keyspace, for benchmarks and demos.
//!
//! Speed comes from doing the work in Redis: `seed.lua` writes a chunk of keys per call with
//! scores from Redis `TIME`, and a few calls are kept in flight so Redis never waits for us.
//! Conversations are `c1`..`cN`, members `u1`..`uM`. Every key gets exactly `round(M x F)` stale
//! members (half rounds up) rather than a random share, so a benchmark knows precisely what a pass
//! must evict. A rerun writes the same keys again (fresh scores), and nothing is ever deleted.

use presence_sweeper_config as config;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use futures_util::{StreamExt, TryStreamExt};
use presence_sweeper_redis::Conn;
use tokio_util::sync::CancellationToken;

use crate::loopback::{self, NotLoopback};
use presence_sweeper_config::KeyPattern;
use presence_sweeper_config::{Config, ScoreUnit, UnknownSweep};
use presence_sweeper_redis::Error;
use presence_sweeper_redis::{Opener, Store};

/// Members one script call writes at most, over all its keys: keeps each call to a few
/// milliseconds of Redis time.
const MEMBERS_PER_CALL: u64 = 20_000;
/// Keys one script call writes at most, so the KEYS list stays small.
const MAX_KEYS_PER_CALL: u64 = 2_000;
/// Script calls (or noise pipelines) in flight at once.
const IN_FLIGHT: usize = 4;
/// Noise keys per pipeline.
const NOISE_PER_PIPELINE: u64 = 1_000;
/// Members of each typing key (fewer when `--members` is smaller): few people type at once.
pub(crate) const TYPING_MEMBERS: u32 = 3;

/// What to seed, resolved from the `seed` command's arguments.
#[derive(Debug, Clone)]
pub(crate) struct SeedOptions {
    /// Conversations, one key each.
    pub(crate) conversations: u64,
    /// Members per key (a key of more than 20,000 members is written over several script calls).
    pub(crate) members: u32,
    /// Share of each key's members that are stale (older than the sweep's ttl), 0 to 1.
    pub(crate) stale_fraction: f64,
    /// The sweep whose `match` and `score_unit` shape the keys.
    pub(crate) sweep: String,
    /// Also seed the `typing` sweep's keys for the same conversations (3 members each, the same
    /// stale share).
    pub(crate) typing: bool,
    /// Also write N unrelated keys (`cache:<n>` strings, `session:<n>` hashes), as a shared
    /// Redis has.
    pub(crate) noise: u64,
}

/// Why seeding was refused before anything was written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SeedError {
    /// `--sweep` names no configured sweep.
    #[error(transparent)]
    UnknownSweep(#[from] UnknownSweep),
    /// `--typing` without a sweep called `typing`.
    #[error("--typing seeds the `typing` sweep's keys, but no sweep called `typing` is configured")]
    NoTypingSweep,
    /// `--stale-fraction` out of range.
    #[error("--stale-fraction must be between 0 and 1 (got {0})")]
    StaleFraction(f64),
    /// The Redis is not on this machine.
    #[error(transparent)]
    NotLoopback(#[from] NotLoopback),
}

/// One kind of key to fill.
#[derive(Debug, Clone)]
struct KeySet {
    sweep: String,
    pattern: KeyPattern,
    ttl: Duration,
    unit: ScoreUnit,
    members: u32,
    stale: u32,
}

/// A validated seeding job.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    conversations: u64,
    main: KeySet,
    typing: Option<KeySet>,
    noise: u64,
}

/// What was written.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SeedReport {
    /// The sweep whose keys were seeded.
    pub(crate) sweep: String,
    /// Keys written for it.
    pub(crate) keys: u64,
    /// Members written into them.
    pub(crate) members: u64,
    /// Of which stale.
    pub(crate) stale: u64,
    /// Typing keys written (`--typing`).
    pub(crate) typing_keys: u64,
    /// Members written into them.
    pub(crate) typing_members: u64,
    /// Of which stale.
    pub(crate) typing_stale: u64,
    /// Unrelated keys written (`--noise`).
    pub(crate) noise_keys: u64,
    /// Wall time.
    pub(crate) duration: Duration,
    /// False if Ctrl-C stopped it early.
    pub(crate) complete: bool,
}

impl fmt::Display for SeedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: keys={} members={} stale={} typing_keys={} typing_members={} typing_stale={} noise_keys={} seconds={:.3}{}",
            self.sweep,
            self.keys,
            self.members,
            self.stale,
            self.typing_keys,
            self.typing_members,
            self.typing_stale,
            self.noise_keys,
            self.duration.as_secs_f64(),
            if self.complete { "" } else { " (interrupted)" }
        )
    }
}

/// Stale members per key: `members x fraction`, half rounding up.
pub(crate) fn stale_count(members: u32, fraction: f64) -> u32 {
    (f64::from(members) * fraction).round() as u32
}

/// Checks the options against the configuration; refuses a Redis that is not on this machine.
pub(crate) fn plan(config: &Config, opts: &SeedOptions) -> Result<Layout, SeedError> {
    if !(0.0..=1.0).contains(&opts.stale_fraction) {
        return Err(SeedError::StaleFraction(opts.stale_fraction));
    }
    let main = config.select_sweeps(std::slice::from_ref(&opts.sweep))?[0];
    let typing = if opts.typing {
        let sweep = config
            .sweep(presence_sweeper_config::TYPING_SWEEP)
            .ok_or(SeedError::NoTypingSweep)?;
        Some(key_set(
            sweep,
            opts.members.min(TYPING_MEMBERS),
            opts.stale_fraction,
        ))
    } else {
        None
    };
    loopback::require(&config.redis, loopback::Topologies::Standalone)?;
    Ok(Layout {
        conversations: opts.conversations,
        main: key_set(main, opts.members, opts.stale_fraction),
        typing,
        noise: opts.noise,
    })
}

fn key_set(sweep: &config::Sweep, members: u32, fraction: f64) -> KeySet {
    KeySet {
        sweep: sweep.name.clone(),
        pattern: sweep.pattern.clone(),
        ttl: sweep.ttl,
        unit: sweep.score_unit,
        members,
        stale: stale_count(members, fraction),
    }
}

/// Connects (one attempt) and writes the planned keyspace. Ctrl-C (`cancel`) stops it between
/// calls.
pub(crate) async fn run(
    plan: &Layout,
    redis: &config::Redis,
    cancel: &CancellationToken,
) -> Result<SeedReport, Error> {
    let store = Store::connect_as(redis, Opener::Tool("seed")).await?;
    let started = Instant::now();
    let script = redis::Script::new(include_str!("seed.lua"));
    let mut con = store.connection();
    // Load once up front: otherwise every call in the first flight would hit NOSCRIPT.
    script.load_async(&mut con).await?;
    let mut report = SeedReport {
        sweep: plan.main.sweep.clone(),
        complete: true,
        ..SeedReport::default()
    };

    let keys = fill(&con, &script, &plan.main, plan.conversations, cancel).await?;
    report.keys = keys;
    report.members = keys * u64::from(plan.main.members);
    report.stale = keys * u64::from(plan.main.stale);
    report.complete &= keys == plan.conversations;

    if let Some(typing) = &plan.typing
        && report.complete
    {
        let keys = fill(&con, &script, typing, plan.conversations, cancel).await?;
        report.typing_keys = keys;
        report.typing_members = keys * u64::from(typing.members);
        report.typing_stale = keys * u64::from(typing.stale);
        report.complete &= keys == plan.conversations;
    }

    if plan.noise > 0 && report.complete {
        report.noise_keys = noise(&con, plan.noise, cancel).await?;
        report.complete &= report.noise_keys == plan.noise;
    }
    report.duration = started.elapsed();
    Ok(report)
}

/// Fills one key per conversation for `set`; returns how many keys were written.
async fn fill(
    con: &Conn,
    script: &redis::Script,
    set: &KeySet,
    conversations: u64,
    cancel: &CancellationToken,
) -> Result<u64, Error> {
    let members = u64::from(set.members.max(1));
    let per_call = (MEMBERS_PER_CALL / members).clamp(1, MAX_KEYS_PER_CALL);
    // A key with more members than one call writes is written in rank ranges over several calls.
    let ranks_per_call = members.min(MEMBERS_PER_CALL);
    let unit = match set.unit {
        ScoreUnit::Seconds => "s",
        ScoreUnit::Milliseconds => "ms",
    };
    let ttl = format!("{:?}", set.ttl.as_secs_f64());
    let calls = (0..conversations)
        .step_by(per_call as usize)
        .flat_map(|first| {
            (0..members)
                .step_by(ranks_per_call as usize)
                .map(move |r0| (first, r0))
        });
    futures_util::stream::iter(calls)
        .take_until(cancel.cancelled())
        .map(|(first, r0)| {
            let mut con = con.clone();
            let n = per_call.min(conversations - first);
            let r1 = (r0 + ranks_per_call).min(members);
            let mut call = script.prepare_invoke();
            for k in first..first + n {
                call.key(set.pattern.key(format!("c{}", k + 1).as_bytes()));
            }
            call.arg(set.members)
                .arg(set.stale)
                .arg(&ttl)
                .arg(unit)
                .arg(first)
                .arg(r0)
                .arg(r1);
            async move {
                let _: u64 = call.invoke_async(&mut con).await?;
                // Keys count once, with their last rank range.
                Ok::<u64, Error>(if r1 == members { n } else { 0 })
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_fold(0, |total, n| async move { Ok(total + n) })
        .await
}

/// Writes `count` unrelated keys: `cache:{n}` strings and `session:{n}` hashes, alternately.
async fn noise(con: &Conn, count: u64, cancel: &CancellationToken) -> Result<u64, Error> {
    let starts = (0..count).step_by(NOISE_PER_PIPELINE as usize);
    futures_util::stream::iter(starts)
        .take_until(cancel.cancelled())
        .map(|first| {
            let mut con = con.clone();
            let n = NOISE_PER_PIPELINE.min(count - first);
            let mut pipe = redis::pipe();
            for i in first + 1..=first + n {
                if i % 2 == 1 {
                    pipe.set(format!("cache:{i}"), format!("cached value {i}"));
                } else {
                    pipe.hset_multiple(
                        format!("session:{i}"),
                        &[("agent", "synthetic"), ("started", "0")],
                    );
                }
                pipe.ignore();
            }
            async move {
                pipe.query_async::<()>(&mut con).await?;
                Ok::<u64, Error>(n)
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_fold(0, |total, n| async move { Ok(total + n) })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_count_is_exact_and_rounds_half_up() {
        assert_eq!(stale_count(20, 0.1), 2);
        assert_eq!(stale_count(5, 0.5), 3);
        assert_eq!(stale_count(5, 0.1), 1);
        assert_eq!(stale_count(3, 0.1), 0);
        assert_eq!(stale_count(20, 0.0), 0);
        assert_eq!(stale_count(20, 1.0), 20);
    }

    #[test]
    fn report_line() {
        let r = SeedReport {
            sweep: "online".into(),
            keys: 10,
            members: 200,
            stale: 20,
            duration: Duration::from_millis(1500),
            complete: true,
            ..SeedReport::default()
        };
        assert_eq!(
            r.to_string(),
            "online: keys=10 members=200 stale=20 typing_keys=0 typing_members=0 typing_stale=0 noise_keys=0 seconds=1.500"
        );
    }
}
