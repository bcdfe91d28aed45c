//! `[evict]`: how eviction work is cut into bounded batches and calls.

use super::section::{Key, Shown};

/// `[evict]`: bounds on the work of each batch and each call. Every setting is explained in the
/// shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evict {
    /// `evict.batch_keys`: keys of one sweep checked together (one read pipeline, then
    /// transactions of at most 100 keys for those holding zombies).
    pub batch_keys: usize,
    /// `evict.max_members_per_call`: members one transaction or script call removes at most,
    /// over all its keys; bounds each command's time in Redis.
    pub max_members_per_call: usize,
    /// `evict.pipeline_depth`: batches in flight at once per primary (over all its sweeps), and
    /// the least the in-flight window shrinks to.
    pub pipeline_depth: usize,
    /// `evict.max_pipeline_depth`: the most the in-flight window grows to while due keys wait
    /// for room; at or below `pipeline_depth`, the window stays at `pipeline_depth`.
    pub max_pipeline_depth: usize,
}

impl Evict {
    pub(super) const KEYS: &[Key<Self>] = &[
        Key {
            name: "batch_keys",
            read: |t, k, e| t.integer(k, 1, 10_000).map(|n| e.batch_keys = n as usize),
            show: |e| Shown::plain(e.batch_keys),
        },
        Key {
            name: "max_members_per_call",
            read: |t, k, e| {
                t.integer(k, 1, 100_000)
                    .map(|n| e.max_members_per_call = n as usize)
            },
            show: |e| Shown::plain(e.max_members_per_call),
        },
        Key {
            name: "pipeline_depth",
            read: |t, k, e| t.integer(k, 1, 256).map(|n| e.pipeline_depth = n as usize),
            show: |e| Shown::plain(e.pipeline_depth),
        },
        Key {
            name: "max_pipeline_depth",
            read: |t, k, e| {
                t.integer(k, 1, 1024)
                    .map(|n| e.max_pipeline_depth = n as usize)
            },
            show: |e| Shown::plain(e.max_pipeline_depth),
        },
    ];
}
