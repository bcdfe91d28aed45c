//! The command line of `presence-sweeper-tools`: the daemon's configuration flags, and the two
//! tools that write synthetic data.

use std::collections::HashMap;
use std::time::Duration;

use clap::{Parser, Subcommand};

use presence_sweeper_cli::ConfigFlags;
use presence_sweeper_cli::manual::{Manual, Section};
use presence_sweeper_config::Sources;

use crate::{demo, seed, simulate};

/// Tools for trying and measuring presence-sweeper on a Redis on this machine: `demo` shows it at
/// work with nothing set up, `seed` fills a Redis with a synthetic presence keyspace, `simulate`
/// runs live users against it and judges a sweeper running separately.
///
/// `seed` and `simulate` read the daemon's configuration (the same file, environment and flags),
/// so that they write the keys and listen on the channels of its sweeps, and refuse (exit 2) a
/// Redis that is not 127.0.0.1, ::1, localhost or a unix socket; `demo` brings its own.
/// `presence-sweeper stats`, which only reads, is in the daemon's binary.
#[derive(Debug, Parser)]
#[command(
    name = "presence-sweeper-tools",
    version = presence_sweeper_cli::version::LONG,
    propagate_version = true
)]
pub(crate) struct Cli {
    /// The configuration file and overrides of its keys.
    #[command(flatten)]
    pub(crate) config: ConfigFlags,

    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Fill a Redis on this machine with a synthetic presence keyspace, fast, for benchmarks and
    /// demos; print one summary line.
    ///
    /// Conversations `c1`..`cN` get one key each (the `--sweep`'s `match` with the `*` replaced)
    /// holding members `u1`..`uM`; exactly round(M x F) of them (half rounds up) are stale in
    /// every key, the others fresh, with scores from Redis TIME. Keys are written over on a
    /// rerun and never deleted. Refuses (exit 2) a Redis that is not 127.0.0.1, ::1, localhost
    /// or a unix socket.
    Seed(SeedArgs),
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
        options: SimulateArgs,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show presence-sweeper at work on this machine, with nothing set up: a private
    /// `redis-server` on a free port, the daemon beside it, and simulated users, some of whom
    /// vanish without a goodbye; print each leave as it arrives and a summary, then remove
    /// everything it started.
    ///
    /// Reads no configuration of yours: the demo's sweep has a 6 s window, so that vanished users
    /// leave within seconds. Ctrl-C ends it early, with the same clean-up. Exit 1 if the sweeper
    /// misbehaved (false leaves, duplicates, missed zombies); 2 if there is no redis-server.
    Demo(DemoArgs),
    // `completions <shell>`, and the hidden `man --dir DIR` that writes the man pages.
    #[command(flatten)]
    Manual(Manual),
}

/// The `demo` command's arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DemoArgs {
    /// The redis-server binary to run; default: the first on PATH.
    #[arg(long, value_name = "PATH")]
    pub(crate) redis_server: Option<std::path::PathBuf>,
    /// How long users vanish; the demo goes on 10 s more for the last leaves.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = positive_duration)]
    pub(crate) duration: Duration,
    /// Conversations.
    #[arg(long, value_name = "C", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) conversations: u32,
    /// Users per conversation.
    #[arg(long, value_name = "U", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) users: u32,
    /// Share of users who vanish per minute without a goodbye, 0 to 1 (they come back as new
    /// users).
    #[arg(long, value_name = "R", default_value_t = 0.3, value_parser = fraction)]
    pub(crate) vanish_rate: f64,
}

impl From<DemoArgs> for demo::DemoOptions {
    fn from(a: DemoArgs) -> Self {
        Self {
            redis_server: a.redis_server,
            duration: a.duration,
            conversations: a.conversations,
            users: a.users,
            vanish_rate: a.vanish_rate,
        }
    }
}

/// What the main man page says beyond the command line.
pub(crate) const MAN_SECTIONS: &[Section] = &[
    Section {
        heading: "EXIT STATUS",
        paragraphs: &[
            "0: done (simulate, demo: the sweeper behaved). 1: failure at run time, or simulate \
             or demo saw false evictions, duplicates, missed zombies or unexpected events. 2: bad \
             option or configuration, a Redis not on this machine, or no redis-server for the \
             demo.",
        ],
    },
    Section {
        heading: "ENVIRONMENT",
        paragraphs: &[
            "PRESENCE_SWEEPER_CONFIG and PRESENCE_SWEEPER__SECTION__KEY, as for \
             presence-sweeper(1): the tools read the daemon's configuration.",
        ],
    },
    Section {
        heading: "SEE ALSO",
        paragraphs: &["presence-sweeper(1), presence-sweeper-stats(1)."],
    },
];

impl Cli {
    /// The configuration sources these flags and `env` describe: the daemon's, but for the
    /// address it serves on, which no tool uses.
    pub(crate) fn sources(&self, env: HashMap<String, String>) -> Sources {
        self.config.sources(env, None)
    }
}

/// A number from 0 to 1.
fn fraction(text: &str) -> Result<f64, String> {
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
fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d.is_zero() => Err("must be more than 0".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// The `seed` command's arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SeedArgs {
    /// Conversations, one key each.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) conversations: u64,
    /// Members per key (a key of more than 20,000 members is written over several script calls).
    #[arg(long, value_name = "M", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub(crate) members: u32,
    /// Share of each key's members that are stale (older than the sweep's ttl), 0 to 1.
    #[arg(long, value_name = "F", default_value_t = 0.1, value_parser = fraction)]
    pub(crate) stale_fraction: f64,
    /// The sweep whose `match` and `score_unit` shape the keys.
    #[arg(long, value_name = "NAME", default_value = "online")]
    pub(crate) sweep: String,
    /// Also seed the `typing` sweep's keys for the same conversations (3 members each, the same
    /// stale share).
    #[arg(long)]
    pub(crate) typing: bool,
    /// Also write N unrelated keys (`cache:<n>` strings, `session:<n>` hashes), as a shared
    /// Redis has.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) noise: u64,
}

impl From<SeedArgs> for seed::SeedOptions {
    fn from(a: SeedArgs) -> Self {
        Self {
            conversations: a.conversations,
            members: a.members,
            stale_fraction: a.stale_fraction,
            sweep: a.sweep,
            typing: a.typing,
            noise: a.noise,
        }
    }
}

/// The `simulate` command's arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SimulateArgs {
    /// Conversations.
    #[arg(long, value_name = "C", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) conversations: u32,
    /// Live users per conversation.
    #[arg(long, value_name = "U", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) users: u32,
    /// Heartbeat period of every live user.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub(crate) heartbeat: Duration,
    /// Share of live users who vanish per minute without a leave (they stop heartbeating).
    #[arg(long, value_name = "R", default_value_t = 0.05, value_parser = fraction)]
    pub(crate) vanish_rate: f64,
    /// Vanished users do not come back; by default they return as new user ids, so the
    /// population stays steady.
    #[arg(long = "no-rejoin", action = clap::ArgAction::SetFalse)]
    pub(crate) rejoin: bool,
    /// Conversations opened per minute while users vanish, each a key that did not exist: its
    /// first user heartbeats once and leaves at once (a zombie in a brand-new key, judged on its
    /// own: `new_key_eviction_lag_seconds`), the others stay like any user.
    #[arg(long, value_name = "N", default_value_t = 0.0)]
    pub(crate) new_conversations: f64,
    /// Some users also type in bursts (a keystroke a second for a few seconds) on the `typing`
    /// sweep's keys.
    #[arg(long)]
    pub(crate) typing: bool,
    /// How long users vanish; the grace period follows.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = positive_duration)]
    pub(crate) duration: Duration,
    /// Time a zombie is given from its last heartbeat before it counts as missed; also how long
    /// the run goes on after `--duration` (with `--typing`, at least the typing sweep's ttl + 2 x
    /// schedule). Default: the sweep's ttl + 2 x schedule.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub(crate) grace: Option<Duration>,
    /// The sweep whose keys, ttl, score unit and channel are used.
    #[arg(long, value_name = "NAME", default_value = "online")]
    pub(crate) sweep: String,
}

impl From<SimulateArgs> for simulate::SimulateOptions {
    fn from(a: SimulateArgs) -> Self {
        Self {
            conversations: a.conversations,
            users: a.users,
            heartbeat: a.heartbeat,
            vanish_rate: a.vanish_rate,
            rejoin: a.rejoin,
            new_conversations: a.new_conversations,
            typing: a.typing,
            duration: a.duration,
            grace: a.grace,
            sweep: a.sweep,
        }
    }
}
