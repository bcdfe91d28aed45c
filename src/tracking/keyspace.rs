//! Keyspace notifications: how the daemon learns of a new presence key within milliseconds of
//! its first `ZADD`, instead of at the next walk.
//!
//! They are Redis's own, off by default (`notify-keyspace-events`). The daemon uses them where
//! the server has them on (`K` with `z` or `A`): on each primary it subscribes
//! (`PSUBSCRIBE __keyspace@<db>__:<match>`, one pattern per sweep) and reads one message per
//! write of a matching key, whose payload is the event (`zadd`, `del`, ...). It never changes
//! the server's configuration unless `tracking.configure_notifications` says it may.
//!
//! Notifications are fire-and-forget pub/sub: a subscriber that reconnects has lost what was
//! sent meanwhile, so every (re)subscription is followed by a reconciliation walk. In a cluster
//! each node publishes only its own keys' events: every primary gets its own subscription.
//! Messages come for the sweeper's own removals too (`zrem...`): told apart by their first
//! bytes, they change nothing in the index but prove that notifications flow, even where the
//! server will not say whether they are on (`CONFIG` refused, as managed services do).

use std::time::Duration;

use futures_util::StreamExt;
use redis::Value;
use redis::aio::{PubSubSink, PubSubStream};

use crate::Error;
use crate::store::{Packed, SendPacked, all_ok};

/// What a primary's `notify-keyspace-events` allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Availability {
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
pub(crate) fn flags_cover(flags: &str) -> bool {
    flags.contains('K') && (flags.contains('A') || flags.contains('z'))
}

/// `flags` with what the daemon needs added: `K` (keyspace channels), `z` (sorted sets) and `g`
/// (deletions and renames), keeping whatever else the server publishes.
pub(crate) fn with_needed(flags: &str) -> String {
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

/// Asks the server what it publishes, on the primary's own connection (no connection of its
/// own: looking again costs one round trip, not a connect).
pub(crate) async fn availability<C>(con: &mut C) -> Result<Availability, Error>
where
    C: SendPacked + Send,
{
    let mut batch = Packed::default();
    batch.command(&[b"CONFIG", b"GET", b"notify-keyspace-events"]);
    let reply = con.send_packed(batch).await?.pop().unwrap_or(Value::Nil);
    if let Value::ServerError(e) = &reply {
        return match config_refusal(e.code(), e.details().unwrap_or_default()) {
            Some(why) => Ok(Availability::Unknown(why.into())),
            None => Err(redis::RedisError::from(e.clone()).into()),
        };
    }
    let flags = config_value(reply).unwrap_or_default();
    Ok(match flags_cover(&flags) {
        true => Availability::On,
        false => Availability::Off(flags),
    })
}

/// Why an error reply to `CONFIG` means the server will never answer it: an ACL without
/// `+config|get`, or a managed Redis that renamed or removed the command (it then answers as
/// to any unknown command). Asking again would only get the same answer.
pub(crate) fn config_refusal(code: &str, detail: &str) -> Option<&'static str> {
    match code {
        "NOPERM" => Some("the Redis user may not run CONFIG GET (add +config|get to its ACL)"),
        "ERR" if detail.starts_with("unknown command") => Some(
            "the server does not offer CONFIG (renamed or disabled, as managed Redis services do)",
        ),
        _ => None,
    }
}

/// The value of a one-parameter `CONFIG GET` reply (a flat pair, or a map).
fn config_value(v: Value) -> Option<String> {
    let value = match v {
        Value::Array(mut pair) if pair.len() == 2 => pair.pop()?,
        Value::Map(mut pairs) if pairs.len() == 1 => pairs.pop()?.1,
        _ => return None,
    };
    redis::from_redis_value::<String>(value).ok()
}

/// Turns on what the daemon needs, keeping the server's other flags (the operator opted in with
/// `tracking.configure_notifications`). Returns the flags set.
pub(crate) async fn enable<C>(con: &mut C, current: &str) -> Result<String, Error>
where
    C: SendPacked + Send,
{
    let flags = with_needed(current);
    let mut batch = Packed::default();
    batch.command(&[
        b"CONFIG",
        b"SET",
        b"notify-keyspace-events",
        flags.as_bytes(),
    ]);
    all_ok(con.send_packed(batch).await?)?;
    Ok(flags)
}

/// The channel prefix of database `db`'s keyspace events.
pub(crate) fn channel_prefix(db: i64) -> String {
    format!("__keyspace@{db}__:")
}

/// What a notification says of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
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
pub(crate) fn change(event: &[u8]) -> Option<Change> {
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

/// One primary's subscription to the keyspace events of its sweeps' keys.
pub(crate) struct Subscription {
    sink: PubSubSink,
    stream: PubSubStream,
    prefix: Vec<u8>,
}

/// One notification, as the primary's loop needs it.
#[derive(Debug)]
pub(crate) struct Notice {
    /// The subscribed pattern that matched (which sweep).
    pub(crate) pattern: Vec<u8>,
    /// The key.
    pub(crate) key: Vec<u8>,
    pub(crate) change: Change,
}

impl Subscription {
    /// Subscribes `pubsub` (a connection of its own to the primary) to `patterns` (channel
    /// patterns from [`channel_prefix`] and a sweep's `match`), within `timeout`.
    pub(crate) async fn start(
        pubsub: redis::aio::PubSub,
        db: i64,
        patterns: &[String],
        timeout: Duration,
    ) -> Result<Self, Error> {
        let (mut sink, stream) = pubsub.split();
        if !patterns.is_empty() {
            tokio::time::timeout(timeout, sink.psubscribe(patterns))
                .await
                .map_err(|_| timed_out())??;
        }
        Ok(Self {
            sink,
            stream,
            prefix: channel_prefix(db).into_bytes(),
        })
    }

    /// A round trip on the subscribed connection: proves it still delivers (a paused server, or
    /// a connection a firewall dropped silently, would not answer).
    pub(crate) async fn ping(&mut self, timeout: Duration) -> Result<(), Error> {
        tokio::time::timeout(timeout, self.sink.ping::<Value>())
            .await
            .map_err(|_| timed_out())??;
        Ok(())
    }

    /// The next notification that matters; `None` once the connection is gone.
    pub(crate) async fn next(&mut self) -> Option<Notice> {
        loop {
            let msg = self.stream.next().await?;
            let Some(change) = change(msg.get_payload_bytes()) else {
                continue;
            };
            let (Ok(pattern), Ok(channel)) =
                (msg.get_pattern::<Vec<u8>>(), msg.get_channel::<Vec<u8>>())
            else {
                continue;
            };
            let Some(key) = channel.strip_prefix(self.prefix.as_slice()) else {
                continue;
            };
            return Some(Notice {
                pattern,
                key: key.to_vec(),
                change,
            });
        }
    }
}

fn timed_out() -> Error {
    Error::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "Redis did not answer on the notification connection in time",
    )))
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

    #[test]
    fn config_get_replies() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            config_value(Value::Array(vec![
                bulk("notify-keyspace-events"),
                bulk("AKE")
            ])),
            Some("AKE".into())
        );
        assert_eq!(config_value(Value::Nil), None);
    }
}
