//! A batch's keys laid end to end in one buffer.
//!
//! A deadline check names a hundred keys or so. Built as a `Vec` each, they cost the daemon an
//! allocation, a copy into memory not yet in the cache and a free per key: about a tenth of its
//! CPU in a `perf` profile of scenario `live` on a slow hour. Here a batch takes two
//! allocations (more only where its keys outgrow the room reserved for them). In the index bench
//! (`cargo bench -p presence-sweeper-rules --bench index`, two runs alternating, 1,000,000 keys),
//! spelling the keys of each batch added per check:
//!
//! | keys as | ns a check, run 1, run 2 |
//! |---|---|
//! | a `Vec<u8>` each | 31, 49 |
//! | a `SmallVec<[u8; 64]>` each (`smallvec`) | 26, 29 |
//! | one buffer (this) | 5, 11 |
//!
//! against 61 to 65 ns a check for the index alone. In the daemon on a fast hour the saving
//! was within the noise of `benches/own_cost.py` (0.81 us a check, as before): a cache miss on
//! the id stays, wherever the key is spelled.

use std::fmt;

use crate::redact::Id;

/// Keys one after another in one buffer, each found by where it ends.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Keys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Keys {
    /// Room for `keys` keys of about `key_len` bytes each.
    pub fn with_capacity(keys: usize, key_len: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(keys.saturating_mul(key_len)),
            ends: Vec::with_capacity(keys),
        }
    }

    /// Appends the key made of `parts`, one after another.
    pub fn push_parts(&mut self, parts: &[&[u8]]) {
        for part in parts {
            self.bytes.extend_from_slice(part);
        }
        self.ends.push(self.bytes.len());
    }

    /// Appends `key`.
    pub fn push(&mut self, key: &[u8]) {
        self.push_parts(&[key]);
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The keys in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let key = &self.bytes[start..end];
            start = end;
            key
        })
    }
}

impl<K: AsRef<[u8]>> FromIterator<K> for Keys {
    fn from_iter<T: IntoIterator<Item = K>>(keys: T) -> Self {
        let mut all = Self::default();
        for key in keys {
            all.push(key.as_ref());
        }
        all
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(Escaped)).finish()
    }
}

/// A key as a log would show it ([`Id`]): keys hold conversation ids.
struct Escaped<'a>(&'a [u8]);

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", Id(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_each_key_whole_and_in_order() {
        let mut keys = Keys::with_capacity(2, 8);
        assert!(keys.is_empty());
        keys.push_parts(&[b"presence:", b"c1", b":online"]);
        keys.push(b"");
        keys.push(b"k\r\n\xff");
        assert_eq!(keys.len(), 3);
        let all: Vec<&[u8]> = keys.iter().collect();
        assert_eq!(all, [&b"presence:c1:online"[..], b"", b"k\r\n\xff"]);
        let again: Keys = all.iter().collect();
        assert_eq!(again, keys);
        assert_eq!(
            format!("{keys:?}"),
            r#"["presence:c1:online", "", "k\r\n\xff"]"#
        );
    }
}
