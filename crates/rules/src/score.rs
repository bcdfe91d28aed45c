//! Scores and staleness: the unit apps write scores in, and the bound below which a member is a
//! zombie.

use std::time::Duration;

/// `sweeps.<name>.score_unit`: the unit of the scores the application writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreUnit {
    /// Unix seconds, fractions allowed.
    Seconds,
    /// Unix milliseconds.
    Milliseconds,
}

impl ScoreUnit {
    /// Converts a score to seconds.
    pub fn to_seconds(self, score: f64) -> f64 {
        match self {
            Self::Seconds => score,
            Self::Milliseconds => score / 1000.0,
        }
    }

    /// Converts Unix seconds to this unit.
    pub fn from_seconds(self, secs: f64) -> f64 {
        match self {
            Self::Seconds => secs,
            Self::Milliseconds => secs * 1000.0,
        }
    }

    /// Expresses a duration in this unit.
    pub fn from_duration(self, d: Duration) -> f64 {
        match self {
            Self::Seconds => d.as_secs_f64(),
            Self::Milliseconds => d.as_secs_f64() * 1000.0,
        }
    }

    /// The configuration value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seconds => "seconds",
            Self::Milliseconds => "milliseconds",
        }
    }
}

/// The staleness bound of one check: members scoring below it are zombies.
#[derive(Debug, Clone)]
pub struct Cutoff {
    /// The bound in the score unit: members scoring below it are zombies.
    pub bound: f64,
    /// `(` and the bound: an exclusive `ZRANGE`/`ZCOUNT` limit, so a score exactly at the
    /// cutoff stays.
    pub below: String,
}

impl Cutoff {
    /// The cutoff `ttl` before `now` (Unix seconds) for scores in `unit`.
    pub fn new(now: f64, ttl: Duration, unit: ScoreUnit) -> Self {
        Self::at(unit.from_seconds(now) - unit.from_duration(ttl))
    }

    /// The cutoff at `bound`, in the score unit.
    pub fn at(bound: f64) -> Self {
        Self {
            bound,
            below: format!("({bound:?}"),
        }
    }

    /// Whether a member scoring `score` is a zombie.
    pub fn is_stale(&self, score: f64) -> bool {
        score < self.bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutoff_is_exclusive_and_in_the_score_unit() {
        let c = Cutoff::new(1_764_460_045.5, Duration::from_secs(45), ScoreUnit::Seconds);
        assert_eq!(c.below, "(1764460000.5");
        let c = Cutoff::new(
            1_764_460_045.5,
            Duration::from_secs(45),
            ScoreUnit::Milliseconds,
        );
        assert_eq!(c.below, "(1764460000500.0");
    }
}
