//! Prometheus metrics, held in an explicit registry (no globals) and only ever read by a scrape:
//! a scrape never touches Redis, so a slow or absent Redis cannot make it hang.
//!
//! Labels are the sweep's configured name, a primary's address (one per primary) and small enums
//! only; no user id, conversation id or key ever becomes a label value.

mod process;
mod sweep;

use presence_sweeper_config as config;
use std::sync::Arc;
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    Encoder as _, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use presence_sweeper_rules::node::NodeId;
use presence_sweeper_rules::trouble::Trouble;

use crate::serve::logging::LogStats;

const NAMESPACE: &str = "presence_sweeper";

pub(crate) use sweep::{GuardMetrics, SweepMetrics};

/// What this binary was built from, for `build_info`: its binary knows (the build script is
/// the command line's).
#[derive(Debug, Clone, Copy)]
pub struct BuildInfo {
    /// The version, e.g. `0.1.0`.
    pub version: &'static str,
    /// The git revision it was built from, or `unknown`.
    pub revision: &'static str,
    /// The compiler's version number, e.g. `1.95.0`.
    pub rustc: &'static str,
}

/// The logger's counts, read at each scrape.
struct LogCollector {
    stats: LogStats,
    dropped: prometheus::IntCounter,
    failed: prometheus::IntCounter,
}

impl Collector for LogCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut descs = self.dropped.desc();
        descs.extend(self.failed.desc());
        descs
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        for (counter, now) in [
            (&self.dropped, self.stats.dropped()),
            (&self.failed, self.stats.failed()),
        ] {
            counter.inc_by(now.saturating_sub(counter.get()));
        }
        let mut families = self.dropped.collect();
        families.extend(self.failed.collect());
        families
    }
}

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
    ticks: IntCounterVec,
    duration: HistogramVec,
    last_success: GaugeVec,
    interval: GaugeVec,
    keys_scanned: IntCounterVec,
    keys: IntGaugeVec,
    members: IntGaugeVec,
    tracked: IntGaugeVec,
    untracked: IntGaugeVec,
    missed: IntCounterVec,
    checks: IntCounterVec,
    check_errors: IntCounterVec,
    cardinality: HistogramVec,
    evicted: IntCounterVec,
    published: IntCounterVec,
    lost: IntCounterVec,
    unconfirmed: IntCounterVec,
    unanswered: IntCounterVec,
    lag: HistogramVec,
    redis_up: IntGauge,
    redis_failures: IntCounterVec,
    notifications_in_use: IntGaugeVec,
    notices: IntCounterVec,
    check_window: IntGaugeVec,
    notifications_config_refused: IntGaugeVec,
    notifications_expected: IntGauge,
    outages: IntCounterVec,
    clock_steps: IntCounterVec,
    writes_refused: IntCounterVec,
    writes_refused_now: IntGaugeVec,
    storm_holding: IntGaugeVec,
    storm_holds: IntCounterVec,
    score_unit_mismatch: IntGaugeVec,
    scores_ahead: IntCounterVec,
    config_reloads: IntCounterVec,
    lease_held: IntGaugeVec,
    webhooks: presence_sweeper_webhooks::DeliveryMetrics,
}

impl Metrics {
    /// Creates and registers every metric, plus the standard `process_*` ones.
    #[expect(
        clippy::too_many_lines,
        reason = "registration of every metric, one after the other: one list to read"
    )]
    pub fn new(build: BuildInfo) -> Self {
        let registry = Registry::new();
        let webhooks = presence_sweeper_webhooks::DeliveryMetrics::new(NAMESPACE, &registry)
            .expect("metric names are unique");
        let by_sweep = &["sweep"];
        let counter = |name: &str, help: &str| {
            IntCounterVec::new(opts(name, help), by_sweep).expect("valid metric")
        };
        let gauge = |name: &str, help: &str| {
            IntGaugeVec::new(opts(name, help), by_sweep).expect("valid metric")
        };
        let m = Self {
            sweeps: IntCounterVec::new(
                opts(
                    "sweeps_total",
                    "Walks of a primary's keyspace finished (passes), by result (success or error).",
                ),
                &["sweep", "result"],
            )
            .expect("valid metric"),
            overruns: counter(
                "sweep_overruns_total",
                "Schedule ticks skipped because the walk of an earlier tick was still running.",
            ),
            ticks: counter(
                "sweep_ticks_total",
                "Schedule ticks that asked a primary for a walk (none are asked while keyspace notifications make walks unnecessary); overruns are a share of these.",
            ),
            duration: HistogramVec::new(
                histogram(
                    "sweep_duration_seconds",
                    "Wall time of a walk of one primary's keyspace.",
                    DURATION_BUCKETS,
                ),
                by_sweep,
            )
            .expect("valid metric"),
            last_success: GaugeVec::new(
                opts(
                    "last_success_timestamp_seconds",
                    "Unix time of the last successful walk; the oldest over the primaries.",
                ),
                by_sweep,
            )
            .expect("valid metric"),
            interval: GaugeVec::new(
                opts(
                    "sweep_interval_seconds",
                    "Time between walks: tracking.reconcile_interval where keyspace notifications are in use on every primary, else the schedule (for cron schedules, between the next two runs).",
                ),
                by_sweep,
            )
            .expect("valid metric"),
            keys_scanned: counter("keys_scanned_total", "Keys returned by SCAN."),
            keys: gauge(
                "keys",
                "Keys of the sweep found by the last walk of each primary, summed.",
            ),
            members: gauge(
                "members",
                "Members of the sweep's keys (the roster size), as of their last checks or reconciliation reads.",
            ),
            tracked: gauge(
                "tracked_keys",
                "Keys in the deadline index: checked when their oldest member's window closes.",
            ),
            untracked: gauge(
                "untracked_keys",
                "Keys the last walks found but could not track (tracking.max_keys reached): they are checked by walks on the sweep's schedule.",
            ),
            missed: counter(
                "missed_notifications_total",
                "Keys a reconciliation walk found untracked while keyspace notifications were in use: notifications that were missed.",
            ),
            checks: counter(
                "deadline_checks_total",
                "Keys checked because their deadline came or they were new to the index.",
            ),
            check_errors: counter(
                "check_errors_total",
                "Key checks that failed (Redis away, refused); the keys are checked again.",
            ),
            cardinality: HistogramVec::new(
                histogram(
                    "key_cardinality",
                    "Members per key, observed at every check of a key.",
                    CARDINALITY_BUCKETS,
                ),
                by_sweep,
            )
            .expect("valid metric"),
            scores_ahead: counter(
                "scores_ahead_keys_total",
                "Keys checked whose scores lay over 1 s (and under a day) ahead of Redis's clock: written before a backward step of it, or by apps on their own clocks. Their members leave that much later.",
            ),
            evicted: counter("evicted_total", "Members removed."),
            published: counter("events_published_total", "Events published."),
            lost: counter(
                "events_failed_total",
                "Members removed whose event was not published: never sent, or refused by Redis.",
            ),
            unconfirmed: counter(
                "events_unconfirmed_total",
                "Members removed whose event was sent but not confirmed (the reply was lost): subscribers may or may not have received it.",
            ),
            unanswered: counter(
                "evictions_unanswered_total",
                "Eviction calls (transactions, script calls) of sweeps without a stream whose reply never came: not within redis.eviction_timeout, or the connection dropped first. Members they removed, if any, were not announced.",
            ),
            lag: HistogramVec::new(
                histogram(
                    "eviction_lag_seconds",
                    "Eviction time minus (last_seen + ttl): how long a zombie outlived its window. Members a day or more past it (a score written by hand) are evicted but not observed.",
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
            redis_failures: IntCounterVec::new(
                opts(
                    "redis_failures_total",
                    "Failed connection attempts and health probes of Redis, by kind: credentials (a wrong or missing password, an unknown user), permission (an ACL), unreachable (no connection), timeout (no answer within redis.command_timeout), other.",
                ),
                &["kind"],
            )
            .expect("valid metric"),
            notifications_in_use: IntGaugeVec::new(
                opts(
                    "notifications_in_use",
                    "1 while keyspace notifications of this primary are in use: subscribed, and notices arrived (or CONFIG GET said they are on) within the last 30 s; else 0.",
                ),
                &["node"],
            )
            .expect("valid metric"),
            notices: IntCounterVec::new(
                opts(
                    "notices_total",
                    "Keyspace notifications read from this primary: with new-key notifications, every key created in the database; else every write of a presence key, heartbeats included.",
                ),
                &["node"],
            )
            .expect("valid metric"),
            check_window: IntGaugeVec::new(
                opts(
                    "check_window",
                    "Requests (deadline checks, walk pages, probes) this primary's loop may have in flight now: evict.pipeline_depth, grown up to evict.max_pipeline_depth while due keys wait for room. At the maximum for long, Redis's round trips are too slow for the keys coming due.",
                ),
                &["node"],
            )
            .expect("valid metric"),
            notifications_config_refused: IntGaugeVec::new(
                opts(
                    "notifications_config_refused",
                    "1 while this primary refuses CONFIG GET (an ACL, or a managed Redis that renamed the command): whether keyspace notifications are on is learnt from notices arriving alone, else 0.",
                ),
                &["node"],
            )
            .expect("valid metric"),
            storm_holding: gauge(
                "storm_holding",
                "1 while the storm guard holds the sweep's evictions (they would take a large share of its members at once), else 0.",
            ),
            storm_holds: counter(
                "storm_holds_total",
                "Times the storm guard started holding the sweep's evictions.",
            ),
            score_unit_mismatch: gauge(
                "score_unit_mismatch",
                "1 while the sweep's scores are about 1000 times off Redis's clock or over a day ahead of it (its score_unit is wrong) and it evicts nothing, else 0.",
            ),
            outages: IntCounterVec::new(
                opts(
                    "redis_outages_total",
                    "Times this primary did not answer for over 1.5 s (down, paused, unreachable); members whose window closed meanwhile got a full ttl again from the outage's end.",
                ),
                &["node"],
            )
            .expect("valid metric"),
            clock_steps: IntCounterVec::new(
                opts(
                    "redis_clock_steps_total",
                    "Times this primary's clock (Redis TIME) moved over 1 s further (forward) or less (backward) than the time that passed on the daemon's monotonic clock; after a forward step every member got a full ttl of real time.",
                ),
                &["node", "direction"],
            )
            .expect("valid metric"),
            writes_refused: IntCounterVec::new(
                opts(
                    "redis_writes_refused_total",
                    "Times this primary began refusing writes (OOM, MISCONF, READONLY) as seen by the canary's increment; nobody was judged until it took them again, and then every member got a full ttl.",
                ),
                &["node"],
            )
            .expect("valid metric"),
            writes_refused_now: IntGaugeVec::new(
                opts(
                    "redis_writes_refused",
                    "1 while this primary refuses writes (OOM, MISCONF, READONLY) and nobody is judged there, else 0.",
                ),
                &["node"],
            )
            .expect("valid metric"),
            notifications_expected: IntGauge::with_opts(opts(
                "notifications_expected",
                "1 if the configuration expects keyspace notifications on every primary (tracking.notifications = \"on\", or tracking.configure_notifications), else 0.",
            ))
            .expect("valid metric"),
            lease_held: IntGaugeVec::new(
                opts(
                    "lease_held",
                    "1 for each primary whose lease of the sweep this replica holds, and sweeps (coordination.lease), else 0.",
                ),
                &["sweep", "node"],
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
            webhooks,
        };
        let build_info = IntGaugeVec::new(
            opts(
                "build_info",
                "Constant 1, labelled with the version of presence-sweeper, the git revision it was built from and the rustc that built it.",
            ),
            &["version", "revision", "rustc"],
        )
        .expect("valid metric");
        build_info
            .with_label_values(&[build.version, build.revision, build.rustc])
            .set(1);
        let collectors: Vec<Box<dyn Collector>> = vec![
            Box::new(m.sweeps.clone()),
            Box::new(m.overruns.clone()),
            Box::new(m.ticks.clone()),
            Box::new(m.duration.clone()),
            Box::new(m.last_success.clone()),
            Box::new(m.interval.clone()),
            Box::new(m.keys_scanned.clone()),
            Box::new(m.keys.clone()),
            Box::new(m.members.clone()),
            Box::new(m.tracked.clone()),
            Box::new(m.untracked.clone()),
            Box::new(m.missed.clone()),
            Box::new(m.checks.clone()),
            Box::new(m.check_errors.clone()),
            Box::new(m.cardinality.clone()),
            Box::new(m.evicted.clone()),
            Box::new(m.published.clone()),
            Box::new(m.lost.clone()),
            Box::new(m.unconfirmed.clone()),
            Box::new(m.unanswered.clone()),
            Box::new(m.lag.clone()),
            Box::new(m.redis_up.clone()),
            Box::new(m.redis_failures.clone()),
            Box::new(m.notifications_in_use.clone()),
            Box::new(m.notices.clone()),
            Box::new(m.check_window.clone()),
            Box::new(m.notifications_config_refused.clone()),
            Box::new(m.notifications_expected.clone()),
            Box::new(m.outages.clone()),
            Box::new(m.clock_steps.clone()),
            Box::new(m.writes_refused.clone()),
            Box::new(m.writes_refused_now.clone()),
            Box::new(m.storm_holding.clone()),
            Box::new(m.storm_holds.clone()),
            Box::new(m.score_unit_mismatch.clone()),
            Box::new(m.scores_ahead.clone()),
            Box::new(m.config_reloads.clone()),
            Box::new(m.lease_held.clone()),
            Box::new(build_info),
            Box::new(process::ProcessCollector::for_self()),
        ];
        for c in collectors {
            m.registry.register(c).expect("metric names are unique");
        }
        for result in ["success", "error"] {
            m.config_reloads.with_label_values(&[result]);
        }
        for kind in [
            "credentials",
            "permission",
            "unreachable",
            "timeout",
            "other",
        ] {
            m.redis_failures.with_label_values(&[kind]);
        }
        m
    }

    /// The handles of one sweep. Creates every series of the sweep at zero, so dashboards and
    /// alerts see them from start-up.
    pub(crate) fn sweep(&self, sweep: &config::Sweep) -> SweepMetrics {
        let name = sweep.name.as_str();
        let l = &[name];
        self.set_interval(name, sweep.schedule.interval().unwrap_or_default());
        SweepMetrics {
            success: self.sweeps.with_label_values(&[name, "success"]),
            error: self.sweeps.with_label_values(&[name, "error"]),
            overruns: self.overruns.with_label_values(l),
            ticks: self.ticks.with_label_values(l),
            duration: self.duration.with_label_values(l),
            last_success: self.last_success.with_label_values(l),
            keys_scanned: self.keys_scanned.with_label_values(l),
            keys: self.keys.with_label_values(l),
            members: self.members.with_label_values(l),
            tracked: self.tracked.with_label_values(l),
            untracked: self.untracked.with_label_values(l),
            missed: self.missed.with_label_values(l),
            checks: self.checks.with_label_values(l),
            check_errors: self.check_errors.with_label_values(l),
            cardinality: self.cardinality.with_label_values(l),
            evicted: self.evicted.with_label_values(l),
            published: self.published.with_label_values(l),
            lost: self.lost.with_label_values(l),
            unconfirmed: self.unconfirmed.with_label_values(l),
            unanswered: self.unanswered.with_label_values(l),
            lag: self.lag.with_label_values(l),
            nodes: Arc::default(),
            guard: GuardMetrics {
                holding: self.storm_holding.with_label_values(l),
                holds: self.storm_holds.with_label_values(l),
            },
            score_unit_mismatch: self.score_unit_mismatch.with_label_values(l),
            scores_ahead: self.scores_ahead.with_label_values(l),
        }
    }

    /// Sets the time between walks a sweep's alerts measure it against.
    pub(crate) fn set_interval(&self, sweep: &str, interval: Duration) {
        self.interval
            .with_label_values(&[sweep])
            .set(interval.as_secs_f64());
    }

    /// Whether this replica holds the lease of `sweep` on `node`.
    pub(crate) fn set_lease(&self, sweep: &str, node: &NodeId, held: bool) {
        self.lease_held
            .with_label_values(&[sweep, &node.to_string()])
            .set(i64::from(held));
    }

    /// Drops the lease series of `sweep` on `node` (gone, or its leases given up).
    pub(crate) fn forget_lease(&self, sweep: &str, node: &NodeId) {
        let _ = self
            .lease_held
            .remove_label_values(&[sweep, &node.to_string()]);
    }

    /// Whether notifications are in use on `node` (created at 0).
    pub(crate) fn notifications_gauge(&self, node: &NodeId) -> IntGauge {
        let g = self
            .notifications_in_use
            .with_label_values(&[node.to_string()]);
        g.set(0);
        g
    }

    /// The notices read from `node` (created at 0).
    pub(crate) fn notices_counter(&self, node: &NodeId) -> IntCounter {
        self.notices.with_label_values(&[node.to_string()])
    }

    /// The in-flight window of `node`'s loop (set as the loop starts).
    pub(crate) fn check_window_gauge(&self, node: &NodeId) -> IntGauge {
        self.check_window.with_label_values(&[node.to_string()])
    }

    /// Whether `node` refuses `CONFIG` (created at 0).
    pub(crate) fn config_refused_gauge(&self, node: &NodeId) -> IntGauge {
        let g = self
            .notifications_config_refused
            .with_label_values(&[node.to_string()]);
        g.set(0);
        g
    }

    /// Every series of `node` at 0, so that an alert on their increase sees the first clock step
    /// or refusal too, and a dashboard shows the primary before anything happened to it; its
    /// outage counter.
    pub(crate) fn start_node(&self, node: &NodeId) -> prometheus::IntCounter {
        let node = node.to_string();
        for direction in ["forward", "backward"] {
            self.clock_steps
                .with_label_values(&[node.as_str(), direction])
                .inc_by(0);
        }
        self.writes_refused
            .with_label_values(&[node.as_str()])
            .inc_by(0);
        self.writes_refused_now
            .with_label_values(&[node.as_str()])
            .set(0);
        self.outages.with_label_values(&[node])
    }

    /// Counts a step of `node`'s clock.
    pub(crate) fn clock_step(&self, node: &NodeId, direction: &str) {
        self.clock_steps
            .with_label_values(&[node.to_string().as_str(), direction])
            .inc();
    }

    /// `node` refuses writes now, or no longer; an episode is counted as it begins.
    pub(crate) fn writes_refused(&self, node: &NodeId, refused: bool) {
        let node = node.to_string();
        let gauge = self.writes_refused_now.with_label_values(&[node.as_str()]);
        if refused && gauge.get() == 0 {
            self.writes_refused
                .with_label_values(&[node.as_str()])
                .inc();
        }
        gauge.set(i64::from(refused));
    }

    /// Drops the series of a primary that left the topology.
    pub(crate) fn forget_node(&self, node: &NodeId) {
        let node = node.to_string();
        let _ = self
            .notifications_in_use
            .remove_label_values(&[node.as_str()]);
        let _ = self
            .notifications_config_refused
            .remove_label_values(&[node.as_str()]);
        let _ = self.notices.remove_label_values(&[node.as_str()]);
        let _ = self.check_window.remove_label_values(&[node.as_str()]);
        let _ = self.outages.remove_label_values(&[node.as_str()]);
        let _ = self.writes_refused.remove_label_values(&[node.as_str()]);
        let _ = self
            .writes_refused_now
            .remove_label_values(&[node.as_str()]);
        for direction in ["forward", "backward"] {
            let _ = self
                .clock_steps
                .remove_label_values(&[node.as_str(), direction]);
        }
    }

    /// Records whether the configuration expects notifications everywhere.
    pub(crate) fn set_notifications_expected(&self, expected: bool) {
        self.notifications_expected.set(i64::from(expected));
    }

    /// Drops every series of a sweep that is no longer configured.
    pub fn forget_sweep(&self, name: &str) {
        for result in ["success", "error"] {
            let _ = self.sweeps.remove_label_values(&[name, result]);
        }
        let l = &[name];
        for g in [
            &self.keys,
            &self.members,
            &self.tracked,
            &self.untracked,
            &self.storm_holding,
        ] {
            let _ = g.remove_label_values(l);
        }
        for c in [
            &self.overruns,
            &self.ticks,
            &self.keys_scanned,
            &self.missed,
            &self.checks,
            &self.check_errors,
            &self.evicted,
            &self.published,
            &self.lost,
            &self.unconfirmed,
            &self.unanswered,
            &self.storm_holds,
        ] {
            let _ = c.remove_label_values(l);
        }
        let _ = self.duration.remove_label_values(l);
        let _ = self.cardinality.remove_label_values(l);
        let _ = self.lag.remove_label_values(l);
        let _ = self.last_success.remove_label_values(l);
        let _ = self.interval.remove_label_values(l);
    }

    /// The webhooks' metrics, whose series an endpoint creates at zero when it starts.
    pub fn webhooks(&self) -> &presence_sweeper_webhooks::DeliveryMetrics {
        &self.webhooks
    }

    /// Records whether the last Redis round trip succeeded.
    pub fn set_redis_up(&self, up: bool) {
        self.redis_up.set(i64::from(up));
    }

    /// Reports what became of log lines that could not be written.
    pub fn watch_logs(&self, stats: LogStats) {
        let counter = |name: &str, help: &str| {
            prometheus::IntCounter::with_opts(opts(name, help)).expect("valid metric")
        };
        let logs = LogCollector {
            stats,
            dropped: counter(
                "log_lines_dropped_total",
                "Log lines dropped because stderr's reader fell behind (the daemon never waits for its log).",
            ),
            failed: counter(
                "log_write_errors_total",
                "Log lines whose write to stderr failed (a closed pipe, a full disk): dropped, never fatal.",
            ),
        };
        // A second registration (a test's second daemon) keeps the first.
        let _ = self.registry.register(Box::new(logs));
    }

    /// Counts a failed connection attempt or probe, by what went wrong.
    pub fn redis_failure(&self, trouble: Trouble) {
        self.redis_failures
            .with_label_values(&[trouble.label()])
            .inc();
    }

    /// Counts a configuration reload.
    pub fn config_reload(&self, ok: bool) {
        self.config_reloads
            .with_label_values(&[if ok { "success" } else { "error" }])
            .inc();
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

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(NAMESPACE)
}

fn histogram(name: &str, help: &str, buckets: &[f64]) -> HistogramOpts {
    HistogramOpts::new(name, help)
        .namespace(NAMESPACE)
        .buckets(buckets.to_vec())
}
