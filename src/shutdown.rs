//! Turns SIGTERM and SIGINT into a cancelled [`CancellationToken`].

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Cancels `cancel` on the first SIGTERM or SIGINT. A second signal exits at once, for an
/// operator who does not want to wait for the drain.
pub fn cancel_on_signals(cancel: CancellationToken) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(
            signal = name,
            "shutting down: no new passes; finishing calls in flight"
        );
        cancel.cancel();
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::warn!(signal = name, "second signal: exiting without waiting");
        std::process::exit(1);
    });
    Ok(())
}
