//! Redis Cluster's hash slots: which slot a key lives in, by its hash tag.

use std::sync::LazyLock;

/// Slots in a cluster.
pub const SLOTS: u16 = 16384;

/// The part of `key` Redis Cluster hashes: what lies between its first `{` and the next `}`
/// when that is not empty, else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The slot of `key`: CRC16 (XMODEM) of its [`hash_tag`], modulo [`SLOTS`].
pub fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) % SLOTS
}

/// A hash tag that puts a key in `slot`: the smallest number (in decimal) whose slot it is, so
/// that every replica names the same key for a slot (the canaries, the webhooks' due sets).
pub fn tag_for(slot: u16) -> &'static str {
    &TAGS[usize::from(slot % SLOTS)]
}

/// Found by counting up: all 16,384 slots are covered below 200,000 (a few ms, once).
static TAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut tags: Vec<Option<String>> = vec![None; usize::from(SLOTS)];
    let mut missing = tags.len();
    let mut n: u64 = 0;
    while missing > 0 {
        let tag = n.to_string();
        let at = usize::from(slot(tag.as_bytes()));
        if tags[at].is_none() {
            tags[at] = Some(tag);
            missing -= 1;
        }
        n += 1;
    }
    tags.into_iter().map(Option::unwrap_or_default).collect()
});

#[cfg(test)]
mod tests {
    use super::*;

    fn crc(bytes: &[u8]) -> u16 {
        crc16::State::<crc16::XMODEM>::calculate(bytes) % SLOTS
    }

    #[test]
    fn slots_match_redis_cluster() {
        // CLUSTER KEYSLOT answers these.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"presence:{c42}:online"), slot(b"c42"));
        assert_eq!(slot(b"{c42}:events"), slot(b"c42"));
        // An empty tag is no tag: the whole key counts.
        assert_eq!(slot(b"a{}b"), crc(b"a{}b"));
        assert_eq!(slot(b"a{b"), crc(b"a{b"));
        // CRC16/XMODEM's check value (of "123456789") is 0x31C3.
        assert_eq!(slot(b"123456789"), 0x31C3 % SLOTS);
    }

    #[test]
    fn the_hash_tag_is_the_first_non_empty_braces() {
        assert_eq!(hash_tag(b"presence:{c42}:online"), b"c42");
        assert_eq!(hash_tag(b"a{}b{c}"), b"a{}b{c}");
        assert_eq!(hash_tag(b"no tag"), b"no tag");
    }

    #[test]
    fn every_slot_has_a_short_tag_that_lands_in_it() {
        let mut largest = 0;
        for s in 0..SLOTS {
            assert_eq!(slot(tag_for(s).as_bytes()), s);
            largest = largest.max(tag_for(s).parse::<u32>().unwrap());
        }
        assert!(largest < 200_000, "{largest}");
    }
}
