//! The `presence-sweeper` binary: parses the command line, loads the configuration, and maps
//! outcomes to exit codes (0 success, 1 failure at run time, 2 bad configuration or usage).

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use presence_sweeper::cli::{Cli, Command};
use presence_sweeper::config::Config;
use presence_sweeper::daemon::Daemon;
use presence_sweeper::notify::Notifier;
use presence_sweeper::seed::SeedOptions;
use presence_sweeper::simulate::SimulateOptions;
use presence_sweeper::sweeper::PassOptions;
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
        Err(e) => {
            eprintln!("presence-sweeper: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
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
        Err(e) => {
            eprintln!("presence-sweeper: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    match runtime.block_on(execute(command, config, cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("presence-sweeper: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

async fn execute(command: Command, config: Config, cli: Cli) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run => {
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
        Command::Sweep { sweeps, dry_run } => {
            let cancel = CancellationToken::new();
            signals::install(cancel.clone())?;
            let selected = match oneshot::select(&config, &sweeps) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("presence-sweeper: {e}");
                    return Ok(ExitCode::from(EXIT_CONFIG));
                }
            };
            let opts = PassOptions {
                dry_run,
                ..PassOptions::default()
            };
            let reports = oneshot::run(&config, &selected, opts, &cancel)
                .await
                .map_err(|e| anyhow::anyhow!("sweep failed: {e}"))?;
            for (name, r) in reports {
                let verb = if dry_run { "would_evict" } else { "evicted" };
                println!(
                    "{name}: keys_scanned={} keys={} members={} {verb}={} events_published={} seconds={:.3}{}",
                    r.keys_scanned,
                    r.keys,
                    r.members,
                    r.evicted,
                    r.events_published,
                    r.duration.as_secs_f64(),
                    if r.complete { "" } else { " (interrupted)" }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Healthcheck { timeout } => match http::check(config.http.listen, timeout).await {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(why) => {
                eprintln!("presence-sweeper: unhealthy: {why}");
                Ok(ExitCode::from(EXIT_FAILURE))
            }
        },
        Command::Seed {
            conversations,
            members,
            stale_fraction,
            sweep,
            typing,
            noise,
        } => {
            let opts = SeedOptions {
                conversations,
                members,
                stale_fraction,
                sweep,
                typing,
                noise,
            };
            let plan = match seed::plan(&config, &opts) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("presence-sweeper: {e}");
                    return Ok(ExitCode::from(EXIT_CONFIG));
                }
            };
            let cancel = CancellationToken::new();
            signals::install(cancel.clone())?;
            let report = seed::run(&plan, &config.redis, &cancel)
                .await
                .map_err(|e| anyhow::anyhow!("seed failed: {e}"))?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { sweeps, top, json } => {
            let selected = match oneshot::select(&config, &sweeps) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("presence-sweeper: {e}");
                    return Ok(ExitCode::from(EXIT_CONFIG));
                }
            };
            let report = stats::run(&config, &selected, top)
                .await
                .map_err(|e| anyhow::anyhow!("stats failed: {e}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Simulate {
            conversations,
            users,
            heartbeat,
            vanish_rate,
            rejoin: _,
            no_rejoin,
            typing,
            duration,
            grace,
            sweep,
            json,
        } => {
            let opts = SimulateOptions {
                conversations,
                users,
                heartbeat,
                vanish_rate,
                rejoin: !no_rejoin,
                typing,
                duration,
                grace,
                sweep,
            };
            let plan = match simulate::plan(&config, &opts) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("presence-sweeper: {e}");
                    return Ok(ExitCode::from(EXIT_CONFIG));
                }
            };
            let cancel = CancellationToken::new();
            signals::install(cancel.clone())?;
            let report = simulate::run(&plan, &config.redis, &cancel)
                .await
                .map_err(|e| anyhow::anyhow!("simulate failed: {e}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            // A benchmark script asserts on the exit code.
            Ok(if report.failed() {
                ExitCode::from(EXIT_FAILURE)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::CheckConfig => unreachable!("handled before the runtime starts"),
    }
}
