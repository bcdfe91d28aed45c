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
        let map = self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let commands = batch.commands();
        // Per primary: its commands, and where each one's reply goes.
        let mut groups: Vec<(&Primary, Packed, Vec<usize>)> = Vec::new();
        for (i, (bytes, args)) in commands.iter().enumerate() {
            let key = args.get(key_arg).copied().unwrap_or_default();
            let owner = map.owner(slot(key)).ok_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::ClusterConnectionNotFound,
                    "no primary serves the slot",
                    slot(key).to_string(),
                ))
            })?;
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
            let replies = self
                .wire_to(owner)
                .await?
                .send(group.into_bytes(), n, Wait::Reply)
                .await?;
            Ok::<_, redis::RedisError>((at, replies))
        });
        let mut out = vec![Value::Nil; commands.len()];
        for sent in futures_util::future::join_all(sends).await {
            let (at, replies) = sent?;
            for (i, reply) in at.into_iter().zip(replies) {
                out[i] = reply;
            }
        }
        for (reply, (bytes, _)) in out.iter_mut().zip(&commands) {
            let moved = match &*reply {
                Value::ServerError(e) if e.code() == "MOVED" => e.details().and_then(moved_to),
                _ => None,
            };
            if let Some(primary) = moved {
                let mut again = Packed::default();
                again.encoded(bytes);
                let wire = self.wire_to(&primary).await?;
                *reply = wire
                    .send(again.into_bytes(), 1, Wait::Reply)
                    .await?
                    .pop()
                    .unwrap_or(Value::Nil);
            }
        }
        Ok(out)
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
