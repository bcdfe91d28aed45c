//! Redis's liveness as one primary's loop sees it: Redis's clock, its last reply, outages and
//! the credit they give, the probes that make a silence show, and the pace of proving the
//! permissions again after a refusal. No I/O: the loop reports replies and failures with the
//! local instant they came at, and asks [`Liveness::poll`] what to send.

use std::time::Duration;

use tokio::time::Instant;

use crate::store::clock::RedisClock;

/// Redis answers within milliseconds when it is well. When it has not for this long (down,
/// paused, partitioned from the sweeper), the apps most likely could not write heartbeats
/// either: staleness is not judged further than this past the last reply, and when Redis
/// answers again the gap is an outage, whose members get a full ttl again from its end.
pub(crate) const STALL: Duration = Duration::from_millis(1500);
/// With nothing else to ask, the loop asks Redis for `TIME` this often, so that a gap in its
/// replies is an outage, not a quiet moment.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// Between probes while Redis does not answer: how soon its return is seen.
const PROBE_RETRY: Duration = Duration::from_millis(100);
/// A judging instant this far behind Redis's clock (seconds) is held back, not merely read a
/// moment ago.
const HELD_BACK_S: f64 = 0.25;
/// After Redis refused the daemon's user a command, how often the permissions are proven
/// again (a preflight, which changes nothing), so that a fixed ACL shows at once.
const REFUSED_RECHECK: Duration = Duration::from_secs(5);

/// An outage of Redis as the loop saw it: from its last reply before the gap to its first
/// after, on Redis's clock (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Credit {
    pub(crate) from: f64,
    pub(crate) to: f64,
}

impl Credit {
    /// Until when a sweep of window `ttl` (seconds) spares the members the outage kept from
    /// heartbeating.
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

/// What to send Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// `TIME`: nothing else was answered lately.
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
    /// When Redis last answered (the local instant, and its clock then).
    last_reply: Option<(Instant, f64)>,
    /// Since when the primaries this loop replaces did not answer (a failover), until its
    /// first answer.
    inherited_outage: Option<f64>,
    /// The last outage: members whose window closed during it are spared until a ttl after
    /// its end.
    credit: Option<Credit>,
    probing: bool,
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
            probing: false,
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
            (Some((last, redis_at)), _) if at.duration_since(last) > STALL => {
                Some((redis_at, at.duration_since(last).as_secs_f64()))
            }
            (None, Some(from)) => Some((from, redis_now - from)),
            _ => None,
        };
        self.last_reply = Some((at, redis_now));
        let (from, seconds) = gap?;
        let outage = Credit {
            from,
            to: redis_now,
        };
        self.credit = Some(match self.credit {
            // A second outage within the credit of the first: one window.
            Some(c) if c.to + STALL.as_secs_f64() * 4.0 >= outage.from => Credit {
                from: c.from.min(outage.from),
                to: outage.to,
            },
            _ => outage,
        });
        Some(Outage { from, seconds })
    }

    /// The probe sent at [`Action::Probe`] came back.
    pub(crate) fn on_probe(&mut self, at: Instant, time: Result<f64, ()>) -> Option<Outage> {
        self.probing = false;
        match time {
            Ok(time) => self.on_reply(at, Some(time)),
            Err(()) => {
                self.probe_after = at + PROBE_RETRY;
                None
            }
        }
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

    /// What to send now, if anything; call until `None`. A probe goes out when nothing was
    /// answered for [`PROBE_EVERY`] (with no sweep here too: a standby knows the outage when it
    /// wins the lease back).
    pub(crate) fn poll(&mut self, at: Instant) -> Option<Action> {
        if !self.probing
            && self.probe_after <= at
            && self
                .last_reply
                .is_none_or(|(last, _)| at.duration_since(last) >= PROBE_EVERY)
        {
            self.probing = true;
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
        let probe = (!self.probing).then(|| match self.last_reply {
            Some((replied, _)) => (replied + PROBE_EVERY).max(self.probe_after),
            // Never answered yet (a start, a loop after a failover): ask at the retry pace.
            None => self.probe_after,
        });
        let proof = match self.refused {
            Some(Proof::At(due)) => Some(due),
            _ => None,
        };
        probe.into_iter().chain(proof).min()
    }

    /// The instant a check of a sweep of window `ttl` judges staleness at: Redis's "now", but
    /// never further than [`STALL`] past its last answer (the apps may not have been able to
    /// write either), and during an outage's credit the outage's start.
    pub(crate) fn judge_at(&self, at: Instant, ttl: f64) -> Option<f64> {
        let now = self.clock?.at(at);
        let (_, last) = self.last_reply?;
        let mut judge = now.min(last + STALL.as_secs_f64());
        if let Some(c) = self.credit
            && now < c.until(ttl)
        {
            judge = judge.min(c.from);
        }
        Some(judge)
    }

    /// Whether staleness judged at `judge` is held back behind Redis's clock (see
    /// [`crate::sweep::Purpose::held_back`]).
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

    /// A loop that has had one reply, at Redis time 1000 s.
    fn answered(t0: Instant) -> Liveness {
        let mut l = Liveness::new(t0, None);
        assert_eq!(l.on_reply(t0, Some(1000.0)), None);
        l
    }

    #[test]
    fn the_first_reply_is_no_outage() {
        let t0 = Instant::now();
        let l = answered(t0);
        assert_eq!(l.credit(), None);
        assert_eq!(l.judge_at(t0, 45.0), Some(1000.0));
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
        // Within the credit, staleness is judged at the outage's start.
        assert_eq!(
            l.judge_at(back + Duration::from_secs(5), 45.0),
            Some(1000.0)
        );
        assert!(l.held_back(back + Duration::from_secs(5), 1000.0));
        // After a ttl from its end, at Redis's now again.
        // Redis answering throughout (replies with no clock of their own).
        let later = back + Duration::from_secs(46);
        for s in 1..=46 {
            assert_eq!(l.on_reply(back + Duration::from_secs(s), None), None);
        }
        assert!((l.judge_at(later, 45.0).unwrap() - 1056.0).abs() < 1e-6);
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
        let judge = l.judge_at(t0 + Duration::from_secs(10), 45.0).unwrap();
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
        assert_eq!(l.judge_at(t0, 45.0), None);
        assert_eq!(l.on_reply(t0, None), None, "no clock: nothing to record");
        l.observe_time(t0, 1000.0);
        assert_eq!(l.judge_at(t0, 45.0), None, "a clock, but no reply yet");
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
        assert_eq!(l.on_probe(t0 + ms(1), Ok(1000.0)), None);
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
        assert_eq!(l.on_probe(t0, Err(())), None);
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
            .on_probe(at, Ok(1002.0))
            .expect("an outage after STALL without replies");
        assert_eq!(back.from, 1000.0);
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
        assert_eq!(l.poll(due), Some(Action::ProvePermissions));
        assert_eq!(l.poll(due), None, "one proof in flight");
        l.on_proof(due + ms(5), false);
        assert_eq!(l.poll(due + ms(5)), None);
        let again = due + ms(5) + REFUSED_RECHECK;
        l.on_reply(again, Some(1010.0));
        assert_eq!(l.poll(again), Some(Action::ProvePermissions));
        l.on_proof(again, true);
        l.on_reply(again + Duration::from_secs(60), Some(1070.0));
        assert_eq!(
            l.poll(again + Duration::from_secs(60)),
            None,
            "no proof once permitted"
        );
    }
}
