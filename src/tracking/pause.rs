//! The timer of the daemon's pause watch (the rules' [`PauseWatch`]): it should fire every
//! [`TICK`]; when it fires far later, the whole process was stopped or starved meanwhile.

use presence_sweeper_rules::pause::{PauseWatch, TICK};
use tokio_util::sync::CancellationToken;

use crate::time::now;

/// Keeps `watch`'s timer running until `cancel` fires.
pub(crate) async fn run(watch: &PauseWatch, cancel: CancellationToken) {
    watch.alive(now());
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(TICK) => {}
        }
        watch.alive(now());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use presence_sweeper_rules::pause::Cursor;

    use super::*;

    #[test]
    fn a_stopped_process_is_seen_by_its_timer() {
        // Real time: a runtime blocked for 700 ms fires the watch's timer late.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let watch = Arc::new(PauseWatch::default());
        let mut seen = Cursor::default();
        rt.block_on(async {
            let cancel = CancellationToken::new();
            let task = tokio::spawn({
                let (watch, cancel) = (watch.clone(), cancel.clone());
                async move { run(&watch, cancel).await }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            // Blocking the runtime is the point: it stands for a stopped process.
            std::thread::sleep(Duration::from_millis(700));
            tokio::time::sleep(Duration::from_millis(150)).await;
            cancel.cancel();
            task.await.unwrap();
        });
        let (_, pause) = rt
            .block_on(async { watch.since(&mut seen, now()) })
            .expect("a pause");
        assert!(pause >= Duration::from_millis(500), "{pause:?}");
    }
}
