//! The canary: a sorted set of the daemon's own on each primary, whose one member the standing
//! probe increments (`ZINCRBY`) about once a second. Its reply is a counter that only grows
//! while Redis keeps its data; a reply lower than the last one seen means what Redis holds was
//! reset or rewound (FLUSHALL, a restart from an older snapshot, a failover to a lagging
//! replica), so members' scores may be older than their apps' last heartbeats.
//!
//! One member shared by every sweeper on the primary: others' increments only make the counter
//! grow faster, and a rewind to before this daemon's last reading still shows as a lower reply.
//! The key carries a hash tag chosen so that, in a cluster, it lives on the primary it watches.
//! Its keyspace notification (`zincrby` on `__keyspace@<db>__:<key>`) is a sorted-set event
//! written about every second: proof that notifications flow from that primary.

#[cfg(test)]
use crate::slot::slot as key_slot;
use crate::slot::tag_for;

/// Every canary key starts so (the ACL needs `~presence-sweeper:canary:*` and `+zincrby`).
pub const PREFIX: &str = "presence-sweeper:canary:";
/// The member incremented.
pub const MEMBER: &[u8] = b"beat";

/// The canary's key on a primary serving `slot` (`None`: not a cluster, any key will do).
pub fn key(slot: Option<u16>) -> Vec<u8> {
    let tag = slot.map_or("0", tag_for);
    format!("{PREFIX}{{{tag}}}").into_bytes()
}

/// What the canary's `ZINCRBY` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// The counter after this increment.
    Count(u64),
    /// The ACL refused it: detection falls back to `run_id`.
    Refused,
    /// Redis refuses writes now: the apps' heartbeats fail as the canary does.
    WritesRefused(WriteRefusal),
    /// Any other answer (a cluster redirection after resharding, a script busy): no evidence.
    Unknown,
}

/// Why Redis refuses writes while it answers reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteRefusal {
    /// `maxmemory` reached under a `noeviction` policy: every write that may grow memory is
    /// refused (`ZADD`, `ZINCRBY`), while `ZREM` and reads go on.
    Oom,
    /// A background save failed with `stop-writes-on-bgsave-error yes`: every write is refused.
    Misconf,
    /// The server is a replica now (a failover demoted it).
    ReadOnly,
    /// The server is loading its data (a restart from RDB or AOF): it answers `TIME` and
    /// `INFO`, but takes no write until the load ends.
    Loading,
    /// `min-replicas-to-write` is not met: too few replicas answer.
    NoReplicas,
}

impl WriteRefusal {
    /// The refusal an error code says, if it is one.
    pub fn of(code: &str) -> Option<Self> {
        match code {
            "OOM" => Some(Self::Oom),
            "MISCONF" => Some(Self::Misconf),
            "READONLY" => Some(Self::ReadOnly),
            "LOADING" => Some(Self::Loading),
            "NOREPLICAS" => Some(Self::NoReplicas),
            _ => None,
        }
    }

    /// Redis's error code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Oom => "OOM",
            Self::Misconf => "MISCONF",
            Self::ReadOnly => "READONLY",
            Self::Loading => "LOADING",
            Self::NoReplicas => "NOREPLICAS",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slot_gets_a_key_that_lives_there() {
        for slot in [0, 1, 5460, 5461, 10922, 16383] {
            let k = key(Some(slot));
            let k = String::from_utf8(k).unwrap();
            let tag = k.split('{').nth(1).unwrap().trim_end_matches('}');
            assert_eq!(key_slot(tag.as_bytes()), slot, "{k}");
            assert!(k.starts_with(PREFIX));
        }
        assert_eq!(key(None), b"presence-sweeper:canary:{0}");
        // Out of every sweep's reach, whatever its `match`.
        assert!(PREFIX.starts_with(crate::pattern::OWN_NAMESPACE));
    }
}
