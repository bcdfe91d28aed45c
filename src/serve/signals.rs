//! Unix signals: SIGTERM and SIGINT shut down, SIGHUP asks for a configuration reload.

use std::io::Write as _;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Cancels `cancel` on the first SIGTERM or SIGINT; a second one exits at once, for an operator
/// who does not want to wait for the drain, and so does the process if it is still running
/// `exit_after` the first (a thread of its own sees to that, whatever the runtime is stuck on).
/// Each SIGHUP sends one item on the returned channel (several SIGHUPs arriving during one
/// reload fold into one more reload).
pub fn install(
    cancel: CancellationToken,
    exit_after: Duration,
) -> std::io::Result<mpsc::Receiver<()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let (reload_tx, reload_rx) = mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
                _ = hup.recv() => {
                    tracing::info!(signal = "SIGHUP", "reloading the configuration");
                    let _ = reload_tx.try_send(());
                    continue;
                }
            };
            if cancel.is_cancelled() {
                tracing::warn!(signal = name, "second signal: exiting without waiting");
                std::process::exit(1);
            }
            tracing::info!(
                signal = name,
                "shutting down: no new passes; finishing calls in flight"
            );
            cancel.cancel();
            std::thread::spawn(move || {
                std::thread::sleep(exit_after);
                let _ = writeln!(
                    std::io::stderr(),
                    "presence-sweeper: still running {exit_after:?} after {name}; exiting"
                );
                std::process::exit(1);
            });
        }
    });
    Ok(reload_rx)
}
