//! Redis's clock as one primary's loop follows it: the readings replies carry, set against the
//! daemon's own monotonic clock. Both move at the same pace; when Redis's moves further or less
//! than the time that passed here, Redis's clock stepped (`ntpdate` at boot, a VM resumed with a
//! stale clock, a clock set by hand).
//!
//! A reading was taken by Redis somewhere between the instant its request was sent and the
//! instant its reply was handled here, so it bounds Redis's clock at any later instant between
//! two lines. A new reading outside the baseline's bounds by more than [`STEP_TOLERANCE`] is a
//! step, however late its reply was handled: lateness only widens the bounds, as in NTP. The
//! baseline is the reading with the shortest round trip of the last few seconds (a probe's),
//! and the estimate of Redis's "now" is its lower bound: never ahead of Redis.

use std::time::{Duration, Instant};

use crate::clock::RedisClock;

/// How far Redis's clock may move beyond (or short of) the time that passed here, past what the
/// readings' round trips allow, before it is a step: above the clocks' drift over
/// [`BASELINE_FOR`], well under the shortest sweep's ttl (`typing`'s 5 s), since a step of `s`
/// makes every score look `s` older.
pub(crate) const STEP_TOLERANCE: f64 = 1.0;

/// A reading serves as the baseline for this long at most, however short its round trip: NTP
/// slews a clock by up to 500 ppm, and an old baseline would drift from Redis's clock (2.5 ms
/// over this long, at most).
const BASELINE_FOR: Duration = Duration::from_secs(5);

/// The round trip assumed for a reading whose request's instant is not known (a SCAN page):
/// wide, so that it never shows a step, and the first probe replaces it as the baseline.
const UNKNOWN_ROUND_TRIP: Duration = Duration::from_secs(10);

/// A step of Redis's clock beyond `STEP_TOLERANCE`, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClockStep {
    /// It jumped ahead: every score looks older by this much at once.
    Forward(f64),
    /// It went back: zombies leave this much later, and scores written before the step lie
    /// in Redis's future.
    Backward(f64),
}

impl ClockStep {
    /// The metric label.
    pub(crate) fn direction(self) -> &'static str {
        match self {
            Self::Forward(_) => "forward",
            Self::Backward(_) => "backward",
        }
    }

    pub(crate) fn seconds(self) -> f64 {
        match self {
            Self::Forward(s) | Self::Backward(s) => s,
        }
    }
}

/// One reading: Redis's clock `redis`, read between the local instants `sent` and `received`.
#[derive(Debug, Clone, Copy)]
struct ClockReading {
    redis: f64,
    sent: Instant,
    received: Instant,
}

impl ClockReading {
    fn round_trip(&self) -> Duration {
        self.received.saturating_duration_since(self.sent)
    }

    /// The least Redis's clock can read at `t`, with no step since this reading.
    fn low(&self, t: Instant) -> f64 {
        self.redis + signed_seconds(t, self.received)
    }

    /// The most it can read at `t`.
    fn high(&self, t: Instant) -> f64 {
        self.redis + signed_seconds(t, self.sent)
    }
}

/// `t - from` in seconds, negative when `t` is earlier.
fn signed_seconds(t: Instant, from: Instant) -> f64 {
    if t >= from {
        t.duration_since(from).as_secs_f64()
    } else {
        -from.duration_since(t).as_secs_f64()
    }
}

/// The baseline, and what the readings since told.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    base: Option<ClockReading>,
    /// When the last reading of any kind was handled.
    last: Option<Instant>,
    /// Readings of requests sent before this instant come from a server the loop left (a
    /// failover followed): they neither show a step nor serve as the baseline.
    rebased_at: Option<Instant>,
}

impl Timeline {
    /// The estimate of Redis's clock (the baseline's lower bound), once read.
    pub(crate) fn clock(&self) -> Option<RedisClock> {
        self.base.map(|b| RedisClock {
            redis: b.redis,
            read_at: b.received,
        })
    }

    /// When the last reading was handled: how fresh the estimate's inputs are.
    pub(crate) fn last_read(&self) -> Option<Instant> {
        self.last
    }

    /// From `at` on, readings come from another server: its clock is no step, and the first
    /// reading sent after `at` is the new baseline.
    pub(crate) fn rebase(&mut self, at: Instant) {
        self.rebased_at = Some(at);
    }

    /// A reply handled at `received` carried Redis's clock `redis` (Unix seconds); its request
    /// was sent at `sent`, if known. Returns the step it shows, if any, and the least Redis's
    /// clock could have read then without it.
    pub(crate) fn observe(
        &mut self,
        sent: Option<Instant>,
        received: Instant,
        redis: f64,
    ) -> Option<(ClockStep, f64)> {
        self.last = Some(received);
        let known = sent.is_some();
        let reading = ClockReading {
            redis,
            sent: sent
                .unwrap_or_else(|| received.checked_sub(UNKNOWN_ROUND_TRIP).unwrap_or(received)),
            received,
        };
        if let Some(at) = self.rebased_at {
            if !known || reading.sent < at {
                return None;
            }
            self.rebased_at = None;
            self.base = Some(reading);
            return None;
        }
        let Some(base) = self.base else {
            self.base = Some(reading);
            return None;
        };
        let step = if !known {
            None
        } else if redis > base.high(received) + STEP_TOLERANCE {
            Some(ClockStep::Forward(redis - base.low(received)))
        } else if redis < base.low(reading.sent) - STEP_TOLERANCE {
            Some(ClockStep::Backward(base.low(received) - redis))
        } else {
            None
        };
        let stale = received.saturating_duration_since(base.received) > BASELINE_FOR;
        let shorter = known && reading.round_trip() <= base.round_trip();
        if step.is_some() || shorter || stale {
            self.base = Some(reading);
        }
        step.map(|s| (s, base.low(received)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A reading whose request went out `rtt` ms before `at`.
    fn read(t: &mut Timeline, at: Instant, rtt: u64, redis: f64) -> Option<(ClockStep, f64)> {
        t.observe(Some(at - ms(rtt)), at, redis)
    }

    #[test]
    fn time_passing_at_the_same_pace_is_no_step() {
        let t0 = crate::testing::now() + ms(10_000);
        let mut t = Timeline::default();
        assert_eq!(read(&mut t, t0, 1, 1000.0), None);
        assert_eq!(read(&mut t, t0 + ms(2500), 1, 1002.5), None);
        assert_eq!(
            t.clock().unwrap().redis,
            1002.5,
            "an as short round trip: newer"
        );
        assert_eq!(
            read(&mut t, t0 + ms(2600), 300, 1002.3),
            None,
            "a slow reply"
        );
        assert_eq!(
            t.clock().unwrap().redis,
            1002.5,
            "the shorter round trip stays"
        );
    }

    #[test]
    fn a_reply_handled_late_is_no_step_either_way() {
        let t0 = crate::testing::now() + ms(10_000);
        let mut t = Timeline::default();
        read(&mut t, t0, 1, 1000.0);
        // A check read TIME at once, then took 5 s before its reply was handled.
        assert_eq!(read(&mut t, t0 + ms(6000), 5000, 1001.0), None);
        assert_eq!(
            read(&mut t, t0 + ms(6100), 1, 1006.1),
            None,
            "nor the next probe"
        );
        // A page, whose request's instant is not known.
        assert_eq!(t.observe(None, t0 + ms(9000), 1003.0), None);
    }

    #[test]
    fn a_jump_ahead_beyond_the_tolerance_is_a_forward_step() {
        let t0 = crate::testing::now() + ms(10_000);
        let mut t = Timeline::default();
        read(&mut t, t0, 2, 1000.0);
        assert_eq!(
            read(&mut t, t0 + ms(1000), 2, 1001.9),
            None,
            "within tolerance"
        );
        let (step, expected) = read(&mut t, t0 + ms(2000), 2, 1032.0).expect("a step");
        assert_eq!(step.direction(), "forward");
        assert!((step.seconds() - 29.1).abs() < 1e-9, "{step:?}");
        assert!((expected - 1002.9).abs() < 1e-9);
        assert_eq!(t.clock().unwrap().redis, 1032.0, "the new baseline");
        assert_eq!(read(&mut t, t0 + ms(3000), 2, 1033.0), None, "once");
    }

    #[test]
    fn a_jump_back_is_a_backward_step() {
        let t0 = crate::testing::now() + ms(10_000);
        let mut t = Timeline::default();
        read(&mut t, t0, 1, 1000.0);
        let (step, _) = read(&mut t, t0 + ms(1000), 1, 971.0).expect("a step");
        assert!((step.seconds() - 30.0).abs() < 1e-9, "{step:?}");
        assert_eq!(step.direction(), "backward");
        assert_eq!(t.clock().unwrap().redis, 971.0);
    }

    #[test]
    fn another_server_s_clock_is_no_step_and_late_replies_of_the_old_one_are_ignored() {
        let t0 = crate::testing::now() + ms(10_000);
        let mut t = Timeline::default();
        read(&mut t, t0, 1, 1000.0);
        t.rebase(t0 + ms(50));
        // A check sent to the old server before the move comes back late.
        assert_eq!(read(&mut t, t0 + ms(100), 80, 1000.1), None);
        assert_eq!(t.clock().unwrap().redis, 1000.0, "not a baseline");
        assert_eq!(read(&mut t, t0 + ms(200), 1, 500.0), None, "the new server");
        assert_eq!(t.clock().unwrap().redis, 500.0);
        assert_eq!(read(&mut t, t0 + ms(300), 1, 500.1), None);
    }

    #[test]
    fn an_old_baseline_gives_way_to_a_slower_reading() {
        let t0 = crate::testing::now() + ms(10_000);
        let mut t = Timeline::default();
        read(&mut t, t0, 1, 1000.0);
        read(&mut t, t0 + ms(6000), 50, 1005.99);
        assert_eq!(t.clock().unwrap().redis, 1005.99, "drift is bounded");
        assert_eq!(t.last_read(), Some(t0 + ms(6000)));
    }
}
