//! Redis's liveness as one primary's loop sees it: Redis's clock, its last reply, outages, resets
//! of its data and the credit they give, the probes that make both show, pauses of the daemon
//! itself, and the pace of proving the permissions again after a refusal. No I/O: the loop
//! reports replies, probes, failures and its own turns with the local instant they came at, and
//! asks [`Liveness::poll`] what to send.
//!
//! The evidence rule: a member is evicted only after a full ttl during which Redis answered and
//! held the member's current data. Whatever breaks that (an outage; a restart, seen as a new
//! `run_id`; a flush, a restart from an older snapshot or a failover to a lagging replica, seen
//! as the canary's counter going back; a failover followed) gives every member Redis holds a
//! full ttl from the instant Redis was seen answering again: the credit. After a failure, a
//! move or a pause of the daemon nothing is judged until a probe has shown whether Redis kept
//! its data. A pause of the daemon (its timers fired far later than asked) is not an outage:
//! Redis and the apps went on without it.

use std::time::Duration;

use tokio::time::Instant;

use super::canary::Reading;
use crate::store::clock::RedisClock;

/// Redis answers within milliseconds when it is well. When it has not for this long (down,
/// paused, partitioned from the sweeper), the apps most likely could not write heartbeats
/// either: staleness is not judged further than this past the last reply, and when Redis
/// answers again the gap is an outage, whose members get a full ttl again from its end.
pub(crate) const STALL: Duration = Duration::from_millis(1500);
/// With nothing else to ask, the loop asks Redis for `TIME` this often, so that a gap in its
/// replies is an outage, not a quiet moment.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// However busy the loop is, a probe (and so the canary's write) goes out this often: a reset
/// of the data shows within about this long, and the canary's notifications keep this pace.
const CANARY_EVERY: Duration = Duration::from_secs(1);
/// Between probes while Redis does not answer: how soon its return is seen.
const PROBE_RETRY: Duration = Duration::from_millis(100);
/// A turn of the loop this much later than its timer asked: the daemon itself was paused (a
/// SIGSTOP, a frozen VM, a throttled container), not Redis. Well under [`STALL`], so that a
/// pause is known for one before its gap could read as an outage.
pub(crate) const PAUSED_AFTER: Duration = Duration::from_millis(500);
/// A judging instant this far behind Redis's clock (seconds) is held back, not merely read a
/// moment ago.
const HELD_BACK_S: f64 = 0.25;
/// After Redis refused the daemon's user a command, how often the permissions are proven
/// again (a preflight, which changes nothing), so that a fixed ACL shows at once.
const REFUSED_RECHECK: Duration = Duration::from_secs(5);

/// The last event that could have kept apps from heartbeating, or rewound their heartbeats:
/// from the last reply before it to the first reply after it, on Redis's clock (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Credit {
    pub(crate) from: f64,
    pub(crate) to: f64,
}

impl Credit {
    /// Until when a sweep of window `ttl` (seconds) spares every member: a full ttl from when
    /// Redis was seen answering again.
    pub(crate) fn until(&self, ttl: f64) -> f64 {
        self.to + ttl
    }
}

/// An outage that a reply just ended: since when (Redis's clock) and how long, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Outage {
    pub(crate) from: f64,
    pub(crate) seconds: f64,
}

/// Why Redis's data is not what the apps last wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reset {
    /// A new `run_id`: Redis restarted (loading RDB or AOF, or empty).
    Restarted,
    /// The canary's counter went back (`from` to `to`): a flush, a restart from an older
    /// snapshot, a failover to a lagging replica.
    Rewound { from: u64, to: u64 },
    /// The loop followed a failover to another server.
    Moved,
}

/// What a probe showed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Seen {
    pub(crate) outage: Option<Outage>,
    pub(crate) reset: Option<Reset>,
    /// The ACL refused the canary, for the first time: say so once.
    pub(crate) canary_refused: bool,
}

/// What a probe brought back (see `ops::Probed`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Evidence {
    pub(crate) time: f64,
    pub(crate) canary: Reading,
    pub(crate) run_id: Option<String>,
}

/// What to send Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
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

#[derive(Debug)]
pub(crate) struct Liveness {
    clock: Option<RedisClock>,
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
    /// The canary's counter as last read, and Redis's `run_id`.
    counter: Option<u64>,
    run_id: Option<String>,
    canary_refused: bool,
    probing: bool,
    /// When the last probe went out.
    probed_at: Option<Instant>,
    /// No probe before then: one that failed at once (the connection refused) is not sent
    /// again on the next turn of the loop, which would spin.
    probe_after: Instant,
    /// Redis refused a command the daemon needs here (an ACL).
    refused: Option<Proof>,
}
impl Liveness {
    pub(crate) fn new(at: Instant, inherited_outage: Option<f64>) -> Self {
        Self {
            clock: None,
            last_reply: None,
            inherited_outage,
            credit: None,
            doubt: false,
            moved: false,
            counter: None,
            run_id: None,
            canary_refused: false,
            probing: false,
            probed_at: None,
            probe_after: at,
            refused: None,
        }
    }

    /// Redis's clock as last read, if it was.
    pub(crate) fn clock(&self) -> Option<RedisClock> {
        self.clock
    }

    /// When Redis last answered (the local instant), and its clock then.
    pub(crate) fn last_reply(&self) -> Option<(Instant, f64)> {
        self.last_reply
    }

    pub(crate) fn credit(&self) -> Option<Credit> {
        self.credit
    }

    /// A reply carried Redis's clock (`redis`, Unix seconds), read at `at`.
    pub(crate) fn observe_time(&mut self, at: Instant, redis: f64) {
        self.clock = Some(RedisClock { redis, at });
    }

    /// Redis answered at `at` (with its clock, when the reply says). Returns the outage this
    /// answer ends: a gap since the last answer longer than [`STALL`], or the failover this
    /// loop inherited.
    pub(crate) fn on_reply(&mut self, at: Instant, time: Option<f64>) -> Option<Outage> {
        if let Some(time) = time {
            self.observe_time(at, time);
        }
        let redis_now = time.or_else(|| self.clock.map(|c| c.at(at)))?;
        let gap = match (self.last_reply, self.inherited_outage.take()) {
            (Some((last, redis_at)), _) if at.saturating_duration_since(last) > STALL => {
                Some((redis_at, at.duration_since(last).as_secs_f64()))
            }
            (None, Some(from)) => Some((from, redis_now - from)),
            _ => None,
        };
        self.last_reply = Some((at, redis_now));
        let (from, seconds) = gap?;
        self.grant(from, redis_now);
        Some(Outage { from, seconds })
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

    /// The probe sent at [`Action::Probe`] came back at `at`: an answer with its evidence, or
    /// a failure.
    pub(crate) fn on_probe(&mut self, at: Instant, probe: Result<Evidence, ()>) -> Seen {
        self.probing = false;
        let Ok(ev) = probe else {
            self.probe_after = at + PROBE_RETRY;
            return Seen::default();
        };
        let before = self.last_reply.map(|(_, redis)| redis);
        let mut seen = Seen {
            reset: self.reset(&ev),
            ..Seen::default()
        };
        if ev.canary == Reading::Refused && !self.canary_refused {
            self.canary_refused = true;
            seen.canary_refused = true;
        }
        seen.outage = self.on_reply(at, Some(ev.time));
        if seen.reset.is_some() {
            self.grant(before.unwrap_or(ev.time), ev.time);
        }
        self.doubt = false;
        seen
    }

    /// What the probe's evidence says of Redis's data since the last probe.
    fn reset(&mut self, ev: &Evidence) -> Option<Reset> {
        let mut reset = std::mem::take(&mut self.moved).then_some(Reset::Moved);
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

    /// A request failed: Redis may have restarted, so nothing is judged until a probe shows
    /// whether it kept its data; the probe goes out at once.
    pub(crate) fn on_failure(&mut self) {
        self.doubt = true;
    }

    /// The loop followed a failover to another server: its data may lag, and the apps could not
    /// write meanwhile. The next probe ends it with a credit.
    pub(crate) fn on_moved(&mut self) {
        self.doubt = true;
        self.moved = true;
    }

    /// The loop turned at `now`, its timer having asked for `planned`. Much later (more than
    /// [`PAUSED_AFTER`]) means the daemon itself did not run meanwhile: that time does not count
    /// as Redis's silence (no outage, no credit), and a probe is asked before judging, since
    /// Redis may have restarted meanwhile. Returns how long the pause was.
    pub(crate) fn on_turn(&mut self, planned: Instant, now: Instant) -> Option<Duration> {
        let late = now.checked_duration_since(planned)?;
        if late <= PAUSED_AFTER {
            return None;
        }
        if let Some((at, _)) = &mut self.last_reply {
            *at = (*at + late).min(now);
        }
        if let Some(at) = &mut self.probed_at {
            *at = (*at + late).min(now);
        }
        self.doubt = true;
        Some(late)
    }

    /// Redis refused a command the checks need: prove the permissions again in a while.
    pub(crate) fn on_refusal(&mut self, at: Instant) {
        if self.refused.is_none() {
            self.refused = Some(Proof::At(at + REFUSED_RECHECK));
        }
    }

    /// The proof sent at [`Action::ProvePermissions`] came back.
    pub(crate) fn on_proof(&mut self, at: Instant, permitted: bool) {
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
    pub(crate) fn poll(&mut self, at: Instant) -> Option<Action> {
        if self.probe_due().is_some_and(|due| due <= at) {
            self.probing = true;
            self.probed_at = Some(at);
            return Some(Action::Probe);
        }
        if let Some(Proof::At(due)) = self.refused
            && due <= at
        {
            self.refused = Some(Proof::InFlight);
            return Some(Action::ProvePermissions);
        }
        None
    }

    /// When [`Liveness::poll`] will have something to send, if no reply comes meanwhile.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        let proof = match self.refused {
            Some(Proof::At(due)) => Some(due),
            _ => None,
        };
        self.probe_due().into_iter().chain(proof).min()
    }

    /// Whether checks may judge staleness now: Redis answered, and no failure, move or pause
    /// awaits a probe's verdict.
    pub(crate) fn judging(&self) -> bool {
        !self.doubt && self.clock.is_some() && self.last_reply.is_some()
    }

    /// The instant a check of a sweep of window `ttl` judges staleness at: Redis's "now", but
    /// never further than [`STALL`] past its last answer (the apps may not have been able to
    /// write either). `None` while not [`judging`](Self::judging).
    pub(crate) fn judge_at(&self, at: Instant) -> Option<f64> {
        if !self.judging() {
            return None;
        }
        let now = self.clock?.at(at);
        let (_, last) = self.last_reply?;
        Some(now.min(last + STALL.as_secs_f64()))
    }

    /// Until when (Redis's clock) a check at `at` of a sweep of window `ttl` spares every
    /// member: the credit's end, while it runs.
    pub(crate) fn spare_until(&self, at: Instant, ttl: f64) -> Option<f64> {
        let now = self.clock?.at(at);
        self.credit.map(|c| c.until(ttl)).filter(|&u| u > now)
    }

    /// Whether staleness judged at `judge` is held back behind Redis's clock (see
    /// [`crate::sweep::Purpose::held_back`]): only while Redis is not answering. A credit
    /// does not hold the judging instant back, so the storm guard stays armed through it.
    pub(crate) fn held_back(&self, at: Instant, judge: f64) -> bool {
        self.clock.is_some_and(|c| c.at(at) - judge > HELD_BACK_S)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A probe's answer at Redis time `time`, with the canary at `count` and `run_id`.
    fn probe(time: f64, count: Option<u64>, run_id: &str) -> Result<Evidence, ()> {
        Ok(Evidence {
            time,
            canary: count.map_or(Reading::Unknown, Reading::Count),
            run_id: (!run_id.is_empty()).then(|| run_id.to_owned()),
        })
    }

    /// A loop that has had one reply, at Redis time 1000 s.
    fn answered(t0: Instant) -> Liveness {
        let mut l = Liveness::new(t0, None);
        assert_eq!(l.poll(t0), Some(Action::Probe));
        assert_eq!(l.on_probe(t0, probe(1000.0, Some(7), "a")), Seen::default());
        l
    }

    #[test]
    fn the_first_reply_is_no_outage() {
        let t0 = Instant::now();
        let l = answered(t0);
        assert_eq!(l.credit(), None);
        assert_eq!(l.judge_at(t0), Some(1000.0));
    }

    #[test]
    fn an_outage_is_declared_only_after_stall_without_replies() {
        let t0 = Instant::now();
        let mut l = answered(t0);
        assert_eq!(
            l.on_reply(t0 + STALL, Some(1001.5)),
            None,
            "a gap of exactly STALL"
        );
        let back = t0 + STALL + STALL + ms(1);
        let outage = l.on_reply(back, Some(1003.001)).expect("an outage");
        assert_eq!(outage.from, 1001.5);
        assert!((outage.seconds - 1.501).abs() < 1e-9);
    }

    #[test]
    fn credit_is_granted_when_redis_returns_and_lasts_a_ttl() {
        let t0 = Instant::now();
        let mut l = answered(t0);
        let back = t0 + Duration::from_secs(10);
        l.on_reply(back, Some(1010.0)).expect("an outage");
        assert_eq!(
            l.credit(),
            Some(Credit {
                from: 1000.0,
                to: 1010.0
            })
        );
        // Within the credit every member is spared until a ttl after Redis answered again,
        // whenever its window closed; staleness is judged at Redis's now.
        let within = back + Duration::from_secs(5);
        assert_eq!(l.spare_until(within, 45.0), Some(1055.0));
        assert_eq!(l.judge_at(back), Some(1010.0));
        // After a ttl from its end, no more sparing.
        for s in 1..=46 {
            assert_eq!(l.on_reply(back + Duration::from_secs(s), None), None);
        }
        let later = back + Duration::from_secs(46);
        assert_eq!(l.spare_until(later, 45.0), None);
        assert!((l.judge_at(later).unwrap() - 1056.0).abs() < 1e-6);
    }

    #[test]
    fn two_close_outages_make_one_credit() {
        let t0 = Instant::now();
        let mut l = answered(t0);
        l.on_reply(t0 + Duration::from_secs(3), Some(1003.0));
        l.on_reply(t0 + Duration::from_secs(8), Some(1008.0));
        assert_eq!(
            l.credit(),
            Some(Credit {
                from: 1000.0,
                to: 1008.0
            })
        );
    }

    #[test]
    fn staleness_is_not_judged_past_stall_after_the_last_reply() {
        let t0 = Instant::now();
        let l = answered(t0);
        let judge = l.judge_at(t0 + Duration::from_secs(10)).unwrap();
        assert_eq!(judge, 1000.0 + STALL.as_secs_f64());
        assert!(l.held_back(t0 + Duration::from_secs(10), judge));
        assert!(!l.held_back(t0 + ms(100), 1000.0));
    }

    #[test]
    fn an_inherited_outage_ends_with_the_first_reply() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0, Some(990.0));
        let outage = l.on_reply(t0, Some(1000.0)).expect("the failover's outage");
        assert_eq!(
            outage,
            Outage {
                from: 990.0,
                seconds: 10.0
            }
        );
        assert_eq!(l.on_reply(t0 + ms(10), Some(1000.01)), None, "ended once");
    }

    #[test]
    fn no_judging_before_redis_answered() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0, None);
        assert_eq!(l.judge_at(t0), None);
        assert_eq!(l.on_reply(t0, None), None, "no clock: nothing to record");
        l.observe_time(t0, 1000.0);
        assert_eq!(l.judge_at(t0), None, "a clock, but no reply yet");
    }

    #[test]
    fn probes_go_out_when_redis_is_quiet_one_at_a_time() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0, None);
        assert_eq!(
            l.poll(t0),
            Some(Action::Probe),
            "never answered: ask at once"
        );
        assert_eq!(l.poll(t0), None, "one probe in flight");
        assert_eq!(
            l.on_probe(t0 + ms(1), probe(1000.0, None, "")),
            Seen::default()
        );
        assert_eq!(l.poll(t0 + ms(100)), None, "answered lately");
        assert_eq!(l.next_wake(), Some(t0 + ms(1) + PROBE_EVERY));
        assert_eq!(l.poll(t0 + ms(1) + PROBE_EVERY), Some(Action::Probe));
    }

    #[test]
    fn other_replies_put_the_probe_off() {
        let t0 = Instant::now();
        let mut l = answered(t0);
        l.on_reply(t0 + ms(400), Some(1000.4));
        assert_eq!(l.poll(t0 + PROBE_EVERY), None);
        assert_eq!(l.next_wake(), Some(t0 + ms(400) + PROBE_EVERY));
    }

    #[test]
    fn a_refused_probe_is_retried_at_the_retry_pace_not_at_once() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0, None);
        assert_eq!(l.poll(t0), Some(Action::Probe));
        assert_eq!(l.on_probe(t0, Err(())), Seen::default());
        assert_eq!(l.poll(t0), None, "no spin on a refused connection");
        assert_eq!(l.next_wake(), Some(t0 + PROBE_RETRY));
        assert_eq!(l.poll(t0 + PROBE_RETRY), Some(Action::Probe));
    }

    #[test]
    fn a_stalled_redis_is_probed_at_the_retry_pace() {
        let t0 = Instant::now();
        let mut l = answered(t0);
        let mut at = t0 + PROBE_EVERY;
        // Past STALL since the last reply: 500 ms, then 12 refused probes 100 ms apart.
        for _ in 0..12 {
            assert_eq!(l.poll(at), Some(Action::Probe));
            l.on_probe(at, Err(()));
            at += PROBE_RETRY;
        }
        let back = l
            .on_probe(at, probe(1002.0, None, ""))
            .outage
            .expect("an outage after STALL without replies");
        assert_eq!(back.from, 1000.0);
    }

    /// Polls at `at`, answering the canary's probes (every [`CANARY_EVERY`]) on the way.
    fn poll_past_probes(l: &mut Liveness, at: Instant, time: f64) -> Option<Action> {
        loop {
            match l.poll(at) {
                Some(Action::Probe) => {
                    l.on_probe(at, probe(time, None, ""));
                }
                other => return other,
            }
        }
    }

    #[test]
    fn permissions_are_proven_again_at_their_pace_until_they_hold() {
        let t0 = Instant::now();
        let mut l = answered(t0);
        l.on_refusal(t0);
        l.on_refusal(t0 + ms(10));
        assert_eq!(l.poll(t0 + ms(10)), None);
        assert_eq!(
            l.next_wake(),
            Some(t0 + PROBE_EVERY),
            "the probe comes first"
        );
        let due = t0 + REFUSED_RECHECK;
        l.on_reply(due, Some(1005.0));
        assert_eq!(
            poll_past_probes(&mut l, due, 1005.0),
            Some(Action::ProvePermissions)
        );
        assert_eq!(
            poll_past_probes(&mut l, due, 1005.0),
            None,
            "one proof in flight"
        );
        l.on_proof(due + ms(5), false);
        assert_eq!(poll_past_probes(&mut l, due + ms(5), 1005.0), None);
        let again = due + ms(5) + REFUSED_RECHECK;
        l.on_reply(again, Some(1010.0));
        assert_eq!(
            poll_past_probes(&mut l, again, 1010.0),
            Some(Action::ProvePermissions)
        );
        l.on_proof(again, true);
        let later = again + Duration::from_secs(60);
        l.on_reply(later, Some(1070.0));
        assert_eq!(
            poll_past_probes(&mut l, later, 1070.0),
            None,
            "no proof once permitted"
        );
    }

    /// Answers the next probe at Redis time `time` with the canary at `count` and `run_id`.
    fn answer(l: &mut Liveness, time: f64, count: Option<u64>, run_id: &str) -> Seen {
        let now = Instant::now();
        assert_eq!(l.poll(now), Some(Action::Probe), "a probe is due");
        l.on_probe(now, probe(time, count, run_id))
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_run_id_spares_every_member_for_a_ttl_from_the_answer() {
        let mut l = answered(Instant::now());
        tokio::time::advance(secs(1)).await;
        // An instant restart: no gap long enough for an outage, but a new run_id.
        let seen = answer(&mut l, 1001.0, Some(8), "b");
        assert_eq!(seen.reset, Some(Reset::Restarted));
        assert_eq!(seen.outage, None, "no outage to count");
        let now = Instant::now();
        assert_eq!(l.spare_until(now, 6.0), Some(1007.0));
        assert_eq!(l.judge_at(now), Some(1001.0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_counter_that_goes_back_is_a_rewind() {
        let mut l = answered(Instant::now());
        tokio::time::advance(secs(1)).await;
        assert_eq!(answer(&mut l, 1001.0, Some(8), "a").reset, None);
        tokio::time::advance(secs(1)).await;
        // A failover to a replica that missed the last increments.
        let seen = answer(&mut l, 1002.0, Some(6), "a");
        assert_eq!(seen.reset, Some(Reset::Rewound { from: 8, to: 6 }));
        assert_eq!(l.spare_until(Instant::now(), 45.0), Some(1047.0));
        // Equal is a rewind too: the increment should have made it one more.
        tokio::time::advance(secs(1)).await;
        assert_eq!(answer(&mut l, 1003.0, Some(7), "a").reset, None);
        tokio::time::advance(secs(1)).await;
        let seen = answer(&mut l, 1004.0, Some(7), "a");
        assert_eq!(seen.reset, Some(Reset::Rewound { from: 7, to: 7 }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_counter_back_at_one_is_a_flush() {
        let mut l = answered(Instant::now());
        tokio::time::advance(secs(1)).await;
        let seen = answer(&mut l, 1001.0, Some(1), "a");
        assert_eq!(seen.reset, Some(Reset::Rewound { from: 7, to: 1 }));
        assert_eq!(seen.outage, None);
        assert_eq!(l.spare_until(Instant::now(), 5.0), Some(1006.0));
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_canary_the_run_id_still_tells_a_restart() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0, None);
        l.poll(t0);
        let refused = Ok(Evidence {
            time: 1000.0,
            canary: Reading::Refused,
            run_id: Some("a".into()),
        });
        assert!(l.on_probe(t0, refused.clone()).canary_refused, "said once");
        tokio::time::advance(secs(1)).await;
        l.poll(Instant::now());
        let again = l.on_probe(Instant::now(), refused);
        assert!(!again.canary_refused, "said only once");
        assert_eq!(again.reset, None);
        tokio::time::advance(secs(1)).await;
        // A missing reading (a redirection, a refused INFO) is no evidence either way.
        assert_eq!(answer(&mut l, 1002.0, None, "").reset, None);
        tokio::time::advance(secs(1)).await;
        assert_eq!(
            answer(&mut l, 1003.0, None, "c").reset,
            Some(Reset::Restarted)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_of_the_daemon_is_no_outage_and_no_credit() {
        let mut l = answered(Instant::now());
        let planned = Instant::now() + PROBE_EVERY;
        // SIGSTOP for 6 s: the loop's timer fires 6 s late.
        tokio::time::advance(secs(6) + PROBE_EVERY).await;
        let resumed = Instant::now();
        assert_eq!(l.on_turn(planned, resumed), Some(secs(6)));
        assert!(
            !l.judging(),
            "a probe first: Redis may have restarted meanwhile"
        );
        assert_eq!(l.judge_at(resumed), None);
        assert!(l.next_wake().unwrap() <= resumed, "probe at once");
        let seen = answer(&mut l, 1006.5, Some(8), "a");
        assert_eq!(seen, Seen::default(), "no outage, no reset");
        assert_eq!(l.credit(), None);
        // Zombies due meanwhile are judged at Redis's now at once.
        assert_eq!(l.judge_at(resumed), Some(1006.5));
        assert_eq!(l.spare_until(resumed, 3.0), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_turn_within_bounds_is_no_pause() {
        let mut l = answered(Instant::now());
        let planned = Instant::now();
        tokio::time::advance(PAUSED_AFTER).await;
        assert_eq!(l.on_turn(planned, Instant::now()), None);
        assert!(l.judging());
        assert_eq!(l.on_turn(planned + secs(5), Instant::now()), None, "early");
    }

    #[tokio::test(start_paused = true)]
    async fn redis_silent_past_a_pause_is_still_an_outage() {
        let mut l = answered(Instant::now());
        let planned = Instant::now() + PROBE_EVERY;
        tokio::time::advance(secs(3)).await;
        l.on_turn(planned, Instant::now());
        // Redis does not answer after the resume either, for 5 s.
        let mut failed = 0;
        for _ in 0..50 {
            if l.poll(Instant::now()) == Some(Action::Probe) {
                l.on_probe(Instant::now(), Err(()));
                failed += 1;
            }
            tokio::time::advance(PROBE_RETRY).await;
        }
        assert!(failed > 40);
        let seen = answer(&mut l, 1008.0, Some(8), "a");
        assert!(seen.outage.is_some(), "the silence after the pause counts");
        assert_eq!(l.spare_until(Instant::now(), 6.0), Some(1014.0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_stops_judging_until_a_probe_answers() {
        let mut l = answered(Instant::now());
        tokio::time::advance(ms(200)).await;
        l.on_failure();
        assert_eq!(l.judge_at(Instant::now()), None);
        assert!(l.next_wake().unwrap() <= Instant::now(), "probe at once");
        assert_eq!(answer(&mut l, 1000.2, Some(8), "a"), Seen::default());
        assert!(l.judging());
    }

    #[tokio::test(start_paused = true)]
    async fn a_followed_failover_spares_every_member() {
        let mut l = answered(Instant::now());
        tokio::time::advance(secs(1)).await;
        l.on_moved();
        assert!(!l.judging());
        // The replica had every increment: still a failover, so a credit.
        let seen = answer(&mut l, 1001.0, Some(8), "r");
        assert_eq!(seen.reset, Some(Reset::Restarted));
        assert_eq!(l.spare_until(Instant::now(), 6.0), Some(1007.0));
    }

    #[tokio::test(start_paused = true)]
    async fn the_credit_ends_a_ttl_after_the_answer_and_the_guard_stays_armed() {
        let mut l = answered(Instant::now());
        tokio::time::advance(secs(5)).await;
        let seen = answer(&mut l, 1005.0, Some(2), "a");
        assert!(seen.outage.is_some() && seen.reset.is_some());
        for s in 1..=6 {
            tokio::time::advance(secs(1)).await;
            let now = Instant::now();
            l.on_reply(now, Some(1005.0 + s as f64));
            let judge = l.judge_at(now).unwrap();
            // Redis answers: the credit holds no instant back, so a storm hold may start.
            assert!(!l.held_back(now, judge), "armed during the credit");
            let spared = l.spare_until(now, 6.0);
            assert_eq!(spared, (s < 6).then_some(1011.0), "at +{s} s");
        }
        // Redis silent: the instant is held back, the guard reads no silence into it.
        tokio::time::advance(secs(3)).await;
        let now = Instant::now();
        assert!(l.held_back(now, l.judge_at(now).unwrap()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_canary_is_written_every_second_however_busy() {
        let mut l = answered(Instant::now());
        for _ in 0..10 {
            tokio::time::advance(ms(100)).await;
            l.on_reply(Instant::now(), None);
            if Instant::now() >= l.next_wake().unwrap() {
                break;
            }
        }
        assert_eq!(l.poll(Instant::now()), Some(Action::Probe));
    }
}
