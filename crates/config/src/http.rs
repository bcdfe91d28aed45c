//! `[http]`: the metrics and health server.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use super::section::{Key, Shown};

/// `[http]`. Every setting is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http {
    /// `http.listen`: the address to bind; port 0 picks a free port.
    pub listen: SocketAddr,
    /// `http.web_config_file`: the exporter toolkit's web configuration file (TLS and basic
    /// auth), read by `serve::web_config`; unset or empty: plain HTTP, no auth.
    pub web_config_file: Option<PathBuf>,
}

/// Only a starting point for reading: the merged tree always holds `http.listen`.
impl Default for Http {
    fn default() -> Self {
        Self {
            listen: (Ipv4Addr::UNSPECIFIED, 0).into(),
            web_config_file: None,
        }
    }
}

impl Http {
    pub(super) const KEYS: &[Key<Self>] = &[
        Key {
            name: "listen",
            read: |t, k, h| {
                let listen = t.string(k)?;
                h.listen = listen.value.parse().map_err(|_| {
                    listen.invalid("not a socket address like \"0.0.0.0:9750\" or \"[::1]:9750\"")
                })?;
                Ok(())
            },
            show: |h| Shown::text(&h.listen.to_string()),
        },
        Key {
            name: "web_config_file",
            read: |t, k, h| {
                h.web_config_file = t
                    .optional_string(k)?
                    .map(|f| f.value)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from);
                Ok(())
            },
            show: |h| Shown::path(h.web_config_file.as_ref()),
        },
    ];
}
