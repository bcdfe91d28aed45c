//! The daemon-wide settings every primary's loop works by, apart from the loop so that the
//! parts that do its I/O read them without reaching into it.

use std::time::Duration;

use presence_sweeper_config as config;

/// The daemon-wide settings every primary's loop works by.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoopSettings {
    pub(crate) scan: config::Scan,
    pub(crate) evict: config::Evict,
    pub(crate) tracking: config::Tracking,
    /// `redis.command_timeout`: bounds subscription round trips.
    pub(crate) command_timeout: Duration,
    /// The loop turns at least this often (a quarter of the systemd watchdog's period, at
    /// most [`super::ALIVE_EVERY`]).
    pub(crate) alive_every: Duration,
}
