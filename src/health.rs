//! Liveness and readiness, decided from what the sweep loops report.
//!
//! Liveness never depends on Redis: a Redis outage must not get the sweeper restarted in a loop.
//! It fails only when a sweep loop died or a pass stopped making progress (no SCAN page and no
//! script reply for a long time, which every Redis call's timeout rules out unless something is
//! stuck). Readiness needs Redis and one completed pass of every sweep.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Shared health state of the daemon.
#[derive(Debug)]
pub struct Health {
    redis_up: AtomicBool,
    shutting_down: AtomicBool,
    stall_after: Duration,
    sweeps: Mutex<BTreeMap<String, SweepState>>,
}

#[derive(Debug, Clone)]
struct SweepState {
    passed_once: bool,
    busy: bool,
    last_progress: Instant,
    last_alive: Instant,
    stopped: bool,
}

impl Health {
    /// A pass that made no progress for `stall_after` counts as stuck.
    pub fn new(stall_after: Duration) -> Arc<Self> {
        Arc::new(Self {
            redis_up: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            stall_after,
            sweeps: Mutex::new(BTreeMap::new()),
        })
    }

    /// Registers a sweep and returns its handle. A sweep registered again (its settings changed
    /// on reload) keeps counting as having passed once, so readiness does not flap.
    pub fn sweep(self: &Arc<Self>, name: &str) -> SweepHealth {
        let now = Instant::now();
        let passed_once = self.state().get(name).is_some_and(|s| s.passed_once);
        self.state().insert(
            name.to_owned(),
            SweepState {
                passed_once,
                busy: false,
                last_progress: now,
                last_alive: now,
                stopped: false,
            },
        );
        SweepHealth {
            health: self.clone(),
            name: name.to_owned(),
        }
    }

    /// Forgets a sweep that is no longer configured.
    pub fn forget_sweep(&self, name: &str) {
        self.state().remove(name);
    }

    /// Records whether the last Redis round trip succeeded.
    pub fn set_redis_up(&self, up: bool) {
        self.redis_up.store(up, Ordering::Relaxed);
    }

    /// Whether the last Redis round trip succeeded.
    pub fn redis_up(&self) -> bool {
        self.redis_up.load(Ordering::Relaxed)
    }

    /// From now on the daemon is not ready (it drains).
    pub fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// `Ok` while every sweep loop is alive and no pass is stuck; else why not.
    pub fn liveness(&self) -> Result<(), String> {
        let now = Instant::now();
        for (name, s) in self.state().iter() {
            if s.stopped && !self.shutting_down.load(Ordering::Relaxed) {
                return Err(format!("sweep {name}: its loop stopped"));
            }
            let quiet = now.saturating_duration_since(s.last_progress);
            if s.busy && quiet > self.stall_after {
                return Err(format!(
                    "sweep {name}: pass made no progress for {}s",
                    quiet.as_secs()
                ));
            }
        }
        Ok(())
    }

    /// `Ok` once Redis answers and every sweep completed a pass, until shutdown; else why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err("shutting down".into());
        }
        if !self.redis_up() {
            return Err("Redis is unreachable".into());
        }
        let waiting: Vec<String> = self
            .state()
            .iter()
            .filter(|(_, s)| !s.passed_once)
            .map(|(n, _)| n.clone())
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!("no completed pass yet: {}", waiting.join(", ")))
        }
    }

    /// Whether every sweep loop reported itself alive within `within` (for the systemd
    /// watchdog: a loop that stopped turning stops the pings).
    pub fn loops_alive_within(&self, within: Duration) -> bool {
        let now = Instant::now();
        self.state()
            .values()
            .all(|s| now.saturating_duration_since(s.last_alive) <= within)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, SweepState>> {
        // A panic while holding this lock cannot leave the map inconsistent: recover it.
        self.sweeps.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A sweep loop's handle on the shared health state.
#[derive(Debug, Clone)]
pub struct SweepHealth {
    health: Arc<Health>,
    name: String,
}

impl SweepHealth {
    fn update(&self, f: impl FnOnce(&mut SweepState)) {
        if let Some(s) = self.health.state().get_mut(&self.name) {
            f(s);
        }
    }

    /// The sweep loop turned (it reacts to ticks and to its pass).
    pub fn alive(&self) {
        self.update(|s| s.last_alive = Instant::now());
    }

    /// A pass starts.
    pub fn pass_started(&self) {
        self.update(|s| {
            s.busy = true;
            s.last_progress = Instant::now();
        });
    }

    /// The pass in flight moved on.
    pub fn progress(&self) {
        self.update(|s| s.last_progress = Instant::now());
    }

    /// A pass ended; `success` if it covered the whole keyspace.
    pub fn pass_finished(&self, success: bool) {
        self.update(|s| {
            s.busy = false;
            s.passed_once |= success;
            s.last_progress = Instant::now();
        });
    }

    /// The loop ended without being asked to (it panicked).
    pub fn stopped(&self) {
        self.update(|s| s.stopped = true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ready_after_redis_and_a_pass_of_every_sweep() {
        let h = Health::new(Duration::from_secs(60));
        let a = h.sweep("online");
        let b = h.sweep("typing");
        assert_eq!(h.readiness().unwrap_err(), "Redis is unreachable");
        h.set_redis_up(true);
        a.pass_started();
        a.pass_finished(true);
        assert_eq!(h.readiness().unwrap_err(), "no completed pass yet: typing");
        b.pass_started();
        b.pass_finished(false);
        assert!(h.readiness().is_err(), "a failed pass does not count");
        b.pass_started();
        b.pass_finished(true);
        assert!(h.readiness().is_ok());
        h.set_redis_up(false);
        assert!(h.readiness().is_err());
        h.set_redis_up(true);
        h.set_shutting_down();
        assert_eq!(h.readiness().unwrap_err(), "shutting down");
        assert!(h.liveness().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn live_unless_a_pass_is_stuck_or_a_loop_died() {
        let h = Health::new(Duration::from_secs(60));
        let a = h.sweep("online");
        // Idle for an hour (a cron schedule) is fine; Redis down is fine.
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(h.liveness().is_ok());
        a.pass_started();
        tokio::time::advance(Duration::from_secs(50)).await;
        a.progress();
        tokio::time::advance(Duration::from_secs(50)).await;
        assert!(h.liveness().is_ok());
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(h.liveness().unwrap_err().contains("no progress for 61s"));
        a.pass_finished(false);
        assert!(h.liveness().is_ok());
        a.stopped();
        assert!(h.liveness().unwrap_err().contains("loop stopped"));
        h.forget_sweep("online");
        assert!(h.liveness().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn watchdog_needs_every_loop_alive() {
        let h = Health::new(Duration::from_secs(60));
        let a = h.sweep("online");
        let b = h.sweep("typing");
        tokio::time::advance(Duration::from_secs(10)).await;
        a.alive();
        assert!(!h.loops_alive_within(Duration::from_secs(5)));
        b.alive();
        assert!(h.loops_alive_within(Duration::from_secs(5)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_sweep_stays_ready() {
        let h = Health::new(Duration::from_secs(60));
        h.set_redis_up(true);
        let a = h.sweep("online");
        a.pass_started();
        a.pass_finished(true);
        assert!(h.readiness().is_ok());
        let _again = h.sweep("online");
        assert!(h.readiness().is_ok());
    }
}
