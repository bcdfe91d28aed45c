//! The process around the sweeps: the daemon, its HTTP endpoint (metrics, liveness,
//! readiness; TLS and basic auth from the web config file), systemd, signals and logging.

pub(crate) mod basic_auth;
pub mod daemon;
pub(crate) mod health;
pub mod http;
pub mod logging;
pub(crate) mod metrics;
pub(crate) mod pinned;
pub(crate) mod reports;
pub mod signals;
mod start;
pub mod systemd;
pub mod web_config;
mod webhooks;

pub use metrics::BuildInfo;
pub use start::StartError;
