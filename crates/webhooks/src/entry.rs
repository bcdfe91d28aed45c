//! A stream entry as a delivery: the request body rebuilt from it, exactly as the event was
//! published, and what ordering and the trim check need from it.
//!
//! The stream script appends the event less its `id` (`...,"prev":"<prev>"}`) and publishes it
//! with `,"id":"<id>"` before the closing brace (`stream.lua`); the entry's own id is that `id`.

use std::cmp::Ordering;

/// A stream entry id, `<ms>-<seq>`, ordered as Redis orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntryId {
    /// Milliseconds on Redis's clock when it was appended.
    pub ms: u64,
    /// Its sequence within that millisecond.
    pub seq: u64,
}

impl EntryId {
    /// The id before any entry: a new history's `prev`.
    pub const ZERO: Self = Self { ms: 0, seq: 0 };

    /// Parses `<ms>-<seq>`.
    pub fn parse(s: &str) -> Option<Self> {
        let (ms, seq) = s.split_once('-')?;
        Some(Self {
            ms: ms.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// An entry that does not hold an event as the stream script writes it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadEntry {
    /// The id is not `<ms>-<seq>`.
    #[error("the entry id is not <ms>-<seq>")]
    Id,
    /// No `event` field, or one that is not a JSON object with a `prev`.
    #[error("the entry holds no event as presence-sweeper writes them")]
    Event,
}

/// One event to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The entry's id (the event's `id`).
    pub id: EntryId,
    /// The entry before it in the stream, as the event says (`prev`).
    pub prev: EntryId,
    /// Its conversation (the `conversation_id` field), which orders its deliveries.
    pub conversation: Option<String>,
    /// The request body: the event's JSON as published.
    pub body: Vec<u8>,
}

#[derive(serde::Deserialize)]
struct Fields {
    prev: String,
    conversation_id: Option<String>,
}

impl Delivery {
    /// The delivery of entry `id` whose `event` field is `event`.
    pub fn from_entry(id: &str, event: &[u8]) -> Result<Self, BadEntry> {
        let entry = EntryId::parse(id).ok_or(BadEntry::Id)?;
        let fields: Fields = serde_json::from_slice(event).map_err(|_| BadEntry::Event)?;
        let prev = EntryId::parse(&fields.prev).ok_or(BadEntry::Event)?;
        let open = event.strip_suffix(b"}").ok_or(BadEntry::Event)?;
        let mut body = Vec::with_capacity(event.len() + id.len() + 8);
        body.extend_from_slice(open);
        body.extend_from_slice(b",\"id\":\"");
        body.extend_from_slice(id.as_bytes());
        body.extend_from_slice(b"\"}");
        Ok(Self {
            id: entry,
            prev,
            conversation: fields.conversation_id,
            body,
        })
    }
}

/// Whether `a` comes after `b` in a stream.
pub fn after(a: EntryId, b: EntryId) -> bool {
    a.cmp(&b) == Ordering::Greater
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_the_published_event() {
        let event =
            br#"{"type":"presence.leave","conversation_id":"c42","user_id":"u7","prev":"0-0"}"#;
        let d = Delivery::from_entry("1764460046500-0", event).unwrap();
        assert_eq!(
            String::from_utf8(d.body).unwrap(),
            r#"{"type":"presence.leave","conversation_id":"c42","user_id":"u7","prev":"0-0","id":"1764460046500-0"}"#
        );
        assert_eq!(
            d.id,
            EntryId {
                ms: 1764460046500,
                seq: 0
            }
        );
        assert_eq!(d.prev, EntryId::ZERO);
        assert_eq!(d.conversation.as_deref(), Some("c42"));
    }

    #[test]
    fn ids_order_as_in_redis() {
        let a = EntryId::parse("10-2").unwrap();
        let b = EntryId::parse("9-100").unwrap();
        assert!(after(a, b) && !after(b, a) && !after(a, a));
        assert_eq!(a.to_string(), "10-2");
    }

    #[test]
    fn what_the_script_did_not_write_is_refused() {
        assert_eq!(Delivery::from_entry("x", b"{}"), Err(BadEntry::Id));
        assert_eq!(
            Delivery::from_entry("1-0", b"{\"a\":1}"),
            Err(BadEntry::Event)
        );
        assert_eq!(Delivery::from_entry("1-0", b"nope"), Err(BadEntry::Event));
    }
}
