//! Pauses of the daemon itself, seen however busy its loops are: a task whose timer should fire
//! every [`TICK`] and, when it fires far later, was not run meanwhile. The whole process was
//! then stopped or starved (a SIGSTOP, a frozen VM, a throttled container, a runtime kept busy
//! by work that did not yield): Redis and the apps went on without it, so that time is neither
//! Redis's silence nor a reason for a credit. A loop's own timer cannot tell: a busy loop never
//! waits for it, and finds an event ready at once after the pause.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often the watch's timer fires.
const TICK: Duration = Duration::from_millis(100);
/// A timer this much later than asked: the daemon did not run. Well under liveness's `STALL`
/// (1.5 s), so that a pause is known for one before its gap could read as an outage.
pub(crate) const PAUSED_AFTER: Duration = Duration::from_millis(500);

/// The pauses seen so far.
#[derive(Debug, Default)]
pub(crate) struct PauseWatch {
    /// How many pauses were seen.
    count: AtomicU64,
    /// Their total length, and when the last one ended.
    total: Mutex<(Duration, Option<Instant>)>,
}

/// What a reader of the watch has taken in so far.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Seen {
    count: u64,
    total: Duration,
}

impl PauseWatch {
    /// Watches until `cancel` fires.
    pub(crate) async fn run(&self, cancel: CancellationToken) {
        loop {
            let due = Instant::now() + TICK;
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep_until(due) => {}
            }
            let now = Instant::now();
            let late = now.saturating_duration_since(due);
            if late > PAUSED_AFTER {
                self.record(now, late);
            }
        }
    }

    /// The daemon did not run for `pause`, until `now`.
    pub(crate) fn record(&self, now: Instant, pause: Duration) {
        let mut total = self.total.lock().unwrap_or_else(|e| e.into_inner());
        total.0 = total.0.saturating_add(pause);
        total.1 = Some(now);
        self.count.fetch_add(1, Ordering::Release);
    }

    /// The pauses since `seen`, summed, and when the last ended; `seen` takes them in. Cheap
    /// when there was none (every turn of every loop asks).
    pub(crate) fn since(&self, seen: &mut Seen) -> Option<(Instant, Duration)> {
        if self.count.load(Ordering::Acquire) == seen.count {
            return None;
        }
        let total = *self.total.lock().unwrap_or_else(|e| e.into_inner());
        let pause = total.0.saturating_sub(seen.total);
        *seen = Seen {
            count: self.count.load(Ordering::Acquire),
            total: total.0,
        };
        Some((total.1?, pause))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_timer_fired_late_is_a_pause_and_each_reader_sees_it_once() {
        let watch = std::sync::Arc::new(PauseWatch::default());
        let cancel = CancellationToken::new();
        let task = tokio::spawn({
            let (watch, cancel) = (watch.clone(), cancel.clone());
            async move { watch.run(cancel).await }
        });
        let (mut a, mut b) = (Seen::default(), Seen::default());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(watch.since(&mut a), None, "on time: no pause");
        watch.record(Instant::now(), Duration::from_secs(3));
        watch.record(Instant::now(), Duration::from_secs(1));
        let (_, pause) = watch.since(&mut a).expect("seen");
        assert_eq!(pause, Duration::from_secs(4), "summed");
        assert_eq!(watch.since(&mut a), None, "once");
        assert_eq!(
            watch.since(&mut b).map(|p| p.1),
            Some(Duration::from_secs(4))
        );
        cancel.cancel();
        task.await.unwrap();
    }

    #[test]
    fn a_stopped_process_is_seen_by_its_timer() {
        // Real time: a runtime blocked for 700 ms fires the watch's timer late.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let watch = std::sync::Arc::new(PauseWatch::default());
        let mut seen = Seen::default();
        rt.block_on(async {
            let cancel = CancellationToken::new();
            let task = tokio::spawn({
                let (watch, cancel) = (watch.clone(), cancel.clone());
                async move { watch.run(cancel).await }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            // Blocking the runtime is the point: it stands for a stopped process.
            std::thread::sleep(Duration::from_millis(700));
            tokio::time::sleep(Duration::from_millis(150)).await;
            cancel.cancel();
            task.await.unwrap();
        });
        let (_, pause) = watch.since(&mut seen).expect("a pause");
        assert!(pause >= Duration::from_millis(500), "{pause:?}");
    }
}
