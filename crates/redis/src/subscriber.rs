//! The notification path's own pub/sub connection, read only as fast as its reader takes
//! messages.
//!
//! Why not redis-rs's `PubSub`: its reader task reads the socket as fast as Redis writes and
//! queues every message, without bound, until the consumer takes it. Under a burst of writes
//! with little CPU for the daemon that queue is the daemon's memory: 300,000 new keys written at
//! about 140,000 writes/s for 25 s took the daemon under a 200m CPU limit to 277 and 306 MB of
//! peak RSS (issue 18).
//!
//! Here nothing reads the socket but the consumer, and only when no whole message is buffered
//! already: the buffer holds at most one read (`READ_CHUNK`) and one message. What the daemon
//! is slow to take waits in the kernel's socket buffers and then in Redis's output buffer for
//! this client, which Redis bounds itself (`client-output-buffer-limit pubsub`, 32 MB at once or
//! 8 MB for 60 s by default): past it Redis drops the subscriber, and the primary subscribes
//! again and reconciles with a walk, as after any lost subscription.
//!
//! It speaks RESP2 (the greeting never asks for RESP3): in subscribed mode every message is an
//! array whose first element names its kind (`pmessage`, `psubscribe`, `pong`, ...).

use std::io;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::packed::Packed;
use super::resp::{Item, Reader, ServerError, protocol, reply_len};
use super::wire::{self, Target, Transport};

/// Bytes asked of the socket at a time: about 400 keyspace messages of presence keys.
const READ_CHUNK: usize = 16 * 1024;

/// The largest message accepted. A keyspace message is its pattern, its channel (the key) and
/// its event: a key this long is no presence key, and the connection is dropped rather than
/// let the buffer grow (the primary resubscribes and a walk finds what was missed).
pub const MAX_MESSAGE: usize = 1024 * 1024;

/// One message of a subscribed connection, borrowed from the read buffer until the next read.
#[derive(Debug, PartialEq)]
pub enum Push<'a> {
    /// A published message that matched a pattern subscription.
    Message {
        /// The subscribed pattern that matched.
        pattern: &'a [u8],
        /// The channel it was published on.
        channel: &'a [u8],
        /// What was published.
        payload: &'a [u8],
    },
    /// A subscription confirmed (`psubscribe`, `subscribe`).
    Subscribed,
    /// The answer to a `PING`.
    Pong,
    /// An error reply (a refused `PSUBSCRIBE`).
    Error(ServerError),
    /// Anything else (an unsubscription, a plain `message`): of no use here.
    Other,
}

/// A connection in subscribed mode, greeted (authenticated, in its database, named).
pub struct Subscriber {
    stream: Box<dyn Transport>,
    buf: BytesMut,
    /// Length of the message handed out last: dropped from the buffer at the next read.
    taken: usize,
}

impl Subscriber {
    /// Connects to `target` and greets it as `name`, within `connect_timeout`.
    pub(super) async fn connect(
        target: &Target,
        name: &str,
        connect_timeout: Duration,
    ) -> redis::RedisResult<Self> {
        let stream = wire::greeted(target, name, connect_timeout).await?;
        Ok(Self::boxed(stream))
    }

    /// A subscriber over a socket already greeted (tests use a socket pair or a fake server).
    #[cfg(test)]
    pub fn over(
        stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    ) -> Self {
        Self::boxed(Box::new(stream))
    }

    fn boxed(stream: Box<dyn Transport>) -> Self {
        Self {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK),
            taken: 0,
        }
    }

    /// Writes one command (`PSUBSCRIBE`, `PING`); its answers come as messages.
    pub async fn command(&mut self, args: &[&[u8]]) -> io::Result<()> {
        let mut packed = Packed::default();
        packed.command(args);
        self.stream.write_all(&packed.into_bytes()).await?;
        self.stream.flush().await
    }

    /// The next message, reading the socket only if no whole one is buffered. Cancel-safe: a
    /// read that did not complete took nothing from the socket.
    pub async fn next(&mut self) -> io::Result<Push<'_>> {
        if self.taken > 0 {
            self.buf.advance(self.taken);
            self.taken = 0;
        }
        loop {
            if let Some(len) = reply_len(&self.buf, 0)? {
                self.taken = len;
                return push(&self.buf[..len]);
            }
            if self.buf.len() > MAX_MESSAGE {
                return Err(protocol("a pub/sub message over 1 MiB"));
            }
            self.buf.reserve(READ_CHUNK);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "Redis closed the notification connection",
                ));
            }
        }
    }

    /// Bytes held in memory now (what the bound is about): the buffer's capacity, which grows
    /// by doubling past [`READ_CHUNK`] only for a message that long.
    #[cfg(test)]
    pub fn buffered(&self) -> usize {
        self.buf.capacity()
    }
}

/// What the whole message `frame` is.
fn push(frame: &[u8]) -> io::Result<Push<'_>> {
    let mut r = Reader::new(frame);
    let n = match r.item().map_err(io::Error::other)? {
        Item::Array(n) if n >= 1 => n,
        Item::Error(e) => return Ok(Push::Error(e.owned())),
        // Outside subscribed mode a PING answers a status.
        Item::Status(b"PONG") => return Ok(Push::Pong),
        _ => return Ok(Push::Other),
    };
    Ok(match (bulk(&mut r)?, n) {
        (b"pmessage", 4) => Push::Message {
            pattern: bulk(&mut r)?,
            channel: bulk(&mut r)?,
            payload: bulk(&mut r)?,
        },
        (b"pong", _) => Push::Pong,
        (b"psubscribe" | b"subscribe", _) => Push::Subscribed,
        _ => Push::Other,
    })
}

fn bulk<'a>(r: &mut Reader<'a>) -> io::Result<&'a [u8]> {
    match r.item() {
        Ok(Item::Bulk(b)) => Ok(b),
        _ => Err(protocol(
            "a pub/sub message with a field that is not a string",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_kind_of_message() {
        assert_eq!(
            push(b"*4\r\n$8\r\npmessage\r\n$3\r\np:*\r\n$3\r\np:a\r\n$4\r\nzadd\r\n").unwrap(),
            Push::Message {
                pattern: b"p:*",
                channel: b"p:a",
                payload: b"zadd"
            }
        );
        assert_eq!(
            push(b"*3\r\n$10\r\npsubscribe\r\n$3\r\np:*\r\n:1\r\n").unwrap(),
            Push::Subscribed
        );
        assert_eq!(push(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n").unwrap(), Push::Pong);
        assert_eq!(push(b"+PONG\r\n").unwrap(), Push::Pong);
        assert_eq!(
            push(b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n").unwrap(),
            Push::Other
        );
        match push(b"-NOPERM no permission\r\n").unwrap() {
            Push::Error(e) => assert_eq!(e.code(), "NOPERM"),
            other => panic!("{other:?}"),
        }
        assert!(push(b"*4\r\n$8\r\npmessage\r\n:1\r\n$1\r\nc\r\n$1\r\nx\r\n").is_err());
    }

    #[tokio::test]
    async fn messages_cut_across_reads_are_joined() {
        let (mut server, client) = tokio::io::duplex(64);
        let mut sub = Subscriber::over(client);
        let msg = b"*4\r\n$8\r\npmessage\r\n$3\r\np:*\r\n$3\r\np:a\r\n$4\r\nzadd\r\n";
        tokio::spawn(async move {
            for chunk in msg.repeat(3).chunks(7) {
                server.write_all(chunk).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        for _ in 0..3 {
            assert!(matches!(
                sub.next().await.unwrap(),
                Push::Message {
                    channel: b"p:a",
                    ..
                }
            ));
        }
        assert!(sub.next().await.is_err(), "closed");
    }

    #[tokio::test]
    async fn a_message_over_the_limit_is_refused() {
        let (mut server, client) = tokio::io::duplex(64 * 1024);
        let mut sub = Subscriber::over(client);
        tokio::spawn(async move {
            let head = format!(
                "*4\r\n$8\r\npmessage\r\n$1\r\np\r\n${}\r\n",
                2 * MAX_MESSAGE
            );
            server.write_all(head.as_bytes()).await.unwrap();
            let _ = server.write_all(&vec![b'k'; 2 * MAX_MESSAGE]).await;
        });
        let e = sub.next().await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // The buffer grows by doubling: at most twice the longest message allowed.
        assert!(sub.buffered() <= 2 * (MAX_MESSAGE + READ_CHUNK));
    }
}
