//! The TLS client configuration of the data path's own connections: the certificates redis-rs
//! would trust for the same `rediss://` URL (`redis.tls.ca_file`, else the system's roots) and
//! the client certificate, if one is configured. Built once per store.

use presence_sweeper_config as config;
use std::io;
use std::sync::{Arc, Once};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// rustls needs a process-wide crypto provider before the first TLS handshake, the data path's
/// and redis-rs's alike.
pub(crate) fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The client configuration for `tls`.
pub(super) fn client_config(tls: &config::Tls) -> io::Result<Arc<ClientConfig>> {
    install_crypto_provider();
    let mut roots = RootCertStore::empty();
    match &tls.ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(cert.map_err(invalid("redis.tls.ca_file"))?)
                    .map_err(invalid("redis.tls.ca_file"))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            if roots.add_parsable_certificates(native.certs).0 == 0
                && let Some(e) = native.errors.into_iter().next()
            {
                return Err(io::Error::other(format!(
                    "no system root certificates: {e}"
                )));
            }
        }
    }
    let builder = ClientConfig::builder().with_root_certificates(roots);
    let config = match &tls.client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(invalid("redis.tls.cert_file"))?;
            let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes())
                .map_err(invalid("redis.tls.key_file"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(invalid("redis.tls.cert_file"))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

fn invalid<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> io::Error {
    move |e| io::Error::new(io::ErrorKind::InvalidInput, format!("{what}: {e}"))
}

/// The certificates in the form the Redis client takes.
/// The certificates of `tls` in the form the Redis client takes.
pub(crate) fn certificates(tls: &config::Tls) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.expose().as_bytes().to_vec(),
            }),
        root_cert: tls.ca.clone(),
    }
}
