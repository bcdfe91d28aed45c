//! The names of an endpoint's delivery state in Redis, beside the streams.
//!
//! - `presence-sweeper:webhooks:<endpoint>:due`: a sorted set of the streams holding entries the
//!   endpoint has not had yet, each scored by when its oldest such entry was appended (ms). The
//!   stream script adds a stream (`ZADD NX`) in the same call that appends to it, so the set
//!   must live in the stream's hash slot: on a Redis Cluster there is one per slot,
//!   `presence-sweeper:webhooks:<endpoint>:due:{<tag>}`, where `<tag>` is the shortest number
//!   that hashes to the slot ([`tag_for`]).
//! - `presence-sweeper:webhooks:<endpoint>:at:<stream>`: a hash per due stream: `cursor` (the
//!   last entry done), `owner` and `until` (the replica that claimed it, and its lease).
//!
//! The state hash's name ends with the stream's, so it carries the stream's hash tag.

use presence_sweeper_rules::slot::{slot, tag_for};

/// The prefix of every key of the webhooks.
pub const KEY_PREFIX: &str = "presence-sweeper:webhooks:";

/// The due set of `endpoint`: the only one (`None`, a single server) or the one of a cluster's
/// hash slot.
pub fn due_key(endpoint: &str, in_slot: Option<u16>) -> String {
    match in_slot {
        None => format!("{KEY_PREFIX}{endpoint}:due"),
        Some(s) => format!("{KEY_PREFIX}{endpoint}:due:{{{}}}", tag_for(s)),
    }
}

/// The prefix that, followed by a stream's name, names the stream's state hash for `endpoint`.
pub fn state_prefix(endpoint: &str) -> String {
    format!("{KEY_PREFIX}{endpoint}:at:")
}

/// The due keys the stream script marks for a sweep delivered to `endpoints`, as it takes them:
/// space-separated (endpoint names hold no spaces). On a cluster, `in_slot` is the slot of the
/// call's keys.
pub fn due_keys_arg<'a>(
    endpoints: impl IntoIterator<Item = &'a String>,
    in_slot: Option<u16>,
) -> Vec<u8> {
    endpoints
        .into_iter()
        .map(|e| due_key(e, in_slot))
        .collect::<Vec<_>>()
        .join(" ")
        .into_bytes()
}

/// The slot of a stream's (or any) key.
pub fn slot_of(key: &[u8]) -> u16 {
    slot(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use presence_sweeper_rules::slot::SLOTS;

    #[test]
    fn names() {
        assert_eq!(due_key("crm", None), "presence-sweeper:webhooks:crm:due");
        assert_eq!(
            format!("{}presence:{{c42}}:log", state_prefix("crm")),
            "presence-sweeper:webhooks:crm:at:presence:{c42}:log"
        );
        let both = ["a".to_owned(), "b".to_owned()];
        assert_eq!(
            due_keys_arg(&both, None),
            b"presence-sweeper:webhooks:a:due presence-sweeper:webhooks:b:due"
        );
    }

    #[test]
    fn a_slots_due_set_lives_in_that_slot_and_so_does_a_streams_state() {
        for s in [0, 1, 866, 5460, 5461, 12_000, SLOTS - 1] {
            assert_eq!(slot(due_key("crm", Some(s)).as_bytes()), s);
        }
        let stream = b"presence:{c42}:log";
        let state = [state_prefix("crm").as_bytes(), stream].concat();
        let due = due_key("crm", Some(slot_of(stream)));
        assert_eq!(slot(&state), slot(stream));
        assert_eq!(slot(due.as_bytes()), slot(stream));
        // Tags are short: a key per slot costs little.
        assert!((0..SLOTS).all(|s| tag_for(s).len() <= 6));
    }
}
