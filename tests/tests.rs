//! The integration tests, one binary of modules (one link). Each module starts its own
//! `redis-server` processes on free ports through `support`.

mod support;

mod acl;
mod bad_day;
mod cli;
mod cluster;
mod daemon;
mod eviction;
mod metrics;
mod operations;
mod replicas;
mod sentinel;
mod tls;
mod tools;
mod tracking;
mod web;
