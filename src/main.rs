//! The `presence-sweeper` binary: parses the command line, loads the configuration, runs the
//! command, and maps outcomes to exit codes (0 success, 1 failure at run time, 2 bad
//! configuration or usage).

use std::fmt::Display;
use std::process::ExitCode;
use std::sync::Arc;

mod cli;

use clap::{CommandFactory as _, Parser};
use cli::{Cli, Command};
use presence_sweeper::pass;
use presence_sweeper::pass::command;
use presence_sweeper::serve::BuildInfo;
use presence_sweeper::serve::daemon::{Daemon, EXIT_DEADLINE};
use presence_sweeper::serve::logging::LogStats;
use presence_sweeper::serve::systemd::Notifier;
use presence_sweeper::serve::web_config::Web;
use presence_sweeper::serve::{http, logging, signals};
use presence_sweeper::stats;
use presence_sweeper_cli::{Program, environment, out, say, version};
use presence_sweeper_config::{Config, ConfigError};
use tokio_util::sync::CancellationToken;

// The sweeper allocates a buffer per RESP value it parses; mimalloc makes that markedly cheaper
// than glibc's allocator (measured with the benchmark in benches/).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// This binary's voice on stderr.
const ME: Program = Program("presence-sweeper");

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    // Describing the binary needs no configuration: it works wherever the package is built.
    if let Some(Command::Manual(manual)) = &cli.command {
        return match manual.run(Cli::command(), cli::MAN_SECTIONS, &mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => failed(e),
        };
    }
    let env = environment();
    let config = match Config::load(&cli.sources(env.clone())) {
        Ok(c) => c,
        Err(e) => return refused(format!("configuration error: {e}")),
    };
    let unknown = config.unknown_variables(&env);
    let command = cli.command.take().unwrap_or(Command::Run);
    // TLS and auth settings are configuration too: a bad file is refused (exit 2) before
    // anything starts, by every command that serves or calls the endpoint.
    let web = match Web::load(config.http.web_config_file.as_deref()) {
        Ok(w) => w,
        Err(e) => return refused(format!("configuration error: {e}")),
    };
    if let Command::CheckConfig = command {
        if !unknown.is_empty() {
            let e = ConfigError::UnknownVariables(unknown);
            return refused(format!("configuration error: {e}"));
        }
        if let Err(e) = out(&config.to_toml()) {
            return failed(e);
        }
        for advice in config.advice() {
            let kind = if advice.is_warning() {
                "warning"
            } else {
                "note"
            };
            say(format_args!("presence-sweeper: {kind}: {advice}"));
        }
        say(format_args!(
            "presence-sweeper: configuration is valid (read: {}; Redis: {})",
            config.provenance,
            config.redis.describe()
        ));
        return ExitCode::SUCCESS;
    }
    let logging =
        (!matches!(command, Command::Healthcheck { .. })).then(|| logging::init(&config.log));
    if matches!(command, Command::Run) {
        // Which Redis, from which file: an empty file or none at all means a local Redis.
        tracing::info!(
            read = %config.provenance,
            redis = %config.redis.describe(),
            "configuration in effect"
        );
    }
    for variable in &unknown {
        if logging.is_some() {
            tracing::warn!("{variable}");
        } else {
            say(format_args!("presence-sweeper: warning: {variable}"));
        }
    }
    // A risky pattern is said by every command that reads or changes the keyspace; the facts
    // (own keys left out) only where the daemon starts.
    for advice in config.advice() {
        match (&command, advice.is_warning()) {
            (Command::Healthcheck { .. }, _) => {}
            (_, true) => tracing::warn!("{advice}"),
            (Command::Run, false) => tracing::info!("{advice}"),
            (_, false) => {}
        }
    }
    let logs = logging
        .as_ref()
        .map(|l| l.stats.clone())
        .unwrap_or_default();
    // One thread: the work is waiting on Redis, and a single-threaded runtime spares the
    // cross-thread wake-ups a multi-threaded one pays for every reply.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return failed(format!("cannot start the async runtime: {e}")),
    };
    let outcome = runtime.block_on(async {
        match command {
            Command::Run => run(config, cli, logs).await,
            Command::Sweep { sweeps, dry_run } => sweep(&config, &sweeps, dry_run).await,
            Command::Healthcheck { timeout } => healthcheck(&config, &web, timeout).await,
            Command::Stats {
                sweeps,
                top,
                sample,
                json,
            } => report_stats(&config, &sweeps, top, sample, json).await,
            Command::CheckConfig | Command::Manual(_) => {
                unreachable!("handled before the runtime starts")
            }
        }
    });
    drop(runtime);
    // What is still queued goes out before the last word, so that it comes last.
    if let Some(logging) = logging {
        logging.flush();
    }
    outcome.unwrap_or_else(|e| failed(format!("{e:#}")))
}

/// Bad configuration or usage: exit 2.
fn refused(why: impl Display) -> ExitCode {
    ME.refused(why)
}

/// Failure at run time: exit 1.
fn failed(why: impl Display) -> ExitCode {
    ME.failed(why)
}

/// The daemon, until SIGTERM or SIGINT; SIGHUP re-reads the same sources.
async fn run(config: Config, cli: Cli, logs: LogStats) -> anyhow::Result<ExitCode> {
    let cancel = CancellationToken::new();
    let reloads = signals::install(cancel.clone(), EXIT_DEADLINE)?;
    let listener = http::bind(config.http.listen).await?;
    let daemon = Daemon {
        config,
        listener,
        reloads,
        loader: Box::new(move || Config::load(&cli.sources(environment()))),
        notifier: Arc::new(Notifier::from_env()),
        logs,
        build: BuildInfo {
            version: version::VERSION,
            revision: version::REVISION,
            rustc: version::rustc_release(),
        },
    };
    daemon.run(cancel).await?;
    Ok(ExitCode::SUCCESS)
}

/// One pass of each selected sweep, a summary line each.
async fn sweep(config: &Config, names: &[String], dry_run: bool) -> anyhow::Result<ExitCode> {
    let selected = match config.select_sweeps(names) {
        Ok(s) => s,
        Err(e) => return Ok(refused(e)),
    };
    // Which Redis is about to change, before anything does (on stderr: stdout is the summaries).
    say(format_args!(
        "presence-sweeper: sweeping {} ({}): {}",
        config.redis.describe(),
        if dry_run {
            "dry run: nothing is changed"
        } else {
            "evicting and publishing"
        },
        selected
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let cancel = CancellationToken::new();
    signals::install(cancel.clone(), EXIT_DEADLINE)?;
    let reports = command::run(config, &selected, pass::Options::new(dry_run), &cancel)
        .await
        .map_err(|e| anyhow::anyhow!("sweep failed: {e}"))?;
    for (name, report) in reports {
        out(&format!(
            "{}\n",
            command::SummaryLine::new(&name, &report, dry_run)
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn healthcheck(
    config: &Config,
    web: &Web,
    timeout: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    Ok(
        match http::healthcheck(config.http.listen, timeout, web).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(why) => failed(format!("unhealthy: {why}")),
        },
    )
}

async fn report_stats(
    config: &Config,
    names: &[String],
    top: usize,
    sample: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let selected = match config.select_sweeps(names) {
        Ok(s) => s,
        Err(e) => return Ok(refused(e)),
    };
    let report = stats::run(config, &selected, top, sample)
        .await
        .map_err(|e| anyhow::anyhow!("stats failed: {e}"))?;
    print_report(&report, json)?;
    Ok(ExitCode::SUCCESS)
}

fn print_report<T: Display + serde::Serialize>(report: &T, json: bool) -> anyhow::Result<()> {
    if json {
        out(&format!("{}\n", serde_json::to_string_pretty(report)?))
    } else {
        out(&report.to_string())
    }
}
