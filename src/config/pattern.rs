//! Key patterns (`presence:*:online`) and channel templates (`presence:{conversation_id}:events`).
//!
//! A sweep's `match` is a SCAN glob with exactly one `*`. Everything around the `*` is literal, so
//! the conversation id of a key is simply the bytes between the literal prefix and suffix. That
//! keeps ids containing `:` or glob characters intact, and works on keys that are not UTF-8.

use std::fmt;

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
}

/// A validated `match` glob: literal prefix, one `*`, literal suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPattern {
    glob: String,
    prefix_len: usize,
    suffix_len: usize,
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
        Ok(Self {
            glob: glob.to_owned(),
            prefix_len: star,
            suffix_len: glob.len() - star - 1,
        })
    }

    /// The glob as given, for `SCAN ... MATCH`.
    pub fn glob(&self) -> &str {
        &self.glob
    }

    /// The literal text before the `*`.
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.glob.as_bytes()[..self.prefix_len]
    }

    /// The literal text after the `*`.
    pub(crate) fn suffix(&self) -> &[u8] {
        let glob = self.glob.as_bytes();
        &glob[glob.len() - self.suffix_len..]
    }

    /// The conversation id of `key`: what the `*` matched. `None` if `key` does not match.
    pub fn conversation_id<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        let (prefix, suffix) = (self.prefix(), self.suffix());
        if key.len() < prefix.len() + suffix.len()
            || !key.starts_with(prefix)
            || !key.ends_with(suffix)
        {
            return None;
        }
        Some(&key[prefix.len()..key.len() - suffix.len()])
    }

    /// The key of a conversation: the inverse of [`KeyPattern::conversation_id`].
    pub fn key(&self, conversation_id: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.glob.len() - 1 + conversation_id.len());
        key.extend_from_slice(self.prefix());
        key.extend_from_slice(conversation_id);
        key.extend_from_slice(self.suffix());
        key
    }
}

impl fmt::Display for KeyPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.glob)
    }
}

/// The placeholder a channel template may contain.
pub const CONVERSATION_ID: &str = "{conversation_id}";

/// A channel name with `{conversation_id}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelTemplate {
    template: String,
    /// The text around the placeholders, split once: rendering runs for every event.
    parts: Vec<String>,
}

impl ChannelTemplate {
    /// Wraps a template; any text without the placeholder is a fixed channel.
    pub fn new(template: &str) -> Self {
        Self {
            template: template.to_owned(),
            parts: template.split(CONVERSATION_ID).map(str::to_owned).collect(),
        }
    }

    /// The channel for one conversation, written into `out` (cleared first) to reuse its buffer.
    pub fn render_into(&self, conversation_id: &[u8], out: &mut Vec<u8>) {
        out.clear();
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(conversation_id);
            }
            out.extend_from_slice(part.as_bytes());
        }
    }

    /// The channel for one conversation.
    pub fn render(&self, conversation_id: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.template.len() + conversation_id.len());
        self.render_into(conversation_id, &mut out);
        out
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
        assert_eq!(t.render(b"c:42"), b"presence:c:42:events");
        let t = ChannelTemplate::new("{conversation_id}/{conversation_id}");
        assert_eq!(t.render(b"x"), b"x/x");
        let t = ChannelTemplate::new("presence-events");
        assert_eq!(t.render(b"x"), b"presence-events");
        // Braces around the placeholder survive: a hash tag for the channel's slot.
        let t = ChannelTemplate::new("presence:{{conversation_id}}:events");
        assert_eq!(t.render(b"c42"), b"presence:{c42}:events");
    }
}
