//! Proves, before a pass evicts anything on a node, that the Redis user may run every command the
//! pass needs, on the keys and channel it needs them on, without changing anything: the commands
//! are queued in a `MULTI` and then discarded. Redis checks ACL permissions when a command is
//! queued, so a refusal shows up here, while the transaction that would remove members is never
//! run. Without this, a user lacking `+publish` would evict members and lose their events.

use redis::Value;
use redis::aio::ConnectionLike;

use crate::Error;
use crate::evict::{EvictScript, ReplyError};
use crate::store::Conn;

/// Queues what a pass does with `key` and (when `publish` is given) `channel`, discards it, and
/// fails with [`Error::Permission`] on the first command the ACL refuses.
pub async fn check<C>(
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
        (
            "ZREMRANGEBYSCORE",
            redis::cmd("ZREMRANGEBYSCORE")
                .arg(key)
                .arg("-inf")
                .arg("-inf")
                .to_owned(),
            key,
        ),
        // What the script runs is checked when it runs; ask for it here as well.
        (
            "ZREMRANGEBYRANK",
            redis::cmd("ZREMRANGEBYRANK")
                .arg(key)
                .arg(0)
                .arg(-1)
                .to_owned(),
            key,
        ),
        (
            "EVALSHA",
            redis::cmd("EVALSHA")
                .arg(script.hash())
                .arg(1)
                .arg(key)
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
    let replies: Vec<Value> = discarded(&probes).query_async(con).await?;
    judge(&probes, &replies)
}

/// Like [`check`] for a sharded publish in a cluster, which must be probed on the primary owning
/// the channel's slot rather than on the node of the keys.
pub async fn check_sharded_publish(con: &mut Conn, channel: &[u8]) -> Result<(), Error> {
    let probes: Vec<(&str, redis::Cmd, &[u8])> = vec![(
        "SPUBLISH",
        redis::cmd("SPUBLISH").arg(channel).arg("").to_owned(),
        channel,
    )];
    let replies = con.pipeline_for_key(&discarded(&probes), channel).await?;
    judge(&probes, &replies)
}

/// `MULTI`, the probes, `DISCARD`: nothing runs.
fn discarded(probes: &[(&str, redis::Cmd, &[u8])]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("MULTI");
    for (_, cmd, _) in probes {
        pipe.add_command(cmd.clone());
    }
    pipe.cmd("DISCARD");
    pipe
}

/// The first ACL refusal among the replies to [`discarded`], as an error.
fn judge(probes: &[(&str, redis::Cmd, &[u8])], replies: &[Value]) -> Result<(), Error> {
    if replies.len() != probes.len() + 2 {
        return Err(ReplyError::new("preflight: unexpected number of replies").into());
    }
    if let Some(refusal) = refusal(&replies[0]) {
        return Err(Error::Permission {
            command: "MULTI".into(),
            target: "this connection".into(),
            detail: refusal,
        });
    }
    for ((command, _, target), reply) in probes.iter().zip(&replies[1..]) {
        if let Some(detail) = refusal(reply) {
            return Err(Error::Permission {
                command: (*command).to_owned(),
                target: if target.is_empty() {
                    "this connection".into()
                } else {
                    String::from_utf8_lossy(target).into_owned()
                },
                detail,
            });
        }
        if let Value::ServerError(e) = reply {
            // MOVED during a resharding and the like: not a permission problem.
            tracing::debug!(command, error = e.code(), "preflight: not a refusal");
        }
    }
    if let Some(detail) = refusal(&replies[probes.len() + 1]) {
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
