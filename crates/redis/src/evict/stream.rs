//! The eviction of a sweep with a stream (`stream.lua`): one script call per batch (per hash
//! slot in a cluster) removes the stale members, appends each event to the stream and publishes
//! it, so that a member is never removed without its entry, nor an entry written twice.
//!
//! A `MULTI`/`EXEC` cannot do this: what it removes is known only once it ran, and the entry
//! holds it. The script is bounded like `evict.lua`, by a member budget per call.

use std::time::Duration;

use presence_sweeper_config::EventShape;
use presence_sweeper_rules::event::{CURSOR_ROOM, ROSTER_LIMIT};
use presence_sweeper_rules::score::ScoreUnit;

use super::call::{self, Head, Reply, Tail};
use crate::reply::{ReplyError, int};
use crate::resp::Value;
use crate::{Node, Wait};

/// What one call is asked to do, besides its keys.
#[derive(Debug, Clone, Copy)]
pub struct StreamParams<'a> {
    /// Window length.
    pub ttl: Duration,
    /// Unit of the scores.
    pub unit: ScoreUnit,
    /// Most members the call removes (and lists in rosters) over all its keys.
    pub budget: usize,
    /// Most remaining members read per key that loses members.
    pub roster: usize,
    /// Staleness is judged no later than this instant (Unix seconds); events are stamped with
    /// the script's own `TIME`.
    pub judge_by: Option<f64>,
    /// `XADD ... MAXLEN ~`; 0 for none.
    pub maxlen: u64,
    /// `XTRIM ... MINID ~` this long before Redis's now.
    pub retention: Option<Duration>,
    /// The stream's key TTL, set at each call that appends.
    pub stream_ttl: Option<Duration>,
    /// One event per member, or per key and step.
    pub shape: EventShape,
    /// `events.max_bytes`.
    pub max_bytes: usize,
    /// `PUBLISH` or `SPUBLISH`.
    pub publish: &'static str,
    /// The encoder's fixed parts (`EventEncoder::parts`).
    pub parts: [&'a [u8]; 4],
    /// Read each key's lowest remaining score (a deadline index needs it).
    pub oldest: bool,
    /// The due sets of the sweep's webhooks, space-separated (empty: none): each stream
    /// appended to is marked due in each, in the same call.
    pub due: &'a [u8],
}

/// One key of a call and the names that go with it.
#[derive(Debug)]
pub struct StreamKey<'a> {
    /// The sorted set.
    pub key: &'a [u8],
    /// Its stream.
    pub stream: Vec<u8>,
    /// `,"conversation_id":...` as the events carry it.
    pub conversation: Vec<u8>,
    /// Where its events are published.
    pub channel: Vec<u8>,
}

/// One key's sweep.
#[derive(Debug, Default)]
pub struct Streamed {
    /// Stale members may be left because the budget ran out; send the key again.
    pub more: bool,
    /// Members left in the set.
    pub card: u64,
    /// Lowest remaining score, in the score unit, when asked for.
    pub oldest: Option<f64>,
    /// Removed members and their scores (in the score unit); each has its entry.
    pub removed: Vec<(Vec<u8>, f64)>,
    /// Events published.
    pub published: u64,
    /// Events whose `PUBLISH` was refused (their entries stand).
    pub unpublished: u64,
    /// The stream refused a write: Redis's error. Nothing more was removed from the key than
    /// `removed`, and the call stopped there.
    pub refused: Option<String>,
}

/// The script, known to Redis by its SHA1.
#[derive(Debug, Clone)]
pub struct StreamScript {
    script: redis::Script,
}

impl Default for StreamScript {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamScript {
    /// The script's source.
    pub const SOURCE: &'static str = include_str!("stream.lua");

    /// The script, hashed (about 18 KB of source: hash it once, where a sweep has a stream).
    pub fn new() -> Self {
        Self {
            script: redis::Script::new(Self::SOURCE),
        }
    }

    fn args(&self, keys: &[StreamKey<'_>], p: &StreamParams<'_>) -> Vec<Vec<u8>> {
        let ms = |d: Option<Duration>| d.map_or(0, |d| d.as_millis().max(1)).to_string();
        let mut argv: Vec<Vec<u8>> = Vec::with_capacity(20 + 4 * keys.len());
        argv.push(self.script.get_hash().as_bytes().to_vec());
        argv.push((2 * keys.len()).to_string().into_bytes());
        for k in keys {
            argv.push(k.key.to_vec());
            argv.push(k.stream.clone());
        }
        let unit = |secs: f64| format!("{:?}", p.unit.from_seconds(secs));
        argv.extend(
            [
                format!("{:?}", p.unit.from_duration(p.ttl)),
                match p.unit {
                    ScoreUnit::Seconds => "s",
                    ScoreUnit::Milliseconds => "ms",
                }
                .to_owned(),
                p.budget.to_string(),
                p.roster.to_string(),
                p.judge_by.map_or_else(String::new, unit),
                p.maxlen.to_string(),
                ms(p.retention),
                ms(p.stream_ttl),
                match p.shape {
                    EventShape::Member => "member",
                    EventShape::Batch => "batch",
                }
                .to_owned(),
                p.max_bytes.to_string(),
                p.publish.to_owned(),
            ]
            .map(String::into_bytes),
        );
        argv.extend(p.parts.iter().map(|part| part.to_vec()));
        argv.push(ROSTER_LIMIT.to_string().into_bytes());
        argv.push(CURSOR_ROOM.to_string().into_bytes());
        argv.push(if p.oldest {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        });
        argv.push(p.due.to_vec());
        for k in keys {
            argv.push(k.conversation.clone());
            argv.push(k.channel.clone());
        }
        argv
    }

    /// A call on `key` and `stream` that does nothing even if it ran (a budget of 0), for the
    /// preflight to queue and discard.
    pub fn idle_call(&self, key: &[u8], stream: &[u8]) -> redis::Cmd {
        let params = StreamParams {
            ttl: Duration::MAX,
            unit: ScoreUnit::Seconds,
            budget: 0,
            roster: 0,
            judge_by: None,
            maxlen: 0,
            retention: None,
            stream_ttl: None,
            shape: EventShape::Member,
            max_bytes: 0,
            publish: "",
            parts: [b""; 4],
            oldest: false,
            due: b"",
        };
        let keys = [StreamKey {
            key,
            stream: stream.to_vec(),
            conversation: Vec::new(),
            channel: Vec::new(),
        }];
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.args(&keys, &params));
        cmd
    }

    /// Sweeps `keys` in one call: EVALSHA, and if Redis lost the script (NOSCRIPT) `SCRIPT
    /// LOAD` and EVALSHA again, in one round trip.
    pub async fn call(
        &self,
        node: &mut Node,
        keys: &[StreamKey<'_>],
        params: &StreamParams<'_>,
    ) -> Result<Reply<Streamed>, crate::Error> {
        let args = self.args(keys, params);
        // The script appends and publishes its events itself: a lost reply loses none, so it is
        // not waited for beyond the command timeout.
        let value = call::evalsha(node, &args, Self::SOURCE, Wait::Reply).await?;
        Ok(call::parse(value, keys.len(), params.unit)?)
    }
}

impl Tail for Streamed {
    /// 4: the stream refused a write, and the call stopped at this key.
    const OTHER_STATUSES: &'static [i64] = &[4];

    /// `{ status, card, oldest, removed, published, unpublished, refused }`, `refused` with
    /// status 4 only.
    fn read(head: Head, mut rest: std::vec::IntoIter<Value>) -> Result<Self, ReplyError> {
        let (Some(published), Some(unpublished)) = (rest.next(), rest.next()) else {
            return Err(ReplyError::new("key result is short"));
        };
        let count = |v: &Value| int(v).ok_or_else(|| ReplyError::new("a count is not an integer"));
        let refused = match (head.status, rest.next()) {
            (4, Some(Value::BulkString(e))) => Some(String::from_utf8_lossy(&e).into_owned()),
            (4, _) => Some("the stream refused a write".to_owned()),
            _ => None,
        };
        Ok(Self {
            more: head.more(),
            card: head.card,
            oldest: head.oldest,
            removed: head.removed,
            published: count(&published)?,
            unpublished: count(&unpublished)?,
            refused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evict::KeyReply;

    fn parse_reply(value: Value, n: usize, unit: ScoreUnit) -> Result<Reply<Streamed>, ReplyError> {
        call::parse(value, n, unit)
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_every_status() {
        let swept = |status: i64, extra: Option<&str>| {
            let mut fields = vec![
                Value::Int(status),
                Value::Int(1),
                bulk("1764460040"),
                Value::Array(vec![bulk("u7"), bulk("1764460000.25")]),
                Value::Int(1),
                Value::Int(0),
            ];
            fields.extend(extra.map(bulk));
            Value::Array(fields)
        };
        let reply = Value::Array(vec![
            bulk("1764460046.5"),
            Value::Array(vec![
                swept(0, None),
                Value::Array(vec![Value::Int(2)]),
                Value::Array(vec![Value::Int(3)]),
                swept(4, Some("OOM command not allowed")),
            ]),
        ]);
        let r = parse_reply(reply, 4, ScoreUnit::Seconds).unwrap();
        assert_eq!(r.now, 1764460046.5);
        let KeyReply::Swept(s) = &r.keys[0] else {
            panic!()
        };
        assert_eq!(s.removed, vec![(b"u7".to_vec(), 1764460000.25)]);
        assert_eq!((s.card, s.oldest, s.published), (1, Some(1764460040.0), 1));
        assert!(s.refused.is_none());
        assert!(matches!(r.keys[1], KeyReply::NotReached));
        assert!(matches!(r.keys[2], KeyReply::WrongType));
        assert!(
            matches!(&r.keys[3], KeyReply::Swept(s) if s.refused.as_deref() == Some("OOM command not allowed"))
        );
        assert!(parse_reply(Value::Int(1), 0, ScoreUnit::Seconds).is_err());
    }
}
