//! Prometheus metrics, held in an explicit registry (no globals) and only ever read by a scrape:
//! a scrape never touches Redis, so a slow or absent Redis cannot make it hang.
//!
//! Labels are the sweep's configured name and small enums only; no user id, conversation id or
//! key ever becomes a label value.

use prometheus::core::Collector;
use prometheus::{
    Encoder as _, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use crate::config::SweepConfig;
use crate::pass::PassReport;
use crate::sweep::Observer;

const NAMESPACE: &str = "presence_sweeper";

/// Pass wall time: a millisecond to five minutes.
const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];
/// How long a zombie outlived its window: milliseconds (sub-second sweeps) to ten minutes.
const LAG_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
];
/// Members per key: one to ten thousand.
const CARDINALITY_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0,
];

/// Every metric of the daemon, and the registry they are exported from.
pub struct Metrics {
    registry: Registry,
    sweeps: IntCounterVec,
    overruns: IntCounterVec,
    duration: HistogramVec,
    last_success: GaugeVec,
    interval: GaugeVec,
    keys_scanned: IntCounterVec,
    keys: IntGaugeVec,
    members: IntGaugeVec,
    cardinality: HistogramVec,
    evicted: IntCounterVec,
    published: IntCounterVec,
    lost: IntCounterVec,
    lag: HistogramVec,
    redis_up: IntGauge,
    config_reloads: IntCounterVec,
    lease_held: IntGaugeVec,
}

impl Metrics {
    /// Creates and registers every metric, plus the standard `process_*` ones.
    pub fn new() -> Self {
        let registry = Registry::new();
        let by_sweep = &["sweep"];
        let m = Self {
            sweeps: IntCounterVec::new(
                opts("sweeps_total", "Passes finished, by result (success or error)."),
                &["sweep", "result"],
            )
            .expect("valid metric"),
            overruns: IntCounterVec::new(
                opts(
                    "sweep_overruns_total",
                    "Ticks skipped because the previous pass was still running.",
                ),
                by_sweep,
            )
            .expect("valid metric"),
            duration: HistogramVec::new(
                histogram("sweep_duration_seconds", "Wall time of a pass.", DURATION_BUCKETS),
                by_sweep,
            )
            .expect("valid metric"),
            last_success: GaugeVec::new(
                opts(
                    "last_success_timestamp_seconds",
                    "Unix time of the last successful pass.",
                ),
                by_sweep,
            )
            .expect("valid metric"),
            interval: GaugeVec::new(
                opts(
                    "sweep_interval_seconds",
                    "Configured time between passes (for cron schedules, between the next two runs).",
                ),
                by_sweep,
            )
            .expect("valid metric"),
            keys_scanned: IntCounterVec::new(
                opts("keys_scanned_total", "Keys returned by SCAN."),
                by_sweep,
            )
            .expect("valid metric"),
            keys: IntGaugeVec::new(
                opts("keys", "Matching keys seen by the last completed pass."),
                by_sweep,
            )
            .expect("valid metric"),
            members: IntGaugeVec::new(
                opts(
                    "members",
                    "Members remaining after the last completed pass (the roster size).",
                ),
                by_sweep,
            )
            .expect("valid metric"),
            cardinality: HistogramVec::new(
                histogram(
                    "key_cardinality",
                    "Members per key, observed once per key per pass.",
                    CARDINALITY_BUCKETS,
                ),
                by_sweep,
            )
            .expect("valid metric"),
            evicted: IntCounterVec::new(opts("evicted_total", "Members removed."), by_sweep)
                .expect("valid metric"),
            published: IntCounterVec::new(
                opts("events_published_total", "Events published."),
                by_sweep,
            )
            .expect("valid metric"),
            lost: IntCounterVec::new(
                opts(
                    "events_failed_total",
                    "Members removed whose event could not be published (Redis failed in between).",
                ),
                by_sweep,
            )
            .expect("valid metric"),
            lag: HistogramVec::new(
                histogram(
                    "eviction_lag_seconds",
                    "Eviction time minus (last_seen + ttl): how long a zombie outlived its window.",
                    LAG_BUCKETS,
                ),
                by_sweep,
            )
            .expect("valid metric"),
            redis_up: IntGauge::with_opts(opts(
                "redis_up",
                "1 if the last Redis round trip succeeded, else 0.",
            ))
            .expect("valid metric"),
            lease_held: IntGaugeVec::new(
                opts(
                    "lease_held",
                    "1 while this replica holds the sweep's lease and sweeps it (coordination.lease).",
                ),
                by_sweep,
            )
            .expect("valid metric"),
            config_reloads: IntCounterVec::new(
                opts(
                    "config_reloads_total",
                    "Configuration reloads (SIGHUP), by result (success or error).",
                ),
                &["result"],
            )
            .expect("valid metric"),
            registry,
        };
        let build_info = IntGaugeVec::new(
            opts(
                "build_info",
                "Constant 1, labelled with the version of presence-sweeper.",
            ),
            &["version"],
        )
        .expect("valid metric");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let collectors: Vec<Box<dyn Collector>> = vec![
            Box::new(m.sweeps.clone()),
            Box::new(m.overruns.clone()),
            Box::new(m.duration.clone()),
            Box::new(m.last_success.clone()),
            Box::new(m.interval.clone()),
            Box::new(m.keys_scanned.clone()),
            Box::new(m.keys.clone()),
            Box::new(m.members.clone()),
            Box::new(m.cardinality.clone()),
            Box::new(m.evicted.clone()),
            Box::new(m.published.clone()),
            Box::new(m.lost.clone()),
            Box::new(m.lag.clone()),
            Box::new(m.redis_up.clone()),
            Box::new(m.config_reloads.clone()),
            Box::new(m.lease_held.clone()),
            Box::new(build_info),
            Box::new(prometheus::process_collector::ProcessCollector::for_self()),
        ];
        for c in collectors {
            m.registry.register(c).expect("metric names are unique");
        }
        for result in ["success", "error"] {
            m.config_reloads.with_label_values(&[result]);
        }
        m
    }

    /// The handles of one sweep. Creates every series of the sweep at zero, so dashboards and
    /// alerts see them from start-up.
    pub fn sweep(&self, sweep: &SweepConfig) -> SweepMetrics {
        let name = sweep.name.as_str();
        let l = &[name];
        let interval = sweep.schedule.interval().unwrap_or_default();
        self.interval
            .with_label_values(l)
            .set(interval.as_secs_f64());
        SweepMetrics {
            success: self.sweeps.with_label_values(&[name, "success"]),
            error: self.sweeps.with_label_values(&[name, "error"]),
            overruns: self.overruns.with_label_values(l),
            duration: self.duration.with_label_values(l),
            last_success: self.last_success.with_label_values(l),
            keys_scanned: self.keys_scanned.with_label_values(l),
            keys: self.keys.with_label_values(l),
            members: self.members.with_label_values(l),
            cardinality: self.cardinality.with_label_values(l),
            evicted: self.evicted.with_label_values(l),
            published: self.published.with_label_values(l),
            lost: self.lost.with_label_values(l),
            lag: self.lag.with_label_values(l),
        }
    }

    /// The lease gauge of a sweep that uses a lease (created at 0).
    pub fn lease_gauge(&self, sweep: &str) -> IntGauge {
        let g = self.lease_held.with_label_values(&[sweep]);
        g.set(0);
        g
    }

    /// Drops every series of a sweep that is no longer configured.
    pub fn forget_sweep(&self, name: &str) {
        let _ = self.lease_held.remove_label_values(&[name]);
        for result in ["success", "error"] {
            let _ = self.sweeps.remove_label_values(&[name, result]);
        }
        let l = &[name];
        let _ = self.overruns.remove_label_values(l);
        let _ = self.duration.remove_label_values(l);
        let _ = self.last_success.remove_label_values(l);
        let _ = self.interval.remove_label_values(l);
        let _ = self.keys_scanned.remove_label_values(l);
        let _ = self.keys.remove_label_values(l);
        let _ = self.members.remove_label_values(l);
        let _ = self.cardinality.remove_label_values(l);
        let _ = self.evicted.remove_label_values(l);
        let _ = self.published.remove_label_values(l);
        let _ = self.lost.remove_label_values(l);
        let _ = self.lag.remove_label_values(l);
    }

    /// Records whether the last Redis round trip succeeded.
    pub fn set_redis_up(&self, up: bool) {
        self.redis_up.set(i64::from(up));
    }

    /// Counts a configuration reload.
    pub fn config_reload(&self, ok: bool) {
        self.config_reloads
            .with_label_values(&[if ok { "success" } else { "error" }])
            .inc();
    }

    /// The registry, for collectors added by other modules.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Everything, in the Prometheus text format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("encoding to a Vec cannot fail");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(NAMESPACE)
}

fn histogram(name: &str, help: &str, buckets: &[f64]) -> HistogramOpts {
    HistogramOpts::new(name, help)
        .namespace(NAMESPACE)
        .buckets(buckets.to_vec())
}

/// One sweep's series, resolved once so recording never looks labels up.
#[derive(Clone)]
pub struct SweepMetrics {
    success: prometheus::IntCounter,
    error: prometheus::IntCounter,
    overruns: prometheus::IntCounter,
    duration: prometheus::Histogram,
    last_success: prometheus::Gauge,
    keys_scanned: prometheus::IntCounter,
    keys: prometheus::IntGauge,
    members: prometheus::IntGauge,
    cardinality: prometheus::Histogram,
    evicted: prometheus::IntCounter,
    published: prometheus::IntCounter,
    lost: prometheus::IntCounter,
    lag: prometheus::Histogram,
}

impl SweepMetrics {
    /// Records a pass that covered the whole keyspace, finished at `unix_now`. Evictions and
    /// events were counted as they happened.
    pub fn pass_succeeded(&self, report: &PassReport, unix_now: f64) {
        self.keys_scanned.inc_by(report.keys_scanned);
        self.duration.observe(report.duration.as_secs_f64());
        self.success.inc();
        self.last_success.set(unix_now);
        self.keys.set(report.counts.keys as i64);
        self.members.set(report.counts.members as i64);
    }

    /// Records a failed pass.
    pub fn pass_failed(&self, partial: &PassReport) {
        self.keys_scanned.inc_by(partial.keys_scanned);
        self.duration.observe(partial.duration.as_secs_f64());
        self.error.inc();
    }

    /// Records a pass cut short by shutdown (neither a success nor an error).
    pub fn pass_interrupted(&self, partial: &PassReport) {
        self.keys_scanned.inc_by(partial.keys_scanned);
    }

    /// Counts a tick skipped because the previous pass was still running.
    pub fn overrun(&self) {
        self.overruns.inc();
    }
}

impl Observer for SweepMetrics {
    fn key_checked(&self, cardinality: u64) {
        self.cardinality.observe(cardinality as f64);
    }

    fn member_evicted(&self, lag_seconds: f64) {
        self.evicted.inc();
        self.lag.observe(lag_seconds.max(0.0));
    }

    fn published(&self, events: u64) {
        self.published.inc_by(events);
    }

    fn events_failed(&self, events: u64) {
        self.lost.inc_by(events);
    }
}
