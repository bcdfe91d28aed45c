//! Key patterns (`presence:*:online`) and channel templates (`presence:{conversation_id}:events`).
//!
//! A sweep's `match` is a SCAN glob with exactly one `*`. Everything around the `*` is literal, so
//! the conversation id of a key is simply the bytes between the literal prefix and suffix. That
//! keeps ids containing `:` or glob characters intact, and works on keys that are not UTF-8.
//!
//! Keys under [`OWN_NAMESPACE`] are the daemon's own (its canary, its leases, its webhooks'
//! delivery state) and match no pattern, however broad: a sweep never evicts from them nor
//! announces them.

use std::fmt;

use crate::keys::Keys;
use crate::slot::hash_tag;

/// Why a `match` value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// No `*`, or more than one.
    #[error("needs exactly one `*` (found {0})")]
    WildcardCount(usize),
    /// A glob metacharacter other than the single `*`.
    #[error(
        "`{0}` is not allowed: only one `*` may be a wildcard, the rest of the pattern is literal"
    )]
    Metachar(char),
    /// A prefix inside the daemon's own namespace: the pattern could match only its keys.
    #[error(
        "`{OWN_NAMESPACE}` keys are the daemon's own (its canary, leases and webhook state): no sweep may match only them"
    )]
    Reserved,
}

/// The namespace of the daemon's own keys, which no sweep ever touches.
pub const OWN_NAMESPACE: &str = "presence-sweeper:";

/// A validated `match` glob: literal prefix, one `*`, literal suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPattern {
    glob: String,
    prefix_len: usize,
    suffix_len: usize,
    /// Whether keys of [`OWN_NAMESPACE`] fit the glob, so that matching must leave them out:
    /// only for a prefix that is the start of the namespace (`presence*`, `*`), so that the
    /// usual pattern pays nothing for it.
    reaches_own: bool,
}

impl KeyPattern {
    /// Parses a glob with exactly one `*` and no other glob metacharacters.
    pub fn parse(glob: &str) -> Result<Self, PatternError> {
        let stars = glob.matches('*').count();
        if stars != 1 {
            return Err(PatternError::WildcardCount(stars));
        }
        if let Some(c) = glob.chars().find(|c| matches!(c, '?' | '[' | ']' | '\\')) {
            return Err(PatternError::Metachar(c));
        }
        let star = glob.find('*').expect("counted one star above");
        let prefix = &glob[..star];
        if prefix.starts_with(OWN_NAMESPACE) {
            return Err(PatternError::Reserved);
        }
        Ok(Self {
            glob: glob.to_owned(),
            prefix_len: star,
            suffix_len: glob.len() - star - 1,
            reaches_own: OWN_NAMESPACE.starts_with(prefix),
        })
    }

    /// The glob as given, for `SCAN ... MATCH`.
    pub fn glob(&self) -> &str {
        &self.glob
    }

    /// The literal text before the `*`.
    pub fn prefix(&self) -> &[u8] {
        &self.glob.as_bytes()[..self.prefix_len]
    }

    /// The literal text after the `*`.
    pub fn suffix(&self) -> &[u8] {
        let glob = self.glob.as_bytes();
        &glob[glob.len() - self.suffix_len..]
    }

    /// Whether the daemon's own keys ([`OWN_NAMESPACE`]) fit the glob: they are left out.
    pub fn reaches_own_keys(&self) -> bool {
        self.reaches_own
    }

    /// Whether nothing literal follows the `*` (`presence:*`, `*`): the glob then fits every
    /// sorted set whose name starts with the prefix, not only presence keys.
    pub fn is_open_ended(&self) -> bool {
        self.suffix_len == 0
    }

    /// The conversation id of `key`: what the `*` matched. `None` if `key` does not match, or
    /// is one of the daemon's own.
    pub fn conversation_id<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        let (prefix, suffix) = (self.prefix(), self.suffix());
        if key.len() < prefix.len() + suffix.len()
            || !key.starts_with(prefix)
            || !key.ends_with(suffix)
            || (self.reaches_own && key.starts_with(OWN_NAMESPACE.as_bytes()))
        {
            return None;
        }
        Some(&key[prefix.len()..key.len() - suffix.len()])
    }

    /// The key of a conversation: the inverse of [`KeyPattern::conversation_id`].
    pub fn key(&self, conversation_id: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.key_len(conversation_id.len()));
        key.extend_from_slice(self.prefix());
        key.extend_from_slice(conversation_id);
        key.extend_from_slice(self.suffix());
        key
    }

    /// Appends the key of a conversation to `keys`, as [`KeyPattern::key`] spells it.
    pub fn push_key(&self, conversation_id: &[u8], keys: &mut Keys) {
        keys.push_parts(&[self.prefix(), conversation_id, self.suffix()]);
    }

    /// The length of a key whose conversation id is `id_len` bytes long.
    pub fn key_len(&self, id_len: usize) -> usize {
        self.prefix_len + self.suffix_len + id_len
    }
}

impl fmt::Display for KeyPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.glob)
    }
}

/// The placeholder of a channel or stream template for the conversation id.
pub const CONVERSATION_ID: &str = "{conversation_id}";

/// The placeholder of a channel or stream template for the presence key's hash tag, braces
/// included: `{c42}` for `presence:{c42}:online`, and the whole key in braces for a key without
/// one. A name that starts its hash tag with it hashes to the key's slot in a Redis Cluster.
pub const HASH_TAG: &str = "{hash_tag}";

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Text(String),
    ConversationId,
    HashTag,
}

/// A channel or stream name with `{conversation_id}` and `{hash_tag}` placeholders; any other
/// text, braces included, is literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelTemplate {
    template: String,
    /// The template split once: rendering runs for every event.
    segments: Vec<Segment>,
}

impl ChannelTemplate {
    /// Wraps a template; any text without a placeholder is a fixed name.
    pub fn new(template: &str) -> Self {
        let mut segments = Vec::new();
        let mut rest = template;
        loop {
            let next = [
                (
                    rest.find(CONVERSATION_ID),
                    CONVERSATION_ID,
                    Segment::ConversationId,
                ),
                (rest.find(HASH_TAG), HASH_TAG, Segment::HashTag),
            ]
            .into_iter()
            .filter_map(|(at, text, seg)| Some((at?, text, seg)))
            .min_by_key(|(at, ..)| *at);
            let Some((at, text, seg)) = next else {
                break;
            };
            if at > 0 {
                segments.push(Segment::Text(rest[..at].to_owned()));
            }
            segments.push(seg);
            rest = &rest[at + text.len()..];
        }
        if !rest.is_empty() {
            segments.push(Segment::Text(rest.to_owned()));
        }
        Self {
            template: template.to_owned(),
            segments,
        }
    }

    /// Whether every conversation gets a name of its own.
    pub fn is_fixed(&self) -> bool {
        self.segments.iter().all(|s| matches!(s, Segment::Text(_)))
    }

    /// The name for the key `key` of the conversation `conversation_id`, written into `out`
    /// (cleared first) to reuse its buffer.
    pub fn render_into(&self, key: &[u8], conversation_id: &[u8], out: &mut Vec<u8>) {
        out.clear();
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => out.extend_from_slice(text.as_bytes()),
                Segment::ConversationId => out.extend_from_slice(conversation_id),
                Segment::HashTag => {
                    out.push(b'{');
                    out.extend_from_slice(hash_tag(key));
                    out.push(b'}');
                }
            }
        }
    }

    /// The name for the key `key` of the conversation `conversation_id`.
    pub fn render(&self, key: &[u8], conversation_id: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.template.len() + key.len() + 2);
        self.render_into(key, conversation_id, &mut out);
        out
    }

    /// What decides the hash slot of the names this template makes.
    fn slot_source(&self) -> SlotSource {
        // The slot is decided by the first `{` of the name and the first `}` after it.
        let mut segments = self.segments.iter().peekable();
        while let Some(segment) = segments.next() {
            match segment {
                Segment::HashTag => return SlotSource::KeyTag,
                Segment::ConversationId => return SlotSource::Unknown,
                Segment::Text(text) => {
                    let Some(open) = text.find('{') else { continue };
                    let after = &text[open + 1..];
                    return match after.find('}') {
                        Some(0) => SlotSource::Unknown,
                        Some(close) => SlotSource::Fixed(after.as_bytes()[..close].to_vec()),
                        None if after.is_empty()
                            && segments.next() == Some(&Segment::ConversationId)
                            && matches!(segments.peek(), Some(Segment::Text(t)) if t.starts_with('}')) =>
                        {
                            SlotSource::ConversationId
                        }
                        None => SlotSource::Unknown,
                    };
                }
            }
        }
        SlotSource::Unknown
    }
}

/// What decides the hash slot of a key or of a name a template makes.
#[derive(Debug, PartialEq)]
enum SlotSource {
    /// A hash tag written in the pattern or template: one slot for all.
    Fixed(Vec<u8>),
    /// `{hash_tag}`: the key's own slot.
    KeyTag,
    /// The conversation id between braces (`presence:{*}:online`, `log:{{conversation_id}}`).
    ConversationId,
    /// The conversation id, or anything that cannot be told from the text alone.
    Unknown,
}

impl KeyPattern {
    fn slot_source(&self) -> SlotSource {
        let prefix = self.prefix();
        let Some(open) = prefix.iter().position(|&b| b == b'{') else {
            return SlotSource::Unknown;
        };
        let after = &prefix[open + 1..];
        match after.iter().position(|&b| b == b'}') {
            Some(0) => SlotSource::Unknown,
            Some(close) => SlotSource::Fixed(after[..close].to_vec()),
            None if after.is_empty() && self.suffix().starts_with(b"}") => {
                SlotSource::ConversationId
            }
            None => SlotSource::Unknown,
        }
    }
}

/// Whether every name `template` makes for a key of `pattern` provably hashes to that key's
/// slot in a Redis Cluster, as one script call needs. `Err` says how to make it so.
pub fn same_slot(pattern: &KeyPattern, template: &ChannelTemplate) -> Result<(), String> {
    let fixed_slot = |tag: &[u8]| crate::slot::slot(tag);
    match (pattern.slot_source(), template.slot_source()) {
        (_, SlotSource::KeyTag) | (SlotSource::ConversationId, SlotSource::ConversationId) => {
            Ok(())
        }
        (SlotSource::Fixed(a), SlotSource::Fixed(b)) if fixed_slot(&a) == fixed_slot(&b) => Ok(()),
        _ => Err(format!(
            "in a Redis Cluster it must hash to the slot of each key it serves, which this name \
             does not; write the key's hash tag into it with {HASH_TAG}, e.g. \"presence:{HASH_TAG}:log\""
        )),
    }
}

impl fmt::Display for ChannelTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.template)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_own_keys_match_no_pattern() {
        for glob in ["presence*", "*", "p*", "presence-*", "*}", "*:{0}"] {
            let p = KeyPattern::parse(glob).unwrap();
            assert!(p.reaches_own_keys(), "{glob}");
            for own in [
                &b"presence-sweeper:canary:{0}"[..],
                b"presence-sweeper:lease:online",
                b"presence-sweeper:hooks:{c42}:crm:due",
            ] {
                if own.ends_with(p.suffix()) {
                    assert_eq!(p.conversation_id(own), None, "{glob}");
                }
            }
        }
        let p = KeyPattern::parse("presence*").unwrap();
        assert_eq!(
            p.conversation_id(b"presence:c42:online"),
            Some(&b":c42:online"[..])
        );
        // A key that only looks like the namespace is not in it.
        assert_eq!(
            p.conversation_id(b"presence-sweeperx"),
            Some(&b"-sweeperx"[..])
        );
        assert!(
            !KeyPattern::parse("presence:*:online")
                .unwrap()
                .reaches_own_keys()
        );
        assert!(!KeyPattern::parse("x*").unwrap().reaches_own_keys());
    }

    #[test]
    fn a_pattern_inside_the_own_namespace_is_refused() {
        assert_eq!(
            KeyPattern::parse("presence-sweeper:*:online"),
            Err(PatternError::Reserved)
        );
        assert!(KeyPattern::parse("presence-sweeper*").is_ok());
    }

    #[test]
    fn open_ended_globs_are_told_apart() {
        assert!(KeyPattern::parse("*").unwrap().is_open_ended());
        assert!(KeyPattern::parse("presence:*").unwrap().is_open_ended());
        assert!(
            !KeyPattern::parse("presence:*:online")
                .unwrap()
                .is_open_ended()
        );
        assert!(!KeyPattern::parse("*:online").unwrap().is_open_ended());
    }

    #[test]
    fn conversation_id_is_what_the_star_matched() {
        let p = KeyPattern::parse("presence:*:online").unwrap();
        assert_eq!(p.conversation_id(b"presence:c42:online"), Some(&b"c42"[..]));
        assert_eq!(
            p.conversation_id(b"presence:team:a:b:online"),
            Some(&b"team:a:b"[..])
        );
        assert_eq!(p.conversation_id(b"presence::online"), Some(&b""[..]));
        assert_eq!(
            p.conversation_id(b"presence:*?[x]:online"),
            Some(&b"*?[x]"[..])
        );
        assert_eq!(p.conversation_id(b"presence:online"), None);
        assert_eq!(p.conversation_id(b"other:c42:online"), None);
        assert_eq!(
            p.conversation_id(b"presence:\xff\xfe:online"),
            Some(&b"\xff\xfe"[..])
        );
    }

    #[test]
    fn key_is_the_inverse_of_conversation_id() {
        for glob in ["presence:*:online", "*:online", "online:*", "*"] {
            let p = KeyPattern::parse(glob).unwrap();
            let key = p.key(b"c:42");
            assert_eq!(p.conversation_id(&key), Some(&b"c:42"[..]), "{glob}");
        }
        let p = KeyPattern::parse("presence:*:typing").unwrap();
        assert_eq!(p.key(b"c1"), b"presence:c1:typing");
    }

    #[test]
    fn braces_in_the_pattern_keep_hash_tags_out_of_the_id() {
        let p = KeyPattern::parse("presence:{*}:online").unwrap();
        assert_eq!(
            p.conversation_id(b"presence:{c42}:online"),
            Some(&b"c42"[..])
        );
        let p = KeyPattern::parse("presence:*:online").unwrap();
        assert_eq!(
            p.conversation_id(b"presence:{c42}:online"),
            Some(&b"{c42}"[..])
        );
    }

    #[test]
    fn star_at_either_end() {
        let p = KeyPattern::parse("*:online").unwrap();
        assert_eq!(p.conversation_id(b"c1:online"), Some(&b"c1"[..]));
        let p = KeyPattern::parse("online:*").unwrap();
        assert_eq!(p.conversation_id(b"online:c1"), Some(&b"c1"[..]));
    }

    #[test]
    fn rejects_bad_globs() {
        assert_eq!(
            KeyPattern::parse("presence:online"),
            Err(PatternError::WildcardCount(0))
        );
        assert_eq!(
            KeyPattern::parse("presence:*:*"),
            Err(PatternError::WildcardCount(2))
        );
        assert_eq!(
            KeyPattern::parse("presence:*:onlin?"),
            Err(PatternError::Metachar('?'))
        );
        assert_eq!(
            KeyPattern::parse("presence:[ab]*"),
            Err(PatternError::Metachar('['))
        );
    }

    #[test]
    fn channel_template_replaces_every_placeholder() {
        let t = ChannelTemplate::new("presence:{conversation_id}:events");
        assert_eq!(t.render(b"k", b"c:42"), b"presence:c:42:events");
        let t = ChannelTemplate::new("{conversation_id}/{conversation_id}");
        assert_eq!(t.render(b"k", b"x"), b"x/x");
        let t = ChannelTemplate::new("presence-events");
        assert_eq!(t.render(b"k", b"x"), b"presence-events");
        assert!(t.is_fixed());
        // Braces around the placeholder survive: a hash tag for the channel's slot.
        let t = ChannelTemplate::new("presence:{{conversation_id}}:events");
        assert_eq!(t.render(b"k", b"c42"), b"presence:{c42}:events");
        assert!(!t.is_fixed());
    }

    #[test]
    fn the_hash_tag_placeholder_is_the_keys_tag_in_braces() {
        let t = ChannelTemplate::new("presence:{hash_tag}:log:{conversation_id}");
        assert_eq!(
            t.render(b"presence:{c42}:online", b"{c42}"),
            b"presence:{c42}:log:{c42}"
        );
        // A key without a tag hashes whole: so does the name, with the key as its tag.
        assert_eq!(
            t.render(b"presence:c42:online", b"c42"),
            b"presence:{presence:c42:online}:log:c42"
        );
        assert_eq!(
            hash_tag(b"a{}b{c}"),
            b"a{}b{c}",
            "an empty first tag: the whole key"
        );
        assert_eq!(hash_tag(b"a{b}c{d}"), b"b");
    }

    #[test]
    fn names_that_provably_share_the_keys_slot() {
        let ok = |glob: &str, template: &str| {
            same_slot(
                &KeyPattern::parse(glob).unwrap(),
                &ChannelTemplate::new(template),
            )
        };
        assert!(ok("presence:*:online", "presence:{hash_tag}:log").is_ok());
        assert!(ok("presence:{*}:online", "log:{{conversation_id}}:x").is_ok());
        assert!(ok("{app}:presence:*:online", "{app}:leaves").is_ok());
        assert!(ok("{app}:presence:*:online", "{app}:log:{conversation_id}").is_ok());
        // A fixed key, or the conversation id whose braces nobody knows.
        let e = ok("presence:*:online", "presence-sweeper:leaves").unwrap_err();
        assert!(e.contains("{hash_tag}"), "{e}");
        assert!(ok("presence:{*}:online", "presence-sweeper:leaves").is_err());
        assert!(ok("presence:*:online", "presence:{conversation_id}:log").is_err());
        assert!(ok("{app}:presence:*:online", "{other}:leaves").is_err());
        assert!(ok("presence:*:online", "{x}:{hash_tag}").is_err());
    }
}
