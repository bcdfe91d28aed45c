//! The loop's side of Redis's liveness: sending the probes and proofs it asks for, and telling
//! it of replies, probes' evidence and the loop's own late turns, then saying (in the log and
//! the outage counter) what it concluded. The rules are `liveness`'s.

use tokio::time::Instant;

use super::liveness::{self, Action};
use super::{Run, ops};

impl Run {
    /// Sends what liveness asks for: probes when Redis was quiet, permission proofs after a
    /// refusal.
    pub(super) fn poll_liveness(&mut self, now: Instant) {
        while let Some(action) = self.liveness.poll(now) {
            let future = match action {
                Action::Probe => self.io.probe(self.canary_key.clone()),
                Action::ProvePermissions => self
                    .io
                    .prove_permissions(self.jobs.iter().map(|t| t.job.sweep.clone()).collect()),
            };
            self.in_flight.push(future);
        }
    }

    /// After an event: a turn far later than the loop's timer asked for means the daemon
    /// itself was paused, which is neither an outage nor a reason for a credit.
    pub(super) fn paused(&mut self) {
        let Some(planned) = self.planned_wake.take() else {
            return;
        };
        if let Some(pause) = self.liveness.on_turn(planned, Instant::now()) {
            tracing::warn!(
                node = %self.id,
                seconds = format_args!("{:.1}", pause.as_secs_f64()),
                "the daemon itself did not run for a while (paused or starved): not a Redis outage; checking Redis before judging"
            );
        }
    }

    /// Redis answered (at `time` on its clock, when the reply says).
    pub(super) fn replied(&mut self, time: Option<f64>) {
        let now = Instant::now();
        let outage = self.liveness.on_reply(now, time);
        self.outage_ended(outage);
    }

    /// A probe answered: what it shows of Redis's data, and of an outage it ends.
    pub(super) fn probed(&mut self, now: Instant, probed: ops::Probed) {
        self.canary_key = probed.key;
        let seen = self.liveness.on_probe(
            now,
            Ok(liveness::Evidence {
                time: probed.time,
                canary: probed.canary,
                run_id: probed.run_id,
            }),
        );
        if seen.canary_refused {
            tracing::warn!(node = %self.id, "the Redis user may not ZINCRBY the canary (presence-sweeper:canary:*): a flush or a rewind of Redis's data is seen only when Redis restarts (its run_id)");
        }
        if let Some(reset) = seen.reset {
            tracing::warn!(node = %self.id, reason = ?reset, "Redis's data was reset or rewound: every member it holds gets a full ttl from now");
        }
        self.outage_ended(seen.outage);
    }

    pub(super) fn outage_ended(&mut self, outage: Option<liveness::Outage>) {
        if let Some(outage) = outage {
            self.outages.inc();
            tracing::warn!(
                node = %self.id,
                seconds = format_args!("{:.1}", outage.seconds),
                "Redis did not answer for a while: every member it holds gets a full ttl from now"
            );
        }
        if let Some((at, redis)) = self.liveness.last_reply() {
            self.last_answer.set(at, redis);
        }
    }
}
