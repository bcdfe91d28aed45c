//! What a read of a batch of keys found, key by key: the facts every decision about a key starts
//! from. The daemon's reads produce them; the rules never read anything themselves.

use std::num::NonZeroU64;

/// One key as read; fields the read did not ask for are 0 or `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KeyRead {
    /// Members below the cutoff, when the read counted them.
    pub stale: u64,
    /// Members.
    pub card: u64,
    /// The lowest score, in the score unit; `None` for an empty (or missing) set.
    pub oldest: Option<f64>,
    /// The highest score, when asked for.
    pub newest: Option<f64>,
    /// Milliseconds until the key itself expires (a deadline probe's `PTTL`), at least 1; `None` without
    /// a key TTL, or when the Redis user may not run `PTTL`. Non-zero so that the read stays 64
    /// bytes: at 72, building one called `memset`, 28 instructions per key read (callgrind).
    pub expires_in: Option<NonZeroU64>,
    /// The longest id the read brought back (the lowest and highest members), in bytes: what
    /// a check sizes its calls by before any eviction taught it.
    pub id_bytes: usize,
}

/// What a deadline check asks of a key besides its lowest score, from what its index knew of
/// it. A read costs Redis about as much per command as per key (`benches/probe_cost.py`): of
/// the three commands a key used to cost (`ZRANGE`, `ZCARD`, `PTTL`), a key of one member
/// needs one at most checks, whether or not it carries a TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probing {
    /// One member at its last read: `ZRANGE key 0 1 WITHSCORES` reads its lowest score and
    /// tells its size (0, 1, or more, which a `ZCARD` then counts) in one command.
    pub single: bool,
    /// Read when the key itself expires (`PTTL`): at its first check; of a key that carries a
    /// TTL, at the check before its checks could reach its end; of a key without one, at a
    /// sample of its checks (one in [`Probing::TTL_SAMPLE`]), so that a TTL set later is found.
    pub ttl: bool,
}

impl Probing {
    /// What is asked of a key nothing is known of: its size and TTL too.
    pub const FULL: Self = Self {
        single: false,
        ttl: true,
    };
    /// Key `i`'s of `probing`, one per key of a batch; a batch without (not a deadline
    /// check's) reads every key in full.
    pub fn of(probing: &[Probing], i: usize) -> Self {
        probing.get(i).copied().unwrap_or(Self::FULL)
    }

    /// One check in this many of a key without a TTL reads its TTL anyway (each key counts
    /// its own checks).
    pub const TTL_SAMPLE: u32 = 32;
}

/// What became of one key's read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyStatus {
    /// A sorted set (a missing key reads as an empty one).
    Set(KeyRead),
    /// No longer a sorted set.
    NotZset,
    /// In a cluster, the key's slot is served by another primary now (MOVED, ASK).
    Moved,
}

impl KeyStatus {
    /// The read, if the key is a sorted set here.
    pub fn set(self) -> Option<KeyRead> {
        match self {
            Self::Set(read) => Some(read),
            _ => None,
        }
    }
}

/// The keys as read, and for a read that asked `TIME` first, Redis's clock just before, in Unix
/// seconds.
#[derive(Debug)]
pub struct Reads {
    pub keys: Vec<KeyStatus>,
    pub time: Option<f64>,
    /// Keys whose `PTTL` the ACL refused: read without their expiry.
    pub pttl_refused: u32,
}
