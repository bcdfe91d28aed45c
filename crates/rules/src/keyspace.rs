//! Keyspace notifications as the rules read them: which flags of `notify-keyspace-events`
//! serve presence keys, and what a notification says of its key. Subscribing is the daemon's.

/// What a primary's `notify-keyspace-events` allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// `K` and `z` (or `A`): every sorted-set write of a key is published.
    On,
    /// Off, or without what presence keys need; the flags as the server reports them.
    Off(String),
    /// The server will not say (the Redis user may not run `CONFIG GET`, or the server does
    /// not offer `CONFIG`), and why: only notices arriving tell.
    Unknown(String),
}

/// Whether `flags` (as `CONFIG GET notify-keyspace-events` reports them) publish keyspace
/// events of sorted-set writes and of deletions.
pub fn flags_cover(flags: &str) -> bool {
    flags.contains('K') && (flags.contains('A') || flags.contains('z'))
}

/// `flags` with what the daemon needs added: `K` (keyspace channels), `z` (sorted sets) and `g`
/// (deletions and renames), keeping whatever else the server publishes.
pub fn with_needed(flags: &str) -> String {
    let mut out = flags.to_owned();
    for c in ['K', 'z', 'g'] {
        // `A` stands for every class of event, `z` and `g` among them.
        let covered = out.contains(c) || (c != 'K' && out.contains('A'));
        if !covered {
            out.push(c);
        }
    }
    out
}

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
        for on in ["KEA", "AK", "Kz", "Kzg", "zK", "KA"] {
            assert!(flags_cover(on), "{on}");
        }
        for off in ["", "Ez", "K", "Kg", "EA", "Kh"] {
            assert!(!flags_cover(off), "{off}");
        }
    }

    #[test]
    fn needed_flags_are_added_and_others_kept() {
        assert_eq!(with_needed(""), "Kzg");
        assert_eq!(with_needed("Ex"), "ExKzg");
        assert_eq!(with_needed("AE"), "AEK");
        assert_eq!(with_needed("KEA"), "KEA");
        assert!(flags_cover(&with_needed("Elh")));
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
