//! A Redis Cluster's slots: which primary serves each, as `CLUSTER SLOTS` says, and the slot of
//! a key. The data path needs them for sharded publishing, where each `SPUBLISH` must reach the
//! primary that owns its channel's slot: [`Store::send_by_slot`] sends each command of a batch
//! there, over that primary's own data-path connection.

use std::sync::Arc;

use presence_sweeper_rules::slot::slot;

use super::Value;
use super::wire::{Target, Wait, Wire};
use super::{Packed, Store};

/// A primary, as (host, port).
pub(crate) type Primary = (String, u16);

/// Which primary serves which slots, as one `CLUSTER SLOTS` reply said.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct SlotMap {
    /// (first slot, last slot, primary), in the reply's order.
    ranges: Vec<(i64, i64, Primary)>,
}

impl SlotMap {
    /// The map of a `CLUSTER SLOTS` reply: `[start, end, [host, port, id, ...], replicas...]`
    /// per range. Ranges of another shape are left out.
    pub(crate) fn from_reply(slots: &Value) -> Self {
        let Value::Array(ranges) = slots else {
            return Self::default();
        };
        let ranges = ranges
            .iter()
            .filter_map(|range| {
                let Value::Array(fields) = range else {
                    return None;
                };
                let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(primary))) =
                    (fields.first(), fields.get(1), fields.get(2))
                else {
                    return None;
                };
                let host = match primary.first()? {
                    Value::BulkString(h) => String::from_utf8_lossy(h).into_owned(),
                    Value::SimpleString(h) => h.clone(),
                    _ => return None,
                };
                let port = match primary.get(1)? {
                    Value::Int(p) => u16::try_from(*p).ok()?,
                    _ => return None,
                };
                Some((*lo, *hi, (host, port)))
            })
            .collect();
        Self { ranges }
    }

    /// The distinct primaries, in the reply's order.
    pub(crate) fn primaries(&self) -> Vec<Primary> {
        let mut out: Vec<Primary> = Vec::new();
        for (_, _, primary) in &self.ranges {
            if !out.contains(primary) {
                out.push(primary.clone());
            }
        }
        out
    }

    /// The primary serving `slot`.
    pub(crate) fn owner(&self, slot: u16) -> Option<&Primary> {
        let slot = i64::from(slot);
        self.ranges
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .map(|(_, _, primary)| primary)
    }
}

/// Where a `MOVED <slot> <host>:<port>` error's `details` send the command.
pub(crate) fn moved_to(details: &str) -> Option<Primary> {
    let address = details.split(' ').nth(1)?;
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

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
        let not_connected = |why: &str| super::wire::no_connection(&format!("{host}:{port}"), why);
        let target = Target::from_info(client.get_connection_info(), self.tls.as_ref())
            .map_err(|why| not_connected(&why))?;
        self.wire(&target)
            .await
            .map_err(|why: Arc<str>| not_connected(&why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn the_map_of_cluster_slots() {
        let node =
            |host: &str, port: i64| Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]);
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("10.0.0.2", 7001),
            ]),
            Value::Array(vec![
                Value::Int(10923),
                Value::Int(12000),
                node("10.0.0.3", 7002),
            ]),
            Value::Array(vec![
                Value::Int(12001),
                Value::Int(16383),
                node("10.0.0.3", 7002),
            ]),
            Value::Array(vec![Value::Int(1)]),
        ]);
        let map = SlotMap::from_reply(&reply);
        assert_eq!(
            map.primaries(),
            vec![
                ("10.0.0.1".to_string(), 7000),
                ("10.0.0.2".to_string(), 7001),
                ("10.0.0.3".to_string(), 7002)
            ]
        );
        assert_eq!(map.owner(0).unwrap().1, 7000);
        assert_eq!(map.owner(5461).unwrap().1, 7001);
        assert_eq!(map.owner(16383).unwrap().1, 7002);
        assert_eq!(SlotMap::from_reply(&Value::Nil).owner(0), None);
    }

    #[test]
    fn a_redirection_names_its_primary() {
        assert_eq!(
            moved_to("3999 127.0.0.1:6381"),
            Some(("127.0.0.1".into(), 6381))
        );
        assert_eq!(moved_to("3999 [::1]:6381"), Some(("::1".into(), 6381)));
        assert_eq!(moved_to("3999"), None);
        assert_eq!(moved_to("3999 host:port"), None);
    }
}
