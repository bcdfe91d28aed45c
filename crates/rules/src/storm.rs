//! The storm guard: when the evictions of a sweep would take a large share of its members at
//! once, they are held for a while, because that is what an outage of the apps looks like (they
//! lost Redis, or a deploy restarted them all), not a crowd leaving at the same instant.
//!
//! Two signs, looked at before every eviction:
//! - **silence**: no heartbeat at all in the sweep's keys for half a ttl (the newest score any
//!   check read, or a keyspace notification of a write). Then every member not written since will
//!   go within one ttl: the whole population. This is seen before the first of them is due, so a
//!   total stop makes no false leave at all. (It assumes apps heartbeat more often than every
//!   half ttl, as they must to stay present.) Without notifications the keys that come due may
//!   all be quiet ones while the busy ones are not due, so silence is only suspected
//!   ([`StormGuard::suspects_silence`]) until a check has read a few busy witnesses' newest
//!   scores too.
//! - **share**: the members evicted within the last ttl plus those about to be exceed `share` of
//!   the sweep's members (those left plus those evicted in that window): a partial stop, seen
//!   once that share has left.
//!
//! Either way the guard trips only for at least `min_members` members. Tripped, it holds every
//! eviction of the sweep for `hold` (default: the sweep's ttl): heartbeats that come back keep
//! their members; the members still stale when the hold ends are evicted then, each announced
//! once, and the guard does not trip again for one ttl, so that they can go. A hold for silence
//! lasts at least a ttl past the first heartbeat that breaks it: apps that come back keep their
//! own heartbeat periods, and each needs up to one to reach every user.
//!
//! An outage of Redis is not silence: the apps could not write meanwhile, and the outage
//! credit spares their members. A check judged at an instant held back behind Redis's clock
//! (Redis not answering, or a credit running on its primary) starts no hold.
//!
//! One guard per sweep, shared by every primary's loop. Several replicas each run their own, on
//! the same evidence.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use std::sync::Arc;

use crate::node::NodeId;

/// What the guard says of an eviction about to happen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admit {
    /// Go ahead.
    Evict,
    /// Hold it until this instant (Redis's clock, Unix seconds).
    Hold(f64),
}

/// Where the guard reports: whether it holds, and each hold it starts.
pub trait GuardReport: Send + Sync {
    /// The guard holds (`true`), or no longer does.
    fn holding(&self, holding: bool);
    /// A hold starts.
    fn hold_started(&self);
}

/// A guard that reports nowhere (a one-shot pass has no guard to report).
#[derive(Debug, Clone, Copy)]
pub struct Unreported;

impl GuardReport for Unreported {
    fn holding(&self, _: bool) {}
    fn hold_started(&self) {}
}

/// `[sweeps.<name>.storm_guard]`: holding mass evictions. Every setting is explained in the
/// shipped `config/presence-sweeper.toml`; the defaults here serve sweeps a file adds.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `sweeps.<name>.storm_guard.enabled`: whether the guard watches this sweep.
    pub enabled: bool,
    /// `sweeps.<name>.storm_guard.share`: the share of the sweep's members whose eviction
    /// within one ttl trips the guard.
    pub share: f64,
    /// `sweeps.<name>.storm_guard.min_members`: fewer evicted members never trip the guard.
    pub min_members: u64,
    /// `sweeps.<name>.storm_guard.hold`: how long evictions wait once it tripped; `None`
    /// follows the sweep's `ttl`.
    pub hold: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled: true,
            share: 0.5,
            min_members: 100,
            hold: None,
        }
    }
}

/// One sweep's storm guard.
pub struct StormGuard {
    cfg: Settings,
    sweep: String,
    ttl: f64,
    metrics: Arc<dyn GuardReport>,
    state: Mutex<Record>,
}

#[derive(Debug, Default)]
struct Record {
    /// Members of the sweep's keys on each primary, as of their last checks.
    population: BTreeMap<NodeId, u64>,
    /// Evictions of the last ttl: (instant, members).
    recent: VecDeque<(f64, u64)>,
    /// The newest heartbeat seen (Redis's clock).
    freshest: Option<f64>,
    /// Holding until then.
    hold_until: Option<f64>,
    /// When the last hold began.
    held_from: f64,
    /// The last hold was a new silence in the calm after another: the next calm lets the
    /// stale members go whatever comes, so that sporadic writes (a join, a pinned member)
    /// during a real stop cannot renew holds forever.
    retripped: bool,
    /// The hold is for silence, and no heartbeat has broken it yet.
    silent_hold: bool,
    /// After a hold, the guard does not trip again before then.
    calm_until: f64,
}

impl std::fmt::Debug for StormGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StormGuard")
            .field("sweep", &self.sweep)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl StormGuard {
    /// The guard of sweep `sweep`, whose window is `ttl`.
    pub fn new(cfg: &Settings, sweep: &str, ttl: Duration, metrics: Arc<dyn GuardReport>) -> Self {
        Self {
            cfg: cfg.clone(),
            sweep: sweep.to_owned(),
            ttl: ttl.as_secs_f64(),
            metrics,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Record> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the guard watches at all (checks then read what it needs).
    pub fn enabled(&self) -> bool {
        self.cfg.enabled
    }

    /// `node` holds `members` members of the sweep now.
    pub fn population(&self, node: &NodeId, members: u64) {
        self.state().population.insert(node.clone(), members);
    }

    /// `node` left (a failover) or stopped running the sweep.
    pub fn forget(&self, node: &NodeId) {
        self.state().population.remove(node);
    }

    /// A heartbeat was seen at `score` (Unix seconds, Redis's clock).
    pub fn heartbeat(&self, at: f64) {
        let mut st = self.state();
        if !at.is_finite() || st.freshest.is_some_and(|f| at <= f) {
            return;
        }
        st.freshest = Some(at);
        if st.silent_hold
            && let Some(until) = st.hold_until
        {
            st.silent_hold = false;
            let until = until.max(at + self.ttl);
            st.hold_until = Some(until);
            tracing::warn!(
                sweep = %self.sweep,
                hold_s = format_args!("{:.1}", until - at),
                "storm guard: heartbeats are back; holding until every app has had a ttl to heartbeat"
            );
        }
    }

    /// Ends a hold whose time is up at `now`; returns whether the guard still holds.
    pub fn holding(&self, now: f64) -> bool {
        let mut st = self.state();
        self.end_hold(&mut st, now);
        st.hold_until.is_some()
    }

    fn end_hold(&self, st: &mut Record, now: f64) {
        if st.hold_until.is_some_and(|until| now >= until) {
            st.hold_until = None;
            st.silent_hold = false;
            st.calm_until = now + self.ttl;
            self.metrics.holding(false);
            tracing::warn!(
                sweep = %self.sweep,
                "storm guard: the hold ended; members still stale leave now"
            );
        }
    }

    /// Whether the silence sign would trip at `now`: no heartbeat seen for half a ttl, in a
    /// sweep big enough to guard. The newest heartbeats are learnt from the keys checks read,
    /// which without keyspace notifications may all be quiet ones (the busy keys are not due):
    /// a check then reads the newest heartbeat of a few witnesses first (see [`Self::heartbeat`]).
    pub fn suspects_silence(&self, now: f64) -> bool {
        if !self.cfg.enabled {
            return false;
        }
        let st = self.state();
        st.hold_until.is_none()
            && st.population.values().sum::<u64>() >= self.cfg.min_members
            && self.silent(&st, now)
            && (now >= st.calm_until || self.silent_again(&st, now))
    }

    /// Whether checks at `now` should read their keys' newest heartbeats: none was heard yet,
    /// or the freshest is older than a quarter ttl, so silence (half a ttl) could begin before
    /// another is read. While one was heard recently, reading every checked key's newest would
    /// cost Redis a second `ZRANGE … WITHSCORES` per key for nothing (`benches/busy.py` counts
    /// them: 2.02 per probe before, 1.20 after).
    pub fn wants_heartbeats(&self, now: f64) -> bool {
        self.cfg.enabled
            && self
                .state()
                .freshest
                .is_none_or(|f| now - f > self.ttl / 4.0)
    }

    /// Whether `stale` members may be evicted at `now` (Redis's clock), found by a check of
    /// keys that hold `checked` members. `held_back`: `now` is behind Redis's clock (see the
    /// module's notes); a hold under way still holds, but none starts.
    pub fn admit(&self, now: f64, stale: u64, checked: u64, held_back: bool) -> Admit {
        if !self.cfg.enabled || stale == 0 {
            return Admit::Evict;
        }
        let mut st = self.state();
        self.end_hold(&mut st, now);
        if let Some(until) = st.hold_until {
            return Admit::Hold(until);
        }
        if held_back {
            return Admit::Evict;
        }
        while st
            .recent
            .front()
            .is_some_and(|&(at, _)| at <= now - self.ttl)
        {
            st.recent.pop_front();
        }
        let in_calm = now < st.calm_until;
        if in_calm && !self.silent_again(&st, now) {
            return Admit::Evict;
        }
        let recent: u64 = st.recent.iter().map(|&(_, n)| n).sum();
        let population = st.population.values().sum::<u64>().max(checked) + recent;
        if population < self.cfg.min_members {
            return Admit::Evict;
        }
        let silent = self.silent(&st, now);
        let due = if silent { population } else { recent + stale };
        if due < self.cfg.min_members || (due as f64) <= self.cfg.share * population as f64 {
            return Admit::Evict;
        }
        let until = now + self.cfg.hold.map_or(self.ttl, |h| h.as_secs_f64());
        st.hold_until = Some(until);
        st.held_from = now;
        st.retripped = in_calm;
        st.silent_hold = silent;
        self.metrics.holding(true);
        self.metrics.hold_started();
        tracing::warn!(
            sweep = %self.sweep,
            members = population,
            due,
            silent_for_s = st.freshest.map(|f| format!("{:.1}", now - f)).unwrap_or_default(),
            hold_s = format_args!("{:.1}", until - now),
            "storm guard: evictions would take {:.0}% of the sweep's members at once (the apps may have lost Redis); holding them",
            100.0 * due as f64 / population.max(1) as f64
        );
        Admit::Hold(until)
    }

    /// No heartbeat seen for half a ttl.
    fn silent(&self, st: &Record, now: f64) -> bool {
        st.freshest.is_some_and(|f| now - f > self.ttl / 2.0)
    }

    /// In the calm after a hold the members still stale may go, unless heartbeats came back
    /// since the hold began and have stopped again: that is a new storm.
    fn silent_again(&self, st: &Record, now: f64) -> bool {
        !st.retripped && self.silent(st, now) && st.freshest.is_some_and(|f| f > st.held_from)
    }

    /// `members` were evicted at `now`.
    pub fn evicted(&self, now: f64, members: u64) {
        if self.cfg.enabled && members > 0 {
            self.state().recent.push_back((now, members));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicI64, Ordering};

    /// What a guard reported: whether it holds, and the holds it started.
    #[derive(Default)]
    struct Seen {
        holding: AtomicI64,
        holds: AtomicI64,
    }

    impl GuardReport for Seen {
        fn holding(&self, holding: bool) {
            self.holding.store(i64::from(holding), Ordering::Relaxed);
        }
        fn hold_started(&self) {
            self.holds.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A guard whose `metrics` field is what it reported (the tests read it back).
    struct Watched {
        guard: StormGuard,
        metrics: Arc<Seen>,
    }

    impl std::ops::Deref for Watched {
        type Target = StormGuard;
        fn deref(&self) -> &StormGuard {
            &self.guard
        }
    }

    impl Seen {
        fn holding_now(&self) -> i64 {
            self.holding.load(Ordering::Relaxed)
        }
        fn holds_started(&self) -> i64 {
            self.holds.load(Ordering::Relaxed)
        }
    }

    fn guard() -> Watched {
        let metrics = Arc::new(Seen::default());
        let guard = StormGuard::new(
            &Settings::default(),
            "online",
            Duration::from_secs(10),
            metrics.clone(),
        );
        Watched { guard, metrics }
    }

    #[test]
    fn a_silent_sweep_is_held_before_the_first_eviction_then_released() {
        let g = guard();
        g.population(&NodeId::new("a"), 1000);
        g.heartbeat(100.0);
        // Half a ttl without any heartbeat: the first zombie of the wave is held.
        assert_eq!(g.admit(106.0, 1, 0, false), Admit::Hold(116.0));
        assert_eq!(g.admit(110.0, 50, 0, false), Admit::Hold(116.0));
        assert!(g.holding(115.0));
        assert_eq!((g.metrics.holding_now(), g.metrics.holds_started()), (1, 1));
        // The hold ends: whatever is still stale goes, and the guard stays calm for a ttl.
        assert_eq!(g.admit(116.0, 900, 0, false), Admit::Evict);
        g.evicted(116.0, 900);
        assert_eq!(g.admit(120.0, 50, 0, false), Admit::Evict);
        assert!(!g.holding(120.0));
        assert_eq!(g.metrics.holding_now(), 0);
    }

    #[test]
    fn silence_is_suspected_only_in_a_big_enough_sweep_past_half_a_ttl() {
        let g = guard();
        g.heartbeat(100.0);
        assert!(!g.suspects_silence(106.0), "no population known yet");
        g.population(&NodeId::new("a"), 1000);
        assert!(!g.suspects_silence(104.0), "4 s is under half the ttl");
        assert!(g.suspects_silence(106.0));
        // A witness's heartbeat clears it.
        g.heartbeat(105.5);
        assert!(!g.suspects_silence(106.0));
        assert_eq!(g.admit(106.0, 10, 0, false), Admit::Evict);
    }

    #[test]
    fn checks_read_heartbeats_only_while_the_freshest_is_a_quarter_ttl_old() {
        let g = guard();
        assert!(g.wants_heartbeats(100.0), "none heard yet");
        g.heartbeat(100.0);
        assert!(!g.wants_heartbeats(102.5), "2.5 s is a quarter of the ttl");
        assert!(g.wants_heartbeats(102.6));
        g.heartbeat(102.6);
        assert!(!g.wants_heartbeats(104.0));
    }

    #[test]
    fn heartbeats_and_small_sweeps_never_trip_it() {
        let g = guard();
        g.population(&NodeId::new("a"), 1000);
        g.heartbeat(105.0);
        assert_eq!(
            g.admit(106.0, 30, 0, false),
            Admit::Evict,
            "not silent, a few"
        );
        g.evicted(106.0, 30);
        let small = guard();
        small.population(&NodeId::new("a"), 60);
        small.heartbeat(0.0);
        assert_eq!(
            small.admit(100.0, 60, 0, false),
            Admit::Evict,
            "under min_members"
        );
    }

    #[test]
    fn a_silent_hold_lasts_a_ttl_past_the_first_heartbeat_back() {
        let g = guard();
        g.population(&NodeId::new("a"), 1000);
        g.heartbeat(100.0);
        assert_eq!(g.admit(106.0, 1, 0, false), Admit::Hold(116.0));
        // The apps come back late in the hold, each at its own phase: every user is written
        // within a ttl of the first heartbeat.
        g.heartbeat(115.0);
        assert_eq!(g.admit(116.0, 400, 0, false), Admit::Hold(125.0));
        g.heartbeat(116.0);
        assert_eq!(
            g.admit(124.0, 10, 0, false),
            Admit::Hold(125.0),
            "extended once"
        );
        g.heartbeat(124.5);
        assert_eq!(g.admit(125.0, 10, 0, false), Admit::Evict);
        assert_eq!(g.metrics.holds_started(), 1);
    }

    #[test]
    fn a_new_silence_after_heartbeats_came_back_trips_even_in_the_calm() {
        let g = guard();
        g.population(&NodeId::new("a"), 1000);
        g.heartbeat(100.0);
        assert_eq!(g.admit(106.0, 1, 0, false), Admit::Hold(116.0));
        g.heartbeat(108.0);
        g.heartbeat(117.5);
        // The hold ends at 118; the members still stale go in the calm that follows.
        assert_eq!(g.admit(118.0, 600, 0, false), Admit::Evict);
        g.evicted(118.0, 600);
        // The apps that came back stop again at 119: silence from 124, within the calm.
        g.heartbeat(119.0);
        assert_eq!(g.admit(123.0, 10, 0, false), Admit::Evict, "not silent yet");
        assert!(g.suspects_silence(124.5));
        assert_eq!(g.admit(124.5, 10, 0, false), Admit::Hold(134.5));
    }

    #[test]
    fn a_check_held_back_by_an_outage_starts_no_hold() {
        let g = guard();
        g.population(&NodeId::new("a"), 1000);
        g.heartbeat(100.0);
        // Redis was away from 100 to 108: the credit judges at 100.5, long after the last
        // heartbeat it could see. Nothing trips, whatever the count.
        assert_eq!(g.admit(100.5, 900, 1000, true), Admit::Evict);
        assert_eq!(g.metrics.holds_started(), 0);
        // A hold under way still holds those checks.
        assert_eq!(g.admit(106.0, 1, 0, false), Admit::Hold(116.0));
        assert_eq!(g.admit(107.0, 1, 0, true), Admit::Hold(116.0));
    }

    #[test]
    fn sporadic_writes_in_a_real_stop_cannot_renew_holds_forever() {
        let g = guard();
        g.population(&NodeId::new("a"), 1000);
        g.heartbeat(100.0);
        assert_eq!(g.admit(106.0, 1, 0, false), Admit::Hold(116.0));
        // One write (a join, say) in the hold extends it once, and then reads as heartbeats
        // that came back and stopped: one more hold...
        g.heartbeat(110.0);
        assert_eq!(g.admit(120.0, 900, 0, false), Admit::Hold(130.0));
        // (itself extended once by a write)...
        g.heartbeat(125.0);
        assert_eq!(g.admit(130.0, 900, 0, false), Admit::Hold(135.0));
        // ... and in its calm the stale members go, whatever is written.
        assert_eq!(g.admit(135.0, 900, 0, false), Admit::Evict);
        g.evicted(135.0, 900);
        g.heartbeat(136.0);
        assert_eq!(g.admit(142.0, 50, 0, false), Admit::Evict);
        assert_eq!(g.metrics.holds_started(), 2);
    }

    #[test]
    fn a_backlog_is_held_before_the_population_is_known() {
        let g = guard();
        // The first check of a start-up walk: 1,000 members read, 600 of them stale.
        assert_eq!(g.admit(100.0, 600, 1000, false), Admit::Hold(110.0));
        let small = guard();
        assert_eq!(
            small.admit(100.0, 60, 100, false),
            Admit::Evict,
            "under min_members"
        );
        let few = guard();
        assert_eq!(
            few.admit(100.0, 400, 1000, false),
            Admit::Evict,
            "under the share"
        );
    }

    #[test]
    fn a_partial_stop_trips_once_the_share_is_gone() {
        let g = guard();
        g.population(&NodeId::new("a"), 600);
        g.population(&NodeId::new("b"), 400);
        for t in 0..10u32 {
            let now = 100.0 + f64::from(t) * 0.1;
            g.heartbeat(now);
            if g.admit(now, 100, 0, false) == Admit::Evict {
                g.evicted(now, 100);
                g.population(&NodeId::new("a"), 600 - 100 * u64::from(t + 1));
            } else {
                // 500 of 1,000 gone within the ttl: the sixth hundred is held.
                assert_eq!(t, 5);
                return;
            }
        }
        panic!("never held");
    }
}
