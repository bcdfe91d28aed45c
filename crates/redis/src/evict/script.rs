//! The bounded eviction script (`evict.lua`) and its typed reply: for keys holding more zombies
//! than one call may remove.
//!
//! One call sweeps a batch of keys and is bounded by a member budget, so no call holds Redis for
//! long whatever the size of a set; keys the budget did not cover come back marked for another
//! call.

use presence_sweeper_rules::score::ScoreUnit;

use super::call::{self, Head, Reply, Tail};
use crate::reply::{ReplyError, members};
use crate::resp::Value;
use crate::{Node, Wait};

/// Members one ZRANGE / ZREMRANGEBYRANK step inside the script touches at most.
const CHUNK: usize = 500;

/// What one script call is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Window length.
    pub ttl: std::time::Duration,
    /// Unit of the scores.
    pub unit: ScoreUnit,
    /// Most members the call removes over all its keys.
    pub budget: usize,
    /// Most remaining members returned per key that lost members.
    pub roster: usize,
    /// Staleness is judged no later than this instant (Unix seconds), though events are
    /// stamped with the script's own `TIME`: the daemon's judging instant, held back after an
    /// outage.
    pub judge_by: Option<f64>,
}

/// One key's sweep.
#[derive(Debug, Default)]
pub struct Swept {
    /// Stale members are left because the budget ran out; send the key again.
    pub more: bool,
    /// Members left in the set.
    pub card: u64,
    /// Lowest remaining score, in the score unit.
    pub oldest: Option<f64>,
    /// Removed members and their scores (in the score unit).
    pub removed: Vec<(Vec<u8>, f64)>,
    /// Up to `Params::roster` remaining members, most recently seen first; only when members
    /// were removed.
    pub roster: Vec<Vec<u8>>,
}

/// The eviction script, identified by its SHA1 so calls send only the hash.
#[derive(Debug, Clone)]
pub struct EvictScript {
    script: redis::Script,
}

impl Default for EvictScript {
    fn default() -> Self {
        Self::new()
    }
}

impl EvictScript {
    /// The script's source.
    pub const SOURCE: &'static str = include_str!("evict.lua");

    /// Prepares the script (nothing is sent yet).
    pub fn new() -> Self {
        Self {
            script: redis::Script::new(Self::SOURCE),
        }
    }

    /// The SHA1 Redis knows the script by.
    pub fn hash(&self) -> &str {
        self.script.get_hash()
    }

    /// The arguments of `EVALSHA` for `keys` with `params`.
    fn args(&self, keys: &[Vec<u8>], params: &Params) -> Vec<Vec<u8>> {
        let unit = |secs: f64| format!("{:?}", params.unit.from_seconds(secs));
        let mut argv: Vec<Vec<u8>> = Vec::with_capacity(8 + keys.len());
        argv.push(self.hash().as_bytes().to_vec());
        argv.push(keys.len().to_string().into_bytes());
        argv.extend(keys.iter().cloned());
        argv.extend(
            [
                format!("{:?}", params.unit.from_duration(params.ttl)),
                match params.unit {
                    ScoreUnit::Seconds => "s",
                    ScoreUnit::Milliseconds => "ms",
                }
                .to_owned(),
                CHUNK.to_string(),
                params.budget.to_string(),
                params.roster.to_string(),
                params.judge_by.map_or_else(String::new, unit),
            ]
            .map(String::into_bytes),
        );
        argv
    }

    /// A call on `key` that does nothing even if it ran (a budget of 0: the script returns at
    /// once; and a window so long that nothing is stale), for the preflight to queue and
    /// discard.
    pub fn idle_call(&self, key: &[u8]) -> redis::Cmd {
        let params = Params {
            ttl: std::time::Duration::MAX,
            unit: ScoreUnit::Seconds,
            budget: 0,
            roster: 0,
            judge_by: None,
        };
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.args(&[key.to_vec()], &params));
        cmd
    }

    /// Sweeps `keys` in one call. EVALSHA, and if Redis lost the script (NOSCRIPT after a
    /// restart or a `SCRIPT FLUSH`) `SCRIPT LOAD` and EVALSHA again, in one round trip.
    pub async fn call(
        &self,
        node: &mut Node,
        keys: &[Vec<u8>],
        params: &Params,
    ) -> Result<Reply<Swept>, crate::Error> {
        let args = self.args(keys, params);
        let value = call::evalsha(node, &args, Self::SOURCE, Wait::Outcome).await?;
        Ok(call::parse(value, keys.len(), params.unit)?)
    }
}

impl Tail for Swept {
    /// `{ status, card, oldest, removed, roster, count }`.
    fn read(head: Head, mut rest: std::vec::IntoIter<Value>) -> Result<Self, ReplyError> {
        let (Some(roster), Some(_count)) = (rest.next(), rest.next()) else {
            return Err(ReplyError::new("key result is short"));
        };
        Ok(Self {
            more: head.more(),
            card: head.card,
            oldest: head.oldest,
            removed: head.removed,
            roster: members(roster)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evict::KeyReply;

    fn parse_reply(value: Value, n: usize, unit: ScoreUnit) -> Result<Reply<Swept>, ReplyError> {
        call::parse(value, n, unit)
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn the_preflights_call_has_the_scripts_arguments() {
        let script = EvictScript::new();
        let packed = script.idle_call(b"presence:c1:online").get_packed_command();
        // EVALSHA, the hash, 1 key and the key, then the six parameters, the budget 0.
        assert!(
            packed.starts_with(b"*10\r\n$7\r\nEVALSHA\r\n"),
            "{packed:?}"
        );
        let text = String::from_utf8_lossy(&packed);
        assert!(text.contains("$18\r\npresence:c1:online\r\n"), "{text}");
        assert!(
            text.contains(&format!(
                "${}\r\n{CHUNK}\r\n$1\r\n0\r\n$1\r\n0\r\n",
                CHUNK.to_string().len()
            )),
            "{text}"
        );
    }

    #[test]
    fn parses_every_status() {
        let reply = Value::Array(vec![
            bulk("1764460046.5"),
            Value::Array(vec![
                Value::Array(vec![
                    Value::Int(0),
                    Value::Int(2),
                    bulk("1764460040"),
                    Value::Array(vec![bulk("u7"), bulk("1764460000.25")]),
                    Value::Array(vec![bulk("u1"), bulk("u2")]),
                    Value::Int(1),
                ]),
                Value::Array(vec![Value::Int(2)]),
                Value::Array(vec![Value::Int(3)]),
                Value::Array(vec![
                    Value::Int(1),
                    Value::Int(0),
                    Value::Nil,
                    Value::Array(vec![]),
                    Value::Array(vec![]),
                    Value::Int(0),
                ]),
            ]),
        ]);
        let r = parse_reply(reply, 4, ScoreUnit::Seconds).unwrap();
        assert_eq!(r.now, 1764460046.5);
        let KeyReply::Swept(s) = &r.keys[0] else {
            panic!()
        };
        assert_eq!(s.removed, vec![(b"u7".to_vec(), 1764460000.25)]);
        assert_eq!(s.roster, vec![b"u1".to_vec(), b"u2".to_vec()]);
        assert_eq!((s.card, s.oldest, s.more), (2, Some(1764460040.0), false));
        assert!(matches!(r.keys[1], KeyReply::NotReached));
        assert!(matches!(r.keys[2], KeyReply::WrongType));
        assert!(matches!(&r.keys[3], KeyReply::Swept(s) if s.more));
    }

    #[test]
    fn milliseconds_now_becomes_seconds() {
        let reply = Value::Array(vec![bulk("1764460046500"), Value::Array(vec![])]);
        let r = parse_reply(reply, 0, ScoreUnit::Milliseconds).unwrap();
        assert_eq!(r.now, 1764460046.5);
    }

    #[test]
    fn rejects_wrong_shapes() {
        assert!(parse_reply(Value::Int(1), 0, ScoreUnit::Seconds).is_err());
        let short = Value::Array(vec![bulk("1"), Value::Array(vec![])]);
        assert!(parse_reply(short, 1, ScoreUnit::Seconds).is_err());
    }
}
