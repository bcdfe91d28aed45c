//! A check of a batch of keys, as the rules see it: how it is to judge ([`CheckOpts`]), why it
//! runs ([`Purpose`]), and what it came to ([`Checked`], [`Counts`]). The check itself (read,
//! evict, announce) is the daemon's I/O.

use crate::plan::KeyState;

/// How one check runs.
#[derive(Debug, Clone, Copy)]
pub struct CheckOpts {
    /// The instant staleness is judged at, on Redis's clock, in Unix seconds: read from Redis a
    /// moment before, never ahead of it, and held back behind it while Redis is not answering
    /// or an outage's credit runs.
    pub judge_at: f64,
    /// Who asks, which decides what is read and whether the storm guard is asked.
    pub purpose: Purpose,
    /// While an outage's or a reset's credit runs, every member is spared until then (Redis's
    /// clock): its app gets a full ttl with Redis answering and holding its data.
    pub spare_until: Option<f64>,
}

/// Why a batch is checked. Each kind reads what it needs, so combinations that make no sense
/// (a guarded dry run, say) cannot be asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Purpose {
    /// A batch of a full pass (the `sweep` command): zombies counted with `ZCOUNT`, no storm
    /// guard.
    Pass {
        /// Count what would be evicted; change and publish nothing.
        dry_run: bool,
    },
    /// Keys a walk found that the deadline index cannot hold: counted with `ZCOUNT`, guarded.
    Walk {
        /// See [`Purpose::held_back`].
        held_back: bool,
    },
    /// Tracked keys whose deadline came: each key's lowest score is read for the index;
    /// guarded.
    Deadline {
        /// Read Redis's clock too (the caller's reading is getting old).
        read_time: bool,
        /// See [`Purpose::held_back`].
        held_back: bool,
    },
}

impl Purpose {
    /// Whether the sweep's storm guard is asked before evicting, and fed.
    pub fn guarded(self) -> bool {
        !matches!(self, Self::Pass { .. })
    }

    /// The judging instant is held back behind Redis's clock (Redis is not answering, or an
    /// outage's credit runs): the apps could not write meanwhile, so the storm guard reads no
    /// silence into it and starts no hold.
    pub fn held_back(self) -> bool {
        match self {
            Self::Walk { held_back } | Self::Deadline { held_back, .. } => held_back,
            Self::Pass { .. } => false,
        }
    }

    /// A guarded check whose instant is Redis's own: one that may start a storm hold.
    pub fn may_hold(self) -> bool {
        self.guarded() && !self.held_back()
    }

    /// Whether the check reads each key's lowest score for a deadline index.
    pub fn tracks(self) -> bool {
        matches!(self, Self::Deadline { .. })
    }

    /// Whether the check is a dry run: it counts, and changes nothing.
    pub fn dry_run(self) -> bool {
        matches!(self, Self::Pass { dry_run: true })
    }
}

/// What a check read of a key's own TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// The check did not ask ([`crate::read::Probing::ttl`]).
    Unread,
    /// It has none (or the Redis user may not read it).
    Never,
    /// It ends this many milliseconds after the read.
    In(u64),
}

impl Expiry {
    /// Milliseconds until the key ends, if the check read that it will.
    pub fn ms(self) -> Option<u64> {
        match self {
            Self::In(ms) => Some(ms),
            _ => None,
        }
    }
}

/// The outcome of one check.
#[derive(Debug)]
pub struct Checked<E> {
    pub counts: Counts,
    /// One per key, in the order given.
    pub states: Vec<KeyState>,
    /// Redis's clock at the read, when the read asked for it (a tracking check does).
    pub time: Option<f64>,
    /// One per key when the read was a tracking check's: what it read of the key's own TTL.
    /// The index looks at the key again when it ends.
    pub expires_in: Vec<Expiry>,
    /// The storm guard held this check's evictions until then (Redis's clock, Unix seconds):
    /// its stale keys are reported `Live` and should be looked at again at that instant.
    pub hold_until: Option<f64>,
    /// The first failure; what was done before it is counted and announced all the same.
    pub error: Option<E>,
}

/// What checks did, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// Sorted sets checked (keys that vanished or changed type are not counted).
    pub keys: u64,
    /// Members left in them.
    pub members: u64,
    /// Members removed (on a dry run: that would have been).
    pub evicted: u64,
    /// Events published.
    pub events_published: u64,
    /// Members removed whose events were not published (never sent, or refused).
    pub events_failed: u64,
    /// Members removed whose events were sent but not confirmed (the reply was lost).
    pub events_unconfirmed: u64,
}

impl Counts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: &Counts) {
        self.keys += other.keys;
        self.members += other.members;
        self.evicted += other.evicted;
        self.events_published += other.events_published;
        self.events_failed += other.events_failed;
        self.events_unconfirmed += other.events_unconfirmed;
    }
}
