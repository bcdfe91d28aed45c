//! What Redis answers, below every user of it (the store, eviction, discovery): the cluster
//! redirection codes, ACL refusals, Redis `TIME`, a batch's first error reply, and the small
//! conversions of reply values. It depends only on the decoder's [`Value`]; its error types are the crate's
//! ([`ReplyError`]).

use presence_sweeper_rules::clock::from_parts;

use super::resp::Value;

pub use crate::error::{ReplyError, refusal_reason};

/// Whether an error code means the key lives on another node now (it moved, or is moving):
/// that node's walk finds it.
pub fn is_moved(code: &str) -> bool {
    matches!(code, "MOVED" | "ASK")
}

/// If `reply` is an ACL refusal (NOPERM), Redis's reason, with any key or channel it quotes
/// left out: the reason reaches error logs and `/readyz`, where conversation ids do not go.
pub fn refusal(reply: &Value) -> Option<String> {
    let Value::ServerError(e) = reply else {
        return None;
    };
    (e.code() == "NOPERM").then(|| refusal_reason(e.details().unwrap_or_default()))
}

/// A `TIME` reply as Unix seconds, or the error saying it was none: the one reader of `TIME`,
/// whichever connection it came over.
pub fn time(reply: Option<&Value>) -> Result<f64, ReplyError> {
    let parts = match reply {
        Some(Value::Array(parts)) => parts.as_slice(),
        _ => return Err(not_a_time()),
    };
    let [secs, micros] = parts else {
        return Err(not_a_time());
    };
    match (int(secs), int(micros)) {
        (Some(secs), Some(micros)) => Ok(from_parts(secs as f64, micros as f64)),
        _ => Err(not_a_time()),
    }
}

/// A `TIME` reply read in place, as Unix seconds.
pub fn read_time(r: &mut crate::resp::Reader<'_>) -> Result<f64, crate::Error> {
    let reply = r.value().map_err(redis::RedisError::from)?;
    Ok(time(reply.as_ref())?)
}

/// The error for a `TIME` reply of another shape.
pub fn not_a_time() -> ReplyError {
    ReplyError::new("TIME is not a time")
}

/// Redis's clock now, in Unix seconds, by one `TIME` round trip on a redis-rs connection (the
/// tools' and `stats`'; the data path reads `TIME` in its own pipelines).
pub async fn redis_time<C>(con: &mut C) -> Result<f64, crate::Error>
where
    C: redis::aio::ConnectionLike + Send,
{
    let reply: Value = redis::cmd("TIME").query_async(con).await?;
    Ok(time(Some(&reply))?)
}

/// The replies, or the first error reply as an error: for batches in which any refusal means
/// the whole request failed.
pub fn all_ok(mut replies: Vec<Value>) -> redis::RedisResult<Vec<Value>> {
    let first = replies
        .iter()
        .position(|v| matches!(v, Value::ServerError(_)));
    if let Some(i) = first
        && let Value::ServerError(e) = replies.swap_remove(i)
    {
        return Err(redis::RedisError::from(e));
    }
    Ok(replies)
}

/// An integer reply (or a bulk or status string holding one).
pub fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A score: a bulk string as Redis formats doubles (`inf` and `-inf` included).
pub fn float(v: &Value) -> Option<f64> {
    match v {
        Value::BulkString(b) => number(b),
        Value::Int(n) => Some(*n as f64),
        _ => None,
    }
}

/// A text reply (a bulk or status string), as UTF-8.
pub fn text(v: Value) -> Option<String> {
    String::from_utf8(bytes(v)?).ok()
}

/// A number as Redis writes it in a reply.
pub fn number(bytes: &[u8]) -> Option<f64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

fn bytes(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    }
}

/// A flat `[member, score, ...]` reply (`WITHSCORES`) as (member, score) pairs.
pub fn scored(v: Value) -> Result<Vec<(Vec<u8>, f64)>, ReplyError> {
    let Value::Array(flat) = v else {
        return Err(ReplyError::new("members with scores are not an array"));
    };
    if flat.len() % 2 != 0 {
        return Err(ReplyError::new("members with scores have an odd length"));
    }
    let mut pairs = Vec::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(member), Some(score)) = (it.next(), it.next()) {
        let score = float(&score).ok_or_else(|| ReplyError::new("a score is not a number"))?;
        let member = bytes(member).ok_or_else(|| ReplyError::new("a member is not a string"))?;
        pairs.push((member, score));
    }
    Ok(pairs)
}

/// An array reply of members.
pub fn members(v: Value) -> Result<Vec<Vec<u8>>, ReplyError> {
    let Value::Array(items) = v else {
        return Err(ReplyError::new("members are not an array"));
    };
    items
        .into_iter()
        .map(|m| bytes(m).ok_or_else(|| ReplyError::new("a member is not a string")))
        .collect()
}

/// The score of a one-member `ZRANGE ... WITHSCORES` reply (`0 0`: the lowest, `-1 -1`: the
/// highest): `Ok(None)` for an empty (or missing) set.
pub fn single_score(v: &Value) -> Result<Option<f64>, ReplyError> {
    match v {
        Value::Array(pair) if pair.is_empty() => Ok(None),
        Value::Array(pair) if pair.len() == 2 => float(&pair[1])
            .map(Some)
            .ok_or_else(|| ReplyError::new("a score is not a number")),
        _ => Err(ReplyError::new("the lowest member is not a pair")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_leaves_out_the_names_redis_quotes() {
        let refused = |details: &str| {
            let line = format!("-NOPERM {details}\r\n");
            let reply = super::super::resp::Reader::new(line.as_bytes()).value();
            refusal(&reply.unwrap().unwrap())
        };
        assert_eq!(
            refused("User u has no permissions to access the 'presence:c42:online' key").as_deref(),
            Some("NOPERM User u has no permissions to access the '…' key")
        );
        assert_eq!(
            refused("this user has no permissions to access one of the keys used as arguments")
                .as_deref(),
            Some("NOPERM this user has no permissions to access one of the keys used as arguments")
        );
        assert_eq!(refusal(&Value::Okay), None);
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn time_reply() {
        let v = Value::Array(vec![bulk("1764460046"), bulk("500000")]);
        assert_eq!(time(Some(&v)).unwrap(), 1_764_460_046.5);
        assert!(time(Some(&Value::Nil)).is_err());
        assert!(time(None).is_err());
        let v = redis::Value::Array(vec![
            redis::Value::BulkString(b"1764460046".to_vec()),
            redis::Value::BulkString(b"500000".to_vec()),
        ]);
        assert_eq!(time(Some(&v.into())).unwrap(), 1_764_460_046.5);
    }

    #[test]
    fn scores_of_every_shape() {
        assert_eq!(float(&bulk("-inf")), Some(f64::NEG_INFINITY));
        assert_eq!(float(&bulk("1.5")), Some(1.5));
        let pair = Value::Array(vec![bulk("u1"), bulk("17.25")]);
        assert_eq!(single_score(&pair).unwrap(), Some(17.25));
        assert_eq!(single_score(&Value::Array(vec![])).unwrap(), None);
        assert!(single_score(&Value::Int(1)).is_err());
        assert!(is_moved("MOVED") && is_moved("ASK") && !is_moved("TRYAGAIN"));
    }
}
