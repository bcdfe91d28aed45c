//! Sharded publishing in a cluster: each command of a batch goes to the primary that owns its
//! channel's slot, over that primary's own data-path connection, as the slot map last read
//! says; a command answered `MOVED` follows the redirection once.

use std::sync::Arc;

use presence_sweeper_rules::slot::slot;

use crate::packed::Packed;
use crate::resp::Value;
use crate::slots::{Primary, moved_to};
use crate::store::Store;
use crate::wire::{self, Target, Wait, Wire};

impl Store {
    /// Sends each command of `batch` to the cluster primary serving the slot of its argument
    /// `key_arg` (an `SPUBLISH`'s channel), over that primary's data-path connection, and
    /// returns the replies in the batch's order. A command answered `MOVED` (the slots moved
    /// since the topology was read) is sent once more where the answer points.
    pub async fn send_by_slot(
        &self,
        batch: Packed,
        key_arg: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        let (replies, failed) = self.send_by_slot_partly(batch, key_arg).await;
        match failed {
            Some(e) => Err(e),
            None => Ok(replies
                .into_iter()
                .map(|r| r.unwrap_or(Value::Nil))
                .collect()),
        }
    }

    /// As [`Store::send_by_slot`], but a primary that fails (its wire's own timeouts bound
    /// how long that takes, and retire a wire that timed out) fails only its own commands:
    /// their replies are `None`, and the first failure comes back beside the replies of the
    /// others, so that one unreachable primary does not hide what the rest answered.
    pub async fn send_by_slot_partly(
        &self,
        batch: Packed,
        key_arg: usize,
    ) -> (Vec<Option<Value>>, Option<redis::RedisError>) {
        let map = self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let commands = batch.commands();
        let mut out: Vec<Option<Value>> = vec![None; commands.len()];
        let mut failed = None;
        // Per primary: its commands, and where each one's reply goes.
        let mut groups: Vec<(&Primary, Packed, Vec<usize>)> = Vec::new();
        for (i, (bytes, args)) in commands.iter().enumerate() {
            let key = args.get(key_arg).copied().unwrap_or_default();
            let Some(owner) = map.owner(slot(key)) else {
                failed.get_or_insert_with(|| {
                    redis::RedisError::from((
                        redis::ErrorKind::ClusterConnectionNotFound,
                        "no primary serves the slot",
                        slot(key).to_string(),
                    ))
                });
                continue;
            };
            let at = match groups.iter().position(|(p, _, _)| *p == owner) {
                Some(at) => at,
                None => {
                    groups.push((owner, Packed::default(), Vec::new()));
                    groups.len() - 1
                }
            };
            groups[at].1.encoded(bytes);
            groups[at].2.push(i);
        }
        let sends = groups.into_iter().map(|(owner, group, at)| async move {
            let n = group.len();
            (at, self.send_to(owner, group, n).await)
        });
        for (at, sent) in futures_util::future::join_all(sends).await {
            match sent {
                Ok(replies) => {
                    for (i, reply) in at.into_iter().zip(replies) {
                        out[i] = Some(reply);
                    }
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        for (reply, (bytes, _)) in out.iter_mut().zip(&commands) {
            let moved = match reply {
                Some(Value::ServerError(e)) if e.code() == "MOVED" => {
                    e.details().and_then(moved_to)
                }
                _ => None,
            };
            if let Some(primary) = moved {
                let mut again = Packed::default();
                again.encoded(bytes);
                match self.send_to(&primary, again, 1).await {
                    Ok(mut replies) => *reply = Some(replies.pop().unwrap_or(Value::Nil)),
                    Err(e) => {
                        *reply = None;
                        failed.get_or_insert(e);
                    }
                }
            }
        }
        (out, failed)
    }

    /// The slots of `among` that the primary serving `slot` serves too, as the slot map last
    /// read says; just `slot` where no primary is known for it.
    pub fn same_primary(&self, slot: u16, among: impl IntoIterator<Item = u16>) -> Vec<u16> {
        let map = self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(owner) = map.owner(slot) else {
            return vec![slot];
        };
        among
            .into_iter()
            .filter(|&s| map.owner(s) == Some(owner))
            .collect()
    }

    /// `n` commands to a cluster primary over its data-path connection.
    async fn send_to(
        &self,
        primary: &Primary,
        commands: Packed,
        n: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        self.wire_to(primary)
            .await?
            .send(commands.into_bytes(), n, Wait::Reply)
            .await
    }

    /// The data-path connection to a cluster primary.
    async fn wire_to(&self, (host, port): &Primary) -> redis::RedisResult<Wire> {
        let client = self.node_client(host, *port)?;
        let not_connected = |why: &str| wire::no_connection(&format!("{host}:{port}"), why);
        let target = Target::from_info(client.get_connection_info(), self.tls.as_ref())
            .map_err(|why| not_connected(&why))?;
        self.wire(&target)
            .await
            .map_err(|why: Arc<str>| not_connected(&why))
    }
}
