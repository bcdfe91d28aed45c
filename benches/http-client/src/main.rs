//! One POST to a local HTTP/1.1 server this process starts, through the client the features pick
//! (none: the server alone, the base line). Compared for binary size and start cost.
use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let svc = service_fn(|_req| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
            });
        }
    });
    let url = format!("http://{addr}/hooks");
    let status = post(&url).await;
    println!("{status}");
}

#[cfg(feature = "hyperclient")]
async fn post(url: &str) -> u16 {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    let tls = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Full<Bytes>>(https);
    let req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    client.request(req).await.unwrap().status().as_u16()
}

#[cfg(feature = "reqwestclient")]
async fn post(url: &str) -> u16 {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    client
        .post(url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[cfg(not(any(feature = "hyperclient", feature = "reqwestclient")))]
async fn post(_url: &str) -> u16 {
    0
}
