//! A call of either eviction script (`evict.lua`, `stream.lua`): `EVALSHA`, loading the script
//! again where Redis lost it, and the reply both return. The scripts differ only in what a
//! swept key's result holds after its common head, so one parser reads both replies, and each
//! script says how to read its own tail ([`Tail`]).

use presence_sweeper_rules::score::ScoreUnit;

use crate::reply::{ReplyError, all_ok, float, int, scored};
use crate::resp::Value;
use crate::{Node, Packed, Wait};

/// The outcome of one call, `S` being what a swept key's result holds.
#[derive(Debug)]
pub struct Reply<S> {
    /// The instant the call judged staleness at, in Unix seconds.
    pub now: f64,
    /// One entry per key, in the order the keys were given.
    pub keys: Vec<KeyReply<S>>,
}

/// The outcome for one key.
#[derive(Debug)]
pub enum KeyReply<S> {
    /// The key was swept (and may need another call, if the result says so).
    Swept(S),
    /// The budget ran out before this key (or, with a stream, an earlier key's stream refused
    /// a write); send it again.
    NotReached,
    /// The key is no longer a sorted set; it is left alone.
    WrongType,
}

/// What every swept key's result begins with: `{ status, card, oldest, removed, ... }`.
#[derive(Debug)]
pub(super) struct Head {
    /// 0: done; 1: stale members are left (the budget ran out); others as the script says.
    pub(super) status: i64,
    /// Members left in the set.
    pub(super) card: u64,
    /// Lowest remaining score, in the score unit, if the script read it.
    pub(super) oldest: Option<f64>,
    /// Removed members and their scores (in the score unit).
    pub(super) removed: Vec<(Vec<u8>, f64)>,
}

impl Head {
    /// Whether the key must be sent again: the budget ran out before all its stale members.
    pub(super) fn more(&self) -> bool {
        self.status == 1
    }
}

/// A script's swept key: read from the common [`Head`] and the fields after it.
pub(super) trait Tail: Sized {
    /// Statuses of a swept key besides 0 (done) and 1 (more to do).
    const OTHER_STATUSES: &'static [i64] = &[];

    /// The key's result, from its head and the fields that follow it.
    fn read(head: Head, rest: std::vec::IntoIter<Value>) -> Result<Self, ReplyError>;
}

/// `EVALSHA` with `args` (the hash, the key count, the keys, the arguments); where Redis does
/// not know the script (a restart, `SCRIPT FLUSH`, a failover), `SCRIPT LOAD` of `source` and
/// `EVALSHA` again, in one round trip, its reply awaited as `wait` says. Returns the script's
/// reply.
pub(super) async fn evalsha(
    node: &mut Node,
    args: &[Vec<u8>],
    source: &str,
    wait: Wait,
) -> Result<Value, crate::Error> {
    let eval = |batch: &mut Packed| {
        let argv: Vec<&[u8]> = std::iter::once(&b"EVALSHA"[..])
            .chain(args.iter().map(Vec::as_slice))
            .collect();
        batch.command(&argv);
    };
    let size = args.iter().map(|a| a.len() + 16).sum::<usize>() + 64;
    let mut batch = Packed::with_capacity(size);
    eval(&mut batch);
    let mut value = node
        .send_with(batch, wait)
        .await?
        .pop()
        .unwrap_or(Value::Nil);
    if matches!(&value, Value::ServerError(e) if e.code() == "NOSCRIPT") {
        let mut batch = Packed::with_capacity(size + source.len() + 32);
        batch.command(&[b"SCRIPT", b"LOAD", source.as_bytes()]);
        eval(&mut batch);
        value = all_ok(node.send_with(batch, wait).await?)?
            .pop()
            .unwrap_or(Value::Nil);
    }
    if let Value::ServerError(e) = value {
        return Err(redis::RedisError::from(e).into());
    }
    Ok(value)
}

/// A script's reply `{ now, results }`: Redis's "now" in the score unit `unit`, and one result
/// per key of the `n_keys` given.
pub(super) fn parse<S: Tail>(
    value: Value,
    n_keys: usize,
    unit: ScoreUnit,
) -> Result<Reply<S>, ReplyError> {
    let err = |what: &str| ReplyError::new(what);
    let Value::Array(mut top) = value else {
        return Err(err("not an array"));
    };
    let (Some(results), Some(now), None) = (top.pop(), top.pop(), top.pop()) else {
        return Err(err("not a pair"));
    };
    let now = float(&now).ok_or_else(|| err("now is not a number"))?;
    let Value::Array(results) = results else {
        return Err(err("results are not an array"));
    };
    if results.len() != n_keys {
        return Err(ReplyError::new(format!(
            "{} results for {n_keys} keys",
            results.len()
        )));
    }
    let keys = results
        .into_iter()
        .map(parse_key)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Reply {
        now: unit.to_seconds(now),
        keys,
    })
}

fn parse_key<S: Tail>(value: Value) -> Result<KeyReply<S>, ReplyError> {
    let err = |what: &str| ReplyError::new(what);
    let Value::Array(fields) = value else {
        return Err(err("key result is not an array"));
    };
    let mut fields = fields.into_iter();
    let status = match fields.next() {
        Some(Value::Int(s)) => s,
        _ => return Err(err("key result has no status")),
    };
    match status {
        2 => return Ok(KeyReply::NotReached),
        3 => return Ok(KeyReply::WrongType),
        0 | 1 => {}
        other if S::OTHER_STATUSES.contains(&other) => {}
        other => return Err(ReplyError::new(format!("unknown key status {other}"))),
    }
    let (Some(card), Some(oldest), Some(removed)) = (fields.next(), fields.next(), fields.next())
    else {
        return Err(err("key result is short"));
    };
    let head = Head {
        status,
        card: int(&card).ok_or_else(|| err("card is not an integer"))?,
        oldest: match oldest {
            Value::Nil => None,
            v => Some(float(&v).ok_or_else(|| err("oldest is not a number"))?),
        },
        removed: scored(removed)?,
    };
    S::read(head, fields).map(KeyReply::Swept)
}
