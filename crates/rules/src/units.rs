//! The score-unit check: a sweep whose scores are about a thousand times off Redis's clock, or
//! more than a day ahead of it, has the wrong `score_unit` (or apps writing the other one).
//! Seconds read as milliseconds make every heartbeat look stale, and every live user would be
//! announced gone; milliseconds read as seconds make nobody ever stale. Either way the sweep
//! evicts nothing until its scores are sane again, and says so: an error in the log once per
//! episode, a gauge, and `/readyz`.
//!
//! Only scores the reads bring anyway are looked at (a probe's lowest and highest score, the
//! newest a guarded walk reads, a sample of stale keys before a pass's first eviction, and in
//! a sweep in milliseconds before each of its evictions): no round trip of its own.

use std::sync::{Arc, Mutex};

use crate::score::ScoreUnit;

/// How far ahead of Redis's clock a score may be before it is called a misconfiguration: apps'
/// clocks drift by seconds, not days.
const AHEAD_S: f64 = 86_400.0;

/// The band of ratios, either way, read as "about a thousand times off": scores of the last
/// few decades in the other unit fall well inside it, and a pinned `0` or `-inf` outside.
const THOUSANDFOLD: (f64, f64) = (500.0, 2000.0);

/// What a score says of the sweep's `score_unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// About a thousand times below Redis's clock: seconds read as milliseconds.
    Smaller,
    /// About a thousand times above it, or more than a day ahead.
    Ahead,
}

impl Mismatch {
    fn says(self) -> &'static str {
        match self {
            Self::Smaller => "about 1000 times below Redis's clock",
            Self::Ahead => "far ahead of Redis's clock (about 1000 times, or by more than a day)",
        }
    }
}

/// Whether `score` (in `unit`) shows a misconfigured unit, judged against `now` (Redis's clock,
/// Unix seconds). `ahead_of`: the instant a score more than a day ahead of is wrong; `None`
/// when `now` may be held back far behind Redis's clock. `+inf` (pinned) and `-inf` never are.
pub fn mismatch(score: f64, unit: ScoreUnit, now: f64, ahead_of: Option<f64>) -> Option<Mismatch> {
    let secs = unit.to_seconds(score);
    if !secs.is_finite() || secs <= 0.0 || now <= 0.0 {
        return None;
    }
    let ratio = now / secs;
    let (low, high) = THOUSANDFOLD;
    if (low..=high).contains(&ratio) {
        Some(Mismatch::Smaller)
    } else if (1.0 / high..=1.0 / low).contains(&ratio)
        || ahead_of.is_some_and(|at| secs > at + AHEAD_S)
    {
        Some(Mismatch::Ahead)
    } else {
        None
    }
}

/// The unit as configured (`score_unit = "…"`).
fn unit_name(unit: ScoreUnit) -> &'static str {
    match unit {
        ScoreUnit::Seconds => "seconds",
        ScoreUnit::Milliseconds => "milliseconds",
    }
}

/// Where a sweep reports a mismatch: `Some(why)` while it lasts (the daemon's gauge reads 1 and
/// `/readyz` names it), `None` once it is over.
#[derive(Clone)]
pub struct UnitAlarm(pub Arc<dyn Fn(Option<String>) + Send + Sync>);

impl UnitAlarm {
    /// An alarm that goes nowhere (a one-shot pass reports in its own error).
    pub fn detached() -> Self {
        Self(Arc::new(|_| {}))
    }
}

impl std::fmt::Debug for UnitAlarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnitAlarm").finish_non_exhaustive()
    }
}

/// Whether one sweep's scores fit its `score_unit`, watched by its checks on every primary.
#[derive(Debug)]
pub struct UnitWatch {
    sweep: String,
    unit: ScoreUnit,
    /// A mismatch ends once no check has seen one for this long (the sweep's ttl): every
    /// misconfigured key is looked at again well within it.
    clear_after: f64,
    alarm: UnitAlarm,
    /// The last instant a mismatching score was read, while an episode lasts.
    last_seen: Mutex<Option<f64>>,
}

impl UnitWatch {
    pub fn new(sweep: &str, unit: ScoreUnit, ttl: f64, alarm: UnitAlarm) -> Self {
        (alarm.0)(None);
        Self {
            sweep: sweep.to_owned(),
            unit,
            clear_after: ttl,
            alarm,
            last_seen: Mutex::default(),
        }
    }

    /// A check read scores at `now` that showed `seen` (if any mismatch); returns whether the
    /// sweep must evict nothing.
    pub fn observe(&self, seen: Option<Mismatch>, now: f64) -> bool {
        let mut last = self.last_seen.lock().unwrap_or_else(|e| e.into_inner());
        match (seen, *last) {
            (Some(m), None) => {
                *last = Some(now);
                // The names and the unit only: never a member or a key.
                tracing::error!(
                    sweep = %self.sweep,
                    score_unit = unit_name(self.unit),
                    "score_unit mismatch: scores are {}; nothing is evicted until they fit",
                    m.says()
                );
                let why = format!(
                    "sweep {}: scores are {} for score_unit = \"{}\"; nothing is evicted",
                    self.sweep,
                    m.says(),
                    unit_name(self.unit)
                );
                (self.alarm.0)(Some(why));
                true
            }
            (Some(_), Some(at)) => {
                // Checks on several primaries finish in any order.
                *last = Some(at.max(now));
                true
            }
            (None, Some(at)) if now - at >= self.clear_after => {
                *last = None;
                (self.alarm.0)(None);
                tracing::warn!(
                    sweep = %self.sweep,
                    score_unit = unit_name(self.unit),
                    "score_unit mismatch over: the scores fit again; evicting again"
                );
                false
            }
            (None, held) => held.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: f64 = 1_764_460_000.0;

    #[test]
    fn seconds_read_as_milliseconds_are_a_thousand_times_too_small() {
        let ms = ScoreUnit::Milliseconds;
        assert_eq!(
            mismatch(NOW - 5.0, ms, NOW, Some(NOW)),
            Some(Mismatch::Smaller)
        );
        // Even a zombie of last year's.
        let year_ago = NOW - 365.0 * 86_400.0;
        assert_eq!(mismatch(year_ago, ms, NOW, None), Some(Mismatch::Smaller));
        assert_eq!(mismatch(NOW * 1000.0 - 5000.0, ms, NOW, Some(NOW)), None);
    }

    #[test]
    fn milliseconds_read_as_seconds_are_far_ahead() {
        let s = ScoreUnit::Seconds;
        assert_eq!(
            mismatch(NOW * 1000.0, s, NOW, Some(NOW)),
            Some(Mismatch::Ahead)
        );
        assert_eq!(
            mismatch(NOW * 1000.0, s, NOW, None),
            Some(Mismatch::Ahead),
            "a thousandfold even when the instant is held back"
        );
        assert_eq!(mismatch(NOW - 40.0, s, NOW, Some(NOW)), None);
    }

    #[test]
    fn more_than_a_day_ahead_is_wrong_unless_the_instant_is_held_back() {
        let s = ScoreUnit::Seconds;
        let ahead = NOW + 2.0 * 86_400.0;
        assert_eq!(mismatch(ahead, s, NOW, Some(NOW)), Some(Mismatch::Ahead));
        assert_eq!(mismatch(ahead, s, NOW, None), None);
        assert_eq!(mismatch(NOW + 3600.0, s, NOW, Some(NOW)), None, "skew");
    }

    #[test]
    fn pinned_and_zero_scores_say_nothing() {
        for unit in [ScoreUnit::Seconds, ScoreUnit::Milliseconds] {
            for score in [f64::INFINITY, f64::NEG_INFINITY, 0.0, -5.0, 1.0] {
                assert_eq!(mismatch(score, unit, NOW, Some(NOW)), None, "{score}");
            }
        }
    }

    #[test]
    fn an_episode_is_reported_once_and_ends_a_ttl_after_the_last_sighting() {
        let reasons: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let r = reasons.clone();
        let alarm = UnitAlarm(Arc::new(move |why| r.lock().unwrap().push(why)));
        let c = UnitWatch::new("online", ScoreUnit::Milliseconds, 10.0, alarm);
        let alarmed = || reasons.lock().unwrap().last().is_some_and(Option::is_some);
        assert!(!c.observe(None, 100.0));
        assert!(c.observe(Some(Mismatch::Smaller), 101.0));
        assert!(c.observe(Some(Mismatch::Smaller), 105.0));
        assert!(alarmed());
        assert!(c.observe(None, 114.0), "still within a ttl of the last one");
        assert!(!c.observe(None, 115.0));
        assert!(!alarmed());
        let reasons = reasons.lock().unwrap();
        assert_eq!(reasons.len(), 3, "cleared at start, set once, cleared once");
        let why = reasons[1].as_deref().unwrap();
        assert!(why.contains("sweep online") && why.contains("score_unit = \"milliseconds\""));
        assert_eq!(reasons[2], None);
    }
}
