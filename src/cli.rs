//! The command line: subcommands and global flags.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{Overrides, Sources};

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
