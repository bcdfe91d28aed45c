//! The web configuration file (`http.web_config_file`): TLS and basic auth of the metrics and
//! health server, in the Prometheus exporter toolkit's format, so that the file an operator
//! writes for node_exporter or redis_exporter works here too.
//!
//! The subset read: `tls_server_config` (`cert_file`, `key_file`, `client_auth_type`,
//! `client_ca_file`, `min_version`) and `basic_auth_users`. Any other key is an error naming it
//! and the file, rather than a setting silently not applied (a `cipher_suites` an operator
//! relies on, say). Relative paths are relative to the file's directory, as in the toolkit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, SupportedProtocolVersion};
use serde::Deserialize;

use crate::serve::basic_auth::BasicAuth;

/// The file as written. Every key is optional; the toolkit's others are refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebFile {
    tls_server_config: Option<TlsFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

/// `tls_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
}

/// Why the web configuration file was refused. Every message names the file, and the key where
/// one is at fault; none holds a password hash.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// The file could not be read.
    #[error("cannot read web config file {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// Not YAML of the expected shape: a syntax error, an unknown key, a wrong type.
    #[error("web config file {path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The YAML parser's message, which names the key and its line.
        message: String,
    },
    /// A key whose value cannot be used.
    #[error("web config file {path}: {key}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The dotted key, e.g. `tls_server_config.key_file`.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// The server's TLS, ready to accept with.
#[derive(Debug)]
pub(crate) struct ServerTls {
    /// What each connection's handshake uses.
    pub(crate) server: Arc<ServerConfig>,
    /// The server's own certificate, which `healthcheck` trusts (and only it): the probe runs
    /// beside the daemon, reads the same file, and so needs no CA nor a name in the certificate
    /// that matches the address it dials.
    pub(crate) leaf: CertificateDer<'static>,
    /// Whether clients must present a certificate (`RequireAndVerifyClientCert`).
    pub(crate) client_cert_required: bool,
}

/// What the web configuration file asks of the server; the default is plain HTTP, no auth.
#[derive(Debug, Default)]
pub struct Web {
    pub(crate) tls: Option<ServerTls>,
    pub(crate) auth: Option<Arc<BasicAuth>>,
}

impl Web {
    /// Reads and checks the file at `path`; `None`: plain HTTP, no auth.
    pub fn load(path: Option<&Path>) -> Result<Self, WebConfigError> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path).map_err(|cause| WebConfigError::Read {
            path: path.to_owned(),
            cause,
        })?;
        // An empty document is YAML's null, which is no mapping: read it as "nothing set".
        let file: WebFile = if text.trim().is_empty() {
            WebFile::default()
        } else {
            serde_yaml_ng::from_str(&text).map_err(|e| WebConfigError::Syntax {
                path: path.to_owned(),
                message: e.to_string(),
            })?
        };
        let file_ctx = FileCtx {
            path,
            dir: path.parent().unwrap_or(Path::new(".")),
        };
        let tls = file
            .tls_server_config
            .map(|t| file_ctx.tls(&t))
            .transpose()?
            .flatten();
        let auth = match file.basic_auth_users {
            Some(users) if !users.is_empty() => Some(Arc::new(BasicAuth::new(users).map_err(
                |(user, reason)| file_ctx.invalid(&format!("basic_auth_users.{user}"), &reason),
            )?)),
            _ => None,
        };
        Ok(Self { tls, auth })
    }

    /// What is in force, for the start-up log line: no secrets, no user names.
    pub fn describe(&self) -> String {
        let tls = match &self.tls {
            None => "plain HTTP",
            Some(t) if t.client_cert_required => "TLS, client certificates required",
            Some(_) => "TLS",
        };
        match &self.auth {
            Some(a) => format!("{tls}, basic auth ({} users)", a.users()),
            None => format!("{tls}, no auth"),
        }
    }
}

/// The file being read: where errors point and relative paths start.
struct FileCtx<'a> {
    path: &'a Path,
    dir: &'a Path,
}

impl FileCtx<'_> {
    fn invalid(&self, key: &str, reason: &str) -> WebConfigError {
        WebConfigError::Invalid {
            path: self.path.to_owned(),
            key: key.to_owned(),
            reason: reason.to_owned(),
        }
    }

    /// Reads the file `key` names, relative to the web config file's directory.
    fn read(&self, key: &str, file: &Path) -> Result<Vec<u8>, WebConfigError> {
        let full = self.dir.join(file);
        std::fs::read(&full).map_err(|e| self.invalid(key, &format!("{}: {e}", full.display())))
    }

    /// `tls_server_config`; `None` when it names neither certificate nor key, as the toolkit
    /// reads such a section: TLS off.
    fn tls(&self, t: &TlsFile) -> Result<Option<ServerTls>, WebConfigError> {
        const K: &str = "tls_server_config";
        let (cert_file, key_file) = match (given(&t.cert_file), given(&t.key_file)) {
            (None, None) if t.client_auth_type.is_none() && t.client_ca_file.is_none() => {
                return Ok(None);
            }
            (Some(cert), Some(key)) => (cert, key),
            (None, _) => return Err(self.invalid(&format!("{K}.cert_file"), "missing")),
            (_, None) => return Err(self.invalid(&format!("{K}.key_file"), "missing")),
        };
        let cert_key = format!("{K}.cert_file");
        let chain = CertificateDer::pem_slice_iter(&self.read(&cert_key, cert_file)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.invalid(&cert_key, &format!("not PEM certificates: {e}")))?;
        let Some(leaf) = chain.first().cloned() else {
            return Err(self.invalid(&cert_key, "holds no certificate"));
        };
        let key_key = format!("{K}.key_file");
        // The key's bytes are secret: the error says what is wrong, never what was read.
        let key = PrivateKeyDer::from_pem_slice(&self.read(&key_key, key_file)?)
            .map_err(|e| self.invalid(&key_key, &format!("no PEM private key: {e}")))?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(self.versions(t.min_version.as_deref())?)
            .map_err(|e| self.invalid(&format!("{K}.min_version"), &e.to_string()))?;
        let auth_key = format!("{K}.client_auth_type");
        let ca_key = format!("{K}.client_ca_file");
        let kind = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
        let builder = match (kind, &t.client_ca_file) {
            ("NoClientCert", None) => builder.with_no_client_auth(),
            ("NoClientCert", Some(_)) => {
                // A CA without a policy that uses it would look like mTLS and be none.
                return Err(self.invalid(
                    &ca_key,
                    "set, but client_auth_type is NoClientCert: say RequireAndVerifyClientCert \
                     (or VerifyClientCertIfGiven)",
                ));
            }
            ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven", None) => {
                return Err(self.invalid(
                    &ca_key,
                    &format!("missing: {kind} verifies client certificates against it"),
                ));
            }
            ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven", Some(ca)) => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&self.read(&ca_key, ca)?) {
                    let cert = cert.map_err(|e| self.invalid(&ca_key, &e.to_string()))?;
                    roots
                        .add(cert)
                        .map_err(|e| self.invalid(&ca_key, &e.to_string()))?;
                }
                let mut verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                if kind == "VerifyClientCertIfGiven" {
                    verifier = verifier.allow_unauthenticated();
                }
                let verifier = verifier
                    .build()
                    .map_err(|e| self.invalid(&ca_key, &e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
            ("RequestClientCert" | "RequireAnyClientCert", _) => {
                return Err(self.invalid(
                    &auth_key,
                    &format!(
                        "{kind} accepts certificates nobody verifies, so it is not supported: \
                         use RequireAndVerifyClientCert"
                    ),
                ));
            }
            (other, _) => {
                return Err(self.invalid(
                    &auth_key,
                    &format!(
                        "{other:?} is not one of NoClientCert, VerifyClientCertIfGiven, \
                         RequireAndVerifyClientCert"
                    ),
                ));
            }
        };
        let mut server = builder
            .with_single_cert(chain, key)
            .map_err(|e| self.invalid(&key_key, &format!("does not fit cert_file: {e}")))?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(ServerTls {
            server: Arc::new(server),
            leaf,
            client_cert_required: kind == "RequireAndVerifyClientCert",
        }))
    }

    /// `min_version`; rustls speaks TLS 1.2 and 1.3 only.
    fn versions(
        &self,
        min: Option<&str>,
    ) -> Result<&'static [&'static SupportedProtocolVersion], WebConfigError> {
        static BOTH: &[&SupportedProtocolVersion] =
            &[&rustls::version::TLS13, &rustls::version::TLS12];
        static TLS13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];
        match min {
            None | Some("TLS12") => Ok(BOTH),
            Some("TLS13") => Ok(TLS13),
            Some(v @ ("TLS10" | "TLS11")) => Err(self.invalid(
                "tls_server_config.min_version",
                &format!("{v} is not supported (only TLS 1.2 and 1.3 are): use TLS12 or TLS13"),
            )),
            Some(other) => Err(self.invalid(
                "tls_server_config.min_version",
                &format!("{other:?} is not TLS12 or TLS13"),
            )),
        }
    }
}

/// The web configuration in force, replaced whole when the file is read again (SIGHUP); each
/// connection takes the one current when it was accepted.
#[derive(Debug)]
pub(crate) struct CurrentWeb {
    path: Option<PathBuf>,
    web: RwLock<Arc<Web>>,
}

impl CurrentWeb {
    /// Reads the file at `path`, if any.
    pub(crate) fn load(path: Option<PathBuf>) -> Result<Self, WebConfigError> {
        let web = Web::load(path.as_deref())?;
        Ok(Self {
            path,
            web: RwLock::new(Arc::new(web)),
        })
    }

    /// What new connections get.
    pub(crate) fn get(&self) -> Arc<Web> {
        self.web.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the file again; on error the running configuration stays. Without a file, nothing
    /// to do (its path is in `[http]`, which takes a restart).
    pub(crate) fn reload(&self) -> Result<bool, WebConfigError> {
        if self.path.is_none() {
            return Ok(false);
        }
        let web = Web::load(self.path.as_deref())?;
        *self.web.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(web);
        Ok(true)
    }
}

/// A path that is set and not empty (the toolkit reads an empty one as unset).
fn given(p: &Option<PathBuf>) -> Option<&Path> {
    p.as_deref().filter(|p| !p.as_os_str().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<Web, WebConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yml");
        std::fs::write(&path, yaml).unwrap();
        Web::load(Some(&path))
    }

    #[test]
    fn empty_or_certless_files_mean_plain_http() {
        for yaml in [
            "",
            "# nothing\n",
            "tls_server_config: {}\n",
            "basic_auth_users: {}\n",
        ] {
            let web = load(yaml).unwrap();
            assert!(web.tls.is_none() && web.auth.is_none(), "{yaml:?}");
            assert_eq!(web.describe(), "plain HTTP, no auth");
        }
    }

    #[test]
    fn half_a_tls_section_names_what_is_missing() {
        let e = load("tls_server_config:\n  cert_file: a.pem\n").unwrap_err();
        assert!(
            e.to_string()
                .ends_with("tls_server_config.key_file: missing"),
            "{e}"
        );
        let e = load("tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n")
            .unwrap_err();
        assert!(e.to_string().contains("tls_server_config.cert_file"), "{e}");
    }

    #[test]
    fn unreadable_files_are_named_relative_to_the_web_config() {
        let e = load("tls_server_config:\n  cert_file: nope.pem\n  key_file: nope.key\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls_server_config.cert_file: /"), "{e}");
        assert!(e.contains("/nope.pem: "), "{e}");
    }
}
