//! When an attempt that failed is tried again, and when an event is given up.
//!
//! Pure: the caller passes the failures so far, the randomness and the time, so every rule is
//! tested without a clock or a receiver.

use std::time::{Duration, SystemTime};

/// The wait after the first failure; each further failure doubles it.
pub const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest wait between two attempts of one event, unless the receiver asks for more.
pub const MAX_RETRY: Duration = Duration::from_secs(60);
/// The longest `Retry-After` honoured: a receiver cannot park an event beyond it (the event's
/// own `retry_for` still ends it sooner).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The wait before attempt `failures + 1` after `failures` (at least 1) failed attempts:
/// exponential, with "equal jitter" (between half and all of the step, `jitter` in 0..1), so
/// that replicas and conversations that failed together do not retry in step. A `Retry-After`
/// from the receiver is honoured as it is (up to [`MAX_RETRY_AFTER`]).
pub fn wait(failures: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
    if let Some(asked) = retry_after {
        return asked.min(MAX_RETRY_AFTER);
    }
    let doublings = failures.saturating_sub(1).min(16);
    let step = FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY);
    step.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// How often, at most, a recovered receiver wakes the attempts waiting out their backoff: a
/// receiver that fails one event for good (and accepts the others) gets that event again at
/// most this often, not at every other event's success.
pub const RECOVERY_WAKE_EVERY: Duration = Duration::from_secs(5);

/// Whether a failed attempt's wait ends early once the receiver accepts another event: after a
/// failure of the whole receiver (5xx, 429, a timeout, a connection error), not after a 4xx
/// refusing this event, and not when the receiver asked for a `Retry-After`.
pub fn wakes_on_recovery(status: Option<u16>, retry_after: Option<Duration>) -> bool {
    retry_after.is_none() && status.is_none_or(|s| s >= 500 || s == 429)
}

/// Whether an event appended at `entry_ms` (Redis's clock) is past its `retry_for` at
/// `now_ms` (Redis's clock, as estimated).
pub fn expired(entry_ms: u64, now_ms: u64, retry_for: Duration) -> bool {
    now_ms.saturating_sub(entry_ms) > retry_for.as_millis() as u64
}

/// A `Retry-After` header's value (RFC 9110: delay-seconds or an HTTP-date) as a wait from
/// `now`; `None` for what is neither.
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Whether an HTTP status means the event was delivered: any 2xx. Redirects are not followed
/// (the endpoint is configured, not discovered), so a 3xx is a failure like any other.
pub fn delivered(status: u16) -> bool {
    (200..300).contains(&status)
}

/// A small, fast randomness for jitter (xorshift64*), seeded by the caller; no global state.
#[derive(Debug, Clone)]
pub struct Jitter(u64);

impl Jitter {
    /// A source seeded with `seed` (any value; 0 is replaced).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// The next value in 0..1.
    pub fn sample(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receiver_wide_failure_waits_for_the_receiver_not_the_backoff() {
        assert!(wakes_on_recovery(Some(503), None));
        assert!(wakes_on_recovery(Some(500), None));
        assert!(wakes_on_recovery(Some(429), None));
        assert!(
            wakes_on_recovery(None, None),
            "a timeout or a connection error"
        );
        assert!(!wakes_on_recovery(Some(400), None), "this event refused");
        assert!(!wakes_on_recovery(Some(404), None));
        assert!(
            !wakes_on_recovery(Some(503), Some(Duration::from_secs(2))),
            "asked to wait"
        );
    }

    #[test]
    fn waits_double_with_jitter_up_to_the_cap() {
        assert_eq!(wait(1, None, 1.0), FIRST_RETRY);
        assert_eq!(wait(1, None, 0.0), FIRST_RETRY / 2);
        assert_eq!(wait(3, None, 1.0), FIRST_RETRY * 4);
        assert_eq!(wait(30, None, 1.0), MAX_RETRY);
        assert_eq!(wait(u32::MAX, None, 0.0), MAX_RETRY / 2);
    }

    #[test]
    fn retry_after_is_honoured_and_bounded() {
        let two = Some(Duration::from_secs(2));
        assert_eq!(wait(1, two, 0.3), Duration::from_secs(2));
        assert_eq!(
            wait(1, Some(Duration::from_secs(1 << 40)), 0.3),
            MAX_RETRY_AFTER
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_460_000);
        assert_eq!(retry_after(" 3 ", now), Some(Duration::from_secs(3)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(retry_after(&later, now), Some(Duration::from_secs(90)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-1", now), None);
    }

    #[test]
    fn an_event_expires_after_retry_for() {
        let hour = Duration::from_secs(3600);
        assert!(!expired(1_000, 1_000 + 3_600_000, hour));
        assert!(expired(1_000, 1_001 + 3_600_000, hour));
        assert!(
            !expired(5_000, 1_000, hour),
            "a clock behind the entry expires nothing"
        );
    }

    #[test]
    fn only_2xx_delivers() {
        assert!(delivered(200) && delivered(204) && delivered(299));
        assert!(!delivered(301) && !delivered(429) && !delivered(500) && !delivered(199));
    }

    #[test]
    fn jitter_stays_in_range_and_varies() {
        let mut j = Jitter::new(42);
        let values: Vec<f64> = (0..1000).map(|_| j.sample()).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        assert!(values.iter().any(|v| *v < 0.1) && values.iter().any(|v| *v > 0.9));
    }
}
