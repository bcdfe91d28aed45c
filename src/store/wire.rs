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

use super::packed::{Packed, all_ok};
use super::resp::{Framer, Reader, Value, protocol, reply_len};

/// Read buffer size; a reply bigger than this simply grows it.
const READ_CHUNK: usize = 64 * 1024;

/// Most requests gathered into one write (the system allows 1024 buffers per call).
const MAX_GATHER: usize = 512;

/// A pipelined connection to one server. Clones share the socket: requests from concurrent
/// batches are written in order and answered in order. It never reconnects: once its socket
/// fails every request fails, [`Wire::is_closed`] turns true, and the store opens a new one.
#[derive(Clone)]
pub(super) struct Wire {
    requests: mpsc::UnboundedSender<Request>,
    /// Fired when a request times out: a server that stops answering (paused, or a connection
    /// a firewall dropped silently) is not asked again on this socket.
    retire: CancellationToken,
    timeout: Duration,
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
    reply: oneshot::Sender<io::Result<Answer>>,
}

struct Pending {
    count: usize,
    /// Replies kept so far.
    seen: usize,
    values: Vec<Value>,
    raw: Option<Vec<u8>>,
    reply: oneshot::Sender<io::Result<Answer>>,
}

impl Pending {
    fn new(request: Request) -> Self {
        Self {
            count: request.count,
            seen: 0,
            values: Vec::with_capacity(if request.raw { 0 } else { request.count }),
            raw: request.raw.then(Vec::new),
            reply: request.reply,
        }
    }

    /// Hands the replies to the requester, which may have given up (timed out): they are
    /// dropped then.
    fn finish(self) {
        let answer = match self.raw {
            Some(raw) => Answer::Raw(raw),
            None => Answer::Values(self.values),
        };
        let _ = self.reply.send(Ok(answer));
    }
}

/// A socket to Redis: TCP, TLS or a unix socket.
pub(super) trait Transport: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Transport for T {}

impl Wire {
    /// Connects, authenticates, selects the database and names the connection `name`, within
    /// `connect_timeout`. Each request then waits at most `timeout` for its replies.
    pub(super) async fn connect(
        target: &Target,
        name: &str,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> RedisResult<Self> {
        let stream = open(target, connect_timeout).await?;
        let (requests, rx) = mpsc::unbounded_channel();
        let retire = CancellationToken::new();
        tokio::spawn(drive(stream, rx, retire.clone()));
        let mut wire = Self {
            requests,
            retire,
            timeout: connect_timeout,
        };
        let hello = Hello::new(target, name);
        let replies = wire.send(hello.bytes, hello.count).await;
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
    pub(super) async fn send(&self, bytes: Vec<u8>, count: usize) -> RedisResult<Vec<Value>> {
        match self.request(bytes, count, false).await? {
            Answer::Values(values) => Ok(values),
            Answer::Raw(_) => Err(protocol("raw replies to a request for values").into()),
        }
    }

    /// Writes `bytes` (RESP commands) and returns the RESP bytes of their `count` replies, for a
    /// caller that reads them without building values.
    pub(super) async fn send_raw(&self, bytes: Vec<u8>, count: usize) -> RedisResult<Vec<u8>> {
        match self.request(bytes, count, true).await? {
            Answer::Raw(raw) => Ok(raw),
            Answer::Values(_) => Err(protocol("values in reply to a request for bytes").into()),
        }
    }

    async fn request(&self, bytes: Vec<u8>, count: usize, raw: bool) -> RedisResult<Answer> {
        if count == 0 {
            return Ok(if raw {
                Answer::Raw(Vec::new())
            } else {
                Answer::Values(Vec::new())
            });
        }
        let (reply, answer) = oneshot::channel();
        let request = Request {
            bytes,
            count,
            raw,
            reply,
        };
        self.requests.send(request).map_err(|_| unsent())?;
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(result)) => Ok(result?),
            // Dropped unread in the queue: the socket failed before this request was written.
            Ok(Err(_)) => Err(unsent().into()),
            Err(_) => {
                self.retire.cancel();
                Err(io::Error::new(io::ErrorKind::TimedOut, "Redis did not answer in time").into())
            }
        }
    }
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

/// A request that never reached Redis, as the wire reports it (for other modules' tests).
#[cfg(test)]
pub(crate) fn unsent_error() -> redis::RedisError {
    unsent().into()
}

/// Whether `e` is a request that never reached Redis (see [`unsent`]). By its text: redis-rs
/// keeps the `io::Error` inside behind a private accessor, and this text is only ever ours.
pub(crate) fn is_unsent(e: &redis::RedisError) -> bool {
    e.is_io_error() && e.to_string().contains(UNSENT)
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "the connection to Redis closed",
    )
}

/// The socket's one task: writes requests in the order they come and hands each reply to the
/// request it answers. Ends when the socket fails or every handle is gone; requests still
/// waiting then fail.
async fn drive(
    mut stream: Box<dyn Transport>,
    mut requests: mpsc::UnboundedReceiver<Request>,
    retire: CancellationToken,
) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut framer = Framer::default();
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let failure = loop {
        tokio::select! {
            request = requests.recv() => {
                let Some(request) = request else { return };
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
                let written = tokio::select! {
                    written = write_gathered(&mut stream, &chunks) => written,
                    () = retire.cancelled() => Err(retired()),
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
    for p in pending {
        let _ = p
            .reply
            .send(Err(io::Error::new(failure.kind(), failure.to_string())));
    }
}

/// Writes every chunk, in order, with as few system calls as the socket allows.
async fn write_gathered(stream: &mut Box<dyn Transport>, chunks: &[Vec<u8>]) -> io::Result<()> {
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

    /// A server that answers the connection's PING and then goes silent, as a paused server or
    /// a connection a firewall dropped would.
    #[tokio::test]
    async fn a_request_that_times_out_retires_the_wire() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await.unwrap();
            // PING and CLIENT SETNAME.
            socket.write_all(b"+PONG\r\n+OK\r\n").await.unwrap();
            // Read and never answer.
            while socket.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        });
        let target = Target {
            addr: Addr::Tcp("127.0.0.1".into(), port),
            username: None,
            password: None,
            db: 0,
        };
        let wire = Wire::connect(
            &target,
            "test",
            Duration::from_secs(5),
            Duration::from_millis(200),
        )
        .await
        .unwrap();
        assert!(!wire.is_closed());
        let error = wire
            .send(b"*1\r\n$4\r\nPING\r\n".to_vec(), 1)
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("did not answer in time"),
            "{error}"
        );
        assert!(
            wire.is_closed(),
            "the store opens a new connection next pass"
        );
        server.abort();
    }
}
