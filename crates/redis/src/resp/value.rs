//! A reply as a value, for the callers that want one rather than reading it in place: the
//! RESP2 subset of `redis::Value`, named alike, with its error replies parsed here.

use std::fmt;

/// One reply of the data path.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A null bulk string or array.
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk string.
    BulkString(Vec<u8>),
    /// An array.
    Array(Vec<Value>),
    /// A status reply other than `OK`.
    SimpleString(String),
    /// `+OK`.
    Okay,
    /// An error reply.
    ServerError(ServerError),
}

/// An error reply as Redis wrote it: a code (its first word: `ERR`, `MOVED`, `NOPERM`, ...) and
/// what follows. Public as what a [`Push::Error`](crate::subscriber::Push::Error) carries; it becomes a
/// `redis::RedisError` with `From`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    code: String,
    details: Option<String>,
}

impl ServerError {
    /// The error code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// What follows the code, if anything does.
    pub fn details(&self) -> Option<&str> {
        self.details.as_deref()
    }
}

impl fmt::Display for ServerError {
    /// As Redis wrote it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.code)?;
        match &self.details {
            Some(details) => write!(f, " {details}"),
            None => Ok(()),
        }
    }
}

/// As redis-rs reports a server error whose code it does not know: `code()` and `detail()`
/// answer as for one it parsed itself (its `kind()` is `Extension` whatever the code: ask the
/// code).
impl From<ServerError> for redis::RedisError {
    fn from(e: ServerError) -> Self {
        redis::make_extension_error(e.code, e.details)
    }
}

/// An error reply's line, borrowed from the bytes it came in (without its `-`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ErrorLine<'a>(&'a [u8]);

impl<'a> ErrorLine<'a> {
    pub(super) fn new(line: &'a [u8]) -> Self {
        Self(line)
    }

    /// The error code: the line's first word (empty if it is not text).
    pub fn code(self) -> &'a str {
        let code = self.0.split(|&b| b == b' ').next().unwrap_or_default();
        std::str::from_utf8(code).unwrap_or_default()
    }

    /// The same error, owned.
    pub fn owned(self) -> ServerError {
        let mut parts = self.0.splitn(2, |&b| b == b' ');
        let text = |part: &[u8]| String::from_utf8_lossy(part).into_owned();
        ServerError {
            code: self.code().to_owned(),
            details: parts.nth(1).map(text),
        }
    }
}

impl fmt::Debug for ErrorLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ErrorLine({:?})", String::from_utf8_lossy(self.0))
    }
}

impl fmt::Display for ErrorLine<'_> {
    /// As Redis wrote it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.0))
    }
}

impl From<ErrorLine<'_>> for redis::RedisError {
    fn from(e: ErrorLine<'_>) -> Self {
        e.owned().into()
    }
}
