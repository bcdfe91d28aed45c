//! When one primary's loop walks its keyspace, and the bookkeeping of the walk in flight. No
//! I/O: the walk's SCAN pages are a stream the loop polls; pacing and batching are the shared
//! [`crate::scan`] pieces a full pass uses too.

use std::time::Duration;

use std::time::Instant;

use crate::clock::after;
use crate::scan::{Pace, Spread};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkKind {
    /// Finds keys the index does not know: on a sweep's schedule, where notifications are not
    /// in use.
    Discover,
    /// Also reads the lowest score of every tracked key, which catches a score written in the
    /// past, a key deleted or created anew while nobody listened (a Redis restart): at start,
    /// after a (re)subscription or a failure, and every `tracking.reconcile_interval`.
    Reconcile,
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEnding {
    /// It covered the keyspace.
    Done,
    Failed,
    /// Shutdown cut it short.
    Cancelled,
}

/// When walks are due: a catch-up walk ("sync") after whatever may have hidden writes, and the
/// periodic reconciliation.
#[derive(Debug)]
pub struct Walks {
    interval: Duration,
    sync_wanted: bool,
    sync_after: Instant,
    reconcile_at: Instant,
}

/// How a walk starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    pub kind: WalkKind,
    /// An untracked key it finds is a missed notification.
    pub count_missed: bool,
    /// A periodic reconciliation with notifications in use: nothing waits for it, so it is
    /// spread over this long ([`spread`]).
    pub spread_over: Option<Duration>,
}

/// A periodic reconciliation is spread over this share of `tracking.reconcile_interval`
/// (a half): with notifications in use nothing waits for it, and at full speed it took a Redis
/// that the apps kept at 85 % of a core to 98 to 100 % for 15 to 37 s at 1,000,000 keys,
/// delaying the apps' own commands (`benches/busy.py --timeline`; spread, at most 98 %). The
/// start-up walk and a catch-up walk after a lost subscription go at full speed: keys may wait
/// for them.
const SPREAD_SHARE: u32 = 2;

/// A spread reconciliation still asks for this many pages a second at least.
const MIN_PAGES_PER_SECOND: f64 = 10.0;

/// The pace that spreads a walk starting at `at` over `spread_over`, given how many pages the
/// last whole walk of the primary read (`None`: no walk finished yet, so no pace). Past
/// `spread_over` the walk goes at full speed: a keyspace that grew since is not walked for
/// longer.
pub fn spread(
    at: Instant,
    spread_over: Option<Duration>,
    last_pages: Option<u64>,
) -> Option<Spread> {
    let (over, pages) = (spread_over?, last_pages?);
    let seconds = over.as_secs_f64();
    (seconds > 0.0).then(|| Spread {
        every: Duration::from_secs_f64(1.0 / (pages as f64 / seconds).max(MIN_PAGES_PER_SECOND)),
        until: at + over,
    })
}

impl Walks {
    /// At start, a catch-up walk is wanted at once.
    pub fn new(at: Instant, reconcile_interval: Duration) -> Self {
        Self {
            interval: reconcile_interval,
            sync_wanted: true,
            sync_after: at,
            reconcile_at: after(at, reconcile_interval),
        }
    }

    /// A catch-up walk is wanted, no sooner than `after`.
    pub fn want_sync(&mut self, after: Instant) {
        self.sync_wanted = true;
        self.sync_after = after;
    }

    /// A catch-up walk is wanted, whenever one was already due.
    pub fn want_sync_soon(&mut self) {
        self.sync_wanted = true;
    }

    /// Whether the periodic reconciliation is due (the subscription's settings are looked at
    /// again then too).
    pub fn reconcile_due(&self, at: Instant) -> bool {
        self.reconcile_at <= at
    }

    /// Whether a walk is due at `at`, with none in flight. A catch-up walk waits for a
    /// subscription being made (`subscription_waits`): then nothing written meanwhile can be
    /// missed, and one walk does for both.
    pub fn due(&self, at: Instant, subscription_waits: bool) -> bool {
        self.reconcile_due(at) || (self.sync_wanted && self.sync_after <= at && !subscription_waits)
    }

    /// When a walk comes due, with none in flight. A walk waiting for a subscription is woken
    /// by its outcome or its retry, not by a timer already due (that would spin).
    pub fn next_wake(&self, subscription_waits: bool) -> Instant {
        if self.sync_wanted && !subscription_waits {
            self.reconcile_at.min(self.sync_after)
        } else {
            self.reconcile_at
        }
    }

    /// A walk of `kind` starts at `at`: a catch-up walk reconciles, and a reconciliation puts
    /// the next one an interval off. A catch-up walk counts no missed notification: the
    /// periodic one, with notifications in use throughout, does.
    pub fn start(&mut self, at: Instant, kind: WalkKind, notifications: bool) -> Start {
        let count_missed = notifications && !self.sync_wanted;
        let kind = if self.sync_wanted {
            WalkKind::Reconcile
        } else {
            kind
        };
        let spread_over =
            (count_missed && kind == WalkKind::Reconcile).then(|| self.interval / SPREAD_SHARE);
        if kind == WalkKind::Reconcile {
            self.sync_wanted = false;
            self.reconcile_at = after(at, self.interval);
        }
        Start {
            kind,
            count_missed,
            spread_over,
        }
    }

    /// Whether a catch-up walk is wanted: a spread walk in flight goes at full speed then,
    /// so that the catch-up does not wait for it.
    pub fn sync_wanted(&self) -> bool {
        self.sync_wanted
    }

    /// Nothing to walk at `at` (no sweep here, or stopping): no catch-up is owed, and a
    /// reconciliation that came due is skipped to the next interval. Left due, it would be due
    /// at every turn and its wake-up always past: a loop without sweeps (a standby's primary)
    /// would spin once the first interval passed.
    pub fn nothing_to_walk(&mut self, at: Instant) {
        self.sync_wanted = false;
        if self.reconcile_due(at) {
            self.reconcile_at = after(at, self.interval);
        }
    }
}

/// The walk in flight (its pages are the loop's: it reads them as this says).
pub struct Walk<E> {
    pub kind: WalkKind,
    pub started: Instant,
    /// The sweeps it serves.
    pub epochs: Vec<u64>,
    pub count_missed: bool,
    /// Notifications were in use when it started, under this generation of the subscription;
    /// if the same one still is at its end, every write since is noticed, and only keys written
    /// since their checks need reading again.
    noticed_from_start: bool,
    generation: u64,
    pub scan_done: bool,
    /// Walk futures not finished yet.
    in_flight: usize,
    pub error: Option<E>,
    pub pace: Pace,
}

impl<E> Walk<E> {
    pub fn new(
        at: Instant,
        start: Start,
        epochs: Vec<u64>,
        pace: Pace,
        subscription: (bool, u64),
    ) -> Self {
        Self {
            kind: start.kind,
            started: at,
            epochs,
            count_missed: start.count_missed,
            noticed_from_start: subscription.0,
            generation: subscription.1,
            scan_done: false,
            in_flight: 0,
            error: None,
            pace,
        }
    }

    /// Whether to ask for the next page at `at`, with `room` in flight and `queued` keys waiting.
    pub fn wants_page(&self, at: Instant, room: bool, queued_ok: bool) -> bool {
        !self.scan_done && self.error.is_none() && self.pace.ready(at) && room && queued_ok
    }

    /// When the pace lets the next page be asked for, if later than `at`.
    pub fn paced_until(&self, at: Instant) -> Option<Instant> {
        self.pace.next_page_at().filter(|t| *t > at)
    }

    pub fn future_started(&mut self) {
        self.in_flight += 1;
    }

    pub fn future_done(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Keeps the first error: the walk ends once its futures have.
    pub fn fail(&mut self, e: E) {
        self.error.get_or_insert(e);
    }

    /// Whether the walk is over, with `queued` keys still waiting for its checks and reads.
    pub fn over(&self, queued: usize) -> bool {
        self.in_flight == 0 && (self.error.is_some() || (self.scan_done && queued == 0))
    }

    /// How the walk ended, once [`Walk::over`]: shutdown (`stopping`) cut it short, or it
    /// failed, or it covered the keyspace.
    pub fn ending(&self, stopping: bool) -> WalkEnding {
        match (&self.error, stopping) {
            (_, true) => WalkEnding::Cancelled,
            (Some(_), false) => WalkEnding::Failed,
            (None, false) => WalkEnding::Done,
        }
    }

    /// A reconciliation that read every key, under one subscription from start to end: from
    /// now on every write is noticed.
    pub fn all_noticed(&self, in_use: bool, generation: u64) -> bool {
        self.kind == WalkKind::Reconcile
            && self.error.is_none()
            && self.noticed_from_start
            && in_use
            && self.generation == generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn walk(at: Instant, kind: WalkKind, subscription: (bool, u64)) -> Walk<&'static str> {
        let start = Start {
            kind,
            count_missed: false,
            spread_over: None,
        };
        Walk::new(at, start, vec![1], Pace::new(at, None, None), subscription)
    }

    #[test]
    fn the_first_walk_reconciles_at_once_and_only_once() {
        let t0 = crate::testing::now();
        let mut w = Walks::new(t0, HOUR);
        assert!(w.due(t0, false));
        assert!(!w.due(t0, true), "it waits for a subscription being made");
        let start = w.start(t0, WalkKind::Discover, false);
        assert_eq!(start.kind, WalkKind::Reconcile);
        assert_eq!(
            start.spread_over, None,
            "the start-up walk goes at full speed"
        );
        assert!(!w.due(t0, false));
        assert_eq!(w.next_wake(false), t0 + HOUR);
    }

    #[test]
    fn a_catch_up_walk_comes_once_after_a_lost_subscription() {
        let t0 = crate::testing::now();
        let mut w = Walks::new(t0, HOUR);
        w.start(t0, WalkKind::Reconcile, false);
        let lost = t0 + Duration::from_secs(60);
        w.want_sync_soon();
        assert!(!w.due(lost, true), "not while resubscribing");
        assert!(w.due(lost, false));
        let start = w.start(lost, WalkKind::Discover, true);
        assert_eq!(start.kind, WalkKind::Reconcile);
        assert!(
            !start.count_missed,
            "a catch-up counts no missed notification"
        );
        assert_eq!(start.spread_over, None, "a catch-up goes at full speed");
        assert!(!w.due(lost + Duration::from_secs(1), false), "once");
    }

    #[test]
    fn a_catch_up_after_a_failure_waits_its_delay() {
        let t0 = crate::testing::now();
        let mut w = Walks::new(t0, HOUR);
        w.start(t0, WalkKind::Reconcile, false);
        w.want_sync(t0 + Duration::from_secs(1));
        assert!(!w.due(t0, false));
        assert_eq!(w.next_wake(false), t0 + Duration::from_secs(1));
        assert_eq!(
            w.next_wake(true),
            t0 + HOUR,
            "a subscription's outcome wakes it"
        );
        assert!(w.due(t0 + Duration::from_secs(1), false));
    }

    #[test]
    fn the_periodic_reconciliation_counts_missed_notifications() {
        let t0 = crate::testing::now();
        let mut w = Walks::new(t0, HOUR);
        w.start(t0, WalkKind::Reconcile, true);
        assert!(w.due(t0 + HOUR, true), "a reconciliation waits for nothing");
        let start = w.start(t0 + HOUR, WalkKind::Reconcile, true);
        assert!(start.count_missed);
        assert_eq!(start.spread_over, Some(HOUR / 2), "nothing waits for it");
        let tick = w.start(t0 + HOUR, WalkKind::Discover, false);
        assert_eq!(tick.kind, WalkKind::Discover);
        assert_eq!(
            w.next_wake(false),
            t0 + HOUR * 2,
            "a discovery moves no reconciliation"
        );
    }

    #[test]
    fn a_spread_reconciliation_paces_the_pages_of_the_walk_before() {
        let t0 = crate::testing::now();
        let minute = Duration::from_secs(60);
        assert_eq!(spread(t0, Some(minute), None), None, "no walk yet");
        assert_eq!(spread(t0, None, Some(6_000)), None, "not spread");
        assert_eq!(
            spread(t0, Some(minute), Some(6_000)),
            Some(Spread {
                every: Duration::from_millis(10),
                until: t0 + minute
            })
        );
        assert_eq!(
            spread(t0, Some(minute), Some(1)).map(|s| s.every),
            Some(Duration::from_millis(100)),
            "at least ten pages a second"
        );
        assert_eq!(spread(t0, Some(Duration::ZERO), Some(1)), None);
        let mut w = Walks::new(t0, HOUR);
        w.start(t0, WalkKind::Reconcile, true);
        assert!(!w.sync_wanted());
        w.want_sync_soon();
        assert!(w.sync_wanted(), "a spread walk in flight hurries");
    }

    #[test]
    fn a_walk_ends_when_its_pages_and_futures_are_done() {
        let t0 = crate::testing::now();
        let mut w = walk(t0, WalkKind::Reconcile, (true, 3));
        assert!(w.wants_page(t0, true, true));
        assert!(!w.wants_page(t0, false, true), "no room in flight");
        w.scan_done = true;
        assert!(!w.wants_page(t0, true, true));
        assert!(!w.over(5), "keys still queued");
        w.future_started();
        assert!(!w.over(0));
        w.future_done();
        assert!(w.over(0));
        assert!(w.all_noticed(true, 3));
        assert!(
            !w.all_noticed(true, 4),
            "a new subscription since it started"
        );
        w.fail("x");
        assert!(!w.all_noticed(true, 3), "a failed walk proves nothing");
    }

    #[test]
    fn a_failed_walk_ends_once_its_futures_are_done() {
        let t0 = crate::testing::now();
        let mut w = walk(t0, WalkKind::Discover, (false, 0));
        w.future_started();
        w.fail("x");
        assert!(!w.wants_page(t0, true, true));
        assert!(!w.over(3));
        w.future_done();
        assert!(w.over(3));
        assert!(!w.all_noticed(true, 0), "a discovery reads no tracked key");
    }
}
