//! Why the daemon could not start or go on: its own setup, apart from the data path's
//! [`crate::Error`], which Redis's answers make and which never stops the daemon.

use crate::serve::web_config::WebConfigError;
use crate::tracking::schedule::TickerError;

/// A failure of the process's own setup: exit code 1 at start, or a reload refused.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The web config file (TLS and basic auth of the HTTP server) was rejected.
    #[error(transparent)]
    WebConfig(#[from] WebConfigError),
    /// A sweep's schedule could not be started.
    #[error(transparent)]
    Schedule(#[from] TickerError),
    /// A local I/O operation failed (binding the listener, for instance).
    #[error("{context}: {cause}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        cause: std::io::Error,
    },
}
