//! What can go wrong talking to Redis ([`Error`]), and what each failure means for the rules
//! ([`Trouble`], through [`Failure`]).

use presence_sweeper_rules::trouble::{Failure, Trouble};

/// Everything that can fail talking to Redis.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Connecting to Redis failed.
    #[error("cannot connect to Redis at {url}: {cause}")]
    Connect {
        /// The URL, password redacted.
        url: String,
        /// Why.
        cause: redis::RedisError,
    },
    /// Something answered at the address, but not in Redis's protocol: another kind of server
    /// (HTTP, a database on the wrong port). One line, not the parser's complaint.
    #[error(
        "cannot connect to Redis: {address} answered, but not as Redis does (is it a Redis server?)"
    )]
    NotRedis {
        /// Where (`host:port`, or the configuration's servers; passwords redacted).
        address: String,
    },
    /// A Redis command failed.
    #[error("Redis: {0}")]
    Redis(redis::RedisError),
    /// The Redis user may not run a command a pass needs (an ACL without it).
    #[error(
        "the Redis user may not run {command} on {target}: {detail} (docs/operations.md, \"Redis permissions\", lists the minimal ACL)"
    )]
    Permission {
        /// The command refused.
        command: String,
        /// The key or channel it was refused on.
        target: String,
        /// Redis's reason.
        detail: String,
    },
    /// Redis answered something of an unexpected shape.
    #[error(transparent)]
    Reply(#[from] ReplyError),
}

/// A reply did not have the expected shape.
#[derive(Debug, thiserror::Error)]
#[error("unexpected reply from Redis: {0}")]
pub struct ReplyError(String);

impl ReplyError {
    /// A reply error saying what was wrong.
    pub fn new(what: impl Into<String>) -> Self {
        Self(what.into())
    }
}

/// A NOPERM refusal's reason as `NOPERM <details>`, without the key or channel Redis quotes
/// (Redis 7.2 and later: "... access the 'presence:c42:online' key"). Everything after an
/// opening quote up to the closing one goes: a name that holds a quote itself loses its tail
/// too.
pub fn refusal_reason(details: &str) -> String {
    let mut reason = String::from("NOPERM ");
    for (i, part) in details.split('\'').enumerate() {
        reason.push_str(if i % 2 == 0 { part } else { "'…'" });
    }
    reason
}

// The causes above are part of each message (logs print errors with `Display` alone), so they
// are not also exposed as `source()`: a chain printer such as anyhow's `{:#}` would print them
// twice ("Address already in use (os error 98): Address already in use (os error 98)").
impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        // A refusal anywhere (a transaction, a script, a publish the ACL changed under): its
        // text from Redis 7.2 on quotes the key or channel, which holds a conversation id, and
        // this error reaches error logs and /readyz.
        if e.code() == Some("NOPERM") {
            return Self::Permission {
                command: "a command".into(),
                target: "a key or channel of a sweep".into(),
                detail: refusal_reason(e.detail().unwrap_or_default()),
            };
        }
        Self::Redis(e)
    }
}

impl Failure for Error {
    fn trouble(&self) -> Trouble {
        Error::trouble(self)
    }

    fn read_only() -> Self {
        redis::make_extension_error("READONLY".into(), Some("the canary's write".into())).into()
    }
}

impl Error {
    /// What kind of trouble with Redis this is.
    pub fn trouble(&self) -> Trouble {
        match self {
            Self::Connect { cause, .. } | Self::Redis(cause) => redis_trouble(cause),
            Self::Permission { .. } => Trouble::Permission,
            _ => Trouble::Other,
        }
    }
}

fn redis_trouble(e: &redis::RedisError) -> Trouble {
    // NOAUTH: a password is required and none was given; WRONGPASS: a wrong one, or an unknown
    // user (Redis does not say which).
    let credentials = e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
        || ["WRONGPASS", "NOAUTH", "invalid username-password"]
            .iter()
            .any(|s| e.to_string().contains(s));
    if credentials {
        Trouble::Credentials
    } else if e.code() == Some("NOPERM") {
        Trouble::Permission
    } else if e.is_timeout() {
        Trouble::Timeout
    } else if e.is_io_error() || e.is_connection_dropped() {
        Trouble::Unreachable
    } else {
        Trouble::Other
    }
}
