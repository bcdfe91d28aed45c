//! `[coordination]`: several sweeper replicas on one Redis.

use std::time::Duration;

use super::duration::MAX_LEASE_TTL;
use super::section::{Key, Shown};

/// `[coordination]`. Every setting is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coordination {
    /// `coordination.lease`: only the replica holding a sweep's lease sweeps it.
    pub lease: bool,
    /// `coordination.lease_ttl`: how long a lease outlives its holder's last renewal.
    pub lease_ttl: Duration,
    /// `coordination.key_prefix`: lease keys are this prefix followed by the sweep name.
    pub key_prefix: String,
}

impl Coordination {
    pub(super) const KEYS: &[Key<Self>] = &[
        Key {
            name: "lease",
            read: |t, k, c| t.bool(k).map(|v| c.lease = v),
            show: |c| Shown::plain(c.lease),
        },
        Key {
            name: "lease_ttl",
            read: |t, k, c| {
                let ttl = t.duration_field(k, MAX_LEASE_TTL)?;
                if ttl.value < Duration::from_secs(1) {
                    // A lease is renewed a third of the way through: shorter leaves no margin.
                    return Err(ttl.invalid(
                        "must be at least 1s (it is renewed a third of the way through)",
                    ));
                }
                c.lease_ttl = ttl.value;
                Ok(())
            },
            show: |c| Shown::duration(c.lease_ttl),
        },
        Key {
            name: "key_prefix",
            read: |t, k, c| t.string(k).map(|v| c.key_prefix = v.value),
            show: |c| Shown::text(&c.key_prefix),
        },
    ];
}
