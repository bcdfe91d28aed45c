//! Logging to stderr, as text or JSON lines, in a way that can never stop the daemon.
//!
//! Lines are handed to a writer thread (`tracing-appender`'s non-blocking writer) through a
//! bounded queue: a log reader that stalls (a full pipe, a slow journald) blocks that thread, not
//! the sweeps, and once `QUEUE_LINES` lines wait, new ones are dropped and counted. A write that
//! fails (a closed pipe, `EPIPE`; a full disk, `ENOSPC`) drops its line and is counted too: it
//! never reaches `tracing-subscriber`'s own error report, an `eprintln!` that would panic on the
//! same broken stderr and take the logging task with it. The metrics report both counts.

use presence_sweeper_config as config;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

use presence_sweeper_config::LogFormat;

/// Quietens dependencies that log routine chatter at INFO.
const QUIET: &str = "tokio_cron_scheduler=warn";

/// Most lines waiting for the writer thread: a few MB, minutes of a busy debug log.
const QUEUE_LINES: usize = 16_384;

/// What became of lines that could not be written, for the metrics.
#[derive(Debug, Clone, Default)]
pub struct LogStats {
    dropped: Option<ErrorCounter>,
    failed: Arc<AtomicU64>,
}

impl LogStats {
    /// Lines dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped
            .as_ref()
            .map_or(0, |c| c.dropped_lines() as u64)
    }

    /// Lines whose write to stderr failed.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

/// The installed logger: keep it until the end, then [`Logging::flush`].
#[derive(Debug)]
pub struct Logging {
    guard: Option<WorkerGuard>,
    /// What became of lines that could not be written.
    pub stats: LogStats,
}

impl Logging {
    /// Writes out what is queued (for about a second at most), at exit.
    pub fn flush(mut self) {
        if let Some(guard) = self.guard.take() {
            // The guard's drop may print to stdout if the writer is stuck, and printing panics
            // when stdout is gone too: an exit must not turn into a panic for that.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(guard)));
        }
    }
}

/// Installs the global subscriber. `log.level` was validated when the configuration loaded.
pub fn init(cfg: &config::Log) -> Logging {
    let filter = EnvFilter::builder()
        .parse(format!("{},{QUIET}", cfg.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let failed = Arc::new(AtomicU64::new(0));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUE_LINES)
        .thread_name("presence-sweeper-log")
        .finish(Stderr {
            failed: failed.clone(),
        });
    let stats = LogStats {
        dropped: Some(writer.error_counter()),
        failed,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .log_internal_errors(false);
    // A second init (tests running commands in one process) is harmless: keep the first.
    let _ = match cfg.format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Logging {
        guard: Some(guard),
        stats,
    }
}

/// Stderr that never fails: a line it cannot write is counted and dropped.
struct Stderr {
    failed: Arc<AtomicU64>,
}

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if std::io::stderr().write_all(buf).is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}
