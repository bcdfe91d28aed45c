//! Proves, before a pass evicts anything on a node, that the Redis user may run every command the
//! pass needs, on the keys and channel it needs them on, without changing anything: the commands
//! are queued in a `MULTI` and then discarded. Redis checks ACL permissions when a command is
//! queued, so a refusal shows up here, while the transaction that would remove members is never
//! run. Without this, a user lacking `+publish` would evict members and lose their events.
//!
//! It runs on a connection of its own: `MULTI` goes first and alone, and nothing else is sent
//! unless it was accepted, so a user refused `MULTI` never gets the probes executed for real, and
//! no other request on a shared connection can land inside the probe transaction. The probes that
//! write are written to do nothing even if they ran.

use redis::aio::ConnectionLike;

use crate::Error;
use crate::evict::EvictScript;
use crate::evict::stream::StreamScript;
use crate::reply::{ReplyError, refusal};
use crate::resp::Value;

/// How a refusal names what it was refused on: the sweep's key pattern and its channel
/// template, never one conversation's key or channel (the error reaches error logs and
/// `/readyz`, where conversation ids do not go).
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    /// The keys, e.g. `presence:*:online`.
    pub keys: &'a str,
    /// The channel, e.g. `presence:{conversation_id}:events`.
    pub channel: &'a str,
    /// The stream, e.g. `presence:{hash_tag}:log`, if the sweep has one.
    pub stream: Option<&'a str>,
}

/// What a sweep with a stream does to it, for the preflight to probe.
#[derive(Debug, Clone, Copy)]
pub struct StreamProbe<'a> {
    /// The stream of the key probed.
    pub key: &'a [u8],
    /// The script that writes it.
    pub script: &'a StreamScript,
    /// It is trimmed by age (`XTRIM`).
    pub trims: bool,
    /// It gets a key TTL (`PEXPIRE`).
    pub expires: bool,
    /// The due sets of the sweep's webhooks, which the script marks (`ZADD`).
    pub due: &'a [String],
}

/// What a probe touches.
#[derive(Debug, Clone, Copy)]
enum On {
    Connection,
    Key,
    Channel,
    Stream,
    Due,
}

impl On {
    fn name(self, names: Names<'_>) -> String {
        match self {
            On::Connection => "this connection".into(),
            On::Key => format!("the keys {}", names.keys),
            On::Channel => format!("the channel {}", names.channel),
            On::Stream => format!("the stream {}", names.stream.unwrap_or_default()),
            On::Due => "the webhooks' keys presence-sweeper:webhooks:*".into(),
        }
    }
}

type Probe = (&'static str, redis::Cmd, On);

/// Queues what a pass does with `key` and (when `publish` is given) `channel`, discards it, and
/// fails with [`Error::Permission`] on the first command the ACL refuses. `con` must be a
/// connection nobody else uses.
pub async fn prove<C>(
    con: &mut C,
    key: &[u8],
    channel: &[u8],
    names: Names<'_>,
    publish: Option<&'static str>,
    script: &EvictScript,
    stream: Option<StreamProbe<'_>>,
) -> Result<(), Error>
where
    C: ConnectionLike + Send,
{
    let mut probes: Vec<Probe> = vec![
        (
            "SCAN",
            redis::cmd("SCAN").arg(0).arg("COUNT").arg(1).to_owned(),
            On::Connection,
        ),
        ("TIME", redis::cmd("TIME"), On::Connection),
        (
            "ZCOUNT",
            redis::cmd("ZCOUNT")
                .arg(key)
                .arg("-inf")
                .arg("-inf")
                .to_owned(),
            On::Key,
        ),
        ("ZCARD", redis::cmd("ZCARD").arg(key).to_owned(), On::Key),
        (
            "ZRANGE",
            redis::cmd("ZRANGE").arg(key).arg(0).arg(0).to_owned(),
            On::Key,
        ),
        // An empty range (min above max): it removes nothing even if it ran.
        (
            "ZREMRANGEBYSCORE",
            redis::cmd("ZREMRANGEBYSCORE")
                .arg(key)
                .arg("+inf")
                .arg("-inf")
                .to_owned(),
            On::Key,
        ),
        // What the script runs is checked when it runs; ask for it here as well. Start after
        // stop: it removes nothing even if it ran.
        (
            "ZREMRANGEBYRANK",
            redis::cmd("ZREMRANGEBYRANK")
                .arg(key)
                .arg(1)
                .arg(0)
                .to_owned(),
            On::Key,
        ),
        // A budget of 0: the script would return at once without touching the key.
        ("EVALSHA", script.idle_call(key), On::Key),
        (
            "SCRIPT LOAD",
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(EvictScript::SOURCE)
                .to_owned(),
            On::Connection,
        ),
    ];
    if let Some(stream) = stream {
        probes.extend(stream_probes(key, stream));
    }
    if let Some(publish) = publish {
        probes.push((
            publish,
            redis::cmd(publish).arg(channel).arg("").to_owned(),
            On::Channel,
        ));
    }
    run_probes(con, &probes, names).await
}

/// What a sweep with a stream runs besides, none of which would change anything if it ran:
/// an `XADD` with the id `0-0` is always refused, a `MINID` of 0 trims nothing, and the `PEXPIRE`
/// is never run (its TTL would be refused as out of range anyway).
fn stream_probes(key: &[u8], stream: StreamProbe<'_>) -> Vec<Probe> {
    let mut probes: Vec<Probe> = vec![
        (
            "XREVRANGE",
            redis::cmd("XREVRANGE")
                .arg(stream.key)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(1)
                .to_owned(),
            On::Stream,
        ),
        (
            "XADD",
            redis::cmd("XADD")
                .arg(stream.key)
                .arg("MAXLEN")
                .arg("~")
                .arg(1)
                .arg("0-0")
                .arg("event")
                .arg("")
                .to_owned(),
            On::Stream,
        ),
        ("EVALSHA", stream.script.idle_call(key, stream.key), On::Key),
        (
            "SCRIPT LOAD",
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(StreamScript::SOURCE)
                .to_owned(),
            On::Connection,
        ),
    ];
    if stream.trims {
        probes.push((
            "XTRIM",
            redis::cmd("XTRIM")
                .arg(stream.key)
                .arg("MINID")
                .arg("~")
                .arg(0)
                .to_owned(),
            On::Stream,
        ));
    }
    for due in stream.due {
        // XX on a member that is never there: nothing even if it ran.
        probes.push((
            "ZADD",
            redis::cmd("ZADD")
                .arg(due)
                .arg("XX")
                .arg(0)
                .arg("")
                .to_owned(),
            On::Due,
        ));
    }
    if stream.expires {
        probes.push((
            "PEXPIRE",
            redis::cmd("PEXPIRE")
                .arg(stream.key)
                .arg(i64::MAX)
                .to_owned(),
            On::Stream,
        ));
    }
    probes
}

/// Like [`prove`] for a sharded publish in a cluster, which must be probed on the primary owning
/// the channel's slot rather than on the node of the keys; `con` is a connection of its own to
/// that primary.
pub async fn prove_sharded_publish<C>(
    con: &mut C,
    channel: &[u8],
    names: Names<'_>,
) -> Result<(), Error>
where
    C: ConnectionLike + Send,
{
    let probes: Vec<Probe> = vec![(
        "SPUBLISH",
        redis::cmd("SPUBLISH").arg(channel).arg("").to_owned(),
        On::Channel,
    )];
    run_probes(con, &probes, names).await
}

/// `MULTI` alone; then, only if it was accepted, the probes and `DISCARD`.
async fn run_probes<C>(con: &mut C, probes: &[Probe], names: Names<'_>) -> Result<(), Error>
where
    C: ConnectionLike + Send,
{
    let mut multi = redis::pipe();
    multi.ignore_errors().cmd("MULTI");
    let accepted: Vec<Value> = multi.query_async(con).await?;
    if let Some(detail) = accepted.first().and_then(refusal) {
        return Err(Error::Permission {
            command: "MULTI".into(),
            target: "this connection".into(),
            detail,
        });
    }
    let replies: Vec<Value> = discarded(probes).query_async(con).await?;
    judge(probes, &replies, names)
}

/// The probes then `DISCARD`, after an accepted `MULTI`: nothing runs.
fn discarded(probes: &[Probe]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for (_, cmd, _) in probes {
        pipe.add_command(cmd.clone());
    }
    pipe.cmd("DISCARD");
    pipe
}

/// A probe the server does not know at all: the pass would evict and then fail. Redis's own
/// message is left out: it quotes the arguments, a conversation's channel among them.
fn unknown(command: &str) -> ReplyError {
    let hint = match command {
        "SPUBLISH" => " (redis.sharded_pubsub needs Redis 7.0 or later)",
        _ => "",
    };
    ReplyError::new(format!(
        "the server does not know the command {command}{hint}"
    ))
}

/// The first ACL refusal among the replies to [`discarded`], as an error; or a command the
/// server does not know.
fn judge(probes: &[Probe], replies: &[Value], names: Names<'_>) -> Result<(), Error> {
    if replies.len() != probes.len() + 1 {
        return Err(ReplyError::new("preflight: unexpected number of replies").into());
    }
    for ((command, _, on), reply) in probes.iter().zip(replies) {
        if let Some(detail) = refusal(reply) {
            return Err(Error::Permission {
                command: (*command).to_owned(),
                target: on.name(names),
                detail,
            });
        }
        if let Value::ServerError(e) = reply {
            if e.details()
                .is_some_and(|d| d.starts_with("unknown command"))
            {
                return Err(unknown(command).into());
            }
            // MOVED during a resharding and the like: not a permission problem.
            tracing::debug!(command, error = e.code(), "preflight: not a refusal");
        }
    }
    if let Some(detail) = refusal(&replies[probes.len()]) {
        return Err(Error::Permission {
            command: "DISCARD".into(),
            target: "this connection".into(),
            detail,
        });
    }
    Ok(())
}
