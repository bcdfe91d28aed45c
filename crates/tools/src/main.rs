//! The `presence-sweeper-tools` binary: `demo`, `seed` and `simulate`, the tools that write
//! synthetic data into a Redis on this machine (the demo's own, private one), built apart from
//! the daemon so that the binary the image and the systemd unit run carries none of them. `seed`
//! and `simulate` read the daemon's configuration the same way; all map outcomes to the same
//! exit codes (0 success, 1 failure at run time, 2 bad configuration or usage).

use std::fmt::Display;
use std::process::ExitCode;

mod cli;
mod demo;
mod loopback;
mod seed;
mod simulate;

use clap::{CommandFactory as _, Parser};
use cli::{Cli, Command};
use presence_sweeper::serve::BuildInfo;
use presence_sweeper::serve::daemon::EXIT_DEADLINE;
use presence_sweeper::serve::{logging, signals};
use presence_sweeper_cli::{EXIT_FAILURE, Program, environment, out, version};
use presence_sweeper_config::Config;
use tokio_util::sync::CancellationToken;

// As the daemon's: `simulate` at 10,000 conversations is traffic for the benchmarks, and must
// not cost more CPU beside the daemon than it did when it was one of its commands.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// This binary's voice on stderr.
const ME: Program = Program("presence-sweeper-tools");

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Describing the binary needs no configuration: it works wherever the package is built.
    if let Command::Manual(manual) = &cli.command {
        return match manual.run(Cli::command(), cli::MAN_SECTIONS, &mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => failed(e),
        };
    }
    // The demo brings its own Redis and configuration: nothing of the operator's is read.
    if let Command::Demo(args) = &cli.command {
        return demo(&args.clone().into());
    }
    let env = environment();
    let config = match Config::load(&cli.sources(env.clone())) {
        Ok(c) => c,
        Err(e) => return refused(format!("configuration error: {e}")),
    };
    let logging = logging::init(&config.log);
    tracing::info!(
        read = %config.provenance,
        redis = %config.redis.describe(),
        "configuration in effect"
    );
    for variable in config.unknown_variables(&env) {
        tracing::warn!("{variable}");
    }
    // One thread, as the daemon: the work is waiting on Redis.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return failed(format!("cannot start the async runtime: {e}")),
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Seed(args) => seed(&config, &args.into()).await,
            Command::Simulate { options, json } => simulate(&config, &options.into(), json).await,
            Command::Manual(_) | Command::Demo(_) => {
                unreachable!("handled before the configuration is read")
            }
        }
    });
    drop(runtime);
    // What is still queued goes out before the last word, so that it comes last.
    logging.flush();
    outcome.unwrap_or_else(|e| failed(format!("{e:#}")))
}

/// The demo, start to end: its own quiet log, its own runtime, everything it started gone at
/// its end, Ctrl-C included.
fn demo(opts: &demo::DemoOptions) -> ExitCode {
    let log = presence_sweeper_config::Log {
        level: "warn".into(),
        ..presence_sweeper_config::Log::default()
    };
    let logging = logging::init(&log);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return failed(format!("cannot start the async runtime: {e}")),
    };
    let build = BuildInfo {
        version: version::VERSION,
        revision: version::REVISION,
        rustc: version::rustc_release(),
    };
    let outcome = runtime.block_on(async {
        let cancel = CancellationToken::new();
        signals::install(cancel.clone(), EXIT_DEADLINE)
            .map_err(|e| demo::DemoError::Daemon(format!("cannot handle signals: {e}")))?;
        demo::run(opts, build, &cancel).await
    });
    drop(runtime);
    logging.flush();
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_FAILURE),
        Err(e @ demo::DemoError::NoServer) => refused(e),
        Err(e) => failed(e),
    }
}

/// Bad configuration or usage: exit 2.
fn refused(why: impl Display) -> ExitCode {
    ME.refused(why)
}

/// Failure at run time: exit 1.
fn failed(why: impl Display) -> ExitCode {
    ME.failed(why)
}

async fn seed(config: &Config, opts: &seed::SeedOptions) -> anyhow::Result<ExitCode> {
    let plan = match seed::plan(config, opts) {
        Ok(p) => p,
        Err(e) => return Ok(refused(e)),
    };
    let cancel = CancellationToken::new();
    signals::install(cancel.clone(), EXIT_DEADLINE)?;
    let report = seed::run(&plan, &config.redis, &cancel)
        .await
        .map_err(|e| anyhow::anyhow!("seed failed: {e}"))?;
    out(&format!("{report}\n"))?;
    Ok(ExitCode::SUCCESS)
}

async fn simulate(
    config: &Config,
    opts: &simulate::SimulateOptions,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let plan = match simulate::plan(config, opts) {
        Ok(p) => p,
        Err(e) => return Ok(refused(e)),
    };
    let cancel = CancellationToken::new();
    signals::install(cancel.clone(), EXIT_DEADLINE)?;
    let report = match simulate::run(&plan, &config.redis, &cancel).await {
        Ok(r) => r,
        Err(e @ simulate::RunError::Refused(_)) => return Ok(refused(e)),
        Err(e) => anyhow::bail!("simulate failed: {e}"),
    };
    if json {
        out(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        out(&report.to_string())?;
    }
    // A benchmark script asserts on the exit code.
    Ok(if report.failed() {
        ExitCode::from(EXIT_FAILURE)
    } else {
        ExitCode::SUCCESS
    })
}
