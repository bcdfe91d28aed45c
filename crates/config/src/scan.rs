//! `[scan]`: how walks discover keys.

use super::section::{Key, Shown};

/// `[scan]`: discovery. Every setting is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// `scan.count`: the COUNT hint of each SCAN call.
    pub count: u32,
    /// `scan.max_keys_per_second`: cap on the keys a walk discovers per second (0 = no cap).
    pub max_keys_per_second: u32,
}

impl Scan {
    pub(super) const KEYS: &[Key<Self>] = &[
        Key {
            name: "count",
            read: |t, k, s| t.integer(k, 1, 1_000_000).map(|n| s.count = n as u32),
            show: |s| Shown::plain(s.count),
        },
        Key {
            name: "max_keys_per_second",
            read: |t, k, s| {
                t.integer(k, 0, 100_000_000)
                    .map(|n| s.max_keys_per_second = n as u32)
            },
            show: |s| Shown::plain(s.max_keys_per_second),
        },
    ];
}
