//! What the loop does when the keyspace-notification subscription changes: it logs once per
//! change, keeps the gauges, and asks for the walks that find what went unnoticed.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::notifications::Io as SubIo;
use super::notifications::{CatchUp, Report, Say};
use super::{NOTICE_BATCH, Run};

impl Run {
    /// Takes the notices that have already arrived, up to a batch, without a turn of the loop
    /// for each: under a flood of writes the loop keeps up with the subscription, whose
    /// messages otherwise wait in memory.
    pub(super) fn notices_waiting(&mut self) {
        use futures_util::FutureExt as _;
        for _ in 0..NOTICE_BATCH {
            let SubIo::Active(sub) = self.notifications.io() else {
                return;
            };
            match sub.next().now_or_never() {
                Some(Some(n)) => self.notice(n),
                Some(None) => return self.subscription_lost("the connection closed"),
                None => return,
            }
        }
    }

    /// Applies what a change of the subscription asks.
    pub(super) fn apply(&mut self, report: Report) {
        match report.say {
            Some(Say::InUse) => {
                tracing::info!(node = %self.id, sweeps = self.jobs.len(), "keyspace notifications in use");
            }
            Some(Say::Warn(why)) => {
                tracing::warn!(node = %self.id, reason = %why, "keyspace notifications are not in use here: walks follow each sweep's schedule");
            }
            Some(Say::Info(why)) => {
                tracing::info!(node = %self.id, reason = %why, "keyspace notifications are off here: walks follow each sweep's schedule");
            }
            Some(Say::Debug(why)) => {
                tracing::debug!(node = %self.id, reason = %why, "keyspace notifications are still off here");
            }
            None => {}
        }
        if let Some(e) = report.failed {
            self.log_error(
                "could not subscribe to keyspace notifications; retrying",
                &e,
            );
        }
        match report.catch_up {
            Some(CatchUp::Now) => self.walks.want_sync(Instant::now()),
            Some(CatchUp::Soon) => self.walks.want_sync_soon(),
            None => {}
        }
        if report.unnoticed {
            for t in &mut self.jobs {
                t.index.set_unnoticed(true);
            }
        }
        if let Some(refused) = report.config_refused {
            self.config_refused.set(i64::from(refused));
        }
        if let Some(in_use) = report.in_use {
            self.subscribed_flag.store(in_use, Ordering::Relaxed);
            self.gauge.set(i64::from(in_use));
        }
    }

    pub(super) fn subscription_lost(&mut self, why: &str) {
        tracing::warn!(node = %self.id, reason = why, "lost the keyspace-notification subscription; subscribing again, then a walk finds what was missed");
        // Often the first sign of a restart.
        self.liveness.on_failure();
        let report = self.notifications.on_lost(Instant::now());
        self.apply(report);
    }
}
