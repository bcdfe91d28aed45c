//! The metrics and health server (hyper, HTTP/1.1).
//!
//! The caller binds the listener, so the address is known (and logged) before the first sweep and
//! tests can bind port 0. Every answer comes from memory; nothing here waits on Redis.
//!
//! TLS and basic auth come from the web config file ([`super::web_config`]). Basic auth guards
//! every path but the probes': `/healthz` and `/readyz` answer anyone with their verdict (a
//! liveness probe carries no secret), and only with credentials say why.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::serve::StartError;
use crate::serve::health::Health;
use crate::serve::metrics::Metrics;
use crate::serve::pinned;
use crate::serve::web_config::{CurrentWeb, Web};

/// A slow client gets this long to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Open connections get this long to finish after shutdown begins.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

const LANDING: &str = "<!doctype html>\n<html><head><title>presence-sweeper</title></head><body>\n\
<h1>presence-sweeper</h1>\n<ul>\n\
<li><a href=\"/metrics\">/metrics</a> Prometheus metrics</li>\n\
<li><a href=\"/healthz\">/healthz</a> liveness</li>\n\
<li><a href=\"/readyz\">/readyz</a> readiness</li>\n\
</ul>\n</body></html>\n";

/// The first byte of a TLS handshake record: anything else on a TLS port is most likely plain
/// HTTP, which gets a plain answer saying so rather than a closed connection.
const TLS_HANDSHAKE: u8 = 0x16;

/// What the handlers read.
#[derive(Clone)]
pub struct Handlers {
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Liveness and readiness.
    pub health: Arc<Health>,
    /// TLS and basic auth, as the web config file says now.
    pub(crate) web: Arc<CurrentWeb>,
}

/// Binds the server's address.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|cause| StartError::Io {
            context: format!("cannot listen on {addr} (http.listen)"),
            cause,
        })
}

/// Serves until `cancel` fires, then lets open requests finish (briefly) and returns.
pub fn serve(listener: TcpListener, state: Handlers, cancel: CancellationToken) -> JoinHandle<()> {
    if let Ok(addr) = listener.local_addr() {
        let web = state.web.get();
        tracing::info!(%addr, web = %web.describe(), "metrics and health server listening");
        if web.auth.is_some() && web.tls.is_none() {
            tracing::warn!("basic auth without TLS: passwords cross the network in the clear");
        }
    }
    tokio::spawn(async move {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors, for instance: back off instead of spinning.
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = cancel.cancelled() => break,
            };
            tokio::spawn(connection(stream, state.clone(), graceful.watcher()));
        }
        drop(listener);
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, graceful.shutdown()).await;
    })
}

/// One connection: the TLS handshake if the web config asks for TLS, then HTTP/1.1.
async fn connection(stream: TcpStream, state: Handlers, watcher: Watcher) {
    // The configuration current at accept time serves the whole connection.
    let web = state.web.get();
    let Some(tls) = &web.tls else {
        return http(stream, state, web, watcher).await;
    };
    // A handshake must finish as soon as request headers must, or idle sockets would pile up.
    let deadline = crate::time::now() + HEADER_TIMEOUT;
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline.into(), stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] != TLS_HANDSHAKE => return refuse_plain(stream, deadline).await,
        Ok(Ok(1)) => {}
        _ => return,
    }
    let accept = TlsAcceptor::from(tls.server.clone()).accept(stream);
    match tokio::time::timeout_at(deadline.into(), accept).await {
        Ok(Ok(stream)) => http(stream, state, web, watcher).await,
        // Scanners and load balancers' TCP checks fail handshakes all day: not worth a warning.
        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake timed out"),
    }
}

/// `curl http://` to an https server: say so, as Go's servers (the exporters) do. The request's
/// head is read first: closing a socket with unread data resets it, and the client would see
/// that instead of the answer.
async fn refuse_plain(mut stream: TcpStream, deadline: std::time::Instant) {
    use tokio::io::AsyncReadExt as _;

    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline.into(), stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    let _ = stream.write_all(PLAIN_ON_TLS.as_bytes()).await;
    let _ = stream.shutdown().await;
}

const PLAIN_ON_TLS: &str = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

async fn http<S>(stream: S, state: Handlers, web: Arc<Web>, watcher: Watcher)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let (state, web) = (state.clone(), web.clone());
        async move { Ok::<_, Infallible>(respond(&state, &web, &req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    let _ = watcher.watch(conn).await;
}

/// Checks the credentials, if the web config asks for them, then answers.
async fn respond(state: &Handlers, web: &Web, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let authorized = match (&web.auth, req.headers().get(AUTHORIZATION)) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(auth), Some(given)) => {
            if !auth.verify(given.as_bytes()).await {
                return unauthorized();
            }
            true
        }
    };
    route(state, req, authorized)
}

fn unauthorized() -> Response<Full<Bytes>> {
    let mut r = text(StatusCode::UNAUTHORIZED, "unauthorized\n");
    r.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"presence-sweeper\", charset=\"UTF-8\""),
    );
    r
}

/// The answer to `req`; `authorized` is false for a request without credentials to a server
/// that wants them.
fn route(state: &Handlers, req: &Request<Incoming>, authorized: bool) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let probe = matches!(path, "/healthz" | "/readyz");
    if !authorized && !probe {
        // Even for unknown paths: what exists is not told to strangers.
        return unauthorized();
    }
    let known = probe || matches!(path, "/" | "/metrics");
    if !known {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/metrics" => {
            let mut r = Response::new(Full::new(Bytes::from(state.metrics.render())));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        "/healthz" => verdict(state.health.liveness(), "ok\n", authorized),
        "/readyz" => verdict(state.health.readiness(), "ready\n", authorized),
        _ => {
            let mut r = Response::new(Full::new(Bytes::from_static(LANDING.as_bytes())));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        }
    }
}

/// A probe's answer; the reason for a 503 only to those who may read it.
fn verdict(result: Result<(), String>, ok: &'static str, say_why: bool) -> Response<Full<Bytes>> {
    match result {
        Ok(()) => text(StatusCode::OK, ok),
        Err(why) if say_why => text(StatusCode::SERVICE_UNAVAILABLE, &format!("{why}\n")),
        Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "unavailable\n"),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_owned())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `presence-sweeper healthcheck`: GET /healthz on `addr` (a wildcard address means this host)
/// within `timeout`, over TLS if `web` says the server speaks it (trusting exactly its
/// certificate). `Ok` on 200, else why not. No credentials are needed: /healthz answers
/// without them.
pub async fn healthcheck(addr: SocketAddr, timeout: Duration, web: &Web) -> Result<(), String> {
    let mut target = addr;
    if target.ip().is_unspecified() {
        target.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let tls = match &web.tls {
        Some(t) if t.client_cert_required => {
            return Err(format!(
                "{target} requires client certificates (client_auth_type \
                 RequireAndVerifyClientCert), and healthcheck has none to present"
            ));
        }
        Some(t) => Some(
            pinned::client_config(t.leaf.clone())
                .map_err(|e| format!("cannot set up TLS to {target}: {e}"))?,
        ),
        None => None,
    };
    let exchange = async {
        let stream = TcpStream::connect(target)
            .await
            .map_err(|e| format!("cannot connect to {target}: {e}"))?;
        let Some(tls) = tls else {
            return get_healthz(stream, target).await;
        };
        let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
            .connect(target.ip().into(), stream)
            .await
            .map_err(|e| format!("TLS handshake with {target} failed: {e}"))?;
        get_healthz(stream, target).await
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("no answer from {target} within {timeout:?}"))?
}

async fn get_healthz<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    target: SocketAddr,
) -> Result<(), String> {
    use tokio::io::AsyncReadExt as _;

    let request = format!("GET /healthz HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot send to {target}: {e}"))?;
    let mut response = Vec::new();
    match stream.read_to_end(&mut response).await {
        Ok(_) => {}
        // A TLS peer that closes without close_notify still sent its whole answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {}
        Err(e) => return Err(format!("cannot read from {target}: {e}")),
    }
    let response = String::from_utf8_lossy(&response);
    let status_line = response.lines().next().unwrap_or_default();
    match status_line.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        _ => Err(format!(
            "{target}/healthz answered {status_line:?}: {}",
            response.split("\r\n\r\n").nth(1).unwrap_or_default().trim()
        )),
    }
}
