//! `presence-sweeper sweep`: every enabled (or each named) sweep once.

use presence_sweeper_config as config;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use presence_sweeper_config::Config;
use presence_sweeper_redis::{Error, Opener, Store};
use presence_sweeper_rules::report::NoObserver;

use crate::evictor::Evictor;
use crate::pass::{self, Pass};

/// Connects (one attempt) and runs one full pass of every sweep in `sweeps`: one walk of each
/// primary serves them all.
pub async fn run(
    config: &Config,
    sweeps: &[&config::Sweep],
    opts: pass::Options,
    cancel: &CancellationToken,
) -> Result<Vec<(String, pass::Report)>, Error> {
    let store = Store::connect_as(&config.redis, Opener::Tool("sweep")).await?;
    let runtime: Vec<Arc<Evictor>> = sweeps
        .iter()
        .map(|s| Arc::new(Evictor::new(s, config)))
        .collect();
    let reports = Pass::new(config)
        .run(&store, &runtime, opts, &NoObserver, cancel)
        .await
        .map_err(|e| e.error)?;
    Ok(sweeps.iter().map(|s| s.name.clone()).zip(reports).collect())
}

/// The summary line `presence-sweeper sweep` prints for one sweep.
pub struct SummaryLine<'a> {
    name: &'a str,
    report: &'a pass::Report,
    dry_run: bool,
}

impl<'a> SummaryLine<'a> {
    /// The summary of `report`, the pass of sweep `name`.
    pub fn new(name: &'a str, report: &'a pass::Report, dry_run: bool) -> Self {
        Self {
            name,
            report,
            dry_run,
        }
    }
}

impl std::fmt::Display for SummaryLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.report;
        let verb = if self.dry_run {
            "would_evict"
        } else {
            "evicted"
        };
        write!(
            f,
            "{}: keys_scanned={} keys={} members={} {verb}={} events_published={} seconds={:.3}{}",
            self.name,
            r.keys_scanned,
            r.counts.keys,
            r.counts.members,
            r.counts.evicted,
            r.counts.events_published,
            r.duration.as_secs_f64(),
            if r.complete { "" } else { " (interrupted)" }
        )
    }
}
