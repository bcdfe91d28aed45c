//! `sweeps.<name>.schedule`: when a sweep's walks run, every fixed period or on a cron
//! expression, as the configuration writes it. Ticking on it is `tracking`'s.

use std::fmt;
use std::time::Duration;

use super::duration::{self, MAX_INTERVAL};

/// A sweep's schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Run every so often (`"30s"`, `"250ms"`).
    Every(Duration),
    /// A 6-field cron expression with seconds (`"0 */5 * * * *"`), in UTC.
    Cron(String),
}

/// Why a `schedule` value was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// Neither a duration nor a valid cron expression.
    #[error(
        "not a duration (like \"30s\" or \"250ms\") nor a 6-field cron expression with seconds (like \"0 */5 * * * *\"): {0}"
    )]
    Unparsable(String),
    /// A period out of range: zero, negative, or longer than [`MAX_INTERVAL`].
    #[error("{0}")]
    Period(String),
    /// A cron expression that no date matches (such as the 31st of February): walks would
    /// never run.
    #[error("no date matches it: the sweep would never walk")]
    Never,
}

impl Schedule {
    /// Parses a human duration (at most [`MAX_INTERVAL`]) or a cron expression with seconds.
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let text = text.trim();
        let fields = text.split_whitespace().count();
        // A cron expression has five fields or more, or its wildcards; anything else is meant
        // as a period ("30s", "1m 30s", "-5s"), and says why it is not one.
        let cron_like = fields >= 5 || text.contains(['*', '/', ',', '?']);
        if !cron_like {
            let period = duration::parse(text, MAX_INTERVAL).map_err(ScheduleError::Period)?;
            return Ok(Self::Every(period));
        }
        if fields != 6 {
            return Err(ScheduleError::Unparsable(format!(
                "{fields} fields where a cron expression needs 6 (seconds first)"
            )));
        }
        let cron = cron_parser()
            .parse(text)
            .map_err(|e| ScheduleError::Unparsable(e.to_string()))?;
        if cron
            .find_next_occurrence(&chrono::Utc::now(), false)
            .is_err()
        {
            return Err(ScheduleError::Never);
        }
        Ok(Self::Cron(text.to_owned()))
    }

    /// Time between passes: the period, or for a cron expression the gap between its next two
    /// runs (`None` if it never runs again).
    pub fn interval(&self) -> Option<Duration> {
        match self {
            Self::Every(d) => Some(*d),
            Self::Cron(expr) => {
                let cron = cron_parser().parse(expr).ok()?;
                let first = cron.find_next_occurrence(&chrono::Utc::now(), false).ok()?;
                let second = cron.find_next_occurrence(&first, false).ok()?;
                (second - first).to_std().ok()
            }
        }
    }
}

/// The parser settings tokio-cron-scheduler uses, so that what validates here runs there.
fn cron_parser() -> croner::parser::CronParser {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Required)
        .dom_and_dow(true)
        .build()
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Every(d) => write!(f, "{}", humantime::format_duration(*d)),
            Self::Cron(expr) => f.write_str(expr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_cron_expressions() {
        assert_eq!(
            Schedule::parse("250ms").unwrap(),
            Schedule::Every(Duration::from_millis(250))
        );
        assert_eq!(
            Schedule::parse("1m 30s").unwrap(),
            Schedule::Every(Duration::from_secs(90))
        );
        assert_eq!(
            Schedule::parse("0 */5 * * * *").unwrap(),
            Schedule::Cron("0 */5 * * * *".into())
        );
    }

    #[test]
    fn interval_of_cron_expressions() {
        let every_5_min = Schedule::parse("0 */5 * * * *").unwrap();
        assert_eq!(every_5_min.interval(), Some(Duration::from_secs(300)));
        let every_second = Schedule::parse("* * * * * *").unwrap();
        assert_eq!(every_second.interval(), Some(Duration::from_secs(1)));
        assert_eq!(
            Schedule::parse("250ms").unwrap().interval(),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn rejects_zero_five_field_and_garbage() {
        let e = Schedule::parse("0s").unwrap_err().to_string();
        assert!(e.contains("greater than zero"), "{e}");
        let e = Schedule::parse("*/5 * * * *").unwrap_err().to_string();
        assert!(e.contains("5 fields"), "{e}");
        assert!(Schedule::parse("0 99 * * * *").is_err());
        assert!(Schedule::parse("soon").is_err());
    }

    #[test]
    fn a_period_is_positive_and_at_most_a_day() {
        assert_eq!(
            Schedule::parse("1day").unwrap(),
            Schedule::Every(MAX_INTERVAL)
        );
        let e = Schedule::parse("1day 1s").unwrap_err().to_string();
        assert_eq!(e, "must be at most 1day");
        for huge in ["9999999999999999999s", "99999999999999999999s"] {
            let e = Schedule::parse(huge).unwrap_err().to_string();
            assert_eq!(e, "must be at most 1day", "{huge}");
        }
        let e = Schedule::parse("-5s").unwrap_err().to_string();
        assert!(e.contains("negative"), "{e}");
        // A cron expression may run less often than the longest period, but it must run.
        assert!(Schedule::parse("0 0 0 1 1 *").is_ok());
        assert!(Schedule::parse("0 0 0 29 2 *").is_ok(), "every leap year");
        let e = Schedule::parse("0 0 0 31 2 *").unwrap_err().to_string();
        assert!(e.contains("would never walk"), "{e}");
    }
}
