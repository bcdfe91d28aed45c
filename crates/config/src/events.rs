//! `[events]`: the events published for evicted members.

use super::section::{Key, Shown};

/// `[events]`. Every setting is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Events {
    /// `events.max_bytes`: the longest event; the roster is cut to fit, the removed member's id
    /// never.
    pub max_bytes: usize,
}

impl Events {
    pub(super) const KEYS: &[Key<Self>] = &[Key {
        name: "max_bytes",
        read: |t, k, e| {
            t.integer(k, 1024, 512 * 1024 * 1024)
                .map(|n| e.max_bytes = n as usize)
        },
        show: |e| Shown::plain(e.max_bytes),
    }];
}
