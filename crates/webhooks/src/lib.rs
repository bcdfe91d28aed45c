//! presence-sweeper's webhooks: every leave of some sweeps POSTed to HTTP endpoints, signed as
//! Standard Webhooks, at least once, from the sweeps' streams.
//!
//! The stream script marks a stream due for each endpoint in the same call that appends to it
//! ([`keys`]); an endpoint's [`Deliverer`] claims due streams with a lease ([`store`]), and a
//! [`worker`] per stream posts its entries in order and moves the stream's cursor once they are
//! done; on a cluster the due sets are per hash slot, found by discovery and by the evictors'
//! [`DueSlots`] hints. The pure parts: [`signing`] (the signature), [`id`] (`webhook-id`), [`entry`] (the body
//! rebuilt from an entry), [`retry`] (backoff, `Retry-After`, expiry). [`client`] is the HTTP
//! side; [`metrics`] the series, labelled by the endpoint's name only.

pub mod client;
pub mod clock;
mod endpoint;
pub mod entry;
mod hints;
pub mod id;
pub mod keys;
pub mod metrics;
pub mod retry;
pub mod signing;
pub mod store;
pub mod worker;

pub use endpoint::{Claiming, DISCOVER, Deliverer, EndpointError, POLL};
pub use hints::DueSlots;
pub use metrics::DeliveryMetrics;
