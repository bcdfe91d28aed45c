//! Logging to stderr, as text or JSON lines.

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Quietens dependencies that log routine chatter at INFO.
const QUIET: &str = "tokio_cron_scheduler=warn";

/// Installs the global subscriber. `log.level` was validated when the configuration loaded.
pub fn init(cfg: &LogConfig) {
    let filter = EnvFilter::builder()
        .parse(format!("{},{QUIET}", cfg.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests running commands in one process) is harmless: keep the first.
    let _ = match cfg.format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
