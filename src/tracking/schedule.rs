//! Ticking on a sweep's schedule (`config::Schedule`).
//!
//! Periodic schedules run on a tokio interval rather than tokio-cron-scheduler: that scheduler
//! polls every 500 ms and keeps its ticks in whole Unix seconds (0.15, `src/scheduler.rs` and
//! `src/job/mod.rs`), which cannot drive a 250 ms or 1 s sweep. Cron expressions, whose finest
//! unit is a second, go through tokio-cron-scheduler.

use tokio::sync::mpsc;
use tokio::time::{Interval, MissedTickBehavior};
use tokio_cron_scheduler::{Job, JobScheduler, JobSchedulerError};
use uuid::Uuid;

use presence_sweeper_config::Schedule;
use presence_sweeper_rules::clock::after;

/// Why a sweep's ticker could not start: the cron scheduler failed.
#[derive(Debug, thiserror::Error)]
#[error("cron scheduler: {0}")]
pub struct TickerError(JobSchedulerError);

// Part of the message, so not also a `source()` (see `crate::Error`).
impl From<JobSchedulerError> for TickerError {
    fn from(e: JobSchedulerError) -> Self {
        Self(e)
    }
}

/// Owns the tokio-cron-scheduler instance shared by every cron sweep; created on first use.
#[derive(Default)]
pub(crate) struct CronClock {
    scheduler: Option<JobScheduler>,
}

impl CronClock {
    async fn scheduler(&mut self) -> Result<&JobScheduler, TickerError> {
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
    ) -> Result<Self, TickerError> {
        match schedule {
            Schedule::Every(period) => {
                let first = after(crate::time::now(), *period);
                let mut interval = tokio::time::interval_at(first.into(), *period);
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
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_instant_too_far_off_is_far_off_not_a_panic() {
        let mut cron = CronClock::default();
        let never = Duration::from_secs(9_999_999_999_999_999_999);
        let mut t = Ticker::start(&Schedule::Every(never), &mut cron)
            .await
            .unwrap();
        let ticked = tokio::time::timeout(Duration::from_secs(3600), t.tick()).await;
        assert!(ticked.is_err(), "no tick within an hour");
    }

    #[tokio::test(start_paused = true)]
    async fn periodic_ticker_skips_missed_ticks() {
        let mut cron = CronClock::default();
        let mut t = Ticker::start(&Schedule::Every(Duration::from_secs(1)), &mut cron)
            .await
            .unwrap();
        let start = crate::time::now();
        t.tick().await;
        assert_eq!(crate::time::now() - start, Duration::from_secs(1));
        // A pass that took 3.5 periods: the missed ticks are not delivered in a burst.
        tokio::time::advance(Duration::from_millis(3500)).await;
        t.tick().await;
        t.tick().await;
        assert_eq!(crate::time::now() - start, Duration::from_secs(5));
    }
}
