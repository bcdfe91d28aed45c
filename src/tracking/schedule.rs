//! When a sweep runs: every fixed period, or on a cron expression.
//!
//! Periodic schedules run on a tokio interval rather than tokio-cron-scheduler: that scheduler
//! polls every 500 ms and keeps its ticks in whole Unix seconds (0.15, `src/scheduler.rs` and
//! `src/job/mod.rs`), which cannot drive a 250 ms or 1 s sweep. Cron expressions, whose finest
//! unit is a second, go through tokio-cron-scheduler.

use std::fmt;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Interval, MissedTickBehavior};
use tokio_cron_scheduler::{Job, JobScheduler, JobSchedulerError};
use uuid::Uuid;

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
    /// A zero period.
    #[error("the period must be greater than zero")]
    Zero,
    /// The cron scheduler failed.
    #[error("cron scheduler: {0}")]
    Scheduler(JobSchedulerError),
}

// Part of the message, so not also a `source()` (see `crate::Error`).
impl From<JobSchedulerError> for ScheduleError {
    fn from(e: JobSchedulerError) -> Self {
        Self::Scheduler(e)
    }
}

impl Schedule {
    /// Parses a human duration or a cron expression with seconds.
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let text = text.trim();
        if let Ok(period) = humantime::parse_duration(text) {
            return if period.is_zero() {
                Err(ScheduleError::Zero)
            } else {
                Ok(Self::Every(period))
            };
        }
        let fields = text.split_whitespace().count();
        if fields != 6 {
            return Err(ScheduleError::Unparsable(format!(
                "{fields} fields where a cron expression needs 6 (seconds first)"
            )));
        }
        cron_parser()
            .parse(text)
            .map_err(|e| ScheduleError::Unparsable(e.to_string()))?;
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

/// Owns the tokio-cron-scheduler instance shared by every cron sweep; created on first use.
#[derive(Default)]
pub(crate) struct CronClock {
    scheduler: Option<JobScheduler>,
}

impl CronClock {
    async fn scheduler(&mut self) -> Result<&JobScheduler, ScheduleError> {
        if self.scheduler.is_none() {
            let scheduler = JobScheduler::new().await?;
            scheduler.start().await?;
            self.scheduler = Some(scheduler);
        }
        Ok(self.scheduler.as_ref().expect("just created"))
    }

    /// Stops the scheduler, if one was started.
    pub(crate) async fn shutdown(&mut self) {
        if let Some(mut scheduler) = self.scheduler.take()
            && let Err(e) = scheduler.shutdown().await
        {
            tracing::warn!(error = %e, "cron scheduler did not shut down cleanly");
        }
    }

    /// Removes a job that a [`Ticker`] registered.
    pub(crate) async fn remove(&mut self, job: CronJob) {
        if let Some(scheduler) = &self.scheduler
            && let Err(e) = scheduler.remove(&job.0).await
        {
            tracing::warn!(error = %e, "could not remove a cron job");
        }
    }
}

/// A job of the cron scheduler, to remove it again. The scheduler's own id type stays here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CronJob(Uuid);

/// The stream of ticks of one sweep.
pub(crate) enum Ticker {
    /// A tokio interval; missed ticks are skipped, never bunched.
    Every(Interval),
    /// Ticks sent by a cron job.
    Cron {
        /// The job, to remove it again.
        job: CronJob,
        /// Where the job's ticks arrive.
        ticks: mpsc::Receiver<()>,
    },
}

impl Ticker {
    /// Starts ticking for `schedule`. The first tick of a periodic schedule comes one period from
    /// now: the daemon runs every sweep once at start on its own.
    pub(crate) async fn start(
        schedule: &Schedule,
        cron: &mut CronClock,
    ) -> Result<Self, ScheduleError> {
        match schedule {
            Schedule::Every(period) => {
                let mut interval =
                    tokio::time::interval_at(tokio::time::Instant::now() + *period, *period);
                interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
                Ok(Self::Every(interval))
            }
            Schedule::Cron(expr) => {
                // Capacity 1 and try_send: a tick that finds one already waiting is redundant.
                let (tx, ticks) = mpsc::channel(1);
                let job = Job::new_async(expr.as_str(), move |_, _| {
                    let tx = tx.clone();
                    Box::pin(async move {
                        let _ = tx.try_send(());
                    })
                })?;
                let job = cron.scheduler().await?.add(job).await?;
                Ok(Self::Cron {
                    job: CronJob(job),
                    ticks,
                })
            }
        }
    }

    /// Waits for the next tick. A cron ticker whose scheduler is gone never ticks again.
    pub(crate) async fn tick(&mut self) {
        match self {
            Self::Every(interval) => {
                interval.tick().await;
            }
            Self::Cron { ticks, .. } => {
                if ticks.recv().await.is_none() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// The cron job behind this ticker, if any.
    pub(crate) fn cron_job(&self) -> Option<CronJob> {
        match self {
            Self::Every(_) => None,
            Self::Cron { job, .. } => Some(*job),
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
        assert!(matches!(Schedule::parse("0s"), Err(ScheduleError::Zero)));
        let e = Schedule::parse("*/5 * * * *").unwrap_err().to_string();
        assert!(e.contains("5 fields"), "{e}");
        assert!(Schedule::parse("0 99 * * * *").is_err());
        assert!(Schedule::parse("soon").is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn periodic_ticker_skips_missed_ticks() {
        let mut cron = CronClock::default();
        let mut t = Ticker::start(&Schedule::Every(Duration::from_secs(1)), &mut cron)
            .await
            .unwrap();
        let start = tokio::time::Instant::now();
        t.tick().await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        // A pass that took 3.5 periods: the missed ticks are not delivered in a burst.
        tokio::time::advance(Duration::from_millis(3500)).await;
        t.tick().await;
        t.tick().await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
