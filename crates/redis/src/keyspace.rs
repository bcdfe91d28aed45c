//! The subscription to keyspace notifications: how the daemon learns of a new presence key within milliseconds of
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

use std::collections::VecDeque;
use std::time::Duration;

use presence_sweeper_rules::keyspace::{
    Availability, Change, Channels, NEW_KEY, Notice, Published, channel_prefix, config_refusal,
    new_key_channel, notice, with_needed,
};

use crate::subscriber::{Push, Subscriber};
use crate::{Error, Packed, SendPacked, ServerError, Value, all_ok, reply};

/// Asks the server what it publishes, on the primary's own connection (no connection of its
/// own: looking again costs one round trip, not a connect).
pub async fn availability<C>(con: &mut C) -> Result<Availability, Error>
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
    Ok(match Published::of(&flags) {
        Some(published) => Availability::On(published),
        None => Availability::Off(flags),
    })
}

/// The value of a one-parameter `CONFIG GET` reply (a flat pair, or a map).
fn config_value(v: Value) -> Option<String> {
    match v {
        Value::Array(mut pair) if pair.len() == 2 => reply::text(pair.pop()?),
        _ => None,
    }
}

/// Turns on what the daemon needs, keeping the server's other flags (the operator opted in with
/// `tracking.configure_notifications`): new keys (`En`) where the server has them, else the
/// keyspace events of sorted sets (`Kzg`; Redis 6.2 refuses `n`). Returns the flags set.
pub async fn enable<C>(con: &mut C, current: &str) -> Result<String, Error>
where
    C: SendPacked + Send,
{
    let mut refused = None;
    for new_keys in [true, false] {
        let flags = with_needed(current, new_keys);
        let mut batch = Packed::default();
        batch.command(&[
            b"CONFIG",
            b"SET",
            b"notify-keyspace-events",
            flags.as_bytes(),
        ]);
        match all_ok(con.send_packed(batch).await?) {
            Ok(_) => return Ok(flags),
            Err(e) => refused = Some(e),
        }
    }
    Err(refused.expect("tried").into())
}

/// Notices read while waiting for an answer on the subscription (its confirmations, a pong),
/// kept for [`Subscription::next`]: at most this many (about 150 KB of short keys).
const HELD: usize = 1024;

/// One primary's subscription to the keyspace events of its sweeps' keys, over the store's
/// [`Subscriber`]: read only as fast as the loop takes notices, so that a burst of writes waits
/// in Redis (bounded by its `client-output-buffer-limit pubsub`), not in the daemon's memory.
pub struct Subscription {
    sub: Subscriber,
    prefix: Vec<u8>,
    /// `__keyevent@<db>__:new`, whose messages name new keys.
    new_keys: Vec<u8>,
    /// Which notifications it listens to.
    channels: Channels,
    /// What it would have listened to had the ACL allowed: `channels`, or what it fell back
    /// from to the keyspace channels (the new keys, or both where the server will not say).
    preferred: Channels,
    held: VecDeque<Notice>,
}

/// One message of the subscription, as it concerns the daemon.
enum Read {
    Notice(Notice),
    Subscribed,
    Pong,
    Refused(ServerError),
    /// A message to ignore (the sweeper's own removals, events that change nothing).
    Nothing,
}

impl Subscription {
    /// Subscribes `sub` (a connection of its own to the primary) to `patterns`: channel
    /// patterns from [`channel_prefix`] and a sweep's `match`, or [`new_key_channel`] (a
    /// pattern without wildcards), within `timeout`.
    pub async fn start(
        sub: Subscriber,
        db: i64,
        patterns: &[String],
        timeout: Duration,
    ) -> Result<Self, Error> {
        let mut this = Self {
            sub,
            prefix: channel_prefix(db).into_bytes(),
            new_keys: new_key_channel(db).into_bytes(),
            channels: Channels::Both,
            preferred: Channels::Both,
            held: VecDeque::new(),
        };
        if !patterns.is_empty() {
            tokio::time::timeout(timeout, this.psubscribe(patterns))
                .await
                .map_err(|_| timed_out())??;
        }
        Ok(this)
    }

    /// Says which notifications `patterns` listen to, for [`Subscription::channels`], and
    /// which were wanted ([`Subscription::preferred`]).
    pub fn listening_to(mut self, channels: Channels, preferred: Channels) -> Self {
        self.channels = channels;
        self.preferred = preferred;
        self
    }

    /// Which notifications it listens to.
    pub fn channels(&self) -> Channels {
        self.channels
    }

    /// Which it would listen to had the ACL allowed.
    pub fn preferred(&self) -> Channels {
        self.preferred
    }

    async fn psubscribe(&mut self, patterns: &[String]) -> Result<(), Error> {
        let mut args: Vec<&[u8]> = vec![b"PSUBSCRIBE"];
        args.extend(patterns.iter().map(String::as_bytes));
        self.sub.command(&args).await.map_err(lost)?;
        let mut confirmed = 0;
        while confirmed < patterns.len() {
            match self.read().await? {
                Read::Subscribed => confirmed += 1,
                Read::Refused(e) => return Err(redis::RedisError::from(e).into()),
                // Past the bound, a notice is left to the walk that follows every new
                // subscription.
                Read::Notice(n) if self.held.len() < HELD => self.held.push_back(n),
                _ => {}
            }
        }
        Ok(())
    }

    /// A round trip on the subscribed connection: proves it still delivers (a paused server, or
    /// a connection a firewall dropped silently, would not answer).
    ///
    /// The notices ahead of the answer are held for [`Subscription::next`], up to `HELD`:
    /// under a burst, that many messages read after the `PING` prove delivery as well, and the
    /// answer, when it comes, is skipped.
    pub async fn ping(&mut self, timeout: Duration) -> Result<(), Error> {
        tokio::time::timeout(timeout, self.pong())
            .await
            .map_err(|_| timed_out())?
    }

    async fn pong(&mut self) -> Result<(), Error> {
        self.sub.command(&[b"PING"]).await.map_err(lost)?;
        loop {
            match self.read().await? {
                Read::Pong => return Ok(()),
                Read::Notice(n) => {
                    self.held.push_back(n);
                    if self.held.len() >= HELD {
                        return Ok(());
                    }
                }
                Read::Refused(e) => return Err(redis::RedisError::from(e).into()),
                Read::Subscribed | Read::Nothing => {}
            }
        }
    }

    /// The next notification that matters; `None` once the connection is gone. Cancel-safe.
    pub async fn next(&mut self) -> Option<Notice> {
        if let Some(n) = self.held.pop_front() {
            return Some(n);
        }
        loop {
            match self.read().await {
                Ok(Read::Notice(n)) => return Some(n),
                Ok(Read::Refused(e)) => {
                    tracing::debug!(error = %redis::RedisError::from(e), "an error on the notification connection");
                    return None;
                }
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// The next message, read only when the loop asks for one.
    async fn read(&mut self) -> Result<Read, Error> {
        Ok(match self.sub.next().await.map_err(lost)? {
            Push::Message {
                channel, payload, ..
            } if channel == self.new_keys.as_slice() => Read::Notice(Notice {
                pattern: NEW_KEY.to_vec(),
                key: payload.to_vec(),
                change: Change::Written,
            }),
            Push::Message {
                pattern,
                channel,
                payload,
            } => {
                notice(&self.prefix, pattern, channel, payload).map_or(Read::Nothing, Read::Notice)
            }
            Push::Subscribed => Read::Subscribed,
            Push::Pong => Read::Pong,
            Push::Error(e) => Read::Refused(e),
            Push::Other => Read::Nothing,
        })
    }
}

fn lost(e: std::io::Error) -> Error {
    Error::Redis(redis::RedisError::from(e))
}

fn timed_out() -> Error {
    Error::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "Redis did not answer on the notification connection in time",
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use presence_sweeper_rules::keyspace::Change;

    use super::*;

    /// What the subscriber's read buffer may reach: one read beside one short message.
    const READ_CHUNK_BOUND: usize = 16 * 1024;

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

    /// A fake server: confirms the subscription, then writes `message` `times` times (or
    /// forever), counting the bytes it got written; answers a PING with a pong after them.
    async fn flooding(
        times: Option<usize>,
        message: &'static [u8],
    ) -> (Subscriber, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let written = Arc::new(AtomicUsize::new(0));
        let count = written.clone();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf).await.unwrap();
            s.write_all(b"*3\r\n$10\r\npsubscribe\r\n$3\r\np:*\r\n:1\r\n")
                .await
                .unwrap();
            let (mut rd, mut wr) = s.into_split();
            let (ping, mut pinged) = tokio::sync::mpsc::channel(4);
            tokio::spawn(async move {
                while rd.read(&mut buf).await.is_ok_and(|n| n > 0) {
                    let _ = ping.send(()).await;
                }
            });
            let mut sent = 0;
            while times.is_none_or(|t| sent < t) {
                if wr.write_all(message).await.is_err() {
                    return;
                }
                sent += 1;
                count.fetch_add(message.len(), Ordering::Relaxed);
            }
            while pinged.recv().await.is_some() {
                let _ = wr.write_all(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n").await;
            }
        });
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        (Subscriber::over(stream), written)
    }

    const ZADD: &[u8] =
        b"*4\r\n$8\r\npmessage\r\n$3\r\np:*\r\n$18\r\n__keyspace@0__:p:a\r\n$4\r\nzadd\r\n";
    const ZREM: &[u8] =
        b"*4\r\n$8\r\npmessage\r\n$3\r\np:*\r\n$18\r\n__keyspace@0__:p:a\r\n$4\r\nzrem\r\n";

    #[tokio::test]
    async fn a_flood_waits_in_the_socket_not_in_memory() {
        let (sub, written) = flooding(None, ZADD).await;
        let t = Duration::from_secs(5);
        let mut sub = Subscription::start(sub, 0, &["p:*".into()], t)
            .await
            .unwrap();
        // A slow consumer: a notice now and then, and a ping amid the flood.
        for round in 0..50 {
            let n = sub.next().await.unwrap();
            assert_eq!((n.key.as_slice(), n.change), (&b"p:a"[..], Change::Written));
            if round == 10 {
                sub.ping(t).await.unwrap();
                assert_eq!(
                    sub.held.len(),
                    HELD,
                    "a ping under a flood holds at most HELD"
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let early = written.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let late = written.load(Ordering::Relaxed);
        // The server's writes stopped once the kernel's buffers were full (a few MB on
        // loopback): unread messages stay there, and in Redis, bounded by its own limit.
        assert_eq!(early, late, "the server is held back");
        assert!(late < 64 << 20, "{late} bytes written");
        assert!(
            sub.sub.buffered() <= 4 * READ_CHUNK_BOUND,
            "{}",
            sub.sub.buffered()
        );
        // Still subscribed: what was written comes in order.
        assert!(sub.next().await.is_some());
    }

    #[tokio::test]
    async fn the_sweepers_own_removals_prove_flow_and_a_ping_is_answered() {
        let (sub, _) = flooding(Some(3), ZREM).await;
        let t = Duration::from_secs(5);
        let mut sub = Subscription::start(sub, 0, &["p:*".into()], t)
            .await
            .unwrap();
        sub.ping(t).await.unwrap();
        // Removals change nothing in the index, but they are notices: notifications flow.
        assert_eq!(sub.held.len(), 3);
        for _ in 0..3 {
            assert_eq!(sub.next().await.unwrap().change, Change::Removed);
        }
        // The server closed nothing; no notice is due, so `next` waits.
        let next = tokio::time::timeout(Duration::from_millis(100), sub.next()).await;
        assert!(next.is_err(), "nothing but removals came");
    }

    #[tokio::test]
    async fn notices_ahead_of_the_pong_are_kept() {
        let (sub, _) = flooding(Some(5), ZADD).await;
        let t = Duration::from_secs(5);
        let mut sub = Subscription::start(sub, 0, &["p:*".into()], t)
            .await
            .unwrap();
        sub.ping(t).await.unwrap();
        for _ in 0..5 {
            assert_eq!(sub.next().await.unwrap().change, Change::Written);
        }
        assert!(sub.held.is_empty());
    }

    #[tokio::test]
    async fn a_refused_subscription_is_a_permission_error() {
        let (mut server, client) = tokio::io::duplex(1024);
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = [0u8; 256];
            let _ = server.read(&mut buf).await;
            let _ = server
                .write_all(
                    b"-NOPERM this user has no permissions to access one of the channels\r\n",
                )
                .await;
            let _ = server.read(&mut buf).await;
        });
        let t = Duration::from_secs(5);
        let refused = Subscription::start(Subscriber::over(client), 0, &["p:*".into()], t).await;
        assert!(matches!(refused, Err(Error::Permission { .. })));
    }
}
