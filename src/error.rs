//! The crate's error type: what can go wrong at run time, beside configuration errors, which
//! have their own type in [`crate::config`].

use crate::config::ConfigError;
use crate::schedule::ScheduleError;
use crate::store::reply::ReplyError;

/// Everything that can fail in presence-sweeper.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration was rejected.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Connecting to Redis failed.
    #[error("cannot connect to Redis at {url}: {source}")]
    Connect {
        /// The URL, password redacted.
        url: String,
        /// Why.
        source: redis::RedisError,
    },
    /// A Redis command failed.
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The Redis user may not run a command a pass needs (an ACL without it).
    #[error(
        "the Redis user may not run {command} on {target}: {detail} (the README lists the minimal ACL)"
    )]
    Permission {
        /// The command refused.
        command: String,
        /// The key or channel it was refused on.
        target: String,
        /// Redis's reason.
        detail: String,
    },
    /// Redis answered something of an unexpected shape.
    #[error(transparent)]
    Reply(#[from] ReplyError),
    /// A schedule could not be started.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// A local I/O operation failed (binding a socket, for instance).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: std::io::Error,
    },
}
