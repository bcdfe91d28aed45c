//! The webhooks' metrics, registered in the daemon's registry. Their only label besides small
//! enums is the endpoint's configured name: no event, stream or conversation id.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// How long one attempt took: a millisecond to a minute (the longest sensible `timeout`).
const ATTEMPT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// What became of an event.
pub const OUTCOMES: &[&str] = &["delivered", "retried", "dropped"];
/// Why an event was dropped.
pub const DROP_REASONS: &[&str] = &["expired", "trimmed"];
/// How an attempt ended (`client::Posted::label`).
pub const RESULTS: &[&str] = &["2xx", "3xx", "4xx", "5xx", "timeout", "error"];

/// Every webhook metric, all endpoints.
#[derive(Clone)]
pub struct DeliveryMetrics {
    deliveries: IntCounterVec,
    dropped: IntCounterVec,
    attempts: IntCounterVec,
    duration: HistogramVec,
    backlog: IntGaugeVec,
    oldest: IntGaugeVec,
    claimed: IntGaugeVec,
    redis_errors: IntCounterVec,
}

impl DeliveryMetrics {
    /// Creates the metrics (names under `namespace`) and registers them in `registry`.
    pub fn new(namespace: &str, registry: &Registry) -> prometheus::Result<Self> {
        let opts = |name: &str, help: &str| Opts::new(name, help).namespace(namespace);
        let m = Self {
            deliveries: IntCounterVec::new(
                opts(
                    "webhook_deliveries_total",
                    "Events of a webhook by outcome: delivered (a 2xx answered), retried (an attempt failed and the event waits for another), dropped (past retry_for, or trimmed from the stream before delivery).",
                ),
                &["webhook", "outcome"],
            )?,
            dropped: IntCounterVec::new(
                opts(
                    "webhook_dropped_total",
                    "Events a webhook gave up, by reason: expired (older than retry_for) or trimmed (gone from the stream before delivery; a gap counts once).",
                ),
                &["webhook", "reason"],
            )?,
            attempts: IntCounterVec::new(
                opts(
                    "webhook_attempts_total",
                    "POSTs to a webhook by result: the status class, timeout, or error (no answer: refused, reset, TLS).",
                ),
                &["webhook", "result"],
            )?,
            duration: HistogramVec::new(
                HistogramOpts::new(
                    "webhook_attempt_duration_seconds",
                    "Wall time of one POST to a webhook, until its answer's status (or the timeout).",
                )
                .namespace(namespace)
                .buckets(ATTEMPT_BUCKETS.to_vec()),
                &["webhook"],
            )?,
            backlog: IntGaugeVec::new(
                opts(
                    "webhook_backlog_streams",
                    "Streams holding events a webhook has not had yet (its due set in Redis), as of this replica's last look.",
                ),
                &["webhook"],
            )?,
            oldest: IntGaugeVec::new(
                opts(
                    "webhook_oldest_undelivered_age_seconds",
                    "Age (on Redis's clock) of the oldest event a webhook has not had yet; 0 with none.",
                ),
                &["webhook"],
            )?,
            claimed: IntGaugeVec::new(
                opts(
                    "webhook_claimed_streams",
                    "Streams this replica holds a claim on and delivers for a webhook.",
                ),
                &["webhook"],
            )?,
            redis_errors: IntCounterVec::new(
                opts(
                    "webhook_redis_errors_total",
                    "Calls to Redis for a webhook's deliveries that failed (retried).",
                ),
                &["webhook"],
            )?,
        };
        registry.register(Box::new(m.deliveries.clone()))?;
        registry.register(Box::new(m.dropped.clone()))?;
        registry.register(Box::new(m.attempts.clone()))?;
        registry.register(Box::new(m.duration.clone()))?;
        registry.register(Box::new(m.backlog.clone()))?;
        registry.register(Box::new(m.oldest.clone()))?;
        registry.register(Box::new(m.claimed.clone()))?;
        registry.register(Box::new(m.redis_errors.clone()))?;
        Ok(m)
    }

    /// The series of `webhook`, every one at zero from the first scrape on.
    pub fn endpoint(&self, webhook: &str) -> Endpoint {
        for outcome in OUTCOMES {
            self.deliveries.with_label_values(&[webhook, outcome]);
        }
        for reason in DROP_REASONS {
            self.dropped.with_label_values(&[webhook, reason]);
        }
        for result in RESULTS {
            self.attempts.with_label_values(&[webhook, result]);
        }
        Endpoint {
            name: webhook.to_owned(),
            metrics: self.clone(),
            duration: self.duration.with_label_values(&[webhook]),
            backlog: self.backlog.with_label_values(&[webhook]),
            oldest: self.oldest.with_label_values(&[webhook]),
            claimed: self.claimed.with_label_values(&[webhook]),
            redis_errors: self.redis_errors.with_label_values(&[webhook]),
        }
    }

    /// Removes the series of an endpoint no longer configured.
    pub fn forget(&self, webhook: &str) {
        for outcome in OUTCOMES {
            let _ = self.deliveries.remove_label_values(&[webhook, outcome]);
        }
        for reason in DROP_REASONS {
            let _ = self.dropped.remove_label_values(&[webhook, reason]);
        }
        for result in RESULTS {
            let _ = self.attempts.remove_label_values(&[webhook, result]);
        }
        let _ = self.duration.remove_label_values(&[webhook]);
        let _ = self.backlog.remove_label_values(&[webhook]);
        let _ = self.oldest.remove_label_values(&[webhook]);
        let _ = self.claimed.remove_label_values(&[webhook]);
        let _ = self.redis_errors.remove_label_values(&[webhook]);
    }
}

/// One endpoint's series.
#[derive(Clone)]
pub struct Endpoint {
    name: String,
    metrics: DeliveryMetrics,
    duration: prometheus::Histogram,
    backlog: prometheus::IntGauge,
    oldest: prometheus::IntGauge,
    claimed: prometheus::IntGauge,
    redis_errors: prometheus::IntCounter,
}

impl Endpoint {
    /// An attempt that ended with `result` after `seconds`.
    pub fn attempt(&self, result: &str, seconds: f64) {
        self.duration.observe(seconds);
        self.metrics
            .attempts
            .with_label_values(&[&self.name, result])
            .inc();
    }

    /// An event's outcome (one of [`OUTCOMES`]).
    pub fn outcome(&self, outcome: &str) {
        self.metrics
            .deliveries
            .with_label_values(&[&self.name, outcome])
            .inc();
    }

    /// A dropped event, by reason (one of [`DROP_REASONS`]).
    pub fn dropped(&self, reason: &str) {
        self.outcome("dropped");
        self.metrics
            .dropped
            .with_label_values(&[&self.name, reason])
            .inc();
    }

    /// The due set as last seen: its size, and the age of its oldest entry.
    pub fn backlog(&self, streams: u64, oldest_age_secs: u64) {
        self.backlog.set(streams as i64);
        self.oldest.set(oldest_age_secs as i64);
    }

    /// Streams this replica holds.
    pub fn claimed(&self, n: usize) {
        self.claimed.set(n as i64);
    }

    /// A failed call to Redis.
    pub fn redis_error(&self) {
        self.redis_errors.inc();
    }
}
