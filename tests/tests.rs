//! The integration tests, one binary of modules (one link). Each module starts its own
//! `redis-server` processes on free ports through `support` (`REDIS_SERVER` picks another
//! binary, e.g. a `valkey-server`; `docs` needs none: it reads files).

mod support;

mod acl;
mod bad_day;
mod cli;
mod cluster;
mod config_reference;
mod daemon;
mod docs;
mod eviction;
mod faults;
mod metrics;
mod operations;
mod replicas;
mod score_unit;
mod sentinel;
mod tls;
mod tools;
mod tracking;
mod web;
