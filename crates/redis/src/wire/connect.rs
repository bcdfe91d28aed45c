//! Where a wire connects ([`Target`]), the socket it opens there (TCP, TLS or a unix socket:
//! [`Transport`]), and what a new connection says first ([`Hello`]): for the wire, and for the
//! subscriber, which reads its socket its own way once greeted ([`greeted`]).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use redis::{ConnectionAddr, ConnectionInfo, RedisResult};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::failure::closed;
use crate::packed::Packed;
use crate::reply::all_ok;
use crate::resp::{Reader, Value, protocol, reply_len};

/// Where a wire connects and as whom. Not `Debug`: it holds the password.
#[derive(Clone)]
pub(crate) struct Target {
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
    pub(crate) fn from_info(
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

impl Target {
    /// A plain TCP target on this machine, with no credentials: the tests' fake servers.
    #[cfg(test)]
    pub(super) fn local(port: u16) -> Self {
        Self {
            addr: Addr::Tcp("127.0.0.1".into(), port),
            username: None,
            password: None,
            db: 0,
        }
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

/// A socket to Redis: TCP, TLS or a unix socket.
pub(crate) trait Transport: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Transport for T {}

/// Opens a socket to `target` within `connect_timeout`.
pub(super) async fn open(
    target: &Target,
    connect_timeout: Duration,
) -> io::Result<Box<dyn Transport>> {
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
pub(super) struct Hello {
    pub(super) bytes: Vec<u8>,
    pub(super) count: usize,
}

impl Hello {
    pub(super) fn new(target: &Target, name: &str) -> Self {
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
    pub(super) fn accepted(mut replies: Vec<Value>) -> RedisResult<()> {
        if let Some(Value::ServerError(e)) = replies.pop() {
            tracing::debug!(error = %e, "could not name a connection (CLIENT SETNAME)");
        }
        all_ok(replies).map(drop)
    }
}

/// Opens a socket to `target` and says [`Hello`] on it, then hands the socket over: for the
/// pub/sub subscriber, which reads it its own way. The whole greeting is bounded by
/// `connect_timeout`.
pub(crate) async fn greeted(
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
