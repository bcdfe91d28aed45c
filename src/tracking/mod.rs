//! Where the daemon's work comes from: one primary's loop (`primary`), which applies what the
//! rules decide from each key's deadline, the notifications of new keys and the walks, with the notification subscription of the Redis crate; every sweep on every primary (`engine`); when sweeps walk (`schedule`); which replica
//! sweeps (`lease`); the timer that sees the daemon's own pauses (`pause`); and what the engine
//! reports (`report`).

pub(crate) mod engine;
pub(crate) mod lease;
pub(crate) mod pause;
pub(crate) mod primary;
pub(crate) mod report;
pub(crate) mod schedule;
