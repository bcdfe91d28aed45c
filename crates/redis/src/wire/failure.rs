//! How a request on a wire fails, as `io::Error`s that say whether Redis may have run it: a
//! request never written (unsent, or for a node with no connection) cannot have changed
//! anything; one written whose reply was lost (a timeout, a reset) may have. Eviction relies on
//! telling the two apart ([`is_reply_lost`]): only the second can have removed members whose
//! events are then owed.

use std::io;

/// A request whose reply did not come within `what`'s limit.
pub(super) fn no_answer(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

/// A wire retired after a timeout: nothing more is written to it.
pub(super) fn retired() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "a request on this connection timed out; it is not used again",
    )
}

/// A request that never reached the socket: Redis cannot have run it. Its kind tells it apart
/// from a request that was written and then lost its reply (which Redis may have run).
pub(super) fn unsent() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, UNSENT)
}

const UNSENT: &str = "the connection to Redis closed before the request was sent";

/// A request for a node that has no connection (it could not connect): never sent either.
pub(crate) fn no_connection(server: &str, why: &str) -> redis::RedisError {
    io::Error::new(
        io::ErrorKind::NotConnected,
        format!("{NO_CONNECTION}{server}: {why}"),
    )
    .into()
}

const NO_CONNECTION: &str = "no connection to ";

/// Whether `e` is a request that never reached Redis (see [`unsent`], [`no_connection`]). By
/// its text: redis-rs keeps the `io::Error` inside behind a private accessor, and these texts
/// are only ever ours.
pub(super) fn is_unsent(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    e.is_io_error() && (text.contains(UNSENT) || text.contains(NO_CONNECTION))
}

/// Whether `e` is a request that was written and then lost its reply (a timeout, a connection
/// reset): Redis may have run it. Never sent, refused, or answered with an error: it did not.
pub fn is_reply_lost(e: &redis::RedisError) -> bool {
    e.is_io_error() && !is_unsent(e) && !e.is_connection_refusal()
}

/// The server closed the socket.
pub(super) fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "the connection to Redis closed",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lost_reply_leaves_delivery_unknown() {
        let io_error = |kind, text: &str| redis::RedisError::from(io::Error::new(kind, text));
        // Written, then no reply: Redis may have run it.
        assert!(is_reply_lost(&io_error(
            io::ErrorKind::TimedOut,
            "no answer"
        )));
        assert!(is_reply_lost(&io_error(
            io::ErrorKind::ConnectionReset,
            "reset"
        )));
        // Never sent, or never connected: it did not.
        assert!(!is_reply_lost(&unsent().into()));
        assert!(!is_reply_lost(&no_connection("127.0.0.1:1", "refused")));
        assert!(!is_reply_lost(&io_error(
            io::ErrorKind::ConnectionRefused,
            "refused"
        )));
        // Redis answered with an error: it did not.
        let refused = redis::RedisError::from((redis::ErrorKind::Client, "NOPERM"));
        assert!(!is_reply_lost(&refused));
    }
}
