//! The data path's own connection to one server: pipelined requests over one socket, read with
//! the crate's own RESP2 decoder (`resp`).
//!
//! Why not redis-rs's connection: profiling a pass showed more than half of the sweeper's CPU in
//! its general-purpose reply parser, and a pass is nothing but replies (a SCAN page of a thousand
//! keys, a count per key, a transaction's members). Here a reply is decoded once into a
//! [`Value`] with exact-size allocations, or handed over as bytes for a caller that reads it in
//! place; commands are encoded by hand (`packed`).
//!
//! Scope: the data path, over plain TCP, TLS (tokio-rustls, with the certificates redis-rs would
//! use: see `tls`) and unix sockets, publishing included. Every other use of Redis keeps
//! redis-rs's connections (leases, preflight, the cluster's topology), but pub/sub (keyspace
//! notifications, `simulate`'s events), which has its own bounded reader on this module's
//! sockets (`subscriber`).

mod connect;
mod driver;
mod failure;
mod request;
#[cfg(test)]
mod tests;

use std::time::Duration;

use redis::RedisResult;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use self::connect::{Hello, open};
use self::driver::drive;
use self::failure::{no_answer, unsent};
use self::request::{Answer, Request};
use crate::resp::{Value, protocol};

pub(crate) use self::connect::{Target, Transport, greeted};
pub use self::failure::is_reply_lost;
pub(crate) use self::failure::no_connection;
pub use self::request::Wait;

/// A pipelined connection to one server. Clones share the socket: requests from concurrent
/// batches are written in order and answered in order. It never reconnects: once its socket
/// fails every request fails, [`Wire::is_closed`] turns true, and the store opens a new one.
///
/// A request that times out retires the wire: nothing new is written to it. Requests already
/// written that change data ([`Wait::Outcome`]) are still heard on it, until their own longer
/// limit: a server that was stalled (SIGSTOP, a frozen VM, a slow disk, a network that held
/// its replies) runs what it had read once it resumes, and what an eviction removed can only
/// be announced if its reply is read.
#[derive(Clone)]
pub(crate) struct Wire {
    requests: mpsc::UnboundedSender<Request>,
    /// Fired when a request times out: a server that stops answering (paused, or a connection
    /// a firewall dropped silently) is not asked again on this socket.
    retire: CancellationToken,
    timeout: Duration,
    /// The whole wait for the reply of a request that changes data (at least `timeout`).
    outcome_timeout: Duration,
}

impl Wire {
    /// Connects, authenticates, selects the database and names the connection `name`, within
    /// `connect_timeout`. Each request then waits at most `timeout` for its replies, and one
    /// that changes data at most `outcome_timeout` (or `timeout`, if that is longer).
    pub(crate) async fn connect(
        target: &Target,
        name: &str,
        connect_timeout: Duration,
        timeout: Duration,
        outcome_timeout: Duration,
    ) -> RedisResult<Self> {
        let stream = open(target, connect_timeout).await?;
        let (requests, rx) = mpsc::unbounded_channel();
        let retire = CancellationToken::new();
        let outcome_timeout = outcome_timeout.max(timeout);
        tokio::spawn(drive(stream, rx, retire.clone(), outcome_timeout));
        let mut wire = Self {
            requests,
            retire,
            timeout: connect_timeout,
            outcome_timeout,
        };
        let hello = Hello::new(target, name);
        let replies = wire.send(hello.bytes, hello.count, Wait::Reply).await;
        if let Err(e) = replies.and_then(Hello::accepted) {
            wire.retire.cancel();
            return Err(e);
        }
        wire.timeout = timeout;
        Ok(wire)
    }

    /// Whether the socket has failed or closed; such a wire only answers errors.
    pub(crate) fn is_closed(&self) -> bool {
        self.requests.is_closed() || self.retire.is_cancelled()
    }

    /// Writes `bytes` (RESP commands) and returns their `count` replies.
    pub(crate) async fn send(
        &self,
        bytes: Vec<u8>,
        count: usize,
        wait: Wait,
    ) -> RedisResult<Vec<Value>> {
        match self.request(bytes, count, false, wait).await? {
            Answer::Values(values) => Ok(values),
            Answer::Raw(_) => Err(protocol("raw replies to a request for values").into()),
        }
    }

    /// Writes `bytes` (RESP commands) and returns the RESP bytes of their `count` replies, for a
    /// caller that reads them without building values.
    pub(crate) async fn send_raw(
        &self,
        bytes: Vec<u8>,
        count: usize,
        wait: Wait,
    ) -> RedisResult<Vec<u8>> {
        match self.request(bytes, count, true, wait).await? {
            Answer::Raw(raw) => Ok(raw),
            Answer::Values(_) => Err(protocol("values in reply to a request for bytes").into()),
        }
    }

    async fn request(
        &self,
        bytes: Vec<u8>,
        count: usize,
        raw: bool,
        wait: Wait,
    ) -> RedisResult<Answer> {
        if count == 0 {
            return Ok(if raw {
                Answer::Raw(Vec::new())
            } else {
                Answer::Values(Vec::new())
            });
        }
        if self.retire.is_cancelled() {
            return Err(unsent().into());
        }
        let (reply, mut answer) = oneshot::channel();
        let request = Request {
            bytes,
            count,
            raw,
            wait,
            reply,
        };
        self.requests.send(request).map_err(|_| unsent())?;
        let answered = match tokio::time::timeout(self.timeout, &mut answer).await {
            Ok(answered) => answered,
            Err(_) => {
                self.retire.cancel();
                if wait == Wait::Reply {
                    return Err(no_answer("Redis did not answer in time").into());
                }
                let rest = self.outcome_timeout.saturating_sub(self.timeout);
                let late = tokio::time::timeout(rest, answer).await.map_err(|_| {
                    no_answer(&format!(
                        "Redis did not answer a call that changes data within {:?}",
                        self.outcome_timeout
                    ))
                })?;
                if late.as_ref().is_ok_and(Result::is_ok) {
                    tracing::debug!(
                        after = ?self.timeout,
                        "Redis answered a call that changes data after the command timeout"
                    );
                }
                late
            }
        };
        match answered {
            Ok(result) => Ok(result?),
            // Dropped unread in the queue: the socket failed before this request was written.
            Err(_) => Err(unsent().into()),
        }
    }
}
