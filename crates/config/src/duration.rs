//! Durations in the configuration: how they are written, and the longest each key takes.
//!
//! Every duration key has an upper bound, checked wherever a configuration is loaded
//! (`check-config`, start-up, a reload): an instant plus a period, a timeout doubled or a lease's
//! ttl in milliseconds must not overflow, whatever the file says. The bounds lie far beyond any
//! useful setting and far below any overflow; a value past one is refused naming it.

use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The longest `redis.connect_timeout`, `redis.command_timeout` and `redis.eviction_timeout`:
/// an hour.
pub const MAX_TIMEOUT: Duration = HOUR;
/// The shortest `sweeps.<name>.ttl`: a second. Within a window shorter than that, a heartbeat's
/// round trip, a busy Redis or the check's own batching (tens of milliseconds) would make users
/// who are there look gone.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// The longest `sweeps.<name>.ttl` and `sweeps.<name>.storm_guard.hold`: a week.
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest `sweeps.<name>.stream_retention` and `sweeps.<name>.stream_ttl`: 30 days.
pub const MAX_STREAM_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// The longest period of `sweeps.<name>.schedule` and `tracking.reconcile_interval`: a day.
/// A cron expression may run less often.
pub const MAX_INTERVAL: Duration = DAY;
/// The longest `coordination.lease_ttl`: a day.
pub const MAX_LEASE_TTL: Duration = DAY;

/// Parses `text` as a duration greater than zero and at most `max`. The error is the reason,
/// for the message that names the key, the value and its source.
pub(super) fn parse(text: &str, max: Duration) -> Result<Duration, String> {
    let text = text.trim();
    // humantime would say "expected number at 0", which names nothing the operator wrote.
    if text.starts_with('-') {
        return Err("negative: a duration must be greater than zero".into());
    }
    let d = humantime::parse_duration(text).map_err(|e| match e {
        // humantime's own words speak of nanoseconds, which the operator did not write.
        humantime::DurationError::NumberOverflow => at_most(max),
        e => format!("not a duration like \"45s\" or \"250ms\": {e}"),
    })?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    if d > max {
        return Err(at_most(max));
    }
    Ok(d)
}

fn at_most(max: Duration) -> String {
    format!("must be at most {}", humantime::format_duration(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_and_bounded() {
        assert_eq!(parse(" 90s ", HOUR), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h", HOUR), Ok(HOUR));
        assert_eq!(parse("1h 1ms", HOUR).unwrap_err(), "must be at most 1h");
        for huge in ["9999999999999999999s", "99999999999999999999s"] {
            assert_eq!(
                parse(huge, HOUR).unwrap_err(),
                "must be at most 1h",
                "{huge}"
            );
        }
        assert_eq!(parse("0s", HOUR).unwrap_err(), "must be greater than zero");
        assert_eq!(
            parse("-5s", HOUR).unwrap_err(),
            "negative: a duration must be greater than zero"
        );
        let e = parse("soon", HOUR).unwrap_err();
        assert!(e.starts_with("not a duration like"), "{e}");
    }
}
