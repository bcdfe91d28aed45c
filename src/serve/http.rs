//! The metrics and health server (hyper, HTTP/1.1).
//!
//! The caller binds the listener, so the address is known (and logged) before the first sweep and
//! tests can bind port 0. Every answer comes from memory; nothing here waits on Redis.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::serve::health::Health;
use crate::serve::metrics::Metrics;

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

/// What the handlers read.
#[derive(Clone)]
pub struct State {
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Liveness and readiness.
    pub health: Arc<Health>,
}

/// Binds the server's address.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|cause| Error::Io {
        context: format!("cannot listen on {addr} (http.listen)"),
        cause,
    })
}

/// Serves until `cancel` fires, then lets open requests finish (briefly) and returns.
pub fn serve(listener: TcpListener, state: State, cancel: CancellationToken) -> JoinHandle<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "metrics and health server listening");
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
            let state = state.clone();
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
        drop(listener);
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, graceful.shutdown()).await;
    })
}

fn route(state: &State, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let known = matches!(path, "/" | "/metrics" | "/healthz" | "/readyz");
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
        "/healthz" => verdict(state.health.liveness(), "ok\n"),
        "/readyz" => verdict(state.health.readiness(), "ready\n"),
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

fn verdict(result: Result<(), String>, ok: &'static str) -> Response<Full<Bytes>> {
    match result {
        Ok(()) => text(StatusCode::OK, ok),
        Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, &format!("{why}\n")),
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
/// within `timeout`. `Ok` on 200, else why not.
pub async fn check(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut target = addr;
    if target.ip().is_unspecified() {
        target.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(target)
            .await
            .map_err(|e| format!("cannot connect to {target}: {e}"))?;
        let request =
            format!("GET /healthz HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("cannot send to {target}: {e}"))?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .map_err(|e| format!("cannot read from {target}: {e}"))?;
        let response = String::from_utf8_lossy(&response);
        let status_line = response.lines().next().unwrap_or_default();
        match status_line.split_whitespace().nth(1) {
            Some("200") => Ok(()),
            _ => Err(format!(
                "{target}/healthz answered {status_line:?}: {}",
                response.split("\r\n\r\n").nth(1).unwrap_or_default().trim()
            )),
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("no answer from {target} within {timeout:?}"))?
}
