//! The `presence-sweeper` binary: parses the command line, loads the configuration, and maps
//! outcomes to exit codes (0 success, 1 failure at run time, 2 bad configuration or usage).

use std::process::ExitCode;

use clap::Parser;
use presence_sweeper::cli::{Cli, Command};
use presence_sweeper::config::Config;
use presence_sweeper::sweeper::PassOptions;
use presence_sweeper::{daemon, logging, oneshot, shutdown};
use tokio_util::sync::CancellationToken;

const EXIT_FAILURE: u8 = 1;
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli.sources(std::env::vars().collect())) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("presence-sweeper: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let command = cli.command.unwrap_or(Command::Run);
    if let Command::CheckConfig = command {
        print!("{}", config.to_toml());
        eprintln!("presence-sweeper: configuration is valid");
        return ExitCode::SUCCESS;
    }
    logging::init(&config.log);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("presence-sweeper: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    match runtime.block_on(execute(command, config)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("presence-sweeper: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

async fn execute(command: Command, config: Config) -> anyhow::Result<ExitCode> {
    let cancel = CancellationToken::new();
    shutdown::cancel_on_signals(cancel.clone())?;
    match command {
        Command::Run => {
            daemon::run(config, cancel).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sweep { sweeps, dry_run } => {
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
        Command::CheckConfig => unreachable!("handled before the runtime starts"),
    }
}
