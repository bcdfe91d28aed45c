//! A reply as a value, for the callers that want one rather than reading it in place: the
//! RESP2 subset of `redis::Value`, named alike, with its error replies parsed here.
//!
//! It is the crate's one reply type. Replies that come over redis-rs's connections (the
//! control path: topology, roles, preflight, `INFO`) are converted into it where they are read,
//! with `From` or by asking redis-rs for a [`Value`]; this module is the only one that looks
//! inside a `redis::Value`.

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

/// A reply read by redis-rs, as the data path's decoder reads the same bytes. The control path
/// speaks RESP2 as well, so the kinds only RESP3 has come from redis-rs itself, and become what
/// RESP2 writes instead: a map (a cluster's replies per node to a command sent to every
/// primary) a flat array of keys and values, a set an array, a double its text, a boolean 1 or 0.
impl From<redis::Value> for Value {
    fn from(v: redis::Value) -> Self {
        use redis::Value as R;
        let all = |items: Vec<R>| items.into_iter().map(Value::from).collect();
        match v {
            R::Nil => Self::Nil,
            R::Int(n) => Self::Int(n),
            R::BulkString(b) => Self::BulkString(b),
            R::Array(items) | R::Set(items) => Self::Array(all(items)),
            R::SimpleString(s) => Self::SimpleString(s),
            R::Okay => Self::Okay,
            R::ServerError(e) => Self::ServerError(ServerError {
                code: e.code().to_owned(),
                details: e.details().map(str::to_owned),
            }),
            R::Map(pairs) => Self::Array(
                pairs
                    .into_iter()
                    .flat_map(|(k, v)| [Self::from(k), Self::from(v)])
                    .collect(),
            ),
            R::Attribute { data, .. } => Self::from(*data),
            R::Double(d) => Self::BulkString(d.to_string().into_bytes()),
            R::Boolean(b) => Self::Int(i64::from(b)),
            R::VerbatimString { text, .. } => Self::BulkString(text.into_bytes()),
            R::Push { kind, data } => Self::Array(
                std::iter::once(Self::BulkString(kind.to_string().into_bytes()))
                    .chain(data.into_iter().map(Self::from))
                    .collect(),
            ),
            // A big number, or a kind newer than this code: neither is asked for here.
            _ => Self::Nil,
        }
    }
}

/// So that a redis-rs command or pipeline can be read straight into a [`Value`]
/// (`query_async::<Value>`, `query_async::<Vec<Value>>`).
impl redis::FromRedisValue for Value {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        Ok(v.into())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redis_rs_reply_becomes_the_same_reply() {
        let bulk = |s: &str| redis::Value::BulkString(s.as_bytes().to_vec());
        let reply = redis::Value::Array(vec![
            redis::Value::Int(7),
            bulk("x"),
            redis::Value::Nil,
            redis::Value::Okay,
            redis::Value::SimpleString("QUEUED".into()),
            redis::Value::Map(vec![(bulk("k"), bulk("v"))]),
        ]);
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            Value::from(reply),
            Value::Array(vec![
                Value::Int(7),
                b("x"),
                Value::Nil,
                Value::Okay,
                Value::SimpleString("QUEUED".into()),
                Value::Array(vec![b("k"), b("v")]),
            ])
        );
    }
}
