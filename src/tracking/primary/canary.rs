//! The canary: a sorted set of the daemon's own on each primary, whose one member the liveness
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

use crate::store::{Value, reply};

/// Every canary key starts so (the ACL needs `~presence-sweeper:canary:*` and `+zincrby`).
pub(crate) const PREFIX: &str = "presence-sweeper:canary:";
/// The member incremented.
pub(crate) const MEMBER: &[u8] = b"beat";
/// Slots in a Redis cluster.
const SLOTS: u16 = 16384;

/// The canary's key on a primary serving `slot` (`None`: not a cluster, any key will do).
pub(crate) fn key(slot: Option<u16>) -> Vec<u8> {
    let tag = slot.map_or_else(|| "0".to_owned(), tag_for);
    format!("{PREFIX}{{{tag}}}").into_bytes()
}

/// The shortest decimal hash tag whose slot is `slot` (every slot has one below 100,000).
fn tag_for(slot: u16) -> String {
    let slot = slot % SLOTS;
    (0u32..)
        .map(|n| n.to_string())
        .find(|t| key_slot(t.as_bytes()) == slot)
        .expect("every slot has a decimal tag")
}

/// Redis Cluster's slot of a hash tag: CRC16 (XMODEM: polynomial 0x1021, initial value 0)
/// modulo the number of slots.
fn key_slot(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

/// The first slot `CLUSTER SLOTS` (`slots`) gives the primary at `host`:`port`.
pub(crate) fn first_slot(slots: &Value, host: &str, port: u16) -> Option<u16> {
    let Value::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let Value::Array(fields) = range else {
            return None;
        };
        let (Some(Value::Int(lo)), Some(Value::Array(primary))) = (fields.first(), fields.get(2))
        else {
            return None;
        };
        let h = match primary.first()? {
            Value::BulkString(h) => String::from_utf8_lossy(h).into_owned(),
            Value::SimpleString(h) => h.clone(),
            _ => return None,
        };
        let p = reply::int(primary.get(1)?)?;
        (h == host && p == u64::from(port)).then(|| u16::try_from(*lo).ok())?
    })
}

/// What the canary's `ZINCRBY` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
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
pub(crate) enum WriteRefusal {
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
    pub(crate) fn of(code: &str) -> Option<Self> {
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
    pub(crate) fn code(self) -> &'static str {
        match self {
            Self::Oom => "OOM",
            Self::Misconf => "MISCONF",
            Self::ReadOnly => "READONLY",
            Self::Loading => "LOADING",
            Self::NoReplicas => "NOREPLICAS",
        }
    }
}

impl Reading {
    pub(crate) fn from_reply(v: &Value) -> Self {
        if reply::refusal(v).is_some() {
            return Self::Refused;
        }
        if let Value::ServerError(e) = v
            && let Some(refusal) = WriteRefusal::of(e.code())
        {
            return Self::WritesRefused(refusal);
        }
        match reply::float(v) {
            Some(n) if n.is_finite() && n >= 1.0 => Self::Count(n as u64),
            _ => Self::Unknown,
        }
    }
}

/// The `run_id` in an `INFO server` reply: it changes with every start of `redis-server`.
pub(crate) fn run_id(info: &Value) -> Option<String> {
    let text = match info {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    text.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // CLUSTER KEYSLOT foo is 12182; CRC16/XMODEM's check value (of "123456789") is 0x31C3.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 0x31C3 % SLOTS);
    }

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
    }

    #[test]
    fn replies_read_as_readings() {
        assert_eq!(
            Reading::from_reply(&Value::BulkString(b"42".to_vec())),
            Reading::Count(42)
        );
        assert_eq!(Reading::from_reply(&Value::Int(1)), Reading::Count(1));
        assert_eq!(Reading::from_reply(&Value::Nil), Reading::Unknown);
        for (code, refusal) in [
            ("OOM", WriteRefusal::Oom),
            ("MISCONF", WriteRefusal::Misconf),
            ("READONLY", WriteRefusal::ReadOnly),
            ("LOADING", WriteRefusal::Loading),
            ("NOREPLICAS", WriteRefusal::NoReplicas),
        ] {
            let line = format!("-{code} the server says no\r\n");
            let reply = crate::store::resp::Reader::new(line.as_bytes()).value();
            assert_eq!(
                reply.ok().flatten().map(|v| Reading::from_reply(&v)),
                Some(Reading::WritesRefused(refusal)),
                "{code}"
            );
        }
        let info =
            Value::BulkString(b"# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\n".to_vec());
        assert_eq!(run_id(&info).as_deref(), Some("abc123"));
    }
}
