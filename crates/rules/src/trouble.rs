//! What a failure to talk to Redis means for the rules: its kind ([`Trouble`]), which decides
//! whether it is an outage, a refusal to report, or neither. The error itself is the I/O's own
//! type ([`Failure`]): the rules keep it and hand it back, and look at nothing else of it.

/// What an error says about the daemon's standing with Redis: readiness and metrics report the
/// kind, so that a wrong password is not taken for an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// Redis refused the credentials (a wrong or missing password, an unknown user).
    Credentials,
    /// The user may not run a command it needs (an ACL).
    Permission,
    /// No connection: down, unreachable, the connection lost.
    Unreachable,
    /// Connected, but no answer within `redis.command_timeout` (a paused or overloaded Redis,
    /// or a connection a firewall dropped silently).
    Timeout,
    /// Anything else (an unexpected reply, a server error).
    Other,
}

impl Trouble {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Credentials => "credentials",
            Self::Permission => "permission",
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Other => "other",
        }
    }

    /// Redis refused the daemon (its credentials or a command): retrying will not help until
    /// someone fixes it.
    pub fn is_refusal(self) -> bool {
        matches!(self, Self::Credentials | Self::Permission)
    }
}

/// What the rules ask of an error of the I/O side: its kind, and how to say it.
pub trait Failure: std::fmt::Display + std::fmt::Debug + Send + 'static {
    /// What kind of trouble with Redis this is.
    fn trouble(&self) -> Trouble;
    /// The error for a write the canary's primary refused as a replica (`READONLY`): the
    /// primary is looked up again with it, as after any other failure.
    fn read_only() -> Self;
}
