//! `[tracking]`: the deadline index, and how it learns of keys.

use std::time::Duration;

use super::duration::MAX_INTERVAL;
use super::section::{Key, Shown};

/// `[tracking]`. Every setting is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tracking {
    /// `tracking.notifications`: whether keyspace notifications tell of new keys.
    pub notifications: NotificationMode,
    /// `tracking.configure_notifications`: turn keyspace notifications on where they are off.
    /// The daemon changes the server's configuration only when told to.
    pub configure_notifications: bool,
    /// `tracking.reconcile_interval`: with notifications in use, how often a walk of each
    /// primary checks the index against the keyspace (notifications are fire-and-forget).
    pub reconcile_interval: Duration,
    /// `tracking.max_keys`: most keys tracked in all; 0 tracks nothing.
    pub max_keys: usize,
}

/// `tracking.notifications`: whether to use keyspace notifications.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NotificationMode {
    /// Where the server has them on; report per primary whether they are in use.
    #[default]
    Auto,
    /// Expected on every primary: a primary without them is logged as a warning and alerted
    /// on (`presence_sweeper_notifications_expected`), and walks follow the schedule there.
    On,
    /// Never: walks follow each sweep's schedule.
    Off,
}

impl NotificationMode {
    /// The configuration value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

impl Tracking {
    pub(super) const KEYS: &[Key<Self>] = &[
        Key {
            name: "notifications",
            read: |t, k, c| {
                let mode = t.string(k)?;
                c.notifications = match mode.value.as_str() {
                    "auto" => NotificationMode::Auto,
                    "on" => NotificationMode::On,
                    "off" => NotificationMode::Off,
                    _ => return Err(mode.invalid("must be \"auto\", \"on\" or \"off\"")),
                };
                Ok(())
            },
            show: |c| Shown::text(c.notifications.as_str()),
        },
        Key {
            name: "configure_notifications",
            read: |t, k, c| t.bool(k).map(|v| c.configure_notifications = v),
            show: |c| Shown::plain(c.configure_notifications),
        },
        Key {
            name: "reconcile_interval",
            read: |t, k, c| {
                let d = t.duration_field(k, MAX_INTERVAL)?;
                if d.value < Duration::from_secs(1) {
                    return Err(d.invalid("must be at least 1s"));
                }
                c.reconcile_interval = d.value;
                Ok(())
            },
            show: |c| Shown::duration(c.reconcile_interval),
        },
        Key {
            name: "max_keys",
            read: |t, k, c| {
                t.integer(k, 0, 1_000_000_000)
                    .map(|n| c.max_keys = n as usize)
            },
            show: |c| Shown::plain(c.max_keys),
        },
    ];
}
