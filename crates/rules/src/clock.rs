//! Redis's clock as the daemon follows it (a reading of `TIME` carried forward with the local
//! monotonic clock), and instants computed from configured durations. Instants come from whoever
//! asks: the rules never read a clock themselves.

use std::time::{Duration, Instant};

/// Redis's clock, as last read, and when.
#[derive(Debug, Clone, Copy)]
pub struct RedisClock {
    /// Redis's clock at the reading, in Unix seconds.
    pub redis: f64,
    /// The local instant of the reading.
    pub read_at: Instant,
}

impl RedisClock {
    /// Redis's clock at the local instant `local`: the reading plus the time since (none for an
    /// instant before the reading). It lags the true instant by the reading's travel, so a
    /// cutoff computed from it is never ahead of Redis.
    pub fn at(&self, local: Instant) -> f64 {
        self.redis + local.saturating_duration_since(self.read_at).as_secs_f64()
    }

    /// [`RedisClock::at`] in milliseconds.
    pub fn ms_at(&self, local: Instant) -> u64 {
        (self.at(local) * 1000.0) as u64
    }

    /// The local instant Redis's clock reads `ms`.
    pub fn local(&self, ms: u64) -> Instant {
        let ahead = ms as f64 / 1000.0 - self.redis;
        if ahead <= 0.0 {
            self.read_at
        } else {
            self.read_at + Duration::from_secs_f64(ahead.min(1e9))
        }
    }
}

/// How far off [`after`] puts a time that cannot be added: tokio's own timers do the same with
/// a timeout too long to add.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// `at + d`, or a time that never comes where that would overflow. Configured durations are
/// bounded (`config::MAX_INTERVAL` and the like), but an instant computed from one must not
/// panic whatever it holds.
pub fn after(at: Instant, d: Duration) -> Instant {
    at.checked_add(d).unwrap_or_else(|| at + FAR_FUTURE)
}

/// Redis `TIME`'s two parts (seconds, microseconds) as Unix seconds.
pub fn from_parts(secs: f64, micros: f64) -> f64 {
    secs + micros / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::now as t0;

    #[test]
    fn the_clock_maps_redis_time_to_local_instants() {
        let clock = RedisClock {
            redis: 1000.0,
            read_at: t0(),
        };
        let later = clock.read_at + Duration::from_millis(1500);
        assert_eq!(clock.ms_at(later), 1_001_500);
        assert_eq!(
            clock.local(1_002_000),
            clock.read_at + Duration::from_secs(2)
        );
        assert_eq!(
            clock.local(0),
            clock.read_at,
            "the past maps to the reading"
        );
        assert_eq!(clock.at(clock.read_at - Duration::from_secs(1)), 1000.0);
    }
}
