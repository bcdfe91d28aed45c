//! Time: Redis's clock (one `TIME` round trip, or a reading carried forward with the local
//! monotonic clock) and the wall clock, for the few places Redis's cannot be asked.

use tokio::time::{Duration, Instant};

use redis::aio::ConnectionLike;

/// Redis's clock now, in Unix seconds, by one `TIME` round trip on a redis-rs connection (the
/// tools'; the data path reads `TIME` in its own pipelines).
pub(crate) async fn redis_time<C>(con: &mut C) -> Result<f64, crate::Error>
where
    C: ConnectionLike + Send,
{
    let reply: redis::Value = redis::cmd("TIME").query_async(con).await?;
    Ok(crate::store::reply::parse_time(&reply).ok_or_else(crate::store::reply::not_a_time)?)
}

/// Redis's clock, as last read, and when.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedisClock {
    /// Redis's clock at the reading, in Unix seconds.
    pub(crate) redis: f64,
    /// The local instant of the reading.
    pub(crate) at: Instant,
}

impl RedisClock {
    /// Redis's clock now: the reading plus the time since. It lags the true instant by the
    /// reading's travel, so a cutoff computed from it is never ahead of Redis.
    pub(crate) fn now(&self) -> f64 {
        self.at(Instant::now())
    }

    /// Redis's clock at the local instant `local` (no earlier than the reading).
    pub(crate) fn at(&self, local: Instant) -> f64 {
        self.redis + local.saturating_duration_since(self.at).as_secs_f64()
    }

    /// [`RedisClock::now`] in milliseconds.
    pub(crate) fn now_ms(&self) -> u64 {
        (self.now() * 1000.0) as u64
    }

    /// The local instant Redis's clock reads `ms`.
    pub(crate) fn local(&self, ms: u64) -> Instant {
        let ahead = ms as f64 / 1000.0 - self.redis;
        if ahead <= 0.0 {
            self.at
        } else {
            self.at + Duration::from_secs_f64(ahead.min(1e9))
        }
    }
}

/// The wall clock, in Unix seconds (for `last_success_timestamp_seconds`, and where Redis's
/// own clock cannot be asked).
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_clock_maps_redis_time_to_local_instants() {
        let clock = RedisClock {
            redis: 1000.0,
            at: Instant::now(),
        };
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(clock.now_ms(), 1_001_500);
        assert_eq!(clock.local(1_002_000), clock.at + Duration::from_secs(2));
        assert_eq!(clock.local(0), clock.at, "the past maps to the reading");
    }
}
