//! Scores ahead of Redis's clock: members whose last heartbeat lies in Redis's future. They come
//! from a backward step of Redis's clock (scores written before it) or from apps that take
//! their scores from their own skewed clocks instead of Redis `TIME`. Nobody is wrongly
//! evicted for it (a score in the future only leaves later), but a zombie among them outlives
//! its window by the lead, so it is reported rather than kept silent: counted per key
//! (`scores_ahead_keys_total`) and logged at most once per `SAY_EVERY` with the largest lead
//! seen. Scores over a day ahead are a wrong `score_unit` instead (`units`).

use std::sync::Mutex;

/// A score this far ahead of Redis's clock (seconds) is ahead: above a reply's travel and the
/// small skew of an app's own clock.
pub const AHEAD_S: f64 = 1.0;
/// The log says it again after this long (seconds of Redis's clock), with the largest lead since.
const SAY_EVERY: f64 = 600.0;

/// One sweep's watch of scores ahead of Redis's clock.
#[derive(Debug)]
pub struct AheadWatch {
    sweep: String,
    /// When the log last said it (Redis's clock), and the largest lead seen since.
    said: Mutex<(Option<f64>, f64)>,
}

impl AheadWatch {
    pub fn new(sweep: &str) -> Self {
        Self {
            sweep: sweep.to_owned(),
            said: Mutex::default(),
        }
    }

    /// A check at `now` (Redis's clock, seconds) read `keys` keys whose scores lay ahead of it,
    /// the furthest by `lead` seconds. Returns how many keys to count.
    pub fn observe(&self, keys: u64, lead: f64, now: f64) -> u64 {
        if keys == 0 {
            return 0;
        }
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        let largest = said.1.max(lead);
        if said.0.is_none_or(|at| now - at >= SAY_EVERY) {
            // Counts and seconds only: never a member or a key.
            tracing::warn!(
                sweep = %self.sweep,
                keys,
                lead_seconds = format_args!("{largest:.1}"),
                "scores ahead of Redis's clock: written before a backward step of Redis's clock, or by apps on their own clocks (take scores from Redis TIME); their members leave that much later"
            );
            *said = (Some(now), 0.0);
        } else {
            said.1 = largest;
        }
        keys
    }
}

/// How far ahead of `now` (seconds) a key's scores lie, if by more than [`AHEAD_S`]: `oldest`
/// and `newest` are in seconds already.
pub fn lead(oldest: Option<f64>, newest: Option<f64>, now: f64) -> Option<f64> {
    let highest = newest.or(oldest)?;
    let lead = highest - now;
    (lead > AHEAD_S && lead <= 86_400.0).then_some(lead)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_scores_well_ahead_and_within_a_day_lead() {
        assert_eq!(lead(Some(1000.5), None, 1000.0), None, "travel and skew");
        assert_eq!(lead(Some(1030.0), None, 1000.0), Some(30.0));
        assert_eq!(
            lead(Some(990.0), Some(1010.0), 1000.0),
            Some(10.0),
            "the newest"
        );
        assert_eq!(
            lead(Some(1000.0 + 2.0 * 86_400.0), None, 1000.0),
            None,
            "a unit"
        );
        assert_eq!(lead(None, None, 1000.0), None);
        assert_eq!(lead(Some(f64::INFINITY), None, 1000.0), None, "pinned");
    }

    #[test]
    fn said_once_per_interval_counted_always() {
        let w = AheadWatch::new("online");
        assert_eq!(w.observe(0, 0.0, 1000.0), 0);
        assert_eq!(w.observe(2, 30.0, 1000.0), 2);
        assert_eq!(w.said.lock().unwrap().0, Some(1000.0));
        assert_eq!(w.observe(1, 45.0, 1010.0), 1);
        assert_eq!(
            w.said.lock().unwrap().clone(),
            (Some(1000.0), 45.0),
            "kept for later"
        );
        w.observe(1, 5.0, 1000.0 + SAY_EVERY);
        assert_eq!(
            w.said.lock().unwrap().clone(),
            (Some(1000.0 + SAY_EVERY), 0.0)
        );
    }
}
