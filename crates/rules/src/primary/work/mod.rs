//! What one primary's loop does next, with no I/O. [`Work`] owns the primary's parts (the
//! coordinator, the sweeps, the walk in flight) and the one decision none of them can make
//! alone: what goes out now. Which keys are checked (a batch per sweep, once its window has
//! passed or it is full, within the in-flight window, and only while Redis's standing
//! allows a verdict), when a walk starts, reads its next page and ends, and when the loop must
//! wake. The loop hands in what happened and applies the [`Task`]s that come back, as ntpd-rs's
//! source loop applies its source's actions.

mod task;
#[cfg(test)]
mod tests;
mod walk;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use task::{Batch, Now, Task, Walked};

use super::coordinator::{Action, Coordinator, Refreshed, Turn};
use super::deadlines::{self, Batching, WITNESSES, Window};
use super::notifications::{Op, Outcome, Pending, Polled};
use super::standing::Evidence;
use super::sweeps::Sweeps;
use super::tracked::{Tick, Tracked};
use super::walks::{Walk, WalkKind};
use super::{Io, Job as _};
use crate::check::{CheckOpts, Checked};
use crate::index::Ticket;
use crate::keys::Keys;
use crate::keyspace::Notice;
use crate::report::Beat;

/// The daemon-wide settings the work goes by.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// `evict.batch_keys`, `evict.pipeline_depth` and `evict.max_pipeline_depth`.
    pub batching: Batching,
    /// `scan.max_keys_per_second`; `None`: walks are not paced.
    pub keys_per_second: Option<f64>,
    /// `tracking.max_keys`, which the log names when an index fills up.
    pub max_keys: usize,
    /// The loop wakes at least this often, idle or not: its turning is what the watchdog
    /// watches.
    pub alive_every: Duration,
    /// A key's first check is followed by a look before its deadline, so that keys first
    /// checked together are not checked together ever after ([`deadlines::spread_first`]).
    /// Off in tests that follow one key's deadlines.
    pub spread_first: bool,
}

/// One primary's work: its parts, the walk in flight, and how many requests are out.
pub struct Work<I: Io> {
    coord: Coordinator<I>,
    sweeps: Sweeps<I>,
    settings: Settings,
    beat: Arc<dyn Beat>,
    walk: Option<Walk<I::Error>>,
    /// Pages the last walk that covered the keyspace read: a periodic reconciliation is
    /// paced by them.
    last_walk_pages: Option<u64>,
    /// Requests handed out whose results have not come back.
    in_flight: usize,
    /// How many may be.
    window: Window,
    /// Shutdown is under way: nothing new goes out, what is out comes back.
    stopping: bool,
    tasks: Vec<Task<I>>,
}

impl<I: Io> Work<I> {
    pub fn new(
        coord: Coordinator<I>,
        sweeps: Sweeps<I>,
        settings: Settings,
        beat: Arc<dyn Beat>,
    ) -> Self {
        coord.on_window(settings.batching.depth);
        Self {
            coord,
            sweeps,
            settings,
            beat,
            walk: None,
            last_walk_pages: None,
            in_flight: 0,
            window: Window::new(&settings.batching),
            stopping: false,
            tasks: Vec::new(),
        }
    }

    /// Decides what goes out at `now`: what the coordinator asks, checks of due keys, the
    /// walk's reads and checks. Returns it with whatever the events since the last turn asked,
    /// in order. `node_changed`: the data path's connection broke, or the store followed a
    /// failover on its own. `subscribe` makes a subscription operation's future, on the
    /// sweeps' channel patterns.
    pub fn turn(
        &mut self,
        now: Now,
        node_changed: bool,
        mut subscribe: impl FnMut(Op<I>, Vec<String>) -> Pending<I>,
    ) -> Vec<Task<I>> {
        let turn = Turn {
            walking: self.walk.is_some(),
            sweeps: self.sweeps.len(),
            node_changed,
            stopping: self.stopping,
        };
        let patterns = self.sweeps.channels();
        self.coord
            .turn(now.at, turn, |op| subscribe(op, patterns.clone()));
        if let Some(walk) = &mut self.walk
            && self.coord.catch_up_wanted()
        {
            walk.pace.unspread();
        }
        self.apply_actions(now.at);
        self.dispatch_checks(now.at);
        self.dispatch_walk_work(now);
        if let Some(clock) = self.coord.clock() {
            self.sweeps.holding(clock.at(now.at));
        }
        std::mem::take(&mut self.tasks)
    }

    /// The coordinator's actions, as tasks or as changes to the sweeps.
    fn apply_actions(&mut self, now: Instant) {
        for action in self.coord.take_actions() {
            match action {
                Action::Probe => self.request(Task::Probe),
                Action::ProvePermissions => {
                    let jobs = self.sweeps.iter().map(|t| t.job.clone()).collect();
                    self.request(Task::ProvePermissions(jobs));
                }
                Action::Refresh(failure) => self.request(Task::Refresh(failure)),
                Action::Walk(start) => self.start_walk(now, start),
                Action::Unnoticed => self.sweeps.set_unnoticed(),
                Action::Suspect => self.tasks.push(Task::Suspect),
                Action::RecheckLatest => {
                    let now_ms = self.coord.clock().map_or(0, |c| c.ms_at(now));
                    self.sweeps.recheck_latest(now_ms);
                }
            }
        }
    }

    /// Hands out a task that makes a request: it is in flight until its result comes back.
    fn request(&mut self, task: Task<I>) {
        self.in_flight += 1;
        self.tasks.push(task);
    }

    /// Whether another request may go out.
    fn room(&self) -> bool {
        self.window.room(self.in_flight)
    }

    /// Hands due keys to checks, a batch per sweep in turn, while there is room in flight and
    /// Redis's standing allows a verdict.
    fn dispatch_checks(&mut self, now: Instant) {
        // Keys that wait for a verdict rather than for room do not grow the window.
        self.window.waiting(false);
        let Some(clock) = self.coord.clock() else {
            return;
        };
        if self.stopping {
            return;
        }
        let now_ms = clock.ms_at(now);
        let read_time = self.coord.wants_time(now);
        let batch = self.settings.batching.batch;
        let mut any = true;
        while any {
            any = false;
            for i in 0..self.sweeps.len() {
                let ttl = self.sweeps.get_mut(i).job.ttl().as_secs_f64();
                let Some(verdict) = self.coord.verdict(now, ttl) else {
                    return;
                };
                if !self.room() {
                    let waiting = self.sweeps.next_ripe(batch).is_some_and(|at| at <= now_ms);
                    self.window.waiting(waiting);
                    return;
                }
                let t = self.sweeps.get_mut(i);
                let Some(due) = t.due_batch(now_ms, batch) else {
                    continue;
                };
                any = true;
                let epoch = t.epoch;
                let opts = deadlines::deadline_opts(verdict, read_time);
                let tickets = due.tickets;
                let mut batch = batch_of(t, due.keys, opts);
                batch.probing = due.probing;
                self.request(Task::Check {
                    epoch,
                    tickets,
                    batch,
                });
            }
        }
    }

    /// The sweeps to run here from now on: a reload changed them, or a lease was won or lost.
    /// A sweep that is new, or whose settings changed, starts with an empty index and a walk.
    pub fn on_jobs(&mut self, now: Instant, jobs: Vec<Arc<I::Job>>) {
        if self.sweeps.set(jobs) {
            self.coord.on_sweeps_changed(now);
        }
    }

    /// The schedule of the sweep `name` ticked: a walk, unless notifications make it
    /// unnecessary or one is running.
    pub fn on_tick(&mut self, now: Instant, name: &str) {
        let walk = self.walk.as_ref().map(|w| w.started);
        match self.sweeps.tick(name, now, self.coord.in_use(), walk) {
            Tick::Skip => {}
            Tick::Running { overrun } => {
                // A sweep whose keys are not all tracked wants its walk on its schedule: a
                // spread walk in flight goes at full speed for it.
                if let Some(walk) = &mut self.walk {
                    walk.pace.unspread();
                }
                tracing::debug!(sweep = %name, node = %self.sweeps.node(), overrun, "a walk is still running; skipping this tick");
            }
            Tick::Walk => {
                self.coord
                    .start_walk(now, WalkKind::Discover, !self.stopping);
            }
        }
    }

    /// The loop woke at `now`: a pause of the daemon since its last turn is taken in.
    pub fn woke(&mut self, now: Instant) {
        self.coord.on_turn(now);
    }

    /// A keyspace notice arrived at `now`.
    pub fn on_notice(&mut self, now: Instant, n: &Notice) {
        self.coord.on_notice(now);
        let redis_now = self.coord.clock().map(|c| c.at(now));
        if let Some(sweep) = self.sweeps.notice(n, redis_now) {
            tracing::warn!(
                sweep = %sweep,
                node = %self.sweeps.node(),
                max_keys = self.settings.max_keys,
                "tracking.max_keys reached: new keys are checked by walks on the sweep's schedule"
            );
        }
    }

    /// The subscription operation in flight came to `outcome` at `now`.
    pub fn on_subscription(&mut self, now: Instant, outcome: Outcome<I>) {
        self.coord.on_subscription(now, outcome);
    }

    /// The subscription's connection closed at `now`.
    pub fn on_subscription_lost(&mut self, now: Instant) {
        self.coord
            .on_subscription_lost(now, "the connection closed");
    }

    /// The probe came back.
    pub fn on_probe(&mut self, now: Now, probe: Result<Evidence, I::Error>) {
        self.landed(false);
        self.coord.on_probe(now.at, probe);
        self.finish_walk_if_done(now);
    }

    /// The proof of the permissions came back.
    pub fn on_permitted(&mut self, now: Now, permitted: Result<(), I::Error>) {
        self.landed(false);
        self.coord.on_permitted(now.at, permitted);
        self.finish_walk_if_done(now);
    }

    /// The look at the primary came back.
    pub fn on_refreshed(&mut self, now: Now, refreshed: Refreshed<I::Error>) {
        self.landed(false);
        self.coord.on_refreshed(now.at, refreshed);
        self.finish_walk_if_done(now);
    }

    /// A [`Task::Check`] sent at `sent` came back: its keys go back into their sweep's index
    /// (unless the sweep was replaced meanwhile), and a failure puts Redis's standing in doubt.
    pub fn on_checked(
        &mut self,
        now: Now,
        sent: Instant,
        epoch: u64,
        tickets: Vec<Ticket>,
        checked: Checked<I::Error>,
    ) {
        self.landed(checked.error.is_some());
        let at = now.at;
        self.coord
            .on_check(sent, at, checked.time, checked.error.is_some());
        let now_ms = self.coord.clock().map_or(0, |c| c.ms_at(at));
        let node = self.sweeps.node().clone();
        if let Some(t) = self.sweeps.by_epoch(epoch) {
            let credit_until = self.coord.credit_until(t.job.ttl().as_secs_f64());
            t.checked(
                &node,
                tickets,
                &checked,
                now_ms,
                credit_until,
                self.settings.spread_first,
            );
        }
        if let Some(e) = checked.error {
            self.coord
                .on_failure(at, "a check failed; its keys are checked again", e);
        }
        self.finish_walk_if_done(now);
    }

    /// A request came back; `failed`: a check that failed.
    fn landed(&mut self, failed: bool) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let before = self.window.depth();
        self.window.landed(failed);
        if self.window.depth() != before {
            self.coord.on_window(self.window.depth());
        }
        self.beat.progress();
    }

    /// Shutdown: nothing new goes out from now on; what is out comes back and is handed in.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// Every request is back after shutdown: a walk still in flight was cut short.
    pub fn stopped(&mut self) {
        if let Some(walk) = self.walk.take() {
            for t in self.sweeps.iter() {
                if walk.epochs.contains(&t.epoch) {
                    t.walk_interrupted();
                }
            }
        }
    }

    /// The loop ends: every sweep's and the primary's share of the figures goes.
    pub fn forget(&self) {
        self.sweeps.forget();
        self.coord.forget();
    }

    /// When the loop must wake at the latest, if nothing happens before: when the next batch
    /// of due keys is ripe (with room for its check), the walk's pace, the parts' timers, and
    /// [`Settings::alive_every`].
    pub fn next_wake(&self, now: Instant) -> Instant {
        let due = self
            .sweeps
            .next_ripe(self.settings.batching.batch)
            .filter(|_| self.room());
        let walk = self.walk.as_ref().map(|w| w.paced_until(now));
        self.coord
            .next_wake(now, self.settings.alive_every, due, walk)
    }

    /// Whether the walk in flight takes its next page at `now`: its pace allows, there is
    /// room in flight, not too many of its keys wait already, and shutdown has not begun.
    pub fn wants_page(&self, now: Instant) -> bool {
        if self.stopping {
            return false;
        }
        let queued_ok = self.settings.batching.room_for_page(self.sweeps.queued());
        self.walk
            .as_ref()
            .is_some_and(|w| w.wants_page(now, self.room(), queued_ok))
    }

    /// What the loop polls for the subscription.
    pub fn subscription(&mut self) -> Polled<'_, I> {
        self.coord.subscription()
    }

    /// Requests out whose results have not come back.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Requests allowed in flight now.
    pub fn window(&self) -> usize {
        self.window.depth()
    }
}

/// A check of `keys` of sweep `t` judged as `opts` say. When the storm guard suspects the
/// sweep went silent, a few busy keys go with it as witnesses.
fn batch_of<I: Io>(t: &Tracked<I>, keys: Keys, opts: CheckOpts) -> Batch<I> {
    let witnesses = if opts.purpose.may_hold() && t.job.guard().suspects_silence(opts.judge_at) {
        let pattern = t.job.pattern();
        t.index
            .latest(WITNESSES)
            .map(|id| pattern.key(id))
            .collect()
    } else {
        Vec::new()
    };
    Batch {
        job: t.job.clone(),
        observer: t.observer.clone(),
        keys,
        probing: Vec::new(),
        witnesses,
        opts,
    }
}
