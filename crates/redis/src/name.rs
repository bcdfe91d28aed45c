//! The names connections give themselves (`CLIENT SETNAME`), so that `CLIENT LIST` on a busy
//! server says which connections are the sweeper's and what each is for.
//!
//! Naming is best effort: a Redis user whose ACL refuses `CLIENT SETNAME` still sweeps, with
//! unnamed connections (the store stops asking after the first refusal).

use redis::aio::ConnectionLike;

/// Who opens the connections: the daemon, or one of the tools (named by its command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opener {
    /// `presence-sweeper run`.
    Daemon,
    /// A command other than `run` (`sweep`, `seed`, `stats`, `simulate`).
    Tool(&'static str),
}

/// What a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The data path's own pipelined connection to a primary (reads, evictions, events).
    Data,
    /// redis-rs's shared connection: pings, leases, topology, sharded publishing.
    Control,
    /// A connection of its own for one setup step (permissions, notification settings).
    Setup,
    /// The pub/sub subscriber: keyspace notifications, or a tool's events.
    Notify,
}

impl Opener {
    /// The connection name for `purpose`, e.g. `presence-sweeper:data` for the daemon and
    /// `presence-sweeper:seed` (`presence-sweeper:seed-data`, ...) for a tool. Only characters
    /// Redis allows in a name (no spaces).
    pub fn name(self, purpose: Role) -> String {
        let what = match purpose {
            Role::Data => "data",
            Role::Control => "control",
            Role::Setup => "setup",
            Role::Notify => "notify",
        };
        match (self, purpose) {
            (Self::Daemon, _) => format!("presence-sweeper:{what}"),
            (Self::Tool(tool), Role::Control) => format!("presence-sweeper:{tool}"),
            (Self::Tool(tool), _) => format!("presence-sweeper:{tool}-{what}"),
        }
    }
}

/// Names the connection `con` is (all of a cluster connection's nodes). A failure is logged at
/// debug level and is no failure of the connection, which works unnamed.
pub(crate) async fn set(
    con: &mut impl ConnectionLike,
    name: &str,
) -> Result<(), redis::RedisError> {
    let named = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(name)
        .query_async::<()>(con)
        .await;
    if let Err(e) = &named {
        tracing::debug!(error = %e, name, "could not name a connection (CLIENT SETNAME)");
    }
    named
}

#[cfg(test)]
mod tests {
    use super::{Opener, Role};

    #[test]
    fn names_say_who_and_what_for() {
        assert_eq!(Opener::Daemon.name(Role::Data), "presence-sweeper:data");
        assert_eq!(Opener::Daemon.name(Role::Notify), "presence-sweeper:notify");
        assert_eq!(
            Opener::Tool("seed").name(Role::Control),
            "presence-sweeper:seed"
        );
        assert_eq!(
            Opener::Tool("seed").name(Role::Data),
            "presence-sweeper:seed-data"
        );
    }
}
