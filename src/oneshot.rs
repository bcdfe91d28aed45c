//! `presence-sweeper sweep`: every enabled (or each named) sweep once.

use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::config::{Config, SweepConfig};
use crate::store::Store;
use crate::sweeper::{NoObserver, PassOptions, PassReport, Sweeper};

/// A `--sweep` name that is not configured.
#[derive(Debug, thiserror::Error)]
#[error("unknown sweep `{name}` (configured: {known})")]
pub struct UnknownSweep {
    /// The name asked for.
    pub name: String,
    /// The configured names.
    pub known: String,
}

/// Picks the sweeps to run: the named ones, enabled or not, or else every enabled one.
pub fn select<'c>(
    config: &'c Config,
    names: &[String],
) -> Result<Vec<&'c SweepConfig>, UnknownSweep> {
    if names.is_empty() {
        return Ok(config.enabled_sweeps().collect());
    }
    names
        .iter()
        .map(|name| {
            config.sweep(name).ok_or_else(|| UnknownSweep {
                name: name.clone(),
                known: config
                    .sweeps
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        })
        .collect()
}

/// Connects (one attempt) and runs each sweep once, one after the other.
pub async fn run(
    config: &Config,
    sweeps: &[&SweepConfig],
    opts: PassOptions,
    cancel: &CancellationToken,
) -> Result<Vec<(String, PassReport)>, Error> {
    let store = Store::connect(&config.redis).await?;
    let mut reports = Vec::with_capacity(sweeps.len());
    for sweep in sweeps {
        let sweeper = Sweeper::new(sweep, config);
        let report = sweeper
            .pass(&store, opts, &NoObserver, cancel)
            .await
            .map_err(|e| e.error)?;
        reports.push((sweep.name.clone(), report));
    }
    Ok(reports)
}

/// The summary line `presence-sweeper sweep` prints for one sweep.
pub struct Summary<'a> {
    name: &'a str,
    report: &'a PassReport,
    dry_run: bool,
}

impl<'a> Summary<'a> {
    /// The summary of `report`, the pass of sweep `name`.
    pub fn new(name: &'a str, report: &'a PassReport, dry_run: bool) -> Self {
        Self {
            name,
            report,
            dry_run,
        }
    }
}

impl std::fmt::Display for Summary<'_> {
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
            r.keys,
            r.members,
            r.evicted,
            r.events_published,
            r.duration.as_secs_f64(),
            if r.complete { "" } else { " (interrupted)" }
        )
    }
}
