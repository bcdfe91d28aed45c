//! A Redis Cluster's slots: which primary serves each, as `CLUSTER SLOTS` says, and where a
//! `MOVED` redirection points. The data path needs them for sharded publishing, where each
//! `SPUBLISH` must reach the primary that owns its channel's slot (`sharded`).

use crate::resp::Value;

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
