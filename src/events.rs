//! The JSON event published for every evicted member.
//!
//! ```json
//! {"type":"presence.leave","conversation_id":"c42","user_id":"u7","reason":"expired",
//!  "last_seen":1764460000.25,"timestamp":1764460046.5,"online":["u1","u2"],"online_count":2}
//! ```
//!
//! The roster field is named after the sweep. Ids are bytes in Redis but JSON strings are Unicode:
//! an id that is not valid UTF-8 is written with U+FFFD in place of the bad bytes, and the exact
//! bytes follow in `user_id_base64` / `conversation_id_base64`, so the payload is always valid JSON
//! and nothing is lost. Roster entries are only ever written lossily.

use base64::Engine as _;

/// Value of the `reason` field.
pub const REASON_EXPIRED: &str = "expired";

/// One eviction to announce.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// What the key pattern's `*` matched.
    pub conversation_id: &'a [u8],
    /// The removed member.
    pub user_id: &'a [u8],
    /// The removed score, in Unix seconds.
    pub last_seen: f64,
    /// When the eviction happened on Redis's clock, in Unix seconds.
    pub timestamp: f64,
    /// The roster, already encoded by [`EventEncoder::roster_json`].
    pub roster_json: &'a [u8],
    /// Members left in the set.
    pub roster_count: u64,
}

/// A roster encoded as a JSON array of strings as its members are read, so that they need not
/// be kept.
#[derive(Debug)]
pub struct Roster {
    json: Vec<u8>,
    len: usize,
}

impl Roster {
    /// An empty roster with room for about `bytes` bytes of JSON.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut json = Vec::with_capacity(bytes + 2);
        json.push(b'[');
        Self { json, len: 0 }
    }

    /// Adds a member; one that is not valid UTF-8 is written lossily.
    pub fn push(&mut self, member: &[u8]) {
        if self.len > 0 {
            self.json.push(b',');
        }
        if !push_plain(&mut self.json, member) {
            push_str(&mut self.json, &String::from_utf8_lossy(member));
        }
        self.len += 1;
    }

    /// How many members it lists.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it lists nobody.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The JSON array.
    pub fn into_json(mut self) -> Vec<u8> {
        self.json.push(b']');
        self.json
    }
}

/// Encodes the events of one sweep; the parts that never change are encoded once.
#[derive(Debug, Clone)]
pub struct EventEncoder {
    head: Vec<u8>,
    roster_key: Vec<u8>,
    count_key: Vec<u8>,
}

impl EventEncoder {
    /// An encoder for events of type `event_type` whose roster field is `roster_field`.
    pub fn new(event_type: &str, roster_field: &str) -> Self {
        let mut head = b"{\"type\":".to_vec();
        push_str(&mut head, event_type);
        let mut roster_key = b",".to_vec();
        push_str(&mut roster_key, roster_field);
        roster_key.push(b':');
        let mut count_key = b",".to_vec();
        push_str(&mut count_key, &format!("{roster_field}_count"));
        count_key.push(b':');
        Self {
            head,
            roster_key,
            count_key,
        }
    }

    /// Encodes a roster as a JSON array of strings.
    pub fn roster_json(members: &[Vec<u8>]) -> Vec<u8> {
        let mut roster = Roster::with_capacity(members.iter().map(|m| m.len() + 3).sum());
        for m in members {
            roster.push(m);
        }
        roster.into_json()
    }

    /// Writes the event's JSON into `out` (cleared first).
    pub fn encode_into(&self, event: &Event<'_>, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.head);
        push_id(out, "conversation_id", event.conversation_id);
        push_id(out, "user_id", event.user_id);
        out.extend_from_slice(b",\"reason\":\"");
        out.extend_from_slice(REASON_EXPIRED.as_bytes());
        out.extend_from_slice(b"\",\"last_seen\":");
        push_f64(out, event.last_seen);
        out.extend_from_slice(b",\"timestamp\":");
        push_f64(out, event.timestamp);
        out.extend_from_slice(&self.roster_key);
        out.extend_from_slice(event.roster_json);
        out.extend_from_slice(&self.count_key);
        serde_json::to_writer(&mut *out, &event.roster_count)
            .expect("writing to a Vec cannot fail");
        out.push(b'}');
    }

    /// The event's JSON.
    pub fn encode(&self, event: &Event<'_>) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + event.roster_json.len());
        self.encode_into(event, &mut out);
        out
    }
}

/// Writes `,"field":` and the id; `field` is one of ours, plain ASCII with nothing to escape.
fn push_id(out: &mut Vec<u8>, field: &str, id: &[u8]) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(b"\":");
    if push_plain(out, id) {
        return;
    }
    match std::str::from_utf8(id) {
        Ok(s) => push_str(out, s),
        Err(_) => {
            push_str(out, &String::from_utf8_lossy(id));
            out.extend_from_slice(b",\"");
            out.extend_from_slice(field.as_bytes());
            out.extend_from_slice(b"_base64\":\"");
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(id)
                    .as_bytes(),
            );
            out.push(b'"');
        }
    }
}

/// Writes `s` as a JSON string, escaped as serde_json does (`"`, `\\`, and control characters);
/// runs of plain text, usually the whole id, are copied at once.
fn push_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut plain = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0..=0x1f => 0,
            _ => continue,
        };
        out.extend_from_slice(&bytes[plain..i - 1]);
        plain = i;
        if short == 0 {
            let (hi, lo) = (HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]);
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', hi, lo]);
        } else {
            out.extend_from_slice(&[b'\\', short]);
        }
    }
    out.extend_from_slice(&bytes[plain..]);
    out.push(b'"');
}

/// Writes `bytes` as a JSON string when they are printable ASCII with nothing to escape, as ids
/// almost always are: one check and one copy. Returns false, having written nothing, otherwise.
fn push_plain(out: &mut Vec<u8>, bytes: &[u8]) -> bool {
    if !bytes.iter().all(|&b| PLAIN[usize::from(b)]) {
        return false;
    }
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    out.extend_from_slice(bytes);
    out.push(b'"');
    true
}

/// The bytes [`push_plain`] copies as they are: printable ASCII but `"` and `\\`.
const PLAIN: [bool; 256] = {
    let mut plain = [false; 256];
    let mut b = 0x20;
    while b < 0x7f {
        plain[b] = b != b'"' as usize && b != b'\\' as usize;
        b += 1;
    }
    plain
};

fn push_f64(out: &mut Vec<u8>, x: f64) {
    // serde_json writes the shortest form that reads back as the same f64, and null for
    // non-finite values (a `-inf` score), which keeps the payload valid JSON.
    serde_json::to_writer(out, &x).expect("writing to a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event<'a>(conv: &'a [u8], user: &'a [u8], roster: &'a [u8]) -> Event<'a> {
        Event {
            conversation_id: conv,
            user_id: user,
            last_seen: 1764460000.25,
            timestamp: 1764460046.5,
            roster_json: roster,
            roster_count: 2,
        }
    }

    #[test]
    fn the_documented_payload() {
        let enc = EventEncoder::new("presence.leave", "online");
        let roster = EventEncoder::roster_json(&[b"u1".to_vec(), b"u2".to_vec()]);
        let json = enc.encode(&event(b"c42", b"u7", &roster));
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"{"type":"presence.leave","conversation_id":"c42","user_id":"u7","reason":"expired","last_seen":1764460000.25,"timestamp":1764460046.5,"online":["u1","u2"],"online_count":2}"#
        );
    }

    #[test]
    fn quotes_and_invalid_utf8_stay_valid_json() {
        let enc = EventEncoder::new("typing.stop", "typing");
        let roster = EventEncoder::roster_json(&[b"a\"b".to_vec(), b"\xff".to_vec()]);
        let json = enc.encode(&event(b"c\"1\\", b"\xffu\n", &roster));
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["conversation_id"], "c\"1\\");
        assert_eq!(v["user_id"], "\u{fffd}u\n");
        assert_eq!(v["user_id_base64"], "/3UK");
        assert!(v.get("conversation_id_base64").is_none());
        assert_eq!(v["typing"][0], "a\"b");
        assert_eq!(v["typing"][1], "\u{fffd}");
        assert_eq!(v["typing_count"], 2);
    }

    #[test]
    fn strings_are_escaped_exactly_as_serde_json_does() {
        let all: String = (0u8..=0x7f)
            .map(char::from)
            .chain("é\u{2028}✓".chars())
            .collect();
        let long = format!("{all}{}", "plain text of some length".repeat(3));
        for s in [
            all.as_str(),
            long.as_str(),
            "",
            "plain",
            "exactly8",
            "sixteen bytes ok",
            "\"\\",
            "a\u{1}b\u{1f}c",
            "seven b\"eight by\\",
        ] {
            let mut ours = Vec::new();
            push_str(&mut ours, s);
            assert_eq!(ours, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
        // A character to escape at every position of the eight-byte steps.
        for at in 0..20 {
            for special in ['"', '\\', '\n', '\u{1}', '\u{7f}', 'é'] {
                let s = format!("{}{special}{}", "a".repeat(at), "b".repeat(19 - at));
                let mut ours = Vec::new();
                push_str(&mut ours, &s);
                assert_eq!(ours, serde_json::to_vec(&s).unwrap(), "{s:?}");
            }
        }
    }

    #[test]
    fn non_finite_scores_become_null() {
        let enc = EventEncoder::new("x", "online");
        let mut e = event(b"c", b"u", b"[]");
        e.last_seen = f64::NEG_INFINITY;
        let v: serde_json::Value = serde_json::from_slice(&enc.encode(&e)).unwrap();
        assert!(v["last_seen"].is_null());
    }
}
