//! Where the daemon's work comes from: each key's deadline (`index`), notifications of new keys
//! (`keyspace`), one primary's loop joining both with walks (`primary`), every sweep on every
//! primary (`engine`), when sweeps walk (`schedule`), which replica sweeps (`lease`), and what the log
//! says of their work (`summary`).

pub(crate) mod engine;
pub(crate) mod index;
pub(crate) mod keyspace;
pub(crate) mod lease;
pub(crate) mod pause;
pub(crate) mod primary;
pub(crate) mod report;
pub(crate) mod schedule;
pub(crate) mod summary;
