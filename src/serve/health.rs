//! Liveness and readiness, decided from what the daemon's loops report.
//!
//! Liveness is the daemon's own: every loop still turns (each turns every few seconds, idle or
//! not, whatever Redis does) and none died. It never depends on Redis: a loop waiting on a
//! silent Redis is alive, and a Redis outage must not get the sweeper restarted in a loop.
//! Readiness is Redis's: it needs Redis answering, every loop running and turning, no walk stuck
//! without progress, and every sweep walked once on every primary (or standing by while another
//! replica holds its lease).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::time::Instant;

use presence_sweeper_rules::node::NodeId;

/// Shared health state of the daemon.
#[derive(Debug)]
pub struct Health {
    /// Why Redis is not usable now; `None` while it answers.
    redis_down: Mutex<Option<String>>,
    shutting_down: AtomicBool,
    stall_after: Duration,
    state: Mutex<Known>,
}

#[derive(Debug, Default)]
struct Known {
    sweeps: BTreeMap<String, SweepState>,
    nodes: BTreeSet<NodeId>,
    loops: BTreeMap<String, LoopState>,
    /// Primaries where Redis refused the daemon's user a command it needs (an ACL), and what
    /// it said; until the permission is proven again.
    refused: BTreeMap<NodeId, String>,
    /// Sweeps whose configuration their data contradicts (a wrong `score_unit`), and why.
    misconfigured: BTreeMap<String, String>,
    /// Primaries that refuse writes now (OOM, MISCONF, READONLY), and what they refuse.
    writes_refused: BTreeMap<NodeId, String>,
}

#[derive(Debug, Default, Clone)]
struct SweepState {
    walked: BTreeSet<NodeId>,
    /// The primaries it runs on here, where leases share them out (`None`: every one); none
    /// while it stands by.
    runs_on: Option<BTreeSet<NodeId>>,
    /// Once ready, a sweep stays ready: a reload or a failover must not make readiness flap.
    ready_once: bool,
}

impl SweepState {
    /// Whether it holds no lease: another replica sweeps.
    fn stands_by(&self) -> bool {
        self.runs_on.as_ref().is_some_and(BTreeSet::is_empty)
    }

    /// Whether it walked every primary of `nodes` it runs on (some primary must be known).
    fn walked_all(&self, nodes: &BTreeSet<NodeId>) -> bool {
        !nodes.is_empty()
            && nodes
                .iter()
                .filter(|n| self.runs_on.as_ref().is_none_or(|on| on.contains(*n)))
                .all(|n| self.walked.contains(n))
    }
}

#[derive(Debug, Clone)]
struct LoopState {
    last_alive: Instant,
    busy: bool,
    last_progress: Instant,
    stopped: bool,
}

impl Health {
    /// A walk that made no progress for `stall_after` counts as stuck.
    pub fn new(stall_after: Duration) -> Arc<Self> {
        Arc::new(Self {
            redis_down: Mutex::new(Some("not connected to Redis yet".into())),
            shutting_down: AtomicBool::new(false),
            stall_after,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Known> {
        // A panic while holding this lock cannot leave the maps inconsistent: recover it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a sweep, not ready until it has walked every primary. A sweep registered again
    /// (its settings changed on reload) stays ready if it was.
    pub fn sweep(&self, name: &str) {
        self.state().sweeps.entry(name.to_owned()).or_default();
    }

    /// Forgets a sweep that is no longer configured.
    pub fn forget_sweep(&self, name: &str) {
        let mut state = self.state();
        state.sweeps.remove(name);
        state.misconfigured.remove(name);
    }

    /// `sweep`'s data contradicts its configuration (`Some`: why, naming no member or key), or
    /// no longer does (`None`). A misconfigured sweep evicts nothing; `/readyz` names it.
    pub(crate) fn set_misconfigured(&self, sweep: &str, why: Option<String>) {
        let mut state = self.state();
        match why {
            Some(why) => state.misconfigured.insert(sweep.to_owned(), why),
            None => state.misconfigured.remove(sweep),
        };
    }

    /// The primaries every sweep must have walked to be ready.
    pub(crate) fn set_nodes(&self, nodes: impl IntoIterator<Item = NodeId>) {
        self.state().nodes = nodes.into_iter().collect();
    }

    /// `sweep` finished a walk of `node`.
    /// Returns whether it is the first walk of `node` by this sweep since the daemon started
    /// (a reload that changes the sweep's settings starts its index again, not its history).
    pub(crate) fn walked(&self, sweep: &str, node: &NodeId) -> bool {
        let mut state = self.state();
        let nodes = state.nodes.clone();
        let Some(s) = state.sweeps.get_mut(sweep) else {
            return false;
        };
        let first = s.walked.insert(node.clone());
        s.ready_once |= s.walked_all(&nodes);
        first
    }

    /// The primaries `sweep` runs on here (`None`: every one), as its leases say. A sweep
    /// that stands by (holds none) is ready: that is its job. A sweep that holds some is ready
    /// once it walked those. Once ready it stays so when it takes more over: as a sidecar, a
    /// replica that is not ready takes its app out of service, which a takeover's first walk
    /// must not.
    pub(crate) fn runs_on(&self, sweep: &str, nodes: Option<BTreeSet<NodeId>>) {
        let mut state = self.state();
        let all = state.nodes.clone();
        if let Some(s) = state.sweeps.get_mut(sweep) {
            s.runs_on = nodes;
            s.ready_once |= s.stands_by() || s.walked_all(&all);
        }
    }

    /// Registers a loop that must keep turning; it is watched until [`LoopHealth::retire`].
    pub(crate) fn register_loop(self: &Arc<Self>, name: &str) -> LoopHealth {
        let now = crate::time::now();
        self.state().loops.insert(
            name.to_owned(),
            LoopState {
                last_alive: now,
                busy: false,
                last_progress: now,
                stopped: false,
            },
        );
        LoopHealth {
            health: self.clone(),
            name: name.to_owned(),
            retired: AtomicBool::new(false),
        }
    }

    /// Records how the last Redis round trip went: `Err` says why Redis is not usable, for
    /// `/readyz`.
    pub fn set_redis(&self, status: Result<(), String>) {
        *self.redis_down.lock().unwrap_or_else(|e| e.into_inner()) = status.err();
    }

    /// Redis refused (`Some`: what it said) or again allows (`None`) on `node` a command the
    /// daemon needs: an ACL problem, which no retry fixes and `/readyz` must name.
    pub(crate) fn set_refused(&self, node: &NodeId, why: Option<String>) {
        let mut state = self.state();
        match why {
            Some(why) => state.refused.insert(node.clone(), why),
            None => state.refused.remove(node),
        };
    }

    /// `node` refuses writes (`Some`: why) or takes them again (`None`): nobody is judged there
    /// meanwhile, and `/readyz` says so. Liveness is not touched: restarting the daemon would
    /// not help.
    pub(crate) fn set_writes_refused(&self, node: &NodeId, why: Option<String>) {
        let mut state = self.state();
        match why {
            Some(why) => state.writes_refused.insert(node.clone(), why),
            None => state.writes_refused.remove(node),
        };
    }

    /// Why Redis is not usable now, if it is not.
    fn redis_down(&self) -> Option<String> {
        self.redis_down
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// From now on the daemon is not ready (it drains).
    pub fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    /// `Ok` while every loop runs and turns; else why not.
    pub fn liveness(&self) -> Result<(), String> {
        let state = self.state();
        if !self.shutting_down()
            && let Some((name, _)) = state.loops.iter().find(|(_, l)| l.stopped)
        {
            return Err(format!("{name}: its loop stopped"));
        }
        if let Some((name, quiet)) = stalest_loop(&state, self.stall_after) {
            return Err(format!(
                "{name}: its loop has not turned for {}s",
                quiet.as_secs()
            ));
        }
        Ok(())
    }

    /// `Ok` once Redis answers, every loop runs and every sweep walked every primary, until
    /// shutdown; else why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.shutting_down() {
            return Err("shutting down".into());
        }
        if let Some(why) = self.redis_down() {
            return Err(why);
        }
        let state = self.state();
        if let Some((name, _)) = state.loops.iter().find(|(_, l)| l.stopped) {
            return Err(format!("{name}: its loop stopped"));
        }
        // Every loop turns at least every few seconds, idle or not: one that has not for this
        // long is stuck, even if nothing it waits on has failed.
        if let Some((name, quiet)) = stalest_loop(&state, self.stall_after) {
            return Err(format!(
                "{name}: its loop has not turned for {}s",
                quiet.as_secs()
            ));
        }
        // A walk waiting on a Redis that accepts connections but answers nothing: the loop
        // is alive (liveness), but the daemon is not doing its job.
        let now = crate::time::now();
        if let Some((name, quiet)) = state
            .loops
            .iter()
            .filter(|(_, l)| l.busy)
            .map(|(name, l)| (name, now.saturating_duration_since(l.last_progress)))
            .find(|&(_, quiet)| quiet > self.stall_after)
        {
            return Err(format!(
                "{name}: its walk made no progress for {}s",
                quiet.as_secs()
            ));
        }
        if let Some((node, why)) = state.refused.iter().next() {
            return Err(format!("{node}: {why}"));
        }
        if let Some((node, why)) = state.writes_refused.iter().next() {
            return Err(format!("{node}: {why}"));
        }
        if let Some(why) = state.misconfigured.values().next() {
            return Err(why.clone());
        }
        let waiting: Vec<&str> = state
            .sweeps
            .iter()
            .filter(|(_, s)| !s.ready_once && !s.stands_by() && !s.walked_all(&state.nodes))
            .map(|(n, _)| n.as_str())
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "not every primary walked yet: {}",
                waiting.join(", ")
            ))
        }
    }

    /// Whether every loop reported itself alive within `within` (for the systemd watchdog: a
    /// loop that stopped turning stops the pings).
    pub fn loops_alive_within(&self, within: Duration) -> bool {
        stalest_loop(&self.state(), within).is_none()
    }
}

/// A loop that has not reported itself alive within `within`, and for how long it has not.
fn stalest_loop(state: &Known, within: Duration) -> Option<(&str, Duration)> {
    let now = crate::time::now();
    state
        .loops
        .iter()
        .map(|(name, l)| (name.as_str(), now.saturating_duration_since(l.last_alive)))
        .find(|&(_, quiet)| quiet > within)
}

/// A loop's handle on the shared health state. Dropping it without [`LoopHealth::retire`] (the
/// loop panicked or returned early) marks the loop stopped.
#[derive(Debug)]
pub(crate) struct LoopHealth {
    health: Arc<Health>,
    name: String,
    retired: AtomicBool,
}

impl LoopHealth {
    fn update(&self, f: impl FnOnce(&mut LoopState)) {
        if let Some(l) = self.health.state().loops.get_mut(&self.name) {
            f(l);
        }
    }

    /// The loop turned.
    pub(crate) fn alive(&self) {
        self.update(|l| l.last_alive = crate::time::now());
    }

    /// A walk starts (`true`) or ends (`false`): while busy, the loop must show progress.
    pub(crate) fn busy(&self, busy: bool) {
        self.update(|l| {
            l.busy = busy;
            l.last_progress = crate::time::now();
        });
    }

    /// The walk in flight moved on.
    pub(crate) fn progress(&self) {
        self.update(|l| l.last_progress = crate::time::now());
    }

    /// The loop ends as asked: it is no longer watched.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
        self.health.state().loops.remove(&self.name);
    }
}

impl Drop for LoopHealth {
    fn drop(&mut self) {
        if !self.retired.load(Ordering::Relaxed) {
            self.update(|l| l.stopped = true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(n: &str) -> NodeId {
        NodeId::new(n)
    }

    #[tokio::test(start_paused = true)]
    async fn ready_after_redis_and_a_walk_of_every_primary() {
        let h = Health::new(Duration::from_secs(60));
        h.sweep("online");
        h.sweep("typing");
        h.set_nodes([node("a"), node("b")]);
        assert_eq!(h.readiness().unwrap_err(), "not connected to Redis yet");
        h.set_redis(Ok(()));
        assert!(h.walked("online", &node("a")), "the first walk of a");
        assert!(!h.walked("online", &node("a")), "not the first any more");
        h.walked("online", &node("b"));
        h.walked("typing", &node("a"));
        assert_eq!(
            h.readiness().unwrap_err(),
            "not every primary walked yet: typing"
        );
        h.runs_on("typing", Some(BTreeSet::new()));
        assert!(h.readiness().is_ok(), "standing by is its job");
        h.runs_on("typing", None);
        assert!(
            h.readiness().is_ok(),
            "taking the lease over keeps a standby ready while it walks"
        );
        h.walked("typing", &node("b"));
        assert!(h.readiness().is_ok());
        h.set_nodes([node("a"), node("c")]);
        assert!(
            h.readiness().is_ok(),
            "a failover does not make readiness flap"
        );
        h.set_redis(Err("Redis refused the credentials: WRONGPASS".into()));
        assert_eq!(
            h.readiness().unwrap_err(),
            "Redis refused the credentials: WRONGPASS"
        );
        h.set_redis(Ok(()));
        h.set_refused(
            &node("a"),
            Some("the Redis user may not run PUBLISH".into()),
        );
        assert_eq!(
            h.readiness().unwrap_err(),
            "a: the Redis user may not run PUBLISH"
        );
        h.set_refused(&node("a"), None);
        assert!(h.readiness().is_ok());
        h.set_shutting_down();
        assert_eq!(h.readiness().unwrap_err(), "shutting down");
        assert!(h.liveness().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn live_while_loops_turn_even_when_a_walk_waits_on_redis() {
        let h = Health::new(Duration::from_secs(60));
        h.set_redis(Ok(()));
        let a = h.register_loop("primary a");
        // Idle for an hour, turning every few seconds (a cron schedule) is fine; Redis down is
        // fine.
        for _ in 0..720 {
            tokio::time::advance(Duration::from_secs(5)).await;
            a.alive();
        }
        assert!(h.liveness().is_ok());
        // A walk waiting on a Redis that answers nothing for 75s: the loop still turns, so the
        // daemon is alive (nothing restarts it), but not ready, and says why.
        a.busy(true);
        for _ in 0..15 {
            tokio::time::advance(Duration::from_secs(5)).await;
            a.alive();
        }
        assert!(h.liveness().is_ok());
        assert_eq!(
            h.readiness().unwrap_err(),
            "primary a: its walk made no progress for 75s"
        );
        a.progress();
        assert!(h.readiness().is_ok());
        a.busy(false);
        // A loop that stops turning is not alive.
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(
            h.liveness().unwrap_err(),
            "primary a: its loop has not turned for 61s"
        );
        a.alive();
        assert!(h.liveness().is_ok());
        drop(a);
        assert!(h.liveness().unwrap_err().contains("loop stopped"));
        assert!(h.readiness().unwrap_err().contains("loop stopped"));
        let b = h.register_loop("primary b");
        b.retire();
        drop(b);
        h.register_loop("primary a").retire();
        assert!(h.liveness().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_stops_turning_makes_the_daemon_unready() {
        let h = Health::new(Duration::from_secs(60));
        h.set_redis(Ok(()));
        let a = h.register_loop("primary a");
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(h.readiness().is_ok());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            h.readiness().unwrap_err(),
            "primary a: its loop has not turned for 61s"
        );
        a.alive();
        assert!(h.readiness().is_ok());
        a.retire();
    }

    #[tokio::test(start_paused = true)]
    async fn watchdog_needs_every_loop_alive() {
        let h = Health::new(Duration::from_secs(60));
        let a = h.register_loop("a");
        let b = h.register_loop("b");
        tokio::time::advance(Duration::from_secs(10)).await;
        a.alive();
        assert!(!h.loops_alive_within(Duration::from_secs(5)));
        b.alive();
        assert!(h.loops_alive_within(Duration::from_secs(5)));
        a.retire();
        b.retire();
    }
}
