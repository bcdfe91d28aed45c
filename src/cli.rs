//! The command line: subcommands and global flags.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::config::{Overrides, Sources};
use crate::seed::SeedOptions;
use crate::simulate::SimulateOptions;

/// Evicts zombie members from Redis presence sorted sets and announces every eviction.
///
/// Discovers keys such as `presence:{conversation}:online` with SCAN, removes members whose score
/// (last heartbeat) fell out of the sweep's window, atomically and on Redis's clock, and publishes
/// one JSON event per removed member.
#[derive(Debug, Parser)]
#[command(name = "presence-sweeper", version, propagate_version = true)]
pub struct Cli {
    /// TOML configuration file (layered over the built-in defaults).
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "PRESENCE_SWEEPER_CONFIG"
    )]
    pub config: Option<PathBuf>,

    /// Redis URL, overriding `redis.url`. Prefer `redis.password_file` to a password here: the
    /// command line is visible to other users of the machine.
    #[arg(long, global = true, value_name = "URL")]
    pub redis_url: Option<String>,

    /// Log format, overriding `log.format`.
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,

    /// Log level or tracing filter, overriding `log.level` (e.g. `debug`).
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// What to do; `run` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: every enabled sweep on its schedule until SIGTERM or SIGINT.
    Run,
    /// Run every enabled sweep (or the named ones) once, print a summary line each, and exit.
    Sweep {
        /// A sweep to run, enabled or not; repeat for several. Default: every enabled sweep.
        #[arg(long = "sweep", value_name = "NAME")]
        sweeps: Vec<String>,
        /// Report what would be evicted; change nothing and publish nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Validate the configuration and print it in effect, secrets redacted; exit 0 or 2.
    CheckConfig,
    /// GET /healthz of the daemon at `http.listen`; exit 0 if it answers 200, else 1. For
    /// container HEALTHCHECKs, where there is no curl.
    Healthcheck {
        /// How long to wait for the answer.
        #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Fill a Redis on this machine with a synthetic presence keyspace, fast, for benchmarks and
    /// demos; print one summary line.
    ///
    /// Conversations `c1`..`cN` get one key each (the `--sweep`'s `match` with the `*` replaced)
    /// holding members `u1`..`uM`; exactly round(M x F) of them (half rounds up) are stale in
    /// every key, the others fresh, with scores from Redis TIME. Keys are written over on a
    /// rerun and never deleted. Refuses (exit 2) a Redis that is not 127.0.0.1, ::1, localhost
    /// or a unix socket.
    Seed(SeedOptions),
    /// Report the presence keyspace of every enabled sweep (or the named ones), read-only: keys,
    /// members, stale members, members per key, oldest heartbeat, largest conversations.
    ///
    /// Streams the keys with SCAN and sends only SCAN, ZCARD, ZCOUNT, ZRANGE and TIME; memory
    /// stays flat however large the keyspace. Works on any Redis.
    Stats {
        /// A sweep to report on, enabled or not; repeat for several. Default: every enabled sweep.
        #[arg(long = "sweep", value_name = "NAME")]
        sweeps: Vec<String>,
        /// How many of the largest conversations to list.
        #[arg(long, value_name = "K", default_value_t = 10)]
        top: usize,
        /// Print one JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Simulate live users against a Redis on this machine and judge a sweeper running
    /// separately: eviction lag, false evictions, duplicate events, missed zombies.
    ///
    /// Users heartbeat as the README tells apps to; some vanish without a leave. Every event on
    /// the sweep's channel is checked. After `--duration` nobody vanishes and the run goes on for
    /// `--grace`; then the keys it wrote are deleted. Exit 1 if there were false evictions,
    /// duplicates, missed zombies or unexpected events; 2 if Redis is not on this machine.
    Simulate {
        /// What to simulate.
        #[command(flatten)]
        options: SimulateOptions,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// A number from 0 to 1.
pub(crate) fn fraction(text: &str) -> Result<f64, String> {
    let x: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{x} is not between 0 and 1"))
    }
}

/// A duration such as `10s` or `250ms`, more than zero.
pub(crate) fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d.is_zero() => Err("must be more than 0".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

impl Cli {
    /// The configuration sources these flags and `env` describe.
    pub fn sources(&self, env: HashMap<String, String>) -> Sources {
        Sources {
            file: self.config.clone(),
            env,
            overrides: Overrides {
                redis_url: self.redis_url.clone(),
                log_format: self.log_format.clone(),
                log_level: self.log_level.clone(),
            },
        }
    }
}
