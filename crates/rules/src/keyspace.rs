//! Keyspace notifications as the rules read them: which flags of `notify-keyspace-events`
//! serve presence keys, and what a notification says of its key. Subscribing is the daemon's.

/// What a primary's `notify-keyspace-events` allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// `E` and `n`: every new key is published ([`Channels::NewKeys`]); or `K` and `z` (or
    /// `A`): every sorted-set write of a key is ([`Channels::Keyspace`]); or both.
    On(Published),
    /// Off, or without what presence keys need; the flags as the server reports them.
    Off(String),
    /// The server will not say (the Redis user may not run `CONFIG GET`, or the server does
    /// not offer `CONFIG`), and why: only notices arriving tell.
    Unknown(String),
}

/// Which notifications a primary's loop listens to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channels {
    /// `__keyevent@<db>__:new` alone (Redis 7.0 and later, Valkey): one message per key
    /// created, none per heartbeat. A tracked key's deadline comes from its checks' replies,
    /// so a new key is all the index needs to hear of.
    NewKeys,
    /// The keyspace channels of the sweeps' keys (`__keyspace@<db>__:<match>`): one message per
    /// write of a presence key, heartbeats included. Where the server has no `n`.
    Keyspace,
    /// Both, where the server will not say which it publishes (`CONFIG` refused) or publishes
    /// neither yet: whichever comes is heard.
    Both,
}

/// Where a server publishes what the daemon needs, from its `notify-keyspace-events`: on one
/// channel at least ([`Published::of`] says `None` otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// `E` and `n`: on `__keyevent@<db>__:new`.
    new_keys: bool,
    /// `K` and `z` (or `A`): on the keyspace channels.
    keyspace: bool,
}

impl Published {
    /// What `flags` publish; `None` if neither.
    pub fn of(flags: &str) -> Option<Self> {
        let new_keys = flags.contains('E') && flags.contains('n');
        let keyspace = flags.contains('K') && (flags.contains('A') || flags.contains('z'));
        (new_keys || keyspace).then_some(Self { new_keys, keyspace })
    }

    /// What to listen to, in order (one choice at least): each is tried where the ACL refuses
    /// the one before. New keys first (one message per key, none per heartbeat); the keyspace
    /// channels where the server publishes those too, so that a user granted only the sweeps'
    /// channels (the ACL of earlier releases) still hears new keys, at the price of hearing
    /// every heartbeat.
    pub fn choices(self) -> Vec<Channels> {
        let mut out = Vec::with_capacity(2);
        if self.new_keys {
            out.push(Channels::NewKeys);
        }
        if self.keyspace {
            out.push(Channels::Keyspace);
        }
        out
    }
}

/// What to listen to where the server will not say what it publishes (`CONFIG` refused) or
/// publishes neither yet: both, and the keyspace channels alone where the ACL refuses the new
/// keys' (the sweeps' own channels are those an ACL is likeliest to grant).
pub const UNSAID: [Channels; 2] = [Channels::Both, Channels::Keyspace];

impl Channels {
    /// The channels `flags` publish what the daemon needs on, preferring new keys; `None` if
    /// neither.
    pub fn of(flags: &str) -> Option<Self> {
        Published::of(flags).map(|p| p.choices()[0])
    }

    /// Whether the sweeps' keyspace channels are listened to.
    pub fn keyspace(self) -> bool {
        self != Self::NewKeys
    }

    /// Whether the new-key channel is listened to.
    pub fn new_keys(self) -> bool {
        self != Self::Keyspace
    }
}

/// Whether `flags` (as `CONFIG GET notify-keyspace-events` reports them) publish what the
/// daemon needs: new keys, or the keyspace events of sorted-set writes.
pub fn flags_cover(flags: &str) -> bool {
    Channels::of(flags).is_some()
}

/// `flags` with the cheapest flags that serve the daemon added, keeping whatever else the
/// server publishes: `E` and `n` (new keys, once each) where the server has `n`
/// (`new_keys`), else `K` (keyspace channels), `z` (sorted sets) and `g` (deletions).
///
/// Beside `A`, the keyspace channels: Redis and Valkey read `n` back without it beside `A`
/// (`CONFIG GET` answers `AKE` for `KEAn`), so new keys set there would look off at the next
/// look, and be set again at every look.
pub fn with_needed(flags: &str, new_keys: bool) -> String {
    let mut out = flags.to_owned();
    let needed: &[char] = if new_keys && !flags.contains('A') {
        &['E', 'n']
    } else {
        &['K', 'z', 'g']
    };
    for &c in needed {
        // `A` stands for every class of event but `n`: `z` and `g` among them.
        let covered = out.contains(c) || (matches!(c, 'z' | 'g') && out.contains('A'));
        if !covered {
            out.push(c);
        }
    }
    out
}

/// The channel of database `db`'s new keys (the payload is the key).
pub fn new_key_channel(db: i64) -> String {
    format!("__keyevent@{db}__:new")
}

/// The [`Notice::pattern`] of a new key: not a sweep's pattern, so every sweep whose `match`
/// the key fits takes it.
pub const NEW_KEY: &[u8] = b"";

/// Why an error reply to `CONFIG` means the server will never answer it: an ACL without
/// `+config|get`, or a managed Redis that renamed or removed the command (it then answers as
/// to any unknown command). Asking again would only get the same answer.
pub fn config_refusal(code: &str, detail: &str) -> Option<&'static str> {
    match code {
        "NOPERM" => Some("the Redis user may not run CONFIG GET (add +config|get to its ACL)"),
        "ERR" if detail.starts_with("unknown command") => Some(
            "the server does not offer CONFIG (renamed or disabled, as managed Redis services do)",
        ),
        _ => None,
    }
}

/// The channel prefix of database `db`'s keyspace events.
pub fn channel_prefix(db: i64) -> String {
    format!("__keyspace@{db}__:")
}

/// What a notification says of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Members were added or raised, or the key was created: track it if unknown.
    Written,
    /// The key is gone (deleted, expired, evicted, renamed away).
    Deleted,
    /// Members were removed (the sweeper's own evictions among them): nothing for the index,
    /// but proof that notifications flow.
    Removed,
}

/// What an event name means for the index; `None` for events to ignore (TTL changes, and
/// anything that cannot create a key, bring a deadline forward, or prove notifications flow).
pub fn change(event: &[u8]) -> Option<Change> {
    // Most messages are heartbeats (`zadd`) and the sweeper's own removals (`zrem...`): decide
    // those on their first bytes.
    match event {
        b"zadd" | b"zincr" => Some(Change::Written),
        [b'z', b'r', b'e', b'm', ..] => Some(Change::Removed),
        b"zunionstore" | b"zinterstore" | b"zdiffstore" | b"zrangestore" | b"restore"
        | b"rename_to" | b"copy_to" | b"move_to" => Some(Change::Written),
        b"del" | b"expired" | b"evicted" | b"rename_from" | b"move_from" => Some(Change::Deleted),
        _ => None,
    }
}

/// One notification, as the primary's loop needs it.
#[derive(Debug, PartialEq)]
pub struct Notice {
    /// The subscribed pattern that matched (which sweep).
    pub pattern: Vec<u8>,
    /// The key.
    pub key: Vec<u8>,
    pub change: Change,
}

/// The notice of a message on `channel` (under `prefix`), if its event matters. The event is
/// looked at first: most messages under a burst are dropped there, before anything is copied.
pub fn notice(prefix: &[u8], pattern: &[u8], channel: &[u8], payload: &[u8]) -> Option<Notice> {
    let change = change(payload)?;
    let key = channel.strip_prefix(prefix)?;
    Some(Notice {
        pattern: pattern.to_vec(),
        key: key.to_vec(),
        change,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_that_cover_presence_keys() {
        for on in ["KEA", "AK", "Kz", "Kzg", "zK", "KA", "En", "nE"] {
            assert!(flags_cover(on), "{on}");
        }
        for off in ["", "Ez", "K", "Kg", "EA", "Kh"] {
            assert!(!flags_cover(off), "{off}");
        }
    }

    #[test]
    fn needed_flags_are_added_and_others_kept() {
        assert_eq!(with_needed("", false), "Kzg");
        assert_eq!(with_needed("Ex", false), "ExKzg");
        assert_eq!(with_needed("AE", false), "AEK");
        assert_eq!(with_needed("KEA", false), "KEA");
        assert!(flags_cover(&with_needed("Elh", false)));
        assert_eq!(with_needed("", true), "En");
        assert_eq!(
            with_needed("EA", true),
            "EAK",
            "n beside A is read back without it"
        );
        assert_eq!(Channels::of("AKE"), Some(Channels::Keyspace));
        assert_eq!(with_needed("Kx", true), "KxEn");
        assert_eq!(
            Channels::of(&with_needed("Elh", true)),
            Some(Channels::NewKeys)
        );
    }

    #[test]
    fn new_keys_are_preferred_wherever_the_server_publishes_them() {
        assert_eq!(Channels::of("En"), Some(Channels::NewKeys));
        assert_eq!(Channels::of("znKE"), Some(Channels::NewKeys));
        assert_eq!(Channels::of("KEA"), Some(Channels::Keyspace));
        assert_eq!(Channels::of("Kzg"), Some(Channels::Keyspace));
        assert_eq!(
            Channels::of("Kn"),
            None,
            "n without E publishes on no channel"
        );
        assert_eq!(Channels::of(""), None);
        assert!(Channels::Both.keyspace() && Channels::Both.new_keys());
        assert!(!Channels::NewKeys.keyspace() && !Channels::Keyspace.new_keys());
    }

    #[test]
    fn the_keyspace_channels_are_the_fallback_where_the_server_publishes_both() {
        let choices = |flags| Published::of(flags).map(Published::choices);
        // As Redis reads `Kzg En` back.
        assert_eq!(
            choices("gznKE"),
            Some(vec![Channels::NewKeys, Channels::Keyspace])
        );
        assert_eq!(choices("En"), Some(vec![Channels::NewKeys]));
        assert_eq!(choices("KEA"), Some(vec![Channels::Keyspace]));
        assert_eq!(choices("Eh"), None);
        assert_eq!(UNSAID[0], Channels::Both);
    }

    #[test]
    fn events_that_matter() {
        assert_eq!(change(b"zadd"), Some(Change::Written));
        assert_eq!(change(b"zincr"), Some(Change::Written));
        assert_eq!(change(b"zrangestore"), Some(Change::Written));
        assert_eq!(change(b"del"), Some(Change::Deleted));
        assert_eq!(change(b"expired"), Some(Change::Deleted));
        for removed in [&b"zrem"[..], b"zremrangebyscore", b"zremrangebyrank"] {
            assert_eq!(change(removed), Some(Change::Removed));
        }
        for ignored in [&b"expire"[..], b"zpopmin", b"persist"] {
            assert_eq!(change(ignored), None);
        }
    }

    #[test]
    fn config_refused_for_good_and_other_errors() {
        assert!(config_refusal("NOPERM", "User x has no permissions").is_some());
        assert!(
            config_refusal(
                "ERR",
                "unknown command 'CONFIG', with args beginning with: 'GET' "
            )
            .is_some()
        );
        assert_eq!(config_refusal("ERR", "syntax error"), None);
        assert_eq!(config_refusal("LOADING", "Redis is loading"), None);
    }
}
