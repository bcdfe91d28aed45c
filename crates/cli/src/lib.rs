//! What presence-sweeper's two binaries (the daemon's and `presence-sweeper-tools`) share at
//! their edge, and only they know: the flags that locate the configuration, the process's
//! environment, exit codes and the lines that go with them, the version, and the manual.
//!
//! - this module: [`ConfigFlags`], [`environment`], and [`Program`], a binary's voice on
//!   stderr and its exit codes;
//! - [`version`]: what the binaries were built from;
//! - [`manual`]: man pages and shell completions, generated from each binary's command line.

pub mod manual;
pub mod version;

use std::collections::HashMap;
use std::fmt::Display;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use presence_sweeper_config::{CONFIG_VAR, Overrides, Sources};

/// Exit code of a failure at run time.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of bad configuration or usage.
pub const EXIT_CONFIG: u8 = 2;

/// The flags every binary takes to find and override its configuration, global to every
/// subcommand. A binary flattens them into its own command line.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigFlags {
    /// TOML configuration file (layered over the built-in defaults).
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = CONFIG_VAR
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
}

/// The system's configuration file, read when nothing names another: where the Debian package
/// and `docs/install.md` put it, and where the systemd unit points.
pub const SYSTEM_CONFIG: &str = "/etc/presence-sweeper/presence-sweeper.toml";

impl ConfigFlags {
    /// The configuration sources these flags and `env` describe; `http_listen` is the
    /// daemon's own override of `http.listen`. Without `--config` (or `PRESENCE_SWEEPER_CONFIG`)
    /// the system's file is read where it exists ([`SYSTEM_CONFIG`]).
    pub fn sources(&self, env: HashMap<String, String>, http_listen: Option<String>) -> Sources {
        self.sources_with(env, http_listen, Path::new(SYSTEM_CONFIG))
    }

    /// [`ConfigFlags::sources`], with the system's file at `system`.
    fn sources_with(
        &self,
        env: HashMap<String, String>,
        http_listen: Option<String>,
        system: &Path,
    ) -> Sources {
        let system_file = self.config.is_none() && system.exists();
        Sources {
            file: self
                .config
                .clone()
                .or_else(|| system_file.then(|| system.to_owned())),
            system_file,
            env,
            overrides: Overrides {
                redis_url: self.redis_url.clone(),
                log_format: self.log_format.clone(),
                log_level: self.log_level.clone(),
                http_listen,
            },
        }
    }
}

/// The process's environment. A variable whose name or value is not UTF-8 cannot be one of
/// ours, and must not abort the process as `std::env::vars` would.
pub fn environment() -> HashMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// A binary's voice: lines on stderr prefixed with its name, and the exit codes that go with
/// them (0 success, 1 failure at run time, 2 bad configuration or usage).
#[derive(Debug, Clone, Copy)]
pub struct Program(pub &'static str);

impl Program {
    /// A line on stderr, after the program's name.
    pub fn say(self, line: impl Display) {
        say(format_args!("{}: {line}", self.0));
    }

    /// Bad configuration or usage: exit 2.
    pub fn refused(self, why: impl Display) -> ExitCode {
        self.say(why);
        ExitCode::from(EXIT_CONFIG)
    }

    /// Failure at run time: exit 1.
    pub fn failed(self, why: impl Display) -> ExitCode {
        self.say(why);
        ExitCode::from(EXIT_FAILURE)
    }
}

/// A line on stderr; a stderr that is gone (a closed pipe, a full disk) is not worth a panic.
pub fn say(line: impl Display) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// A command's output on stdout; failing to write it fails the command.
pub fn out(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| anyhow::anyhow!("cannot write the output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_file_is_read_unless_another_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("presence-sweeper.toml");
        let none = ConfigFlags::default();
        let s = none.sources_with(HashMap::new(), None, &system);
        assert_eq!(
            (s.file, s.system_file),
            (None, false),
            "no system file: defaults"
        );
        std::fs::write(&system, "").unwrap();
        let s = none.sources_with(HashMap::new(), None, &system);
        assert_eq!((s.file, s.system_file), (Some(system.clone()), true));
        let named = ConfigFlags {
            config: Some(PathBuf::from("/srv/other.toml")),
            ..ConfigFlags::default()
        };
        let s = named.sources_with(HashMap::new(), None, &system);
        assert_eq!(
            (s.file, s.system_file),
            (Some(PathBuf::from("/srv/other.toml")), false)
        );
    }
}
