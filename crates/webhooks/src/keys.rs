//! The names of an endpoint's delivery state in Redis, beside the streams.
//!
//! - `presence-sweeper:webhooks:<endpoint>:due`: a sorted set of the streams holding entries the
//!   endpoint has not had yet, each scored by when its oldest such entry was appended (ms). The
//!   stream script adds a stream (`ZADD NX`) in the same call that appends to it.
//! - `presence-sweeper:webhooks:<endpoint>:at:<stream>`: a hash per due stream: `cursor` (the
//!   last entry done), `owner` and `until` (the replica that claimed it, and its lease).
//!
//! The state hash's name ends with the stream's, so it carries the stream's hash tag.

/// The prefix of every key of the webhooks.
pub const KEY_PREFIX: &str = "presence-sweeper:webhooks:";

/// The due set of `endpoint`.
pub fn due_key(endpoint: &str) -> String {
    format!("{KEY_PREFIX}{endpoint}:due")
}

/// The prefix that, followed by a stream's name, names the stream's state hash for `endpoint`.
pub fn state_prefix(endpoint: &str) -> String {
    format!("{KEY_PREFIX}{endpoint}:at:")
}

/// The due keys the stream script marks for a sweep delivered to `endpoints`, as it takes them:
/// space-separated (endpoint names hold no spaces).
pub fn due_keys_arg<'a>(endpoints: impl IntoIterator<Item = &'a String>) -> Vec<u8> {
    endpoints
        .into_iter()
        .map(|e| due_key(e))
        .collect::<Vec<_>>()
        .join(" ")
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(due_key("crm"), "presence-sweeper:webhooks:crm:due");
        assert_eq!(
            format!("{}presence:{{c42}}:log", state_prefix("crm")),
            "presence-sweeper:webhooks:crm:at:presence:{c42}:log"
        );
        let both = ["a".to_owned(), "b".to_owned()];
        assert_eq!(
            due_keys_arg(&both),
            b"presence-sweeper:webhooks:a:due presence-sweeper:webhooks:b:due"
        );
    }
}
