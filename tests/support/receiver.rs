//! A webhook receiver for the tests: a real HTTP/1.1 server (hyper, optionally behind TLS) on a
//! free port, on a thread and runtime of its own, that answers as the test says and records
//! every request it gets.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

/// What the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 200.
    Accept = 0,
    /// 500.
    Fail = 1,
    /// Reads the request and never answers.
    Hang = 2,
    /// 503 with `Retry-After: 2`.
    Busy = 3,
    /// 503, no `Retry-After`: the sender's own backoff decides.
    Unavailable = 4,
    /// 422: this event refused (the receiver is up), retried on the backoff alone.
    Reject = 5,
}

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Hit {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub content_type: String,
    pub body: Vec<u8>,
    pub at: Instant,
    /// The status it was answered with (0: none, it hung).
    pub status: u16,
}

impl Hit {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

type Decide = dyn Fn(&Hit, usize) -> Mode + Send + Sync;

/// The running receiver; stops on drop.
pub struct Receiver {
    pub addr: SocketAddr,
    hits: Arc<Mutex<Vec<Hit>>>,
    mode: Arc<AtomicU8>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    /// A receiver that answers by its mode ([`Receiver::set`]).
    pub fn start(mode: Mode) -> Self {
        Self::start_with(mode, None, None)
    }

    /// A receiver that answers as `decide` says, given the request and how many times its
    /// `webhook-id` came before.
    pub fn deciding(decide: impl Fn(&Hit, usize) -> Mode + Send + Sync + 'static) -> Self {
        Self::start_with(Mode::Accept, Some(Arc::new(decide)), None)
    }

    /// A receiver over TLS with the certificate and key in `cert` and `key` (PEM).
    pub fn start_tls(cert: &Path, key: &Path) -> Self {
        Self::start_with(Mode::Accept, None, Some(tls_config(cert, key)))
    }

    fn start_with(
        mode: Mode,
        decide: Option<Arc<Decide>>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(Mutex::new(Vec::new()));
        let mode = Arc::new(AtomicU8::new(mode as u8));
        let stop = CancellationToken::new();
        let state = State {
            hits: hits.clone(),
            mode: mode.clone(),
            decide,
            stop: stop.clone(),
        };
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(serve(listener, state, tls));
        });
        Self {
            addr,
            hits,
            mode,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    /// Changes what it answers from now on.
    pub fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Every request so far.
    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    /// The requests answered with a 2xx.
    pub fn delivered(&self) -> Vec<Hit> {
        self.hits()
            .into_iter()
            .filter(|h| (200..300).contains(&h.status))
            .collect()
    }

    /// Waits until `n` distinct ids were answered with a 2xx; fails after `timeout`.
    pub fn wait_delivered(&self, n: usize, timeout: Duration) -> Vec<Hit> {
        let deadline = Instant::now() + timeout;
        loop {
            let delivered = self.delivered();
            let ids: std::collections::HashSet<&str> =
                delivered.iter().map(|h| h.id.as_str()).collect();
            if ids.len() >= n {
                return delivered;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} events delivered within {timeout:?} ({} requests)",
                ids.len(),
                self.hits().len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Clone)]
struct State {
    hits: Arc<Mutex<Vec<Hit>>>,
    mode: Arc<AtomicU8>,
    decide: Option<Arc<Decide>>,
    stop: CancellationToken,
}

async fn serve(
    listener: std::net::TcpListener,
    state: State,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    loop {
        let (tcp, _) = tokio::select! {
            () = state.stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(_) => continue,
            },
        };
        let state = state.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| answer(state.clone(), req));
            match acceptor {
                Some(a) => {
                    if let Ok(tls) = a.accept(tcp).await {
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    }
                }
                None => {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                }
            }
        });
    }
}

async fn answer(state: State, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let mut hit = Hit {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        content_type: header("content-type"),
        body: Vec::new(),
        at: Instant::now(),
        status: 0,
    };
    hit.body = req.into_body().collect().await.unwrap().to_bytes().to_vec();
    let mode = {
        let hits = state.hits.lock().unwrap();
        let before = hits.iter().filter(|h| h.id == hit.id).count();
        match &state.decide {
            Some(decide) => decide(&hit, before),
            None => match state.mode.load(Ordering::SeqCst) {
                0 => Mode::Accept,
                1 => Mode::Fail,
                2 => Mode::Hang,
                3 => Mode::Busy,
                4 => Mode::Unavailable,
                _ => Mode::Reject,
            },
        }
    };
    let (status, retry_after) = match mode {
        Mode::Accept => (200, None),
        Mode::Fail => (500, None),
        Mode::Busy => (503, Some("2")),
        Mode::Unavailable => (503, None),
        Mode::Reject => (422, None),
        Mode::Hang => (0, None),
    };
    hit.status = status;
    state.hits.lock().unwrap().push(hit);
    if mode == Mode::Hang {
        state.stop.cancelled().await;
    }
    let mut response = Response::builder().status(status.max(200));
    if let Some(after) = retry_after {
        response = response.header("retry-after", after);
    }
    Ok(response.body(Full::new(Bytes::from_static(b"ok"))).unwrap())
}

fn tls_config(cert: &Path, key: &Path) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Arc::new(config)
}

/// Verifies a Standard Webhooks signature header against `secret` (`whsec_...`): some `v1,`
/// signature must be the HMAC-SHA256 of `<id>.<timestamp>.<body>`. Written here from the
/// specification, apart from the daemon's code.
pub fn verify(secret: &str, hit: &Hit) -> bool {
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let mut signed = format!("{}.{}.", hit.id, hit.timestamp).into_bytes();
    signed.extend_from_slice(&hit.body);
    let expected =
        base64::engine::general_purpose::STANDARD.encode(ring::hmac::sign(&key, &signed));
    hit.signature
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|s| s == expected)
}
