//! The `webhook-id` of an event: `ps1_<first 16 bytes of SHA-256(stream key), hex>_<entry id>`.
//!
//! Made of the stream entry alone, so it is the same on every attempt, after a restart and on
//! every replica; the stream's hash keeps two streams' equal entry ids apart, and hides the
//! key (which names a conversation) from anyone who sees the header.

use std::fmt::Write as _;

/// The id's version prefix: a change of scheme gets a new one.
const PREFIX: &str = "ps1_";

/// The `webhook-id` of entry `entry` of stream `stream`.
pub fn webhook_id(stream: &[u8], entry: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, stream);
    let mut id = String::with_capacity(PREFIX.len() + 33 + entry.len());
    id.push_str(PREFIX);
    for b in &digest.as_ref()[..16] {
        let _ = write!(id, "{b:02x}");
    }
    id.push('_');
    id.push_str(entry);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_streams_hash_and_the_entry_id() {
        assert_eq!(
            webhook_id(b"presence:{c42}:log", "1764460046500-0"),
            "ps1_fbb9cca8fb803df3ea55910f43255cf2_1764460046500-0"
        );
        assert_eq!(
            webhook_id(b"presence-sweeper:leaves", "1-0"),
            "ps1_b0a9c6261a265615c9052a80fcc2e0d7_1-0"
        );
    }

    #[test]
    fn two_streams_with_one_entry_id_differ() {
        assert_ne!(webhook_id(b"a", "1-0"), webhook_id(b"b", "1-0"));
    }
}
