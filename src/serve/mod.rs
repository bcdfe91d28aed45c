//! The process around the sweeps: the daemon, its HTTP endpoint (metrics, liveness,
//! readiness), systemd, signals and logging.

pub mod daemon;
pub(crate) mod health;
pub mod http;
pub mod logging;
pub(crate) mod metrics;
pub mod signals;
pub mod systemd;
