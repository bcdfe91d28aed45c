//! The JSON event published for every evicted member.
//!
//! ```json
//! {"type":"presence.leave","conversation_id":"c42","user_id":"u7","reason":"expired",
//!  "last_seen":1764460000.25,"timestamp":1764460046.5,"online":["u1","u2"],"online_count":2}
//! ```
//!
//! The roster field is named after the sweep. An event is at most `events.max_bytes` long: the
//! roster is cut to the members that fit (most recently seen first) and `<sweep>_truncated:
//! true` says so; the removed member's own id is always sent whole (an id longer than the cap
//! makes an event with an empty roster, longer than the cap).
//!
//! Two shapes: one event per removed member (above), or one per key and eviction step
//! (`batch`), listing the removed members in `leaves` and split into several events when they do
//! not fit one. Either says `"vacated":true` when the step emptied the set (in its last event).
//! With a stream, each event also carries `prev` (the stream entry before it) and, as published,
//! `id` (its own entry): room for both is kept within the cap.
//!
//! Ids are bytes in Redis but JSON strings are Unicode:
//! an id that is not valid UTF-8 is written with U+FFFD in place of the bad bytes, and the exact
//! bytes follow in `user_id_base64` / `conversation_id_base64`, so the payload is always valid JSON
//! and nothing is lost. Roster entries are only ever written lossily.

use base64::Engine as _;

/// Value of the `reason` field.
pub const REASON_EXPIRED: &str = "expired";

/// Most remaining members an event lists (fewer when they do not fit `events.max_bytes`); the
/// full count goes beside it.
pub const ROSTER_LIMIT: usize = 100;

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
    /// The members left, most recently seen first (at most the roster limit).
    pub roster: &'a Roster,
    /// Members left in the set.
    pub roster_count: u64,
    /// The removal emptied the set (and this is the step's last event).
    pub vacated: bool,
}

/// A roster encoded as JSON strings as its members are read, so that they need not be kept;
/// where each one ends is remembered, so that an event can carry as many as fit its cap.
#[derive(Debug, Clone, Default)]
pub struct Roster {
    /// The members as JSON strings, separated by commas (no brackets).
    json: Vec<u8>,
    /// Where each member's string ends in `json`.
    ends: Vec<u32>,
}

impl Roster {
    /// An empty roster with room for about `bytes` bytes of JSON.
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            json: Vec::with_capacity(bytes),
            ends: Vec::new(),
        }
    }

    /// The roster of `members`, most recently seen first.
    pub fn of(members: &[Vec<u8>]) -> Self {
        let mut roster = Self::with_capacity(members.iter().map(|m| m.len() + 3).sum());
        for m in members {
            roster.push(m);
        }
        roster
    }

    /// Adds a member; one that is not valid UTF-8 is written lossily.
    pub fn push(&mut self, member: &[u8]) {
        if !self.ends.is_empty() {
            self.json.push(b',');
        }
        if !push_plain(&mut self.json, member) {
            push_str(&mut self.json, &String::from_utf8_lossy(member));
        }
        self.ends
            .push(u32::try_from(self.json.len()).unwrap_or(u32::MAX));
    }

    /// How many members it lists.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of its JSON.
    pub fn json_len(&self) -> usize {
        self.json.len()
    }

    /// The longest member's JSON, in bytes.
    pub fn longest(&self) -> usize {
        let mut start = 0;
        let mut longest = 0;
        for &end in &self.ends {
            longest = longest.max(end as usize - start);
            start = end as usize + 1;
        }
        longest
    }

    /// The JSON of the first `n` members, without brackets.
    fn first(&self, n: usize) -> &[u8] {
        match n {
            0 => b"",
            n => &self.json[..self.ends[n - 1] as usize],
        }
    }

    /// How many of the first members fit in `bytes` of JSON (without brackets).
    fn fitting(&self, bytes: usize) -> usize {
        self.ends.partition_point(|&end| end as usize <= bytes)
    }
}

/// Most bytes of a stream entry id, `<ms>-<seq>`: two 64-bit numbers.
pub const ID_MAX: usize = 41;
/// What `,"prev":"<id>"` and `,"id":"<id>"` may take, kept free in every event of a sweep with
/// a stream, so that where events split and rosters are cut does not depend on the ids.
pub const CURSOR_ROOM: usize = 10 + ID_MAX + 8 + ID_MAX;
/// `,"vacated":true`.
const VACATED: &[u8] = b",\"vacated\":true";
/// What opens a batch event's list of removed members, after the conversation id.
const LEAVES_OPEN: &[u8] = b",\"reason\":\"expired\",\"leaves\":[";
/// What closes it, before the timestamp.
const LEAVES_CLOSE: &[u8] = b"],\"timestamp\":";

/// The members one eviction step removed from one key, for batch events.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// What the key pattern's `*` matched.
    pub conversation_id: &'a [u8],
    /// The removed members, as the objects of `leaves`.
    pub leaves: &'a Leaves,
    /// When the eviction happened on Redis's clock, in Unix seconds.
    pub timestamp: f64,
    /// The members left, most recently seen first (at most the roster limit).
    pub roster: &'a Roster,
    /// Members left in the set.
    pub roster_count: u64,
    /// The step emptied the set: its last event says so.
    pub vacated: bool,
}

/// The removed members of a step as the JSON objects of a batch event's `leaves`:
/// `{"user_id":...,"last_seen":...}`, with `user_id_base64` for an id that is not UTF-8.
#[derive(Debug, Clone, Default)]
pub struct Leaves {
    /// The objects, separated by commas, and where each ends.
    items: Roster,
}

impl Leaves {
    /// Adds a removed member, last seen at `last_seen` (Unix seconds).
    pub fn push(&mut self, user_id: &[u8], last_seen: f64) {
        let json = &mut self.items.json;
        if !self.items.ends.is_empty() {
            json.push(b',');
        }
        json.push(b'{');
        push_field(json, "user_id", user_id);
        json.extend_from_slice(b",\"last_seen\":");
        push_f64(json, last_seen);
        json.push(b'}');
        let end = u32::try_from(json.len()).unwrap_or(u32::MAX);
        self.items.ends.push(end);
    }

    /// How many members it lists.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The JSON of the members `from..to`, without brackets.
    fn range(&self, from: usize, to: usize) -> &[u8] {
        let start = match from {
            0 => 0,
            n => self.items.ends[n - 1] as usize + 1,
        };
        &self.items.json[start..self.items.first(to).len().max(start)]
    }
}

/// Encodes the events of one sweep; the parts that never change are encoded once.
#[derive(Debug, Clone)]
pub struct EventEncoder {
    head: Vec<u8>,
    roster_key: Vec<u8>,
    count_key: Vec<u8>,
    truncated: Vec<u8>,
    max_bytes: usize,
    /// Bytes kept free for `prev` and `id`: a sweep with a stream has them.
    cursor_room: usize,
}

impl EventEncoder {
    /// An encoder for events of type `event_type` whose roster field is `roster_field`, each at
    /// most `max_bytes` long (but for an id longer than that); with `stream`, room is kept for
    /// `prev` and `id`.
    pub fn new(event_type: &str, roster_field: &str, max_bytes: usize, stream: bool) -> Self {
        let mut head = b"{\"type\":".to_vec();
        push_str(&mut head, event_type);
        let mut roster_key = b",".to_vec();
        push_str(&mut roster_key, roster_field);
        roster_key.push(b':');
        let mut count_key = b",".to_vec();
        push_str(&mut count_key, &format!("{roster_field}_count"));
        count_key.push(b':');
        let mut truncated = b",".to_vec();
        push_str(&mut truncated, &format!("{roster_field}_truncated"));
        truncated.extend_from_slice(b":true");
        Self {
            head,
            roster_key,
            count_key,
            truncated,
            max_bytes,
            cursor_room: if stream { CURSOR_ROOM } else { 0 },
        }
    }

    /// What a script that writes the same events needs: the head (`{"type":...`), the roster's
    /// key, the count's key and the truncation flag, each as JSON.
    pub fn parts(&self) -> [&[u8]; 4] {
        [
            &self.head,
            &self.roster_key,
            &self.count_key,
            &self.truncated,
        ]
    }

    /// Writes the event's JSON into `out` (cleared first): the roster is cut to what fits in
    /// the encoder's `max_bytes`. With `prev` (a sweep with a stream), the event ends with it.
    pub fn encode_into(&self, event: &Event<'_>, prev: Option<&[u8]>, out: &mut Vec<u8>) {
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
        let rest = Rest {
            roster: event.roster,
            count: event.roster_count,
            vacated: event.vacated,
            vacated_room: event.vacated,
            prev,
        };
        self.finish(out, &rest);
    }

    /// Where a step's batch events split: the end (exclusive) of each one's leaves. Each event
    /// holds at least one leave, and as many as fit `max_bytes` beside the roster, or beside
    /// half the room when the roster would take more.
    pub fn batch_splits(&self, step: &Step<'_>) -> Vec<usize> {
        let room = self.max_bytes.saturating_sub(self.batch_fixed(step));
        let room = room - step.roster.json_len().min(room / 2);
        let ends = &step.leaves.items.ends;
        let mut splits = Vec::new();
        let (mut from, mut start) = (0, 0);
        while from < ends.len() {
            // The members from..to take ends[to - 1] - start bytes, commas between included.
            let fit = ends[from..].partition_point(|&end| end as usize - start <= room);
            let to = from + fit.max(1);
            splits.push(to);
            start = ends[to - 1] as usize + 1;
            from = to;
        }
        splits
    }

    /// The bytes of a batch event of `step` besides its leaves and its roster's members.
    fn batch_fixed(&self, step: &Step<'_>) -> usize {
        let mut varying = Vec::with_capacity(64);
        push_id(&mut varying, "conversation_id", step.conversation_id);
        push_f64(&mut varying, step.timestamp);
        let mut count = itoa::Buffer::new();
        let count = count.format(step.roster_count).len();
        self.head.len()
            + varying.len()
            + LEAVES_OPEN.len()
            + LEAVES_CLOSE.len()
            + self.rest_len(count, step.vacated)
    }

    /// Writes the batch event of `step`'s leaves `from..to` into `out` (cleared first); the
    /// step's `last` event says whether it emptied the set.
    pub fn batch_into(
        &self,
        step: &Step<'_>,
        (from, to): (usize, usize),
        last: bool,
        prev: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) {
        out.clear();
        out.extend_from_slice(&self.head);
        push_id(out, "conversation_id", step.conversation_id);
        out.extend_from_slice(LEAVES_OPEN);
        out.extend_from_slice(step.leaves.range(from, to));
        out.extend_from_slice(LEAVES_CLOSE);
        push_f64(out, step.timestamp);
        let rest = Rest {
            roster: step.roster,
            count: step.roster_count,
            vacated: step.vacated && last,
            vacated_room: step.vacated,
            prev,
        };
        self.finish(out, &rest);
    }

    /// The bytes after the roster's members: brackets, the count, `vacated` where room is kept
    /// for it, the cursors' room, the closing brace.
    fn rest_len(&self, count: usize, vacated_room: bool) -> usize {
        self.roster_key.len()
            + 2
            + self.count_key.len()
            + count
            + if vacated_room { VACATED.len() } else { 0 }
            + self.cursor_room
            + 1
    }

    /// The roster, cut to what fits, the count and the flags, `prev`, the closing brace.
    fn finish(&self, out: &mut Vec<u8>, rest: &Rest<'_>) {
        let mut count = itoa::Buffer::new();
        let count = count.format(rest.count).as_bytes();
        let tail = self.rest_len(count.len(), rest.vacated_room);
        let roster = rest.roster;
        let whole = roster.first(roster.len()).len();
        let members = if out.len() + tail + whole <= self.max_bytes {
            roster.len()
        } else {
            let room = self
                .max_bytes
                .saturating_sub(out.len() + tail + self.truncated.len());
            roster.fitting(room)
        };
        out.extend_from_slice(&self.roster_key);
        out.push(b'[');
        out.extend_from_slice(roster.first(members));
        out.push(b']');
        out.extend_from_slice(&self.count_key);
        out.extend_from_slice(count);
        // Cut here to fit, or read short (a sweep that met long ids reads fewer members for
        // its rosters): either way the roster is not all it would have been.
        let whole_roster = rest.count.min(ROSTER_LIMIT as u64);
        if members < roster.len() || (members as u64) < whole_roster {
            out.extend_from_slice(&self.truncated);
        }
        if rest.vacated {
            out.extend_from_slice(VACATED);
        }
        if let Some(prev) = rest.prev {
            out.extend_from_slice(b",\"prev\":\"");
            out.extend_from_slice(prev);
            out.push(b'"');
        }
        out.push(b'}');
    }

    /// The event's JSON.
    #[cfg(test)]
    pub fn encode(&self, event: &Event<'_>) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + event.roster.json.len());
        self.encode_into(event, None, &mut out);
        out
    }
}

/// What ends an event, whatever its shape.
struct Rest<'a> {
    roster: &'a Roster,
    count: u64,
    /// Say `"vacated":true`.
    vacated: bool,
    /// Keep room for it: in every event of a step that emptied the set, so that where the
    /// step's events split does not depend on which one is last.
    vacated_room: bool,
    prev: Option<&'a [u8]>,
}

/// `,"conversation_id":"<id>"` (and its `_base64`) as events carry it, for a script that writes
/// them.
pub fn conversation_field(id: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(id.len() + 24);
    push_id(&mut out, "conversation_id", id);
    out
}

/// Writes `,"field":` and the id; `field` is one of ours, plain ASCII with nothing to escape.
fn push_id(out: &mut Vec<u8>, field: &str, id: &[u8]) {
    out.push(b',');
    push_field(out, field, id);
}

/// Writes `"field":` and the id as a JSON string: one that is not UTF-8 lossily, followed by
/// `,"<field>_base64":` and its exact bytes.
fn push_field(out: &mut Vec<u8>, field: &str, id: &[u8]) {
    out.push(b'"');
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
    // serde_json writes the shortest form that reads back as the same f64.
    serde_json::to_writer(out, &seconds(x)).expect("writing to a Vec cannot fail");
}

/// An instant in Unix seconds as events and reports give it: JSON has no infinities, and a
/// score of `-inf` (a member written by hand, that never heartbeat) is the Unix epoch, 0. (`+inf`
/// is never stale, so never in an event.)
pub fn seconds(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// One eviction step held in owned values, encoded as the daemon encodes it: for whoever has no
/// reply to read in place (the tests compare the stream script's entries with it).
pub mod owned {
    use super::{Event, EventEncoder, Leaves, Roster, Step};

    /// One key's eviction step as the tests saw it.
    #[derive(Debug, Clone)]
    pub struct StepInput {
        /// The sweep's `event`, its name, `events.max_bytes`, whether it has a stream.
        pub event_type: String,
        pub roster_field: String,
        pub max_bytes: usize,
        pub stream: bool,
        pub conversation_id: Vec<u8>,
        /// Removed members and when they were last seen (Unix seconds), lowest score first.
        pub leaves: Vec<(Vec<u8>, f64)>,
        pub timestamp: f64,
        /// The members left, most recently seen first, as read (at most 100).
        pub roster: Vec<Vec<u8>>,
        pub roster_count: u64,
    }

    /// The events the daemon's encoder writes for `step`, one per member or (`batch`) as the
    /// step splits; `prevs[i]` is what the `i`th one names as `prev`.
    pub fn encode(step: &StepInput, batch: bool, prevs: &[Option<Vec<u8>>]) -> Vec<Vec<u8>> {
        let enc = EventEncoder::new(
            &step.event_type,
            &step.roster_field,
            step.max_bytes,
            step.stream,
        );
        let roster = Roster::of(&step.roster);
        let vacated = step.roster_count == 0;
        let prev = |i: usize| prevs.get(i).and_then(|p| p.as_deref());
        let mut out = Vec::new();
        if !batch {
            for (i, (user, last_seen)) in step.leaves.iter().enumerate() {
                let event = Event {
                    conversation_id: &step.conversation_id,
                    user_id: user,
                    last_seen: *last_seen,
                    timestamp: step.timestamp,
                    roster: &roster,
                    roster_count: step.roster_count,
                    vacated: vacated && i + 1 == step.leaves.len(),
                };
                let mut json = Vec::new();
                enc.encode_into(&event, prev(i), &mut json);
                out.push(json);
            }
            return out;
        }
        let mut leaves = Leaves::default();
        for (user, last_seen) in &step.leaves {
            leaves.push(user, *last_seen);
        }
        let s = Step {
            conversation_id: &step.conversation_id,
            leaves: &leaves,
            timestamp: step.timestamp,
            roster: &roster,
            roster_count: step.roster_count,
            vacated,
        };
        let splits = enc.batch_splits(&s);
        let mut from = 0;
        for (i, &to) in splits.iter().enumerate() {
            let mut json = Vec::new();
            enc.batch_into(&s, (from, to), i + 1 == splits.len(), prev(i), &mut json);
            out.push(json);
            from = to;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event<'a>(conv: &'a [u8], user: &'a [u8], roster: &'a Roster) -> Event<'a> {
        Event {
            conversation_id: conv,
            user_id: user,
            last_seen: 1764460000.25,
            timestamp: 1764460046.5,
            roster,
            roster_count: 2,
            vacated: false,
        }
    }

    #[test]
    fn the_documented_payload() {
        let enc = EventEncoder::new("presence.leave", "online", 65536, false);
        let roster = Roster::of(&[b"u1".to_vec(), b"u2".to_vec()]);
        let json = enc.encode(&event(b"c42", b"u7", &roster));
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"{"type":"presence.leave","conversation_id":"c42","user_id":"u7","reason":"expired","last_seen":1764460000.25,"timestamp":1764460046.5,"online":["u1","u2"],"online_count":2}"#
        );
    }

    #[test]
    fn quotes_and_invalid_utf8_stay_valid_json() {
        let enc = EventEncoder::new("typing.stop", "typing", 65536, false);
        let roster = Roster::of(&[b"a\"b".to_vec(), b"\xff".to_vec()]);
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
    fn a_score_of_minus_infinity_is_the_epoch() {
        let enc = EventEncoder::new("x", "online", 65536, false);
        let roster = Roster::default();
        let mut e = event(b"c", b"u", &roster);
        e.last_seen = f64::NEG_INFINITY;
        let v: serde_json::Value = serde_json::from_slice(&enc.encode(&e)).unwrap();
        assert_eq!(v["last_seen"], 0.0);
    }

    #[test]
    fn the_roster_is_cut_to_fit_and_says_so() {
        let members: Vec<Vec<u8>> = (0..100)
            .map(|i| format!("{i:04}{}", "m".repeat(996)).into_bytes())
            .collect();
        let roster = Roster::of(&members);
        let enc = EventEncoder::new("presence.leave", "online", 8 * 1024, false);
        let user = vec![b'u'; 2000];
        let json = enc.encode(&event(b"c42", &user, &roster));
        assert!(json.len() <= 8 * 1024, "{}", json.len());
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["user_id"].as_str().unwrap().len(), 2000, "the id whole");
        let kept = v["online"].as_array().unwrap();
        assert_eq!(kept.len(), 5, "as many as fit: {}", json.len());
        assert_eq!(
            kept[0].as_str().unwrap(),
            String::from_utf8_lossy(&members[0])
        );
        assert_eq!(v["online_count"], 2, "the count stays the whole set's");
        assert_eq!(v["online_truncated"], true);
        // A roster that fits is whole, without the flag; so is one cut to nothing.
        let small = Roster::of(&members[..2]);
        let v: serde_json::Value =
            serde_json::from_slice(&enc.encode(&event(b"c", b"u", &small))).unwrap();
        assert_eq!(v["online"].as_array().unwrap().len(), 2);
        assert!(v.get("online_truncated").is_none());
        let huge = vec![b'h'; 9000];
        let json = enc.encode(&event(b"c", &huge, &roster));
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["online"].as_array().unwrap().len(), 0);
        assert_eq!(
            v["user_id"].as_str().unwrap().len(),
            9000,
            "longer than the cap, whole"
        );
        assert_eq!(v["online_truncated"], true);
    }

    #[test]
    fn a_roster_read_short_says_so_too() {
        let members: Vec<Vec<u8>> = (0..5).map(|i| format!("u{i}").into_bytes()).collect();
        let roster = Roster::of(&members);
        let enc = EventEncoder::new("presence.leave", "online", 64 * 1024, false);
        let mut e = event(b"c", b"u", &roster);
        for (count, truncated) in [(5, false), (150, true), (6, true)] {
            e.roster_count = count;
            let v: serde_json::Value = serde_json::from_slice(&enc.encode(&e)).unwrap();
            assert_eq!(v["online"].as_array().unwrap().len(), 5);
            assert_eq!(v.get("online_truncated").is_some(), truncated, "{count}");
        }
    }

    #[test]
    fn a_batch_splits_to_fit_lists_every_leave_and_vacates_once() {
        let enc = EventEncoder::new("presence.leave", "online", 4096, true);
        let mut leaves = Leaves::default();
        for i in 0..500 {
            leaves.push(
                format!("user-{i:05}").as_bytes(),
                1764460000.0 + f64::from(i),
            );
        }
        leaves.push(b"\xffbad", 1.5);
        let roster = Roster::default();
        let step = Step {
            conversation_id: b"c42",
            leaves: &leaves,
            timestamp: 1764460046.5,
            roster: &roster,
            roster_count: 0,
            vacated: true,
        };
        let splits = enc.batch_splits(&step);
        assert!(splits.len() > 1 && splits.len() < 20, "{splits:?}");
        let (mut from, mut listed, mut vacated) = (0, Vec::new(), 0);
        for (i, &to) in splits.iter().enumerate() {
            let mut json = Vec::new();
            let last = i + 1 == splits.len();
            enc.batch_into(&step, (from, to), last, Some(b"1764460046500-0"), &mut json);
            assert!(json.len() + 8 + ID_MAX <= 4096, "{} bytes", json.len());
            let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
            vacated += usize::from(v["vacated"] == true);
            assert_eq!(v["prev"], "1764460046500-0");
            for l in v["leaves"].as_array().unwrap() {
                listed.push(l["user_id"].as_str().unwrap().to_owned());
            }
            from = to;
        }
        assert_eq!((listed.len(), vacated), (501, 1));
        assert_eq!(listed[500], "\u{fffd}bad");
    }
}
