//! A sweep as one primary's loop runs it: its deadline index, what the walk in flight queued for
//! it, and how each thing that comes back (a check, a page, a notice, a read, the walk's end)
//! changes them. No I/O: the loop hands results in and gets batches of work out.

use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;

use super::deadlines::{self, Batching, Look};
use super::standing::Verdict;
use super::walks::{WalkEnding, WalkKind};
use super::{Io, Job};
use crate::check::{Checked, Expiry};
use crate::index::{Capacity, Index, NEVER, Next, Spread, Ticket, Track};
use crate::keys::Keys;
use crate::keyspace::{self, Change};
use crate::node::NodeId;
use crate::read::{KeyRead, KeyStatus, Probing, Reads};
use crate::report::{Beat, Observer, SweepReport};
use crate::scan::Queue;

/// The sweep's window in milliseconds.
fn ttl_ms(job: &impl Job) -> u64 {
    u64::try_from(job.ttl().as_millis()).unwrap_or(NEVER)
}

/// A sweep on this primary.
pub struct Tracked<I: Io> {
    pub job: Arc<I::Job>,
    /// Tells this sweep's futures from those of a sweep it replaced.
    pub epoch: u64,
    pub index: Index,
    pub observer: Arc<dyn Observer>,
    /// The keyspace-notification channel pattern of its keys.
    pub channel: String,
    /// A walk covering this sweep finished since it was added.
    synced: bool,
    /// Keys the last walk could not track (the index is full).
    untracked: u64,
    /// Keys of this sweep the walk in flight found so far, and could not track.
    walk_scanned: u64,
    walk_untracked: u64,
    /// Work the walk in flight queued: ids to reconcile, and keys to check directly (they could
    /// not be tracked).
    verify: Queue,
    direct: Queue,
    /// Once the walk's SCAN is done: the index slot from which keys it did not see are read
    /// (and forgotten if gone), until the end of the index.
    unseen_from: Option<usize>,
    /// Members of the keys walks check directly (untracked): at the last walk's end, and so
    /// far in the walk in flight. The storm guard counts them with the index's.
    direct_members: u64,
    walk_direct_members: u64,
    /// This sweep's last schedule tick that asked for a walk.
    last_tick: Option<Instant>,
}

/// What a schedule tick comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    /// Nothing to walk for: notifications find the new keys.
    Skip,
    /// A walk runs: it serves this tick (`overrun` if it started before the previous one).
    Running { overrun: bool },
    /// Walk now.
    Walk,
}

/// Keys due for a check, as the index handed them out: the `i`-th ticket, key and probing are
/// of one key, and so is the `i`-th state of the check's result.
#[derive(Debug)]
pub struct Due {
    /// What gives each key back to the index when its check returns.
    pub tickets: Vec<Ticket>,
    /// The keys to read.
    pub keys: Keys,
    /// What each key's read asks besides its lowest score.
    pub probing: Vec<Probing>,
}

/// Work a walk queued for this sweep, ready to go.
pub enum WalkWork {
    /// A check of keys the index could not take, judged as `verdict` allows and no later than
    /// their page was read.
    Direct {
        keys: Vec<Vec<u8>>,
        page_time: f64,
        verdict: Verdict,
    },
    /// A read of tracked keys' lowest scores (a reconciliation).
    Verify { ids: Vec<Vec<u8>> },
    /// A read of tracked keys the walk did not find: those gone are forgotten.
    Unseen { ids: Vec<Vec<u8>> },
}

/// How the walk in flight ended, for each sweep it served.
#[derive(Debug, Clone, Copy)]
pub struct WalkEnd {
    pub how: WalkEnding,
    pub duration: Duration,
    /// A reconciliation under one subscription from start to end: every write is noticed.
    pub all_noticed: bool,
    pub notifications: bool,
    pub max_keys: usize,
    /// Unix time now, for the last-success gauge.
    pub unix_now: f64,
}

impl<I: Io> Tracked<I> {
    pub fn new(
        job: Arc<I::Job>,
        epoch: u64,
        db: i64,
        capacity: Arc<Capacity>,
        beat: Arc<dyn Beat>,
    ) -> Self {
        let observer: Arc<dyn Observer> = Arc::new(LoopObserver {
            report: job.report().clone(),
            beat,
        });
        Self {
            channel: format!("{}{}", keyspace::channel_prefix(db), job.pattern().glob()),
            job,
            epoch,
            index: Index::new(capacity),
            observer,
            synced: false,
            untracked: 0,
            walk_scanned: 0,
            walk_untracked: 0,
            verify: Queue::default(),
            direct: Queue::default(),
            unseen_from: None,
            direct_members: 0,
            walk_direct_members: 0,
            last_tick: None,
        }
    }

    /// Keys queued by the walk in flight, waiting for a check or a read (and one while keys
    /// it did not see are left to read).
    pub fn queued(&self) -> usize {
        self.verify.len() + self.direct.len() + usize::from(self.unseen_from.is_some())
    }

    /// Publishes what the index holds now (`tracked_keys`, `members`) and tells the storm
    /// guard: after every change of the index's size, so that the gauges follow the keyspace.
    pub fn index_changed(&self, node: &NodeId) {
        let (tracked, members) = (self.index.len() as u64, self.index.members());
        self.report_population(node);
        self.job.report().node_figures(node, &mut |f| {
            f.tracked = tracked;
            f.members = members;
        });
    }

    /// Tells the storm guard how many members this sweep has here: the tracked keys' as of
    /// their checks, and the untracked keys' as of the walks that checked them.
    fn report_population(&self, node: &NodeId) {
        let direct = self.direct_members.max(self.walk_direct_members);
        self.job
            .guard()
            .population(node, self.index.members() + direct);
    }

    /// A schedule tick at `now`. With notifications in use a walk adds nothing between
    /// reconciliations, unless some keys could not be tracked. A walk started since this
    /// sweep's previous tick (another sweep's tick, met at the same moment) is this tick's
    /// walk; only one older than that is late.
    pub fn tick(&mut self, now: Instant, notifications: bool, walk: Option<Instant>) -> Tick {
        if notifications && self.synced && self.untracked == 0 {
            return Tick::Skip;
        }
        let previous = self.last_tick.replace(now);
        let tick = match walk {
            Some(started) => Tick::Running {
                overrun: previous.is_some_and(|p| started < p),
            },
            None => Tick::Walk,
        };
        self.job
            .report()
            .tick(matches!(tick, Tick::Running { overrun: true }));
        tick
    }

    /// A batch of keys to check at `now_ms` (Redis's clock), if one is ripe (see
    /// [`Batching::ripe_at`]).
    pub fn due_batch(&mut self, now_ms: u64, batch: usize) -> Option<Due> {
        if self.ripe_at(batch).is_none_or(|at| at > now_ms) {
            return None;
        }
        let due = self.take_due(Batching::due_by(now_ms), batch);
        (!due.keys.is_empty()).then_some(due)
    }

    /// When (ms, Redis's clock) this sweep's next batch of `batch` keys is checked.
    pub fn ripe_at(&self, batch: usize) -> Option<u64> {
        Batching::ripe_at(self.index.next_due(), self.index.nth_due(batch))
    }

    /// The keys due by `due_by` (ms, Redis's clock), up to `batch`.
    fn take_due(&mut self, due_by: u64, batch: usize) -> Due {
        let mut due = Due {
            tickets: Vec::with_capacity(batch),
            // Ids as long as a UUID's need no second allocation.
            keys: Keys::with_capacity(batch, self.job.pattern().key_len(36)),
            probing: Vec::with_capacity(batch),
        };
        let pattern = self.job.pattern();
        self.index.take_due(due_by, batch, |ticket, id, probing| {
            due.tickets.push(ticket);
            pattern.push_key(id, &mut due.keys);
            due.probing.push(probing);
        });
        due
    }

    /// A check of keys this sweep's index handed out came back: each key is looked at again at
    /// its new deadline, retried, or forgotten. `credit_until`: the credit of the last outage
    /// or reset (Redis's clock, seconds), which spares every member until then.
    /// `spread_first`: a key's first check is followed by a look before its deadline, and
    /// the first check at a deadline after it by another ([`deadlines::spread_first`],
    /// [`deadlines::respread`]).
    pub fn checked(
        &mut self,
        node: &NodeId,
        tickets: Vec<Ticket>,
        checked: &Checked<I::Error>,
        now_ms: u64,
        credit_until: Option<f64>,
        spread_first: bool,
    ) {
        let ttl_ms = ttl_ms(&*self.job);
        // Members an outage kept from heartbeating are looked at again when their credit ends;
        // members the storm guard holds, when the hold ends.
        let spared_until = deadlines::spared_until(credit_until, checked.hold_until, now_ms);
        let written_by = now_ms.saturating_add(ttl_ms);
        for (k, (ticket, state)) in tickets.into_iter().zip(&checked.states).enumerate() {
            let expiry = checked.expires_in.get(k).copied().unwrap_or(Expiry::Unread);
            match deadlines::next_look(state, now_ms, ttl_ms, spared_until, expiry.ms()) {
                Look::Forget => self.index.checked(ticket, None, written_by),
                Look::At { next, card } => {
                    let spread = match (spared_until, spread_first) {
                        (None, true) => self.index.spread(ticket),
                        _ => None,
                    };
                    let next = match spread {
                        None => next,
                        Some(Spread::First(f)) => deadlines::spread_first(now_ms, next, ttl_ms, f),
                        Some(Spread::Again { fraction, due }) => {
                            deadlines::respread(now_ms, next, due, ttl_ms, fraction)
                        }
                    };
                    let next = Next {
                        at: next,
                        card,
                        ttl: deadlines::ttl_seen(expiry, now_ms, next, ttl_ms),
                    };
                    self.index.checked(ticket, Some(next), written_by)
                }
                Look::Retry(at) => self.index.retry(ticket, at),
            }
        }
        self.job
            .report()
            .deadline_checks(checked.states.len() as u64, checked.error.is_some());
        self.index_changed(node);
    }

    /// A keyspace notice for conversation `id`, at Redis's `now` (seconds) if its clock was
    /// read. Returns whether the index was full for the first time: from then on ticks walk
    /// again, which the loop logs.
    pub fn notice(&mut self, node: &NodeId, id: &[u8], change: Change, now: Option<f64>) -> bool {
        match change {
            Change::Written => {
                if let Some(now) = now {
                    self.job.guard().heartbeat(now);
                }
                let now_ms = now.map(|now| (now * 1000.0) as u64);
                // A score written now is due by now + ttl; before the first reply there is no
                // clock to say when now is, and the first walk reads every key anyway.
                let by = now_ms.map_or(NEVER, |now| now.saturating_add(ttl_ms(&*self.job)));
                if !self.index.written(id, by)
                    && self.index.track(id, now_ms.unwrap_or(0)) == Track::Full
                    && self.untracked == 0
                {
                    // Left to walks on the schedule, like any key a walk could not track. The
                    // next walk counts such keys; a notice cannot tell a key it refused before
                    // from a new one.
                    self.untracked = 1;
                    self.job
                        .report()
                        .node_figures(node, &mut |f| f.untracked = 1);
                    return true;
                }
            }
            Change::Deleted => {
                self.index.deleted(id);
                self.index_changed(node);
            }
            Change::Removed => {}
        }
        false
    }

    /// A walk starts.
    pub fn walk_started(&mut self) {
        self.walk_scanned = 0;
        self.walk_untracked = 0;
        self.walk_direct_members = 0;
        self.unseen_from = None;
        self.index.walk_started();
    }

    /// The walk's SCAN is done: every key there throughout the walk was found, so the others
    /// may be gone.
    pub fn scan_done(&mut self) {
        self.unseen_from = Some(0);
    }

    /// A key the walk found (`id` of this sweep), in a page read at Redis's `page_time`:
    /// tracked, queued for a read (reconciliation) or for a direct check (the index is full).
    pub fn found(
        &mut self,
        key: &[u8],
        id: &[u8],
        page_time: f64,
        kind: WalkKind,
        count_missed: bool,
        now_ms: u64,
    ) {
        self.walk_scanned += 1;
        if let Some(read) = self.index.found(id) {
            if kind == WalkKind::Reconcile && read {
                self.verify.push(id.to_vec(), page_time);
            }
            return;
        }
        match self.index.track(id, now_ms) {
            Track::Added => {
                if count_missed && self.synced {
                    self.job.report().missed_notifications(1);
                }
            }
            Track::Known => {}
            Track::Full => {
                self.walk_untracked += 1;
                self.direct.push(key.to_vec(), page_time);
            }
        }
    }

    /// The next batch of work the walk queued, if one is ready. Keys to check directly wait
    /// while nothing may be evicted (`verdict` is `None`); reads go on.
    pub fn walk_work(
        &mut self,
        batch: usize,
        scan_done: bool,
        verdict: Option<Verdict>,
    ) -> Option<WalkWork> {
        if let Some(verdict) = verdict
            && let Some((keys, page_time)) = self.direct.take(batch, scan_done)
        {
            return Some(WalkWork::Direct {
                keys,
                page_time,
                verdict,
            });
        }
        if let Some((ids, _)) = self.verify.take(batch, scan_done) {
            return Some(WalkWork::Verify { ids });
        }
        let mut ids = Vec::new();
        while ids.is_empty()
            && let Some(from) = self.unseen_from
        {
            self.unseen_from = self.index.unseen(from, batch, &mut ids);
        }
        (!ids.is_empty()).then_some(WalkWork::Unseen { ids })
    }

    /// A direct check of the walk came back: its members count for the storm guard.
    pub fn direct_checked(&mut self, node: &NodeId, members: u64) {
        self.walk_direct_members += members;
        self.report_population(node);
    }

    /// Reads of tracked keys the walk did not find came back: those gone are forgotten.
    /// Returns how many.
    pub fn unseen_read(&mut self, node: &NodeId, ids: &[Vec<u8>], reads: Reads) -> usize {
        let mut forgotten = 0;
        for (id, read) in ids.iter().zip(reads.keys) {
            let there = matches!(read, KeyStatus::Set(KeyRead { card, .. }) if card > 0);
            if !there && self.index.gone(id) {
                forgotten += 1;
            }
        }
        if forgotten > 0 {
            self.index_changed(node);
        }
        forgotten
    }

    /// Reads of tracked keys' lowest scores came back: deadlines move earlier where a score
    /// was written in the past, and keys found gone are forgotten.
    pub fn verified(&mut self, node: &NodeId, ids: &[Vec<u8>], reads: Reads) {
        let ttl_ms = ttl_ms(&*self.job);
        let unit = self.job.score_unit();
        for (id, read) in ids.iter().zip(reads.keys) {
            match read.set() {
                Some(KeyRead {
                    oldest: Some(oldest),
                    card,
                    ..
                }) => {
                    let deadline = deadlines::deadline_ms(unit.to_seconds(oldest), ttl_ms);
                    self.index.due_by(id, deadline, card);
                }
                // Gone since it was tracked (a restart, a DEL nobody told us of).
                _ => self.index.deleted(id),
            }
        }
        self.index_changed(node);
    }

    /// The walk in flight ended: its figures, and whether this sweep is synced now. Returns
    /// what the log should say of it.
    pub fn walk_ended(&mut self, node: &NodeId, end: WalkEnd) -> Ended {
        self.verify.clear();
        self.direct.clear();
        self.unseen_from = None;
        let report = self.job.report();
        match end.how {
            WalkEnding::Cancelled => {
                report.walk_interrupted(self.walk_scanned);
                return Ended::default();
            }
            WalkEnding::Failed => {
                report.walk_failed(self.walk_scanned, end.duration);
                return Ended::default();
            }
            WalkEnding::Done => {}
        }
        report.walk_succeeded(self.walk_scanned, end.duration);
        if end.all_noticed {
            self.index.set_unnoticed(false);
        }
        let newly_full = self.walk_untracked > 0 && self.untracked == 0;
        self.untracked = self.walk_untracked;
        self.direct_members = self.walk_direct_members;
        self.report_population(node);
        let first = report.walked(node) && !self.synced;
        self.synced = true;
        let (scanned, untracked) = (self.walk_scanned, self.walk_untracked);
        let (tracked, members) = (self.index.len() as u64, self.index.members());
        report.node_figures(node, &mut |f| {
            f.keys = scanned;
            f.untracked = untracked;
            f.tracked = tracked;
            f.members = members;
            f.last_success = end.unix_now;
        });
        Ended {
            untracked: newly_full.then_some(untracked),
            first: first.then_some((scanned, tracked as usize)),
        }
    }

    /// Shutdown cut the walk in flight short.
    pub fn walk_interrupted(&self) {
        self.job.report().walk_interrupted(self.walk_scanned);
    }

    /// This sweep leaves the primary (a reload, a lost lease, the loop's end).
    pub fn forget(&self, node: &NodeId) {
        self.job.report().forget_node(node);
        self.job.guard().forget(node);
    }
}

/// What the log says of a sweep's part of a walk that ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// The index filled up: this many keys are left to walks on the schedule.
    pub untracked: Option<u64>,
    /// The sweep's first walk of this primary: keys found, keys tracked.
    pub first: Option<(u64, usize)>,
}

impl Ended {
    /// What the log says of sweep `sweep`'s part of the walk that ended as `end`.
    pub fn log(&self, sweep: &str, node: &NodeId, end: &WalkEnd) {
        if let Some(keys) = self.untracked {
            tracing::warn!(
                sweep,
                %node,
                keys,
                max_keys = end.max_keys,
                "tracking.max_keys reached: the keys past it are checked by walks on the sweep's schedule"
            );
        }
        if let Some((keys, tracked)) = self.first {
            tracing::info!(
                sweep,
                %node,
                keys,
                tracked,
                notifications = end.notifications,
                "first walk done: its keys are checked at their deadlines from now on"
            );
        }
    }
}

/// What checks on this primary report to: the sweep's report, and the loop's liveness.
struct LoopObserver {
    report: Arc<dyn SweepReport>,
    beat: Arc<dyn Beat>,
}

impl Observer for LoopObserver {
    fn key_checked(&self, cardinality: u64) {
        self.report.key_checked(cardinality);
    }
    fn progress(&self) {
        self.beat.progress();
    }
    fn member_evicted(&self, lag_seconds: f64) {
        self.report.member_evicted(lag_seconds);
    }
    fn published(&self, events: u64) {
        self.report.published(events);
    }
    fn scores_ahead(&self, keys: u64) {
        self.report.scores_ahead(keys);
    }
    fn read_refused(&self) {
        self.report.read_refused();
    }
    fn events_failed(&self, events: u64) {
        self.report.events_failed(events);
    }
    fn events_unconfirmed(&self, events: u64) {
        self.report.events_unconfirmed(events);
    }
    fn evictions_unanswered(&self, calls: u64) {
        self.report.evictions_unanswered(calls);
    }
}

#[cfg(test)]
mod tests;
