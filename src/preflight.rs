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

use redis::Value;
use redis::aio::ConnectionLike;

use crate::Error;
use crate::evict::EvictScript;
use crate::reply::ReplyError;

/// Queues what a pass does with `key` and (when `publish` is given) `channel`, discards it, and
/// fails with [`Error::Permission`] on the first command the ACL refuses. `con` must be a
/// connection nobody else uses.
pub(crate) async fn check<C>(
    con: &mut C,
    key: &[u8],
    channel: &[u8],
    publish: Option<&str>,
    script: &EvictScript,
) -> Result<(), Error>
where
    C: ConnectionLike + Send,
{
    let mut probes: Vec<(&str, redis::Cmd, &[u8])> = vec![
        (
            "SCAN",
            redis::cmd("SCAN").arg(0).arg("COUNT").arg(1).to_owned(),
            b"",
        ),
        ("TIME", redis::cmd("TIME"), b""),
        (
            "ZCOUNT",
            redis::cmd("ZCOUNT")
                .arg(key)
                .arg("-inf")
                .arg("-inf")
                .to_owned(),
            key,
        ),
        ("ZCARD", redis::cmd("ZCARD").arg(key).to_owned(), key),
        (
            "ZRANGE",
            redis::cmd("ZRANGE").arg(key).arg(0).arg(0).to_owned(),
            key,
        ),
        // An empty range (min above max): it removes nothing even if it ran.
        (
            "ZREMRANGEBYSCORE",
            redis::cmd("ZREMRANGEBYSCORE")
                .arg(key)
                .arg("+inf")
                .arg("-inf")
                .to_owned(),
            key,
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
            key,
        ),
        // A budget of 0: the script would return at once without touching the key.
        (
            "EVALSHA",
            redis::cmd("EVALSHA")
                .arg(script.hash())
                .arg(1)
                .arg(key)
                .arg("1e300")
                .arg("s")
                .arg(1)
                .arg(0)
                .arg(0)
                .arg("")
                .arg("")
                .to_owned(),
            key,
        ),
        (
            "SCRIPT LOAD",
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(EvictScript::SOURCE)
                .to_owned(),
            b"",
        ),
    ];
    if let Some(publish) = publish {
        probes.push((
            publish,
            redis::cmd(publish).arg(channel).arg("").to_owned(),
            channel,
        ));
    }
    run_probes(con, &probes).await
}

/// Like [`check`] for a sharded publish in a cluster, which must be probed on the primary owning
/// the channel's slot rather than on the node of the keys; `con` is a connection of its own to
/// that primary.
pub(crate) async fn check_sharded_publish<C>(con: &mut C, channel: &[u8]) -> Result<(), Error>
where
    C: ConnectionLike + Send,
{
    let probes: Vec<(&str, redis::Cmd, &[u8])> = vec![(
        "SPUBLISH",
        redis::cmd("SPUBLISH").arg(channel).arg("").to_owned(),
        channel,
    )];
    run_probes(con, &probes).await
}

/// `MULTI` alone; then, only if it was accepted, the probes and `DISCARD`.
async fn run_probes<C>(con: &mut C, probes: &[(&str, redis::Cmd, &[u8])]) -> Result<(), Error>
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
    judge(probes, &replies)
}

/// The probes then `DISCARD`, after an accepted `MULTI`: nothing runs.
fn discarded(probes: &[(&str, redis::Cmd, &[u8])]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for (_, cmd, _) in probes {
        pipe.add_command(cmd.clone());
    }
    pipe.cmd("DISCARD");
    pipe
}

/// The first ACL refusal among the replies to [`discarded`], as an error.
fn judge(probes: &[(&str, redis::Cmd, &[u8])], replies: &[Value]) -> Result<(), Error> {
    if replies.len() != probes.len() + 1 {
        return Err(ReplyError::new("preflight: unexpected number of replies").into());
    }
    for ((command, _, target), reply) in probes.iter().zip(replies) {
        if let Some(detail) = refusal(reply) {
            return Err(Error::Permission {
                command: (*command).to_owned(),
                target: if target.is_empty() {
                    "this connection".into()
                } else {
                    crate::logging::Id(target).to_string()
                },
                detail,
            });
        }
        if let Value::ServerError(e) = reply {
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

/// The reason, if `reply` is an ACL refusal.
fn refusal(reply: &Value) -> Option<String> {
    match reply {
        Value::ServerError(e) if e.code() == "NOPERM" => {
            Some(format!("NOPERM {}", e.details().unwrap_or_default()))
        }
        _ => None,
    }
}
