//! The daemon's one clock: tokio's, so that tests can pause and advance it, read as the
//! instants the rules take (`std::time::Instant`). Every timer of the daemon sleeps on it.

use std::time::Instant;

/// The instant now, on tokio's clock.
#[expect(
    clippy::disallowed_types,
    reason = "the one place tokio's clock is read"
)]
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Sleeps until `deadline` (an instant of [`now`]).
pub(crate) async fn sleep_until(deadline: Instant) {
    tokio::time::sleep_until(deadline.into()).await;
}

/// The wall clock, in Unix seconds (for `last_success_timestamp_seconds`, and where Redis's
/// own clock cannot be asked).
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
