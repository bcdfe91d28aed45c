//! A request on a wire as its socket's task sees it: the bytes to write, how many replies to
//! hand back and how ([`Answer`]), how long its requester waits ([`Wait`]), and, once written,
//! its replies as they arrive ([`Pending`]).

use std::io;

use tokio::sync::oneshot;

use crate::resp::Value;

/// How long a request's reply is waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Given up at `redis.command_timeout`: reads, and requests whose lost reply costs no
    /// more than a count (a publish, a stream sweep's script, which publishes itself).
    Reply,
    /// A call whose reply alone says what it changed (an eviction without a stream): after
    /// `redis.command_timeout` the wire retires, but this reply is still read from its socket
    /// until `redis.eviction_timeout`. Its change must happen in its last command only (`EXEC`,
    /// `EVALSHA`), so that a request cut while being written changed nothing.
    Outcome,
}

/// What a request gets back.
pub(super) enum Answer {
    /// The replies, decoded.
    Values(Vec<Value>),
    /// The replies' RESP bytes, as they came, for a caller that reads them itself.
    Raw(Vec<u8>),
}

/// A request as its requester hands it to the socket's task.
pub(super) struct Request {
    /// RESP commands, written as they are.
    pub(super) bytes: Vec<u8>,
    /// Replies to return.
    pub(super) count: usize,
    /// Whether to return the replies as bytes rather than values.
    pub(super) raw: bool,
    pub(super) wait: Wait,
    pub(super) reply: oneshot::Sender<io::Result<Answer>>,
}

/// A request written to the socket, waiting for its replies.
pub(super) struct Pending {
    /// Replies to return.
    pub(super) count: usize,
    /// Replies kept so far.
    pub(super) seen: usize,
    pub(super) values: Vec<Value>,
    pub(super) raw: Option<Vec<u8>>,
    pub(super) wait: Wait,
    /// `None` once the request was failed early (the wire retired): its replies are read and
    /// dropped, to reach the ones behind them.
    reply: Option<oneshot::Sender<io::Result<Answer>>>,
}

impl Pending {
    pub(super) fn new(request: Request) -> Self {
        Self {
            count: request.count,
            seen: 0,
            values: Vec::with_capacity(if request.raw { 0 } else { request.count }),
            raw: request.raw.then(Vec::new),
            wait: request.wait,
            reply: Some(request.reply),
        }
    }

    /// Hands the replies to the requester, which may have given up (timed out): they are
    /// dropped then.
    pub(super) fn finish(self) {
        let Some(reply) = self.reply else { return };
        let answer = match self.raw {
            Some(raw) => Answer::Raw(raw),
            None => Answer::Values(self.values),
        };
        let _ = reply.send(Ok(answer));
    }

    /// Fails the request with `e`, unless it already was.
    pub(super) fn fail(&mut self, e: &io::Error) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Err(io::Error::new(e.kind(), e.to_string())));
        }
    }

    /// A request that changes data whose requester still waits for its outcome.
    pub(super) fn awaits_outcome(&self) -> bool {
        self.wait == Wait::Outcome && self.reply.as_ref().is_some_and(|r| !r.is_closed())
    }
}
