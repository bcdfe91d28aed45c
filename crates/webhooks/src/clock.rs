//! Redis's clock as this process estimates it between calls: events expire by their entry ids,
//! which Redis stamps, so `retry_for` is judged on Redis's clock, not on a skewed local one.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The offset of Redis's clock from the local one, learnt from every call that reads `TIME`.
#[derive(Debug, Default)]
pub struct RedisOffset {
    offset_ms: AtomicI64,
}

fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl RedisOffset {
    /// Redis said its time was `now_ms` just now.
    pub fn observe(&self, now_ms: u64) {
        self.offset_ms
            .store(now_ms as i64 - local_ms(), Ordering::Relaxed);
    }

    /// Redis's time now, in ms, as estimated.
    pub fn now_ms(&self) -> u64 {
        (local_ms() + self.offset_ms.load(Ordering::Relaxed)).max(0) as u64
    }
}

/// The local time in whole Unix seconds: `webhook-timestamp` is the sender's clock, which the
/// receiver compares with its own (within a tolerance, usually five minutes).
pub fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The instant now, on tokio's clock (which tests can pause), as std's `Instant`.
#[expect(
    clippy::disallowed_types,
    reason = "the one place this crate reads tokio's clock"
)]
pub fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
