//! `[http]`: the metrics and health server.

use std::net::{Ipv4Addr, SocketAddr};

use super::section::{Key, Shown};

/// `[http]`. Every setting is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// `http.listen`: the address to bind; port 0 picks a free port.
    pub listen: SocketAddr,
}

/// Only a starting point for reading: the merged tree always holds `http.listen`.
impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: (Ipv4Addr::UNSPECIFIED, 0).into(),
        }
    }
}

impl HttpConfig {
    pub(super) const KEYS: &[Key<Self>] = &[Key {
        name: "listen",
        read: |t, k, h| {
            let listen = t.string(k)?;
            h.listen = listen.value.parse().map_err(|_| {
                listen.invalid("not a socket address like \"0.0.0.0:9750\" or \"[::1]:9750\"")
            })?;
            Ok(())
        },
        show: |h| Shown::text(&h.listen.to_string()),
    }];
}
