//! The command line: subcommands and global flags, and how they resolve into the library's
//! options. Only the binary knows this module.

use std::collections::HashMap;

use clap::{Parser, Subcommand};

use presence_sweeper_cli::ConfigFlags;
use presence_sweeper_cli::manual::{Manual, Section};
use presence_sweeper_config::Sources;

/// Evicts zombie members from Redis presence sorted sets and announces every eviction.
///
/// Knows every key such as `presence:{conversation}:online` (from keyspace notifications and SCAN
/// walks) and when its oldest member's window closes; at that instant removes the members whose
/// score (last heartbeat) fell out of the window, atomically and on Redis's clock, and publishes
/// one JSON event per removed member.
///
/// With no command it runs the daemon: `presence-sweeper` is `presence-sweeper run`. Without
/// `--config` it reads /etc/presence-sweeper/presence-sweeper.toml where that file exists, else
/// the built-in defaults (a Redis at redis://127.0.0.1:6379/0); `check-config` says which, and
/// so does the first line of the log.
///
/// `demo`, `seed` and `simulate`, which write synthetic data for demos and benchmarks, are in the
/// `presence-sweeper-tools` binary.
#[derive(Debug, Parser)]
#[command(
    name = "presence-sweeper",
    version = presence_sweeper_cli::version::LONG,
    propagate_version = true
)]
pub(crate) struct Cli {
    /// The configuration file and overrides of its keys.
    #[command(flatten)]
    pub(crate) config: ConfigFlags,

    /// Address of the metrics and health server, overriding `http.listen`.
    #[arg(
        long,
        global = true,
        value_name = "ADDR",
        visible_alias = "web.listen-address"
    )]
    pub(crate) http_listen: Option<String>,

    /// What to do; `run` when omitted.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the daemon (what no command means): every enabled sweep, its keys checked at their
    /// deadlines, until SIGTERM or SIGINT.
    Run,
    /// Run one full pass of every enabled sweep (or the named ones): every key checked; print a
    /// summary line each, and exit.
    ///
    /// The line: `keys_scanned` (what SCAN returned), `keys` (sorted sets checked), `members` (the
    /// members left in them after the eviction), `evicted`, `events_published`, `seconds`.
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
    /// Report the presence keyspace of every enabled sweep (or the named ones), read-only: keys,
    /// members, stale members, members per key, oldest heartbeat, largest conversations.
    ///
    /// Streams the keys with SCAN and sends only SCAN, ZCARD, ZCOUNT, ZRANGE and TIME (and
    /// CLIENT SETNAME, naming its connections); memory stays flat however large the keyspace.
    /// Works on any Redis.
    Stats {
        /// A sweep to report on, enabled or not; repeat for several. Default: every enabled sweep.
        #[arg(long = "sweep", value_name = "NAME")]
        sweeps: Vec<String>,
        /// How many of the largest conversations to list.
        #[arg(long, value_name = "K", default_value_t = 10)]
        top: usize,
        /// How many of the keys each sweep would sweep to list, as SCAN finds them.
        #[arg(long, value_name = "N", default_value_t = 5)]
        sample: usize,
        /// Print one JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    // `completions <shell>`, and the hidden `man --dir DIR` that writes the man pages.
    #[command(flatten)]
    Manual(Manual),
}

/// What the main man page says beyond the command line.
pub(crate) const MAN_SECTIONS: &[Section] = &[
    Section {
        heading: "EXIT STATUS",
        paragraphs: &[
            "0: success, or a clean shutdown. 1: failure at run time (Redis unreachable for a \
             one-shot command, the metrics address taken, a shutdown past its deadline). 2: bad \
             configuration or usage, named in one line on stderr.",
        ],
    },
    Section {
        heading: "ENVIRONMENT",
        paragraphs: &[
            "PRESENCE_SWEEPER_CONFIG: the configuration file, as --config.",
            "PRESENCE_SWEEPER__SECTION__KEY: any configuration key, e.g. \
             PRESENCE_SWEEPER__REDIS__URL=redis://10.0.0.5:6379/0; over the file, under the flags.",
        ],
    },
    Section {
        heading: "FILES",
        paragraphs: &[
            "/etc/presence-sweeper/presence-sweeper.toml: the configuration the systemd unit \
             reads. Its comments describe every setting; the built-in defaults are the same file.",
            "/etc/presence-sweeper/presence-sweeper.env: PRESENCE_SWEEPER__SECTION__KEY=value \
             lines for the systemd unit (mode 0600: it may hold credentials).",
            "/lib/systemd/system/presence-sweeper.service: the hardened systemd unit; the package \
             installs it disabled: point the configuration at your Redis, then systemctl enable \
             --now presence-sweeper.",
            "/usr/share/presence-sweeper/: the Prometheus alert rules and the Grafana dashboard.",
            "/usr/share/doc/presence-sweeper/: the README and the operations, configuration, \
             events and metrics documentation.",
        ],
    },
    Section {
        heading: "SEE ALSO",
        paragraphs: &[
            "presence-sweeper-tools(1): seed and simulate, to try and measure a sweeper on a Redis \
             of this machine.",
        ],
    },
];

impl Cli {
    /// The configuration sources these flags and `env` describe.
    pub(crate) fn sources(&self, env: HashMap<String, String>) -> Sources {
        self.config.sources(env, self.http_listen.clone())
    }
}
