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

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use redis::{ConnectionAddr, ConnectionInfo, RedisResult};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::packed::Packed;
use super::reply::all_ok;
use super::resp::{Framer, Reader, Value, protocol, reply_len};

/// Read buffer size; a reply bigger than this simply grows it.
const READ_CHUNK: usize = 64 * 1024;

/// Most requests gathered into one write (the system allows 1024 buffers per call).
const MAX_GATHER: usize = 512;

/// How often a retired wire that waits for outcomes looks whether anyone still waits.
const GAVE_UP_CHECK: Duration = Duration::from_secs(1);

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
pub(super) struct Wire {
    requests: mpsc::UnboundedSender<Request>,
    /// Fired when a request times out: a server that stops answering (paused, or a connection
    /// a firewall dropped silently) is not asked again on this socket.
    retire: CancellationToken,
    timeout: Duration,
    /// The whole wait for the reply of a request that changes data (at least `timeout`).
    outcome_timeout: Duration,
}

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

/// Where a wire connects and as whom. Not `Debug`: it holds the password.
#[derive(Clone)]
pub(super) struct Target {
    addr: Addr,
    username: Option<String>,
    password: Option<String>,
    db: i64,
}

#[derive(Clone)]
enum Addr {
    Tcp(String, u16),
    Tls(String, u16, Arc<rustls::ClientConfig>),
    Unix(PathBuf),
}

impl Target {
    /// The target of a redis-rs connection description; a TLS one is reached with `tls`. `Err`
    /// says why it cannot be (TLS without its configuration, or asking not to verify the
    /// server, which the sweeper never does).
    pub(super) fn from_info(
        info: &ConnectionInfo,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Result<Self, String> {
        let addr = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Addr::Tcp(host.clone(), *port),
            ConnectionAddr::TcpTls { insecure: true, .. } => {
                return Err("a TLS server that is not to be verified".into());
            }
            ConnectionAddr::TcpTls { host, port, .. } => match tls {
                Some(config) => Addr::Tls(host.clone(), *port, config.clone()),
                None => return Err("a TLS server without a TLS configuration".into()),
            },
            ConnectionAddr::Unix(path) => Addr::Unix(path.clone()),
            _ => return Err("an address of a kind the data path does not speak".into()),
        };
        let settings = info.redis_settings();
        Ok(Self {
            addr,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
            db: settings.db(),
        })
    }
}

impl std::fmt::Display for Target {
    /// The server's address (never the credentials).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.addr {
            Addr::Tcp(host, port) | Addr::Tls(host, port, _) => write!(f, "{host}:{port}"),
            Addr::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What a request gets back.
enum Answer {
    /// The replies, decoded.
    Values(Vec<Value>),
    /// The replies' RESP bytes, as they came, for a caller that reads them itself.
    Raw(Vec<u8>),
}

struct Request {
    bytes: Vec<u8>,
    /// Replies to return.
    count: usize,
    /// Whether to return the replies as bytes rather than values.
    raw: bool,
    wait: Wait,
    reply: oneshot::Sender<io::Result<Answer>>,
}

struct Pending {
    count: usize,
    /// Replies kept so far.
    seen: usize,
    values: Vec<Value>,
    raw: Option<Vec<u8>>,
    wait: Wait,
    /// `None` once the request was failed early (the wire retired): its replies are read and
    /// dropped, to reach the ones behind them.
    reply: Option<oneshot::Sender<io::Result<Answer>>>,
}

impl Pending {
    fn new(request: Request) -> Self {
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
    fn finish(self) {
        let Some(reply) = self.reply else { return };
        let answer = match self.raw {
            Some(raw) => Answer::Raw(raw),
            None => Answer::Values(self.values),
        };
        let _ = reply.send(Ok(answer));
    }

    /// Fails the request with `e`, unless it already was.
    fn fail(&mut self, e: &io::Error) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Err(io::Error::new(e.kind(), e.to_string())));
        }
    }

    /// A request that changes data whose requester still waits for its outcome.
    fn awaits_outcome(&self) -> bool {
        self.wait == Wait::Outcome && self.reply.as_ref().is_some_and(|r| !r.is_closed())
    }
}

/// A socket to Redis: TCP, TLS or a unix socket.
pub(super) trait Transport: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Transport for T {}

impl Wire {
    /// Connects, authenticates, selects the database and names the connection `name`, within
    /// `connect_timeout`. Each request then waits at most `timeout` for its replies, and one
    /// that changes data at most `outcome_timeout` (or `timeout`, if that is longer).
    pub(super) async fn connect(
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
    pub(super) fn is_closed(&self) -> bool {
        self.requests.is_closed() || self.retire.is_cancelled()
    }

    /// Writes `bytes` (RESP commands) and returns their `count` replies.
    pub(super) async fn send(
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
    pub(super) async fn send_raw(
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

fn no_answer(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

/// Opens a socket to `target` within `connect_timeout`.
async fn open(target: &Target, connect_timeout: Duration) -> io::Result<Box<dyn Transport>> {
    tokio::time::timeout(connect_timeout, async {
        Ok::<Box<dyn Transport>, io::Error>(match &target.addr {
            Addr::Tcp(host, port) => {
                let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
            Addr::Tls(host, port, config) => {
                let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                s.set_nodelay(true)?;
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                let tls = tokio_rustls::TlsConnector::from(config.clone());
                Box::new(tls.connect(name, s).await?)
            }
            #[cfg(unix)]
            Addr::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            #[cfg(not(unix))]
            Addr::Unix(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "unix sockets are not supported here",
                ));
            }
        })
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
}

/// What a new connection says first: AUTH and SELECT where needed, PING (so that even with
/// nothing to authenticate or select, the server is proven to answer, and to speak RESP), then
/// `CLIENT SETNAME`, whose refusal (an ACL without it) is no failure.
struct Hello {
    bytes: Vec<u8>,
    count: usize,
}

impl Hello {
    fn new(target: &Target, name: &str) -> Self {
        let mut hello = Packed::default();
        if let Some(password) = &target.password {
            match &target.username {
                Some(user) => hello.command(&[b"AUTH", user.as_bytes(), password.as_bytes()]),
                None => hello.command(&[b"AUTH", password.as_bytes()]),
            };
        }
        let db = target.db.to_string();
        if target.db != 0 {
            hello.command(&[b"SELECT", db.as_bytes()]);
        }
        hello.command(&[b"PING"]);
        hello.command(&[b"CLIENT", b"SETNAME", name.as_bytes()]);
        let count = hello.len();
        Self {
            bytes: hello.into_bytes(),
            count,
        }
    }

    /// Fails on an error reply to anything but the name.
    fn accepted(mut replies: Vec<Value>) -> RedisResult<()> {
        if let Some(Value::ServerError(e)) = replies.pop() {
            tracing::debug!(error = %e, "could not name a connection (CLIENT SETNAME)");
        }
        all_ok(replies).map(drop)
    }
}

/// Opens a socket to `target` and says [`Hello`] on it, then hands the socket over: for the
/// pub/sub subscriber, which reads it its own way. The whole greeting is bounded by
/// `connect_timeout`.
pub(super) async fn greeted(
    target: &Target,
    name: &str,
    connect_timeout: Duration,
) -> RedisResult<Box<dyn Transport>> {
    let greet = async {
        let mut stream = open(target, connect_timeout).await?;
        let hello = Hello::new(target, name);
        stream.write_all(&hello.bytes).await?;
        let mut input = BytesMut::with_capacity(1024);
        let mut replies = Vec::with_capacity(hello.count);
        while replies.len() < hello.count {
            match reply_len(&input, 0)? {
                Some(len) => {
                    let value = Reader::new(&input[..len]).value()?;
                    replies.push(value.ok_or_else(|| protocol("a whole reply read as cut"))?);
                    input.advance(len);
                }
                None if stream.read_buf(&mut input).await? == 0 => return Err(closed().into()),
                None => {}
            }
        }
        if !input.is_empty() {
            return Err(protocol("more replies than commands").into());
        }
        Hello::accepted(replies)?;
        Ok(stream)
    };
    tokio::time::timeout(connect_timeout, greet)
        .await
        .unwrap_or_else(
            |_| Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out").into()),
        )
}

fn retired() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "a request on this connection timed out; it is not used again",
    )
}

/// A request that never reached the socket: Redis cannot have run it. Its kind tells it apart
/// from a request that was written and then lost its reply (which Redis may have run).
fn unsent() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, UNSENT)
}

const UNSENT: &str = "the connection to Redis closed before the request was sent";

/// A request for a node that has no connection (it could not connect): never sent either.
pub(super) fn no_connection(server: &str, why: &str) -> redis::RedisError {
    io::Error::new(
        io::ErrorKind::NotConnected,
        format!("{NO_CONNECTION}{server}: {why}"),
    )
    .into()
}

const NO_CONNECTION: &str = "no connection to ";

/// Whether `e` is a request that never reached Redis (see [`unsent`], [`no_connection`]). By
/// its text: redis-rs keeps the `io::Error` inside behind a private accessor, and these texts
/// are only ever ours.
fn is_unsent(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    e.is_io_error() && (text.contains(UNSENT) || text.contains(NO_CONNECTION))
}

/// Whether `e` is a request that was written and then lost its reply (a timeout, a connection
/// reset): Redis may have run it. Never sent, refused, or answered with an error: it did not.
pub fn is_reply_lost(e: &redis::RedisError) -> bool {
    e.is_io_error() && !is_unsent(e) && !e.is_connection_refusal()
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "the connection to Redis closed",
    )
}

/// The socket's one task: writes requests in the order they come and hands each reply to the
/// request it answers. Ends when the socket fails or every handle is gone; requests still
/// waiting then fail. Once retired it writes nothing more, and reads on only while a
/// [`Wait::Outcome`] request waits for its reply, for at most `outcome_timeout`.
async fn drive(
    mut stream: Box<dyn Transport>,
    mut requests: mpsc::UnboundedReceiver<Request>,
    retire: CancellationToken,
    outcome_timeout: Duration,
) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut framer = Framer::default();
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let failure = loop {
        tokio::select! {
            request = requests.recv() => {
                let Some(request) = request else { return };
                if retire.is_cancelled() {
                    // Never written: dropped, it fails as never sent.
                    break retired();
                }
                // Whatever else is queued goes out in the same write, gathered (no copy).
                let mut next = Some(request);
                while let Some(mut request) = next.take() {
                    chunks.push(std::mem::take(&mut request.bytes));
                    pending.push_back(Pending::new(request));
                    if chunks.len() < MAX_GATHER {
                        next = requests.try_recv().ok();
                    }
                }
                // A server that stops reading must not hold the driver in a write forever.
                let mut sent = 0;
                let written = tokio::select! {
                    written = write_gathered(&mut stream, &chunks, &mut sent) => written,
                    () = retire.cancelled() => {
                        unwritten(&mut pending, &chunks, sent);
                        Err(retired())
                    }
                };
                if let Err(e) = written {
                    break e;
                }
                chunks.clear();
            }
            () = retire.cancelled() => break retired(),
            // Read even when nothing is pending: a server that closes an idle connection (a
            // restart) is noticed at once, and the next pass opens a new one.
            read = stream.read_buf(&mut input) => match read {
                Ok(0) => break closed(),
                Ok(_) => {
                    if let Err(e) = deliver(&mut input, &mut pending, &mut framer) {
                        break e;
                    }
                    if input.capacity() - input.len() < READ_CHUNK / 4 {
                        input.reserve(READ_CHUNK);
                    }
                }
                Err(e) => break e,
            },
        }
    };
    // Requests still queued were never written: dropped, each fails as never sent.
    requests.close();
    while requests.try_recv().is_ok() {}
    let failure = if retire.is_cancelled() {
        hear_outcomes(
            &mut stream,
            &mut pending,
            &mut input,
            &mut framer,
            outcome_timeout,
        )
        .await
        .unwrap_or(failure)
    } else {
        failure
    };
    for mut p in pending {
        p.fail(&failure);
    }
}

/// A write of `chunks`, the last requests in `pending`, was cut short after `sent` bytes: the
/// requests it did not finish are taken out and fail as never sent. One cut in the middle
/// changed nothing either: Redis runs no command it has not read whole, and a request that
/// changes data does so only in its last command ([`Wait::Outcome`]). (Over TLS, bytes the
/// stream took may still sit unencrypted in it: such a request counts as written.)
fn unwritten(pending: &mut VecDeque<Pending>, chunks: &[Vec<u8>], sent: usize) {
    let mut end = 0;
    let whole = chunks
        .iter()
        .take_while(|c| {
            end += c.len();
            end <= sent
        })
        .count();
    for _ in whole..chunks.len() {
        // Dropping its reply: the requester sees a request never sent.
        drop(pending.pop_back());
    }
}

/// On a retired wire: fails the [`Wait::Reply`] requests at once, and reads on until every
/// [`Wait::Outcome`] request has its reply or its requester gave up (seen within
/// [`GAVE_UP_CHECK`]), the socket fails, or `limit` passes. `Some`: the socket's failure, for
/// the requests left.
async fn hear_outcomes(
    stream: &mut Box<dyn Transport>,
    pending: &mut VecDeque<Pending>,
    input: &mut BytesMut,
    framer: &mut Framer,
    limit: Duration,
) -> Option<io::Error> {
    let given_up = retired();
    for p in pending.iter_mut().filter(|p| p.wait == Wait::Reply) {
        p.fail(&given_up);
    }
    let deadline = tokio::time::Instant::now() + limit;
    while pending.iter().any(Pending::awaits_outcome) {
        tokio::select! {
            read = stream.read_buf(input) => match read {
                Ok(0) => return Some(closed()),
                Ok(_) => {
                    if let Err(e) = deliver(input, pending, framer) {
                        return Some(e);
                    }
                    if input.capacity() - input.len() < READ_CHUNK / 4 {
                        input.reserve(READ_CHUNK);
                    }
                }
                Err(e) => return Some(e),
            },
            () = tokio::time::sleep_until(deadline) => return None,
            // A requester dropped (a reload, shutdown) is noticed even while nothing arrives.
            () = tokio::time::sleep(GAVE_UP_CHECK) => {}
        }
    }
    None
}

/// Writes every chunk, in order, with as few system calls as the socket allows, counting the
/// bytes the socket took in `sent` (so that a write cut short tells how far it got).
async fn write_gathered(
    stream: &mut Box<dyn Transport>,
    chunks: &[Vec<u8>],
    sent: &mut usize,
) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = stream.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "Redis stopped reading",
            ));
        }
        *sent += n;
        IoSlice::advance_slices(&mut rest, n);
    }
    // A TLS stream holds what it encrypted until flushed; a socket has nothing to flush.
    stream.flush().await
}

/// Parses every complete reply in `input` and hands it to its request.
///
/// Replies for values are decoded optimistically: most are complete when they are first looked
/// at. A raw reply, and one that was not complete, is first walked by the `framer`, which
/// resumes where it stopped as more arrives, so a big reply arriving in many reads is walked
/// once and decoded once.
fn deliver(
    input: &mut BytesMut,
    pending: &mut VecDeque<Pending>,
    framer: &mut Framer,
) -> io::Result<()> {
    while !input.is_empty() {
        let Some(front) = pending.front_mut() else {
            return Err(protocol("a reply that no request asked for"));
        };
        match &mut front.raw {
            Some(raw) => {
                let Some(len) = framer.reply_end(input)? else {
                    return Ok(());
                };
                raw.extend_from_slice(&input[..len]);
                input.advance(len);
            }
            None => {
                if framer.walking() && framer.reply_end(input)?.is_none() {
                    return Ok(());
                }
                let mut reader = Reader::new(input);
                let Some(value) = reader.value()? else {
                    // Walk what has come, so that the next read resumes after it.
                    if framer.reply_end(input)?.is_some() {
                        return Err(protocol("a reply both whole and cut"));
                    }
                    return Ok(());
                };
                let len = reader.position();
                front.values.push(value);
                input.advance(len);
            }
        }
        front.seen += 1;
        if front.seen == front.count {
            pending.pop_front().expect("front exists").finish();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one reply `bytes` holds, as a value.
    fn decoded(bytes: &[u8]) -> Value {
        Reader::new(bytes).value().unwrap().expect("whole")
    }

    fn pending(count: usize, raw: bool) -> (Pending, oneshot::Receiver<io::Result<Answer>>) {
        let (reply, rx) = oneshot::channel();
        let request = Request {
            bytes: Vec::new(),
            count,
            raw,
            wait: Wait::Reply,
            reply,
        };
        (Pending::new(request), rx)
    }

    fn values(rx: &mut oneshot::Receiver<io::Result<Answer>>) -> Vec<Value> {
        match rx.try_recv().expect("answered").expect("no error") {
            Answer::Values(v) => v,
            Answer::Raw(_) => panic!("raw answer to a request for values"),
        }
    }

    /// Replies cut anywhere, for values and raw alike, reach their requests whole.
    #[test]
    fn replies_arriving_in_pieces_are_delivered_whole() {
        let reply: &[u8] = b"*3\r\n$3\r\nabc\r\n*2\r\n:1\r\n$2\r\nxy\r\n+OK\r\n";
        let both = [reply, reply].concat();
        for cut in 1..both.len() {
            for cut2 in cut..both.len() {
                let (a, mut a_rx) = pending(1, false);
                let (b, mut b_rx) = pending(1, true);
                let mut pending = VecDeque::from([a, b]);
                let mut framer = Framer::default();
                let mut input = BytesMut::new();
                for piece in [&both[..cut], &both[cut..cut2], &both[cut2..]] {
                    input.extend_from_slice(piece);
                    deliver(&mut input, &mut pending, &mut framer).unwrap();
                }
                assert_eq!(values(&mut a_rx), vec![decoded(reply)], "cuts {cut} {cut2}");
                match b_rx.try_recv().expect("answered").expect("no error") {
                    Answer::Raw(raw) => assert_eq!(raw, reply, "cuts {cut} {cut2}"),
                    Answer::Values(_) => panic!("values answer to a request for bytes"),
                }
                assert!(input.is_empty() && pending.is_empty());
            }
        }
    }

    #[test]
    fn replies_go_to_their_requests_in_order() {
        let (a, mut a_rx) = pending(1, false);
        let (b, mut b_rx) = pending(2, true);
        let (c, mut c_rx) = pending(1, false);
        let mut pending = VecDeque::from([a, b, c]);
        let mut input = BytesMut::from(&b":1\r\n*1\r\n$2\r\nab\r\n:3\r\n:4"[..]);
        let mut framer = Framer::default();
        deliver(&mut input, &mut pending, &mut framer).unwrap();
        assert_eq!(values(&mut a_rx), vec![Value::Int(1)]);
        match b_rx.try_recv().expect("answered").expect("no error") {
            Answer::Raw(raw) => assert_eq!(raw, b"*1\r\n$2\r\nab\r\n:3\r\n"),
            Answer::Values(_) => panic!("values answer to a request for bytes"),
        }
        assert!(c_rx.try_recv().is_err(), "still waiting for its reply");
        input.extend_from_slice(b"\r\n");
        deliver(&mut input, &mut pending, &mut framer).unwrap();
        assert_eq!(values(&mut c_rx), vec![Value::Int(4)]);
        assert!(input.is_empty());
        input.extend_from_slice(b":5\r\n");
        assert!(
            deliver(&mut input, &mut pending, &mut framer).is_err(),
            "nobody asked"
        );
    }

    fn raw(rx: &mut oneshot::Receiver<io::Result<Answer>>) -> Vec<u8> {
        match rx.try_recv().expect("answered").expect("no error") {
            Answer::Raw(raw) => raw,
            Answer::Values(_) => panic!("values answer to a request for bytes"),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Replies cut anywhere, one request each (every other one raw), reach their requests
        /// whole and in order.
        #[test]
        fn generated_replies_cut_anywhere_reach_their_requests(
            replies in proptest::collection::vec(super::super::resp::tests::arb_value(), 1..5),
            cuts in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..5),
        ) {
            let mut bytes = Vec::new();
            let mut requests = VecDeque::new();
            let mut answers = Vec::new();
            for (i, v) in replies.iter().enumerate() {
                let start = bytes.len();
                super::super::resp::tests::encode(v, &mut bytes);
                let (p, rx) = pending(1, i % 2 == 1);
                requests.push_back(p);
                answers.push((rx, start..bytes.len()));
            }
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut framer = Framer::default();
            let mut input = BytesMut::new();
            let mut from = 0;
            for to in cuts.into_iter().chain([bytes.len()]) {
                input.extend_from_slice(&bytes[from..to]);
                from = to;
                deliver(&mut input, &mut requests, &mut framer).unwrap();
            }
            proptest::prop_assert!(input.is_empty() && requests.is_empty());
            for (i, ((mut rx, range), v)) in answers.into_iter().zip(&replies).enumerate() {
                if i % 2 == 1 {
                    proptest::prop_assert_eq!(raw(&mut rx), bytes[range].to_vec());
                } else {
                    proptest::prop_assert_eq!(values(&mut rx), vec![v.clone()]);
                }
            }
        }
    }

    /// A header announcing a huge reply reserves nothing for it: the input grows only with what
    /// arrives (the driver's reads), and delivering waits.
    #[test]
    fn a_hostile_header_reserves_nothing() {
        use super::super::resp::tests::allocated;
        for head in [
            &b"$1073741824\r\nsome of it"[..],
            b"*2147483647\r\n:1\r\n:2\r\n",
            b"*1\r\n$1073741824\r\n",
        ] {
            for raw in [false, true] {
                let (p, mut rx) = pending(1, raw);
                let mut pending = VecDeque::from([p]);
                let mut framer = Framer::default();
                let mut input = BytesMut::with_capacity(READ_CHUNK);
                input.extend_from_slice(head);
                let before = allocated();
                for _ in 0..3 {
                    deliver(&mut input, &mut pending, &mut framer).unwrap();
                }
                let used = allocated() - before;
                assert!(used < 1024, "{head:?}: {used} bytes");
                assert_eq!(input.capacity(), READ_CHUNK);
                assert!(rx.try_recv().is_err(), "still waiting");
            }
        }
    }

    /// A server on a free port that answers the connection's PING and CLIENT SETNAME, then
    /// hands every later read to `answer`, which may write replies when it likes.
    async fn server<F, Fut>(answer: F) -> (Target, tokio::task::JoinHandle<()>)
    where
        F: FnOnce(
                tokio::net::tcp::OwnedWriteHalf,
                tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
            ) -> Fut
            + Send
            + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let (mut read, mut write) = socket.into_split();
            let mut buf = [0u8; 1024];
            let _ = read.read(&mut buf).await.unwrap();
            write.write_all(b"+PONG\r\n+OK\r\n").await.unwrap();
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let answering = tokio::spawn(answer(write, rx));
            while let Ok(n) = read.read(&mut buf).await {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
            drop(tx);
            let _ = answering.await;
        });
        let target = Target {
            addr: Addr::Tcp("127.0.0.1".into(), port),
            username: None,
            password: None,
            db: 0,
        };
        (target, task)
    }

    const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

    async fn connect(target: &Target, timeout: u64, outcome: u64) -> Wire {
        Wire::connect(
            target,
            "test",
            Duration::from_secs(5),
            Duration::from_millis(timeout),
            Duration::from_millis(outcome),
        )
        .await
        .unwrap()
    }

    /// A server that goes silent after the greeting, as a paused server or a connection a
    /// firewall dropped would.
    #[tokio::test]
    async fn a_request_that_times_out_retires_the_wire() {
        let (target, server) = server(|write, mut rx| async move {
            // Holding the socket open, answering nothing.
            let _open = write;
            while rx.recv().await.is_some() {}
        })
        .await;
        let wire = connect(&target, 200, 200).await;
        assert!(!wire.is_closed());
        let error = wire.send(PING.to_vec(), 1, Wait::Reply).await.unwrap_err();
        assert!(
            error.to_string().contains("did not answer in time"),
            "{error}"
        );
        assert!(
            is_reply_lost(&error),
            "it was written: Redis may have run it"
        );
        assert!(
            wire.is_closed(),
            "the store opens a new connection next pass"
        );
        let after = wire.send(PING.to_vec(), 1, Wait::Reply).await.unwrap_err();
        assert!(is_unsent(&after), "nothing more is written: {after}");
        server.abort();
    }

    /// A server that stalls longer than the command timeout, then answers everything it read
    /// (a SIGSTOP, a frozen VM): the call that changes data gets its reply on the retired
    /// wire; the reads before and behind it failed at the command timeout, as lost replies.
    #[tokio::test]
    async fn a_call_that_changes_data_is_heard_after_the_command_timeout() {
        use tokio::io::AsyncWriteExt;
        let (target, server) = server(|mut write, mut rx| async move {
            let mut got = 0;
            while got < 3 * PING.len() {
                got += rx.recv().await.unwrap().len();
            }
            tokio::time::sleep(Duration::from_millis(1500)).await;
            write.write_all(b"+PONG\r\n:7\r\n+PONG\r\n").await.unwrap();
            while rx.recv().await.is_some() {}
        })
        .await;
        let wire = connect(&target, 100, 30_000).await;
        let started = tokio::time::Instant::now();
        let (before, change, behind) = tokio::join!(
            wire.send(PING.to_vec(), 1, Wait::Reply),
            wire.send(PING.to_vec(), 1, Wait::Outcome),
            wire.send(PING.to_vec(), 1, Wait::Reply),
        );
        for read in [before, behind] {
            let read = read.unwrap_err();
            assert!(is_reply_lost(&read), "{read}");
        }
        assert_eq!(change.unwrap(), vec![Value::Int(7)], "heard late");
        assert!(started.elapsed() >= Duration::from_millis(1500));
        assert!(wire.is_closed(), "retired all the same");
        server.abort();
    }

    /// A server that never answers: the call that changes data gives up at its own limit, as a
    /// lost reply; a request sent after it on the retired wire is never written.
    #[tokio::test]
    async fn a_call_that_changes_data_gives_up_at_its_own_limit() {
        let (target, server) = server(|write, mut rx| async move {
            // Holding the socket open, answering nothing.
            let _open = write;
            while rx.recv().await.is_some() {}
        })
        .await;
        let wire = connect(&target, 100, 400).await;
        let started = tokio::time::Instant::now();
        let error = wire
            .send(PING.to_vec(), 1, Wait::Outcome)
            .await
            .unwrap_err();
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(400) && waited < Duration::from_secs(10),
            "{waited:?}"
        );
        assert!(is_reply_lost(&error), "{error}");
        assert!(error.to_string().contains("changes data"), "{error}");
        let after = wire
            .send(PING.to_vec(), 1, Wait::Outcome)
            .await
            .unwrap_err();
        assert!(is_unsent(&after), "{after}");
        server.abort();
    }

    /// The connection drops while a call that changes data waits: its reply is lost (Redis
    /// may have run it), not unsent.
    #[tokio::test]
    async fn a_dropped_connection_loses_the_reply_of_a_call_that_changes_data() {
        let (target, server) = server(|write, mut rx| async move {
            let _ = rx.recv().await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(write);
        })
        .await;
        let wire = connect(&target, 100, 30_000).await;
        let error = wire
            .send(PING.to_vec(), 1, Wait::Outcome)
            .await
            .unwrap_err();
        assert!(is_reply_lost(&error), "{error}");
        server.abort();
    }

    /// A server that stops reading (its socket buffers full): a call too big to be written
    /// whole times out, and since Redis never read it whole it changed nothing. It fails as
    /// never sent at once, rather than waiting out its limit and counting as unanswered.
    #[tokio::test]
    async fn a_call_cut_while_being_written_fails_as_unsent_at_once() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await.unwrap();
            socket.write_all(b"+PONG\r\n+OK\r\n").await.unwrap();
            // Reads nothing more, holding the socket open.
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        let target = Target {
            addr: Addr::Tcp("127.0.0.1".into(), port),
            username: None,
            password: None,
            db: 0,
        };
        let wire = connect(&target, 200, 30_000).await;
        let big = vec![b'x'; 256 * 1024 * 1024];
        let started = tokio::time::Instant::now();
        let error = wire.send(big, 1, Wait::Outcome).await.unwrap_err();
        assert!(is_unsent(&error), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        server.abort();
    }

    /// A requester that stops waiting (a reload, shutdown): the retired wire lets its socket go
    /// within a second or two, not at the call's limit.
    #[tokio::test]
    async fn a_retired_wire_closes_once_nobody_waits() {
        let (closed_tx, closed_rx) = oneshot::channel();
        let (target, server) = server(move |write, mut rx| async move {
            let _open = write;
            while rx.recv().await.is_some() {}
            let _ = closed_tx.send(tokio::time::Instant::now());
        })
        .await;
        let wire = connect(&target, 100, 60_000).await;
        let call = wire.send(PING.to_vec(), 1, Wait::Outcome);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), call)
                .await
                .is_err(),
            "still waiting when dropped"
        );
        let dropped = tokio::time::Instant::now();
        let closed = tokio::time::timeout(Duration::from_secs(20), closed_rx)
            .await
            .expect("the socket closed")
            .unwrap();
        assert!(
            closed - dropped < Duration::from_secs(10),
            "{:?}",
            closed - dropped
        );
        assert!(wire.is_closed());
        server.abort();
    }

    #[test]
    fn only_a_lost_reply_leaves_delivery_unknown() {
        let io_error = |kind, text: &str| redis::RedisError::from(io::Error::new(kind, text));
        // Written, then no reply: Redis may have run it.
        assert!(is_reply_lost(&io_error(
            io::ErrorKind::TimedOut,
            "no answer"
        )));
        assert!(is_reply_lost(&io_error(
            io::ErrorKind::ConnectionReset,
            "reset"
        )));
        // Never sent, or never connected: it did not.
        assert!(!is_reply_lost(&unsent().into()));
        assert!(!is_reply_lost(&no_connection("127.0.0.1:1", "refused")));
        assert!(!is_reply_lost(&io_error(
            io::ErrorKind::ConnectionRefused,
            "refused"
        )));
        // Redis answered with an error: it did not.
        let refused = redis::RedisError::from((redis::ErrorKind::Client, "NOPERM"));
        assert!(!is_reply_lost(&refused));
    }
}
