//! The HTTP side of one endpoint: a keep-alive HTTP/1.1 client (TLS by rustls with ring), and one
//! attempt's POST, bounded in time and in what it reads back.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use http_body_util::{BodyExt as _, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as Legacy;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use presence_sweeper_config::Webhook;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::retry;

/// The most bytes of a response body read: a receiver's answer is not used, only its status,
/// and a huge or endless body must not hold the attempt or memory.
pub const MAX_RESPONSE_BYTES: usize = 4096;
/// How long an idle keep-alive connection is kept for the next request.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an endpoint's client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The url does not parse as an http(s) URI.
    #[error("webhooks.{0}.url: not a valid http or https URL")]
    Url(String),
    /// A certificate of `ca_file` is unusable.
    #[error("webhooks.{endpoint}.ca_file: {why}")]
    Ca {
        /// The endpoint.
        endpoint: String,
        /// Why.
        why: String,
    },
    /// No root certificates in the system and no `ca_file` for an https url.
    #[error("webhooks.{0}: no system root certificates for an https url; set ca_file")]
    NoRoots(String),
    /// rustls refused the protocol versions.
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    /// The receiver answered with this status (and maybe a `Retry-After`).
    Status {
        /// The HTTP status.
        status: u16,
        /// The `Retry-After` it sent, as a wait.
        retry_after: Option<Duration>,
    },
    /// No complete answer within the endpoint's `timeout`.
    TimedOut,
    /// No answer: the connection failed (refused, reset, TLS). Its text names no event.
    Failed(String),
}

impl Posted {
    /// The metric label of the attempt's result.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Status { status, .. } => match status {
                200..=299 => "2xx",
                300..=399 => "3xx",
                400..=499 => "4xx",
                _ => "5xx",
            },
            Self::TimedOut => "timeout",
            Self::Failed(_) => "error",
        }
    }
}

/// The headers of one attempt.
#[derive(Debug)]
pub struct Signed<'a> {
    /// `webhook-id`.
    pub id: &'a str,
    /// `webhook-timestamp`.
    pub timestamp: u64,
    /// `webhook-signature`.
    pub signature: String,
}

/// One endpoint's client; clones share its connections.
#[derive(Clone)]
pub struct Client {
    http: Legacy<HttpsConnector<HttpConnector>, Full<Bytes>>,
    uri: http::Uri,
    timeout: Duration,
}

impl Client {
    /// The client of `hook`.
    pub fn new(hook: &Webhook) -> Result<Self, ClientError> {
        let uri: http::Uri = hook
            .url
            .parse()
            .map_err(|_| ClientError::Url(hook.name.clone()))?;
        let mut http = HttpConnector::new();
        // Small requests on a kept-alive connection: Nagle would hold each one back.
        http.set_nodelay(true);
        http.enforce_http(false);
        http.set_connect_timeout(Some(hook.timeout));
        let tls = tls_config(hook, uri.scheme_str() == Some("https"))?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let http = Legacy::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(hook.concurrency as usize)
            .build(connector);
        Ok(Self {
            http,
            uri,
            timeout: hook.timeout,
        })
    }

    /// POSTs `body` once, signed, within the endpoint's timeout.
    pub async fn post(&self, signed: &Signed<'_>, body: Bytes) -> Posted {
        let request = match self.request(signed, body) {
            Ok(r) => r,
            Err(e) => return Posted::Failed(e.to_string()),
        };
        let attempt = async {
            let response = self.http.request(request).await.map_err(|e| {
                let mut why = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    why = format!("{why}: {s}");
                    source = s.source();
                }
                why
            })?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry::retry_after(v, SystemTime::now()));
            drain(response.into_body()).await;
            Ok::<_, String>(Posted::Status {
                status,
                retry_after,
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(why)) => Posted::Failed(why),
            Err(_) => Posted::TimedOut,
        }
    }

    fn request(
        &self,
        signed: &Signed<'_>,
        body: Bytes,
    ) -> Result<http::Request<Full<Bytes>>, http::Error> {
        http::Request::post(self.uri.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(
                USER_AGENT,
                HeaderValue::from_static(concat!("presence-sweeper/", env!("CARGO_PKG_VERSION"))),
            )
            .header("webhook-id", signed.id)
            .header("webhook-timestamp", signed.timestamp.to_string())
            .header("webhook-signature", &signed.signature)
            .body(Full::new(body))
    }
}

/// Reads at most [`MAX_RESPONSE_BYTES`] of a response body: a body read to its end lets the
/// connection be reused, and one that is longer is cut (its connection is then closed).
async fn drain(mut body: hyper::body::Incoming) {
    let mut read = 0;
    while read < MAX_RESPONSE_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
            _ => return,
        }
    }
}

/// TLS for the endpoint: its `ca_file`, else the system's roots (only needed for https).
fn tls_config(hook: &Webhook, https: bool) -> Result<rustls::ClientConfig, ClientError> {
    let mut roots = RootCertStore::empty();
    let ca_error = |why: String| ClientError::Ca {
        endpoint: hook.name.clone(),
        why,
    };
    match &hook.ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| ca_error(e.to_string()))?;
                roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
            }
        }
        None if https => {
            let native = rustls_native_certs::load_native_certs();
            if roots.add_parsable_certificates(native.certs).0 == 0 {
                return Err(ClientError::NoRoots(hook.name.clone()));
            }
        }
        None => {}
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // The connector sets ALPN (http/1.1 only) itself.
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
