//! Redis's standing as one primary's loop sees it: Redis's clock and its steps (`timeline`), its
//! last reply, outages, resets of its data, refused writes and the credit they give, the probes
//! that make them show, pauses of the daemon itself, and the pace of proving the permissions
//! again after a refusal. No I/O: the loop
//! reports replies, probes, failures and its own turns with the local instant they came at, and
//! asks [`Standing::poll`] what to send.
//!
//! The evidence rule: a member is evicted only after a full ttl of real time during which Redis
//! answered, took writes and held the member's current data. Whatever breaks that (an outage; a
//! restart, seen as a new `run_id`; a flush, a restart from an older snapshot or a failover to
//! a lagging replica, seen as the canary's counter going back; a failover followed; writes
//! refused, seen as the canary's increment refused; a forward step of Redis's clock, seen
//! against the daemon's monotonic clock) gives every member Redis holds a full ttl from the
//! instant Redis was seen answering (or taking writes, or on its new time) again: the credit. After a failure, a
//! move or a pause of the daemon nothing is judged until a probe has shown whether Redis kept
//! its data. A pause of the daemon (its timers fired far later than asked) is not an outage:
//! Redis and the apps went on without it.

use std::time::Duration;

use std::time::Instant;

use super::canary::{Reading, WriteRefusal};
use crate::clock::RedisClock;

mod timeline;

pub use timeline::ClockStep;
use timeline::Timeline;

/// Redis answers within milliseconds when it is well. When it has not for this long (down,
/// paused, partitioned from the sweeper), the apps most likely could not write heartbeats
/// either: staleness is not judged further than this past the last reply, and when Redis
/// answers again the gap is an outage, whose members get a full ttl again from its end.
pub const STALL: Duration = Duration::from_millis(1500);
/// With nothing else to ask, the loop asks Redis for `TIME` this often, so that a gap in its
/// replies is an outage, not a quiet moment.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// However busy the loop is, a probe (and so the canary's write) goes out this often: a reset
/// of the data shows within about this long, and the canary's notifications keep this pace.
const CANARY_EVERY: Duration = Duration::from_secs(1);
/// Between probes while Redis does not answer: how soon its return is seen.
const PROBE_RETRY: Duration = Duration::from_millis(100);
/// A judging instant this far behind Redis's clock (seconds) is held back, not merely read a
/// moment ago.
const HELD_BACK_S: f64 = 0.25;
/// After Redis refused the daemon's user a command, how often the permissions are proven
/// again (a preflight, which changes nothing), so that a fixed ACL shows at once.
const REFUSED_RECHECK: Duration = Duration::from_secs(5);

/// The last event that could have kept apps from heartbeating, or rewound their heartbeats:
/// from the last reply before it to the first reply after it, on Redis's clock (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Credit {
    pub from: f64,
    pub to: f64,
}

impl Credit {
    /// Until when a sweep of window `ttl` (seconds) spares every member: a full ttl from when
    /// Redis was seen answering again.
    pub fn until(&self, ttl: f64) -> f64 {
        self.to + ttl
    }
}

/// An outage that a reply just ended: since when (Redis's clock) and how long, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outage {
    pub from: f64,
    pub seconds: f64,
}

/// Why Redis's data is not what the apps last wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// A new `run_id`: Redis restarted (loading RDB or AOF, or empty).
    Restarted,
    /// The canary's counter went back (`from` to `to`): a flush, a restart from an older
    /// snapshot, a failover to a lagging replica.
    Rewound { from: u64, to: u64 },
    /// The loop followed a failover to another server.
    Moved,
}

/// What a reply or a probe showed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    pub outage: Option<Outage>,
    pub reset: Option<Reset>,
    /// Redis's clock stepped (a forward step comes with a credit).
    pub step: Option<ClockStep>,
    /// Redis began refusing writes, or took them again.
    pub writes: Option<Writes>,
    /// The ACL refused the canary, for the first time: say so once.
    pub canary_refused: bool,
}

/// A change in whether Redis takes writes, as the canary's increment shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Writes {
    /// Refused from now on: nobody is judged while they are.
    Refused(WriteRefusal),
    /// Taken again after `seconds` (Redis's clock) of refusals: every member gets a credit.
    Taken { seconds: f64 },
}

/// What a probe brought back (see `ops::Probed`).
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub time: f64,
    pub canary: Reading,
    pub run_id: Option<String>,
}

/// How a check at one instant may judge staleness: the one query the loop asks before it
/// sends a check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// The instant staleness is judged at (Redis's clock, Unix seconds).
    pub judge_at: f64,
    /// Whether that instant is held back behind Redis's clock (Redis is not answering).
    pub held_back: bool,
    /// Every member is spared until then (Redis's clock): an outage's or a reset's credit.
    pub spare_until: Option<f64>,
}

/// What to send Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `TIME`, the canary and the `run_id`.
    Probe,
    /// A preflight of every sweep: may the Redis user now do what the checks do?
    ProvePermissions,
}

/// The permission proofs after a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    At(Instant),
    InFlight,
}

/// What the probes read of Redis's data: the canary's counter and Redis's `run_id`. A reading
/// that contradicts the last one says the data was reset or rewound.
#[derive(Debug, Default)]
struct Witness {
    counter: Option<u64>,
    run_id: Option<String>,
    canary_refused: bool,
    /// Since when (Redis's clock: the last write it took) writes are refused, while they are.
    writes_refused: Option<f64>,
    /// When the canary's last increment was taken (Redis's clock).
    wrote_at: Option<f64>,
}

impl Witness {
    /// Takes in `ev`; a reset if it contradicts what was read before (a rewound counter
    /// outweighs a restart: it also says the data went back).
    fn read(&mut self, ev: &Evidence) -> Option<Reset> {
        let mut reset = None;
        if let Some(id) = &ev.run_id {
            if self.run_id.as_ref().is_some_and(|old| old != id) {
                reset = Some(Reset::Restarted);
            }
            self.run_id = Some(id.clone());
        }
        if let Reading::Count(n) = ev.canary {
            // The increment makes the reply at least one more than the last one seen, however
            // many sweepers share the member; anything else went back.
            if let Some(last) = self.counter
                && n <= last
            {
                reset = Some(Reset::Rewound { from: last, to: n });
            }
            self.counter = Some(n);
        }
        reset
    }

    /// Whether the canary's increment shows writes refused from now on, or taken again (with
    /// since when they were refused: the credit's start).
    fn writes(&mut self, ev: &Evidence) -> Option<(Writes, f64)> {
        match ev.canary {
            Reading::WritesRefused(refusal) if self.writes_refused.is_none() => {
                let since = self.wrote_at.unwrap_or(ev.time);
                self.writes_refused = Some(since);
                Some((Writes::Refused(refusal), since))
            }
            Reading::Count(_) => {
                self.wrote_at = Some(ev.time);
                let since = self.writes_refused.take()?;
                Some((
                    Writes::Taken {
                        seconds: ev.time - since,
                    },
                    since,
                ))
            }
            _ => None,
        }
    }

    /// Whether the canary was refused for the first time (said once).
    fn newly_refused(&mut self, canary: Reading) -> bool {
        let first = canary == Reading::Refused && !self.canary_refused;
        self.canary_refused |= first;
        first
    }
}

#[derive(Debug)]
pub struct Standing {
    timeline: Timeline,
    /// When Redis last answered (the local instant, moved on by pauses of the daemon, and its
    /// clock then).
    last_reply: Option<(Instant, f64)>,
    /// Since when the primaries this loop replaces did not answer (a failover), until its
    /// first answer.
    inherited_outage: Option<f64>,
    /// The last outage or reset: every member is spared until a ttl after its end.
    credit: Option<Credit>,
    /// Nothing is judged until a probe shows whether Redis kept its data: set by a failure, a
    /// move, a pause of the daemon.
    doubt: bool,
    /// A failover was followed: the next probe ends it with a credit.
    moved: bool,
    /// What the probes read of Redis's data.
    witness: Witness,
    probing: bool,
    /// When the last probe went out (moved on by pauses, for the probes' pace).
    probed_at: Option<Instant>,
    /// When the probe in flight went out, and the doubts raised until then.
    probe_sent: Option<(Instant, u64)>,
    /// Failures, moves and pauses so far: a probe clears doubt only if none came after it
    /// went out.
    doubts: u64,
    /// No probe before then: one that failed at once (the connection refused) is not sent
    /// again on the next turn of the loop, which would spin.
    probe_after: Instant,
    /// Redis refused a command the daemon needs here (an ACL).
    refused: Option<Proof>,
}
impl Standing {
    pub fn new(at: Instant, inherited_outage: Option<f64>) -> Self {
        Self {
            timeline: Timeline::default(),
            last_reply: None,
            inherited_outage,
            credit: None,
            doubt: false,
            moved: false,
            witness: Witness::default(),
            probing: false,
            probed_at: None,
            probe_sent: None,
            doubts: 0,
            probe_after: at,
            refused: None,
        }
    }

    /// Redis's clock as estimated from its readings, once read.
    pub fn clock(&self) -> Option<RedisClock> {
        self.timeline.clock()
    }

    /// When a reply last carried Redis's clock.
    pub fn last_read(&self) -> Option<Instant> {
        self.timeline.last_read()
    }

    /// When Redis last answered (the local instant), and its clock then.
    pub fn last_reply(&self) -> Option<(Instant, f64)> {
        self.last_reply
    }

    pub fn credit(&self) -> Option<Credit> {
        self.credit
    }

    /// A reply handled at `at` carried Redis's clock (`redis`, Unix seconds); its request went
    /// out at `sent`, if known. Returns the step of Redis's clock it shows, if any: a forward
    /// step gives every member a full ttl of real time from it (their scores all look older at
    /// once), a backward one only delays zombies.
    pub fn observe_time(
        &mut self,
        sent: Option<Instant>,
        at: Instant,
        redis: f64,
    ) -> Option<ClockStep> {
        let (step, expected) = self.timeline.observe(sent, at, redis)?;
        if let ClockStep::Forward(_) = step {
            self.grant(expected, redis);
        }
        Some(step)
    }

    /// Redis answered at `at` (with its clock, when the reply says) a request sent at `sent`,
    /// if known. Returns the outage this answer ends (a gap since the last answer longer than
    /// [`STALL`], or the failover this loop inherited) and the step of Redis's clock it shows.
    pub fn on_reply(&mut self, sent: Option<Instant>, at: Instant, time: Option<f64>) -> Seen {
        let step = time.and_then(|time| self.observe_time(sent, at, time));
        let Some(redis_now) = time.or_else(|| self.clock().map(|c| c.at(at))) else {
            return Seen::default();
        };
        let arrived = arrival(sent, at, redis_now);
        let gap = match (self.last_reply, self.inherited_outage.take()) {
            (Some((last, redis_at)), _) if at.saturating_duration_since(last) > STALL => {
                Some((redis_at, at.duration_since(last).as_secs_f64()))
            }
            (None, Some(from)) => Some((from, redis_now - from)),
            _ => None,
        };
        // A reply that read Redis's clock long before it arrived (an eviction answered late)
        // does not move the last answer's clock back.
        let redis_now = self
            .last_reply
            .map_or(redis_now, |(_, before)| before.max(redis_now));
        self.last_reply = Some((at, redis_now));
        let outage = gap.map(|(from, seconds)| {
            self.grant(from, arrived);
            Outage { from, seconds }
        });
        Seen {
            outage,
            step,
            ..Seen::default()
        }
    }

    /// Every member gets a full ttl from `to` (Redis's clock). A second event within the credit
    /// of the first makes one window.
    fn grant(&mut self, from: f64, to: f64) {
        self.credit = Some(match self.credit {
            Some(c) if c.to + STALL.as_secs_f64() * 4.0 >= from => Credit {
                from: c.from.min(from),
                to: to.max(c.to),
            },
            _ => Credit { from, to },
        });
    }

    /// The probe sent at [`Request::Probe`] came back at `at`: an answer with its evidence, or
    /// a failure.
    pub fn on_probe(&mut self, at: Instant, probe: Result<Evidence, ()>) -> Seen {
        self.probing = false;
        let (sent, doubts) = self.probe_sent.take().unwrap_or((at, self.doubts));
        let Ok(ev) = probe else {
            self.probe_after = at + PROBE_RETRY;
            return Seen::default();
        };
        // A probe sent before the last failure, move or pause proves nothing of what followed:
        // the next one is asked at once.
        let current = doubts == self.doubts;
        let before = self.last_reply.map(|(_, redis)| redis);
        let reset = self.reset(&ev, current);
        let canary_refused = self.witness.newly_refused(ev.canary);
        let writes = self.witness.writes(&ev);
        let seen = Seen {
            reset,
            canary_refused,
            writes: writes.map(|(w, _)| w),
            ..self.on_reply(Some(sent), at, Some(ev.time))
        };
        let arrived = arrival(Some(sent), at, ev.time);
        if seen.reset.is_some() {
            self.grant(before.unwrap_or(ev.time), arrived);
        }
        if let Some((Writes::Taken { .. }, since)) = writes {
            self.grant(since, arrived);
        }
        if current {
            self.doubt = false;
        }
        seen
    }

    /// What the probe's evidence says of Redis's data since the last probe; a followed failover
    /// counts once a probe sent after it answers (`current`).
    fn reset(&mut self, ev: &Evidence, current: bool) -> Option<Reset> {
        let moved = (current && std::mem::take(&mut self.moved)).then_some(Reset::Moved);
        self.witness.read(ev).or(moved)
    }

    /// Something that puts Redis's standing in doubt: nothing is judged until a probe sent after it
    /// answers.
    fn doubt(&mut self) {
        self.doubt = true;
        self.doubts += 1;
    }

    /// A request failed: Redis may have restarted, so nothing is judged until a probe shows
    /// whether it kept its data; the probe goes out at once.
    pub fn on_failure(&mut self) {
        self.doubt();
    }

    /// The loop followed a failover to another server at `at`: its data may lag, and the apps
    /// could not write meanwhile. The next probe ends it with a credit.
    pub fn on_moved(&mut self, at: Instant) {
        self.doubt();
        self.moved = true;
        // Another server's clock: a difference is no step.
        self.timeline.rebase(at);
    }

    /// The daemon itself did not run for `pause`, until `now` (a SIGSTOP, a frozen VM, a
    /// throttled container, a starved runtime): that time does not count as Redis's silence
    /// (no outage, no credit), and a probe is asked before judging, since Redis may have
    /// restarted meanwhile.
    pub fn on_pause(&mut self, now: Instant, pause: Duration) {
        if let Some((at, _)) = &mut self.last_reply {
            *at = at.checked_add(pause).map_or(now, |t| t.min(now));
        }
        if let Some(at) = &mut self.probed_at {
            *at = at.checked_add(pause).map_or(now, |t| t.min(now));
        }
        self.doubt();
    }

    /// Redis refused a command the checks need: prove the permissions again in a while.
    pub fn on_refusal(&mut self, at: Instant) {
        if self.refused.is_none() {
            self.refused = Some(Proof::At(at + REFUSED_RECHECK));
        }
    }

    /// The proof sent at [`Request::ProvePermissions`] came back.
    pub fn on_proof(&mut self, at: Instant, permitted: bool) {
        self.refused = (!permitted).then_some(Proof::At(at + REFUSED_RECHECK));
    }

    /// When the next probe is due, if none is in flight: at once in doubt, otherwise when
    /// nothing was answered for [`PROBE_EVERY`] or nothing was probed for [`CANARY_EVERY`].
    fn probe_due(&self) -> Option<Instant> {
        if self.probing {
            return None;
        }
        let due = match (self.last_reply, self.probed_at) {
            _ if self.doubt => self.probe_after,
            // Never answered yet (a start, a loop after a failover): ask at the retry pace.
            (None, _) | (_, None) => self.probe_after,
            (Some((replied, _)), Some(probed)) => {
                (replied + PROBE_EVERY).min(probed + CANARY_EVERY)
            }
        };
        Some(due.max(self.probe_after))
    }

    /// What to send now, if anything; call until `None`. Probes go out even with no sweep here
    /// (a standby knows the outage when it wins the lease back).
    pub fn poll(&mut self, at: Instant) -> Option<Request> {
        if self.probe_due().is_some_and(|due| due <= at) {
            self.probing = true;
            self.probed_at = Some(at);
            self.probe_sent = Some((at, self.doubts));
            return Some(Request::Probe);
        }
        if let Some(Proof::At(due)) = self.refused
            && due <= at
        {
            self.refused = Some(Proof::InFlight);
            return Some(Request::ProvePermissions);
        }
        None
    }

    /// When [`Standing::poll`] will have something to send, if no reply comes meanwhile.
    pub fn next_wake(&self) -> Option<Instant> {
        let proof = match self.refused {
            Some(Proof::At(due)) => Some(due),
            _ => None,
        };
        self.probe_due().into_iter().chain(proof).min()
    }

    /// Whether checks may judge staleness now: Redis answered, and no failure, move or pause
    /// awaits a probe's verdict.
    pub fn judging(&self) -> bool {
        !self.doubt
            && self.witness.writes_refused.is_none()
            && self.clock().is_some()
            && self.last_reply.is_some()
    }

    /// How a check at `at` of a sweep of window `ttl` (seconds) may judge: `None` while not
    /// [`judging`](Self::judging), and then nothing may be evicted.
    pub fn verdict(&self, at: Instant, ttl: f64) -> Option<Verdict> {
        let judge_at = self.judge_at(at)?;
        Some(Verdict {
            judge_at,
            held_back: self.held_back(at, judge_at),
            spare_until: self.spare_until(at, ttl),
        })
    }

    /// The instant a check of a sweep of window `ttl` judges staleness at: Redis's "now", but
    /// never further than [`STALL`] past its last answer (the apps may not have been able to
    /// write either). `None` while not [`judging`](Self::judging).
    pub fn judge_at(&self, at: Instant) -> Option<f64> {
        if !self.judging() {
            return None;
        }
        let now = self.clock()?.at(at);
        let (_, last) = self.last_reply?;
        Some(now.min(last + STALL.as_secs_f64()))
    }

    /// Until when (Redis's clock) a check at `at` of a sweep of window `ttl` spares every
    /// member: the credit's end, while it runs.
    pub fn spare_until(&self, at: Instant, ttl: f64) -> Option<f64> {
        let now = self.clock()?.at(at);
        self.credit.map(|c| c.until(ttl)).filter(|&u| u > now)
    }

    /// Whether staleness judged at `judge` is held back behind Redis's clock (see
    /// [`crate::check::Purpose::held_back`]): only while Redis is not answering. A credit
    /// does not hold the judging instant back, so the storm guard stays armed through it.
    pub fn held_back(&self, at: Instant, judge: f64) -> bool {
        self.clock().is_some_and(|c| c.at(at) - judge > HELD_BACK_S)
    }
}

/// Redis's clock, at most, when a reply that read it as `time` arrived at `at`, its request
/// having gone out at `sent`. A credit counts from there: `TIME` runs first in a probe, and the
/// canary's write after it may wait (`CLIENT PAUSE ... WRITE` holds the connection's every
/// later command), so Redis took writes again when the reply came, not when its clock was read.
fn arrival(sent: Option<Instant>, at: Instant, time: f64) -> f64 {
    sent.map_or(time, |sent| {
        time + at.saturating_duration_since(sent).as_secs_f64()
    })
}

#[cfg(test)]
mod tests;
