//! The `presence-sweeper` binary: parses the command line, loads the configuration, runs the
//! command, and maps outcomes to exit codes (0 success, 1 failure at run time, 2 bad
//! configuration or usage).

use std::fmt::Display;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use presence_sweeper::cli::{Cli, Command};
use presence_sweeper::config::Config;
use presence_sweeper::daemon::Daemon;
use presence_sweeper::pass::PassOptions;
use presence_sweeper::seed::SeedOptions;
use presence_sweeper::simulate::SimulateOptions;
use presence_sweeper::systemd::Notifier;
use presence_sweeper::{http, logging, oneshot, seed, signals, simulate, stats};
use tokio_util::sync::CancellationToken;

// The sweeper allocates a buffer per RESP value it parses; mimalloc makes that markedly cheaper
// than glibc's allocator (measured with the benchmark in benches/).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EXIT_FAILURE: u8 = 1;
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    let config = match Config::load(&cli.sources(std::env::vars().collect())) {
        Ok(c) => c,
        Err(e) => return refused(format!("configuration error: {e}")),
    };
    let command = cli.command.take().unwrap_or(Command::Run);
    if let Command::CheckConfig = command {
        print!("{}", config.to_toml());
        eprintln!("presence-sweeper: configuration is valid");
        return ExitCode::SUCCESS;
    }
    if !matches!(command, Command::Healthcheck { .. }) {
        logging::init(&config.log);
    }
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
            Command::Run => run(config, cli).await,
            Command::Sweep { sweeps, dry_run } => sweep(&config, &sweeps, dry_run).await,
            Command::Healthcheck { timeout } => healthcheck(&config, timeout).await,
            Command::Seed(opts) => seed(&config, &opts).await,
            Command::Stats { sweeps, top, json } => report_stats(&config, &sweeps, top, json).await,
            Command::Simulate { options, json } => simulate(&config, &options, json).await,
            Command::CheckConfig => unreachable!("handled before the runtime starts"),
        }
    });
    outcome.unwrap_or_else(|e| failed(format!("{e:#}")))
}

/// Bad configuration or usage: exit 2.
fn refused(why: impl Display) -> ExitCode {
    eprintln!("presence-sweeper: {why}");
    ExitCode::from(EXIT_CONFIG)
}

/// Failure at run time: exit 1.
fn failed(why: impl Display) -> ExitCode {
    eprintln!("presence-sweeper: {why}");
    ExitCode::from(EXIT_FAILURE)
}

/// The daemon, until SIGTERM or SIGINT; SIGHUP re-reads the same sources.
async fn run(config: Config, cli: Cli) -> anyhow::Result<ExitCode> {
    let cancel = CancellationToken::new();
    let reloads = signals::install(cancel.clone())?;
    let listener = http::bind(config.http.listen).await?;
    let daemon = Daemon {
        config,
        listener,
        reloads,
        loader: Box::new(move || Config::load(&cli.sources(std::env::vars().collect()))),
        notifier: Arc::new(Notifier::from_env()),
    };
    daemon.run(cancel).await?;
    Ok(ExitCode::SUCCESS)
}

/// One pass of each selected sweep, a summary line each.
async fn sweep(config: &Config, names: &[String], dry_run: bool) -> anyhow::Result<ExitCode> {
    let selected = match oneshot::select(config, names) {
        Ok(s) => s,
        Err(e) => return Ok(refused(e)),
    };
    let cancel = CancellationToken::new();
    signals::install(cancel.clone())?;
    let opts = PassOptions {
        dry_run,
        ..PassOptions::default()
    };
    let reports = oneshot::run(config, &selected, opts, &cancel)
        .await
        .map_err(|e| anyhow::anyhow!("sweep failed: {e}"))?;
    for (name, report) in reports {
        println!("{}", oneshot::Summary::new(&name, &report, dry_run));
    }
    Ok(ExitCode::SUCCESS)
}

async fn healthcheck(config: &Config, timeout: std::time::Duration) -> anyhow::Result<ExitCode> {
    Ok(match http::check(config.http.listen, timeout).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => failed(format!("unhealthy: {why}")),
    })
}

async fn seed(config: &Config, opts: &SeedOptions) -> anyhow::Result<ExitCode> {
    let plan = match seed::plan(config, opts) {
        Ok(p) => p,
        Err(e) => return Ok(refused(e)),
    };
    let cancel = CancellationToken::new();
    signals::install(cancel.clone())?;
    let report = seed::run(&plan, &config.redis, &cancel)
        .await
        .map_err(|e| anyhow::anyhow!("seed failed: {e}"))?;
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}

async fn report_stats(
    config: &Config,
    names: &[String],
    top: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let selected = match oneshot::select(config, names) {
        Ok(s) => s,
        Err(e) => return Ok(refused(e)),
    };
    let report = stats::run(config, &selected, top)
        .await
        .map_err(|e| anyhow::anyhow!("stats failed: {e}"))?;
    print_report(&report, json)?;
    Ok(ExitCode::SUCCESS)
}

async fn simulate(config: &Config, opts: &SimulateOptions, json: bool) -> anyhow::Result<ExitCode> {
    let plan = match simulate::plan(config, opts) {
        Ok(p) => p,
        Err(e) => return Ok(refused(e)),
    };
    let cancel = CancellationToken::new();
    signals::install(cancel.clone())?;
    let report = simulate::run(&plan, &config.redis, &cancel)
        .await
        .map_err(|e| anyhow::anyhow!("simulate failed: {e}"))?;
    print_report(&report, json)?;
    // A benchmark script asserts on the exit code.
    Ok(if report.failed() {
        ExitCode::from(EXIT_FAILURE)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_report<T: Display + serde::Serialize>(report: &T, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}
