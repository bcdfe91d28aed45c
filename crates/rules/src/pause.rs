//! Pauses of the daemon itself, seen however busy its loops are: a task whose timer should fire
//! every [`TICK`] and, when it fires far later, was not run meanwhile. The whole process was
//! then stopped or starved (a SIGSTOP, a frozen VM, a throttled container, a runtime kept busy
//! by work that did not yield): Redis and the apps went on without it, so that time is neither
//! Redis's silence nor a reason for a credit. A loop's own timer cannot tell: a busy loop never
//! waits for it, and finds an event ready at once after the pause.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::time::Instant;

/// How often the watch's timer fires.
pub const TICK: Duration = Duration::from_millis(100);
/// A timer this much later than asked: the daemon did not run. Well under liveness's `STALL`
/// (1.5 s), so that a pause is known for one before its gap could read as an outage.
pub const PAUSED_AFTER: Duration = Duration::from_millis(500);

/// The pauses seen so far.
#[derive(Debug, Default)]
pub struct PauseWatch {
    /// How many pauses were seen.
    count: AtomicU64,
    /// Their total length, when the last one ended, and when the process was last seen
    /// running (by the watch's timer or by a reader).
    state: Mutex<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    total: Duration,
    ended: Option<Instant>,
    alive: Option<Instant>,
}

/// What a reader of the watch has taken in so far.
#[derive(Debug, Default, Clone, Copy)]
pub struct Cursor {
    count: u64,
    total: Duration,
}

impl PauseWatch {
    /// The process runs at `now`: if it was last seen running far longer than a tick ago, it
    /// was paused meanwhile. The watch's timer says so; so does a loop that turns before the
    /// timer (the runtime hands out what waited on sockets first after a resume).
    pub fn alive(&self, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let gap = state
            .alive
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        state.alive = Some(now);
        if gap > TICK + PAUSED_AFTER {
            Self::add(&mut state, now, gap.saturating_sub(TICK));
            self.count.fetch_add(1, Ordering::Release);
        }
    }

    fn add(state: &mut Ledger, now: Instant, pause: Duration) {
        state.total = state.total.saturating_add(pause);
        state.ended = Some(now);
    }

    /// The daemon did not run for `pause`, until `now`.
    #[cfg(test)]
    pub(crate) fn record(&self, now: Instant, pause: Duration) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Self::add(&mut state, now, pause);
        self.count.fetch_add(1, Ordering::Release);
    }

    /// The pauses since `seen`, summed, and when the last ended; `seen` takes them in. At
    /// `now`, a watch whose timer is overdue is a pause ending now, whether or not the timer
    /// fired yet. Cheap when there was none (every turn of every loop asks).
    pub fn since(&self, seen: &mut Cursor, now: Instant) -> Option<(Instant, Duration)> {
        self.alive(now);
        if self.count.load(Ordering::Acquire) == seen.count {
            return None;
        }
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let pause = state.total.saturating_sub(seen.total);
        *seen = Cursor {
            count: self.count.load(Ordering::Acquire),
            total: state.total,
        };
        Some((state.ended?, pause))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::now as t0;

    #[test]
    fn a_timer_fired_late_is_a_pause_and_each_reader_sees_it_once() {
        let watch = PauseWatch::default();
        let start = t0();
        let (mut a, mut b) = (Cursor::default(), Cursor::default());
        for tick in 0..20 {
            watch.alive(start + TICK * tick);
        }
        let now = start + TICK * 20;
        assert_eq!(watch.since(&mut a, now), None, "on time: no pause");
        watch.record(now, Duration::from_secs(3));
        watch.record(now, Duration::from_secs(1));
        let (_, pause) = watch.since(&mut a, now).expect("seen");
        assert_eq!(pause, Duration::from_secs(4), "summed");
        assert_eq!(watch.since(&mut a, now), None, "once");
        assert_eq!(
            watch.since(&mut b, now).map(|p| p.1),
            Some(Duration::from_secs(4))
        );
    }

    #[test]
    fn a_timer_fired_late_is_a_pause_of_the_gap_less_a_tick() {
        let watch = PauseWatch::default();
        let start = t0();
        watch.alive(start);
        let mut seen = Cursor::default();
        let late = start + Duration::from_millis(800);
        watch.alive(late);
        let (ended, pause) = watch.since(&mut seen, late).expect("a pause");
        assert_eq!((ended, pause), (late, Duration::from_millis(700)));
    }

    #[test]
    fn a_loop_turning_before_the_overdue_timer_sees_the_pause_once() {
        let watch = PauseWatch::default();
        let t0 = t0();
        watch.alive(t0);
        let mut seen = Cursor::default();
        // Resumed after 3 s: a loop turns first, the watch's timer fires after it.
        let resumed = t0 + Duration::from_secs(3);
        let (ended, pause) = watch.since(&mut seen, resumed).expect("a pause");
        assert_eq!((ended, pause), (resumed, Duration::from_millis(2900)));
        watch.alive(resumed + Duration::from_millis(1));
        assert_eq!(
            watch.since(&mut seen, resumed + Duration::from_millis(2)),
            None,
            "once"
        );
    }
}
