//! The canary's replies read (`canary` in the rules says what the canary is): its `ZINCRBY`'s
//! answer, the slot a cluster primary serves, and the `run_id` of `INFO server`.

use presence_sweeper_rules::primary::canary::{Reading, WriteRefusal};

use presence_sweeper_redis::{Value, reply};

/// The first slot `CLUSTER SLOTS` (`slots`) gives the primary at `host`:`port`.
pub(crate) fn first_slot(slots: &Value, host: &str, port: u16) -> Option<u16> {
    let Value::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let Value::Array(fields) = range else {
            return None;
        };
        let (Some(Value::Int(lo)), Some(Value::Array(primary))) = (fields.first(), fields.get(2))
        else {
            return None;
        };
        let h = match primary.first()? {
            Value::BulkString(h) => String::from_utf8_lossy(h).into_owned(),
            Value::SimpleString(h) => h.clone(),
            _ => return None,
        };
        let p = reply::int(primary.get(1)?)?;
        (h == host && p == u64::from(port)).then(|| u16::try_from(*lo).ok())?
    })
}

/// What the canary's `ZINCRBY` answered, as a reading.
pub(crate) fn reading(v: &Value) -> Reading {
    if reply::refusal(v).is_some() {
        return Reading::Refused;
    }
    if let Value::ServerError(e) = v
        && let Some(refusal) = WriteRefusal::of(e.code())
    {
        return Reading::WritesRefused(refusal);
    }
    match reply::float(v) {
        Some(n) if n.is_finite() && n >= 1.0 => Reading::Count(n as u64),
        _ => Reading::Unknown,
    }
}

/// The `run_id` in an `INFO server` reply: it changes with every start of `redis-server`.
pub(crate) fn run_id(info: &Value) -> Option<String> {
    let text = match info {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    text.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_read_as_readings() {
        assert_eq!(
            reading(&Value::BulkString(b"42".to_vec())),
            Reading::Count(42)
        );
        assert_eq!(reading(&Value::Int(1)), Reading::Count(1));
        assert_eq!(reading(&Value::Nil), Reading::Unknown);
        for (code, refusal) in [
            ("OOM", WriteRefusal::Oom),
            ("MISCONF", WriteRefusal::Misconf),
            ("READONLY", WriteRefusal::ReadOnly),
            ("LOADING", WriteRefusal::Loading),
            ("NOREPLICAS", WriteRefusal::NoReplicas),
        ] {
            let line = format!("-{code} the server says no\r\n");
            let reply = presence_sweeper_redis::resp::Reader::new(line.as_bytes()).value();
            assert_eq!(
                reply.ok().flatten().map(|v| reading(&v)),
                Some(Reading::WritesRefused(refusal)),
                "{code}"
            );
        }
        let info =
            Value::BulkString(b"# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\n".to_vec());
        assert_eq!(run_id(&info).as_deref(), Some("abc123"));
    }
}
