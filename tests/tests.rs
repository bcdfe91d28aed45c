//! The integration tests, one binary of modules (one link). Each module starts its own
//! `redis-server` processes on free ports through `support` (`REDIS_SERVER` picks another
//! binary, e.g. a `valkey-server`; `docs` needs none: it reads files).

#![expect(
    clippy::disallowed_methods,
    reason = "these tests run real servers in real time, from threads of their own: nothing here is paused"
)]
#![expect(
    clippy::too_many_lines,
    reason = "a scenario reads best top to bottom, as it happens"
)]
#![expect(
    unreachable_pub,
    reason = "a test binary has no outside: `pub` here only shares helpers between its modules"
)]

mod support;

mod acl;
mod bad_day;
mod cli;
mod cluster;
mod config_reference;
mod daemon;
mod docs;
mod durations;
mod eviction;
mod faults;
mod metrics;
mod new_keys;
mod operations;
mod own_keys;
mod replicas;
mod score_unit;
mod sentinel;
mod streams;
mod tls;
mod tools;
mod tracking;
mod web;
mod webhooks;
