//! Redis's clock as one primary's loop follows it: the readings every reply carries, set against
//! the daemon's own monotonic clock. Both move at the same pace; when Redis's moves further or
//! less than the time that passed here, Redis's clock stepped (`ntpdate` at boot, a VM resumed
//! with a stale clock, a clock set by hand, a failover to a host whose clock differs).
//!
//! A reading lags the true instant by its reply's travel, so the estimate of Redis's "now" is
//! the reading that lagged least of the recent ones plus the time since: a lower bound of
//! Redis's clock. A later reading beyond that estimate by more than [`STEP_TOLERANCE`] is a
//! forward step; one behind it by more is a backward step.

use tokio::time::{Duration, Instant};

use crate::store::clock::RedisClock;

/// How far Redis's clock may move beyond (or short of) the time that passed here before it is
/// a step: well above a reply's travel and the two clocks' drift over [`BASELINE_FOR`], well
/// under the shortest sweep's ttl (`typing`'s 5 s), since a step of `s` makes every score look
/// `s` older.
pub(crate) const STEP_TOLERANCE: f64 = 1.0;

/// A reading serves as the baseline for this long at most, however much less it lagged than
/// the readings since: NTP slews a clock by up to 500 ppm, and an old baseline would drift
/// from Redis's clock (2.5 ms over this long, at most).
const BASELINE_FOR: Duration = Duration::from_secs(5);

/// A step of Redis's clock beyond [`STEP_TOLERANCE`], in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Step {
    /// It jumped ahead: every score looks older by this much at once.
    Forward(f64),
    /// It went back: zombies leave this much later, and scores written before the step lie
    /// in Redis's future.
    Backward(f64),
}

impl Step {
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

/// The baseline of the estimate, and whether the next reading starts a new one.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    clock: Option<RedisClock>,
    /// The next reading is of another server (a failover followed): its clock is no step.
    rebase: bool,
}

impl Timeline {
    /// The estimate of Redis's clock, once read.
    pub(crate) fn clock(&self) -> Option<RedisClock> {
        self.clock
    }

    /// The next reading comes from another server: no step is read into it.
    pub(crate) fn rebase(&mut self) {
        self.rebase = true;
    }

    /// A reply read at `at` carried Redis's clock `redis` (Unix seconds). Returns the step it
    /// shows, if any, and the estimate Redis's clock was expected at.
    pub(crate) fn observe(&mut self, at: Instant, redis: f64) -> Option<(Step, f64)> {
        let reading = RedisClock { redis, read_at: at };
        let Some(base) = self.clock.filter(|_| !std::mem::take(&mut self.rebase)) else {
            self.clock = Some(reading);
            return None;
        };
        let expected = base.at(at);
        let ahead = redis - expected;
        let step = if ahead > STEP_TOLERANCE {
            Some(Step::Forward(ahead))
        } else if ahead < -STEP_TOLERANCE {
            Some(Step::Backward(-ahead))
        } else {
            None
        };
        // A reading beyond the estimate lagged less than the baseline (or is a step): it is the
        // better baseline. One behind it lagged more, unless the baseline is too old to trust.
        let stale = at.saturating_duration_since(base.read_at) > BASELINE_FOR;
        if step.is_some() || ahead > 0.0 || stale {
            self.clock = Some(reading);
        }
        step.map(|s| (s, expected))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn time_passing_at_the_same_pace_is_no_step() {
        let t0 = Instant::now();
        let mut t = Timeline::default();
        assert_eq!(t.observe(t0, 1000.0), None);
        assert_eq!(t.observe(t0 + ms(2500), 1002.5), None);
        assert_eq!(
            t.observe(t0 + ms(2600), 1002.0),
            None,
            "a reply that lagged"
        );
        let estimate = t.clock().unwrap().at(t0 + ms(2600));
        assert!(
            (estimate - 1002.6).abs() < 1e-9,
            "the estimate keeps the reading that lagged least: {estimate}"
        );
    }

    #[test]
    fn a_jump_ahead_beyond_the_tolerance_is_a_forward_step() {
        let t0 = Instant::now();
        let mut t = Timeline::default();
        t.observe(t0, 1000.0);
        assert_eq!(t.observe(t0 + ms(1000), 1001.9), None, "within tolerance");
        let (step, expected) = t.observe(t0 + ms(2000), 1032.0).expect("a step");
        assert_eq!(step.direction(), "forward");
        assert!((step.seconds() - 29.1).abs() < 1e-9, "{step:?}");
        assert!(
            (expected - 1002.9).abs() < 1e-9,
            "a reading ahead was the better baseline"
        );
        assert_eq!(t.clock().unwrap().redis, 1032.0, "the new baseline");
        assert_eq!(t.observe(t0 + ms(3000), 1033.0), None, "once");
    }

    #[test]
    fn a_jump_back_is_a_backward_step() {
        let t0 = Instant::now();
        let mut t = Timeline::default();
        t.observe(t0, 1000.0);
        let (step, _) = t.observe(t0 + ms(1000), 971.0).expect("a step");
        assert_eq!(step, Step::Backward(30.0));
        assert_eq!(t.clock().unwrap().redis, 971.0);
    }

    #[test]
    fn another_server_s_clock_is_no_step() {
        let t0 = Instant::now();
        let mut t = Timeline::default();
        t.observe(t0, 1000.0);
        t.rebase();
        assert_eq!(t.observe(t0 + ms(100), 500.0), None);
        assert_eq!(t.observe(t0 + ms(200), 500.1), None);
    }

    #[test]
    fn an_old_baseline_gives_way_to_a_lagging_reading() {
        let t0 = Instant::now();
        let mut t = Timeline::default();
        t.observe(t0, 1000.0);
        t.observe(t0 + ms(6000), 1005.99);
        assert_eq!(t.clock().unwrap().redis, 1005.99, "drift is bounded");
    }
}
