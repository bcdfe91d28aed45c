//! One claimed stream's deliveries: read a batch after the cursor, post its events (one
//! conversation's one after the other, in stream order; different conversations concurrently),
//! then move the cursor. The batch bounds memory; the cursor moves only once every event of the
//! batch is delivered or dropped, so a crash repeats at most one batch, with the same ids.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::client::{Client, Posted, Signed};
use crate::clock::{RedisOffset, now, unix_seconds};
use crate::entry::{Delivery, EntryId, after};
use crate::id::webhook_id;
use crate::metrics::Endpoint;
use crate::retry::{self, Jitter};
use crate::signing::Signer;
use crate::store::{Advanced, Claimed, DeliveryStore, StoreError};

/// The most entries read and held per stream at a time.
pub const BATCH: usize = 64;
/// The first wait after a failed Redis call; it doubles up to [`REDIS_RETRY_MAX`].
const REDIS_RETRY_FIRST: Duration = Duration::from_millis(100);
const REDIS_RETRY_MAX: Duration = Duration::from_secs(5);

/// What every stream of one endpoint shares.
pub struct Common {
    /// The endpoint's name, for logs.
    pub name: String,
    /// Its HTTP client.
    pub client: Client,
    /// Its keys.
    pub signer: Signer,
    /// Its state in Redis.
    pub store: DeliveryStore,
    /// Its series.
    pub metrics: Endpoint,
    /// Redis's clock.
    pub clock: RedisOffset,
    /// One permit per request in flight (`concurrency`).
    pub permits: Semaphore,
    /// `retry_for`.
    pub retry_for: Duration,
    /// Whether the receiver is failing, so that a change is logged once, not every attempt.
    pub failing: AtomicBool,
    /// Woken when the receiver accepts an event after failing: attempts waiting out a backoff
    /// after a failure of the whole receiver go at once, so a backlog drains within seconds of
    /// an outage's end, not up to [`retry::MAX_RETRY`] later.
    pub recovered: Notify,
    /// When `recovered` last woke them (at most every [`retry::RECOVERY_WAKE_EVERY`]), and
    /// whether a recovery came sooner and waits for a later success to wake them.
    pub woken: Mutex<(Option<Instant>, bool)>,
}

impl Common {
    /// The receiver accepted an event; `recovered`: after failing. Wakes the attempts waiting
    /// for it, unless they were woken just now: then a later success does (a recovery is never
    /// swallowed, only put off).
    fn receiver_accepted(&self, recovered: bool) {
        let mut woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        let (last, pending) = &mut *woken;
        if !recovered && !*pending {
            return;
        }
        if last.is_none_or(|at| now().duration_since(at) >= retry::RECOVERY_WAKE_EVERY) {
            *last = Some(now());
            *pending = false;
            self.recovered.notify_waiters();
        } else {
            *pending = true;
        }
    }
}

/// Delivers `claimed` until nothing waits, the claim is lost, or `cancel` fires.
pub async fn run(shared: Arc<Common>, claimed: Claimed, cancel: CancellationToken) {
    let stream = claimed.stream;
    let mut cursor = claimed.cursor;
    let since = EntryId {
        ms: claimed.since_ms,
        seq: 0,
    };
    let mut jitter = Jitter::new(seed(&stream));
    loop {
        let read = || shared.store.read(&stream, cursor, since.ms, BATCH);
        let Some(entries) = redis_retrying(&shared, &cancel, read).await else {
            return;
        };
        let (deliveries, last) = parse(&shared, entries);
        check_trim(&shared, cursor, since, deliveries.first(), last.is_none());
        let done = last.unwrap_or(cursor.unwrap_or(since));
        if !deliver_batch(&shared, &stream, deliveries, &cancel, &mut jitter).await {
            return;
        }
        let moved = || shared.store.advance(&stream, done);
        match redis_retrying(&shared, &cancel, moved).await {
            Some(Advanced::More) => cursor = Some(done),
            Some(Advanced::Lost | Advanced::Settled) | None => return,
        }
    }
}

/// The deliveries of a batch and its last entry's id; entries that hold no event (written by
/// something else) are skipped and counted as dropped.
fn parse(
    shared: &Common,
    entries: Vec<(String, Option<Vec<u8>>)>,
) -> (Vec<Delivery>, Option<EntryId>) {
    let mut last = None;
    let mut out = Vec::with_capacity(entries.len());
    for (id, event) in entries {
        last = EntryId::parse(&id).or(last);
        match event.map(|e| Delivery::from_entry(&id, &e)) {
            Some(Ok(d)) => out.push(d),
            _ => {
                shared.metrics.outcome("dropped");
                tracing::warn!(
                    webhook = %shared.name,
                    "a stream entry holds no event as presence-sweeper writes them; skipped"
                );
            }
        }
    }
    (out, last)
}

/// Counts a gap before the first entry read: entries trimmed (or expired with their stream)
/// before they were delivered. The chain of `prev` ids tells: the first entry after the cursor
/// names it, and the first one since the stream was marked due names one before that.
fn check_trim(
    shared: &Common,
    cursor: Option<EntryId>,
    since: EntryId,
    first: Option<&Delivery>,
    empty: bool,
) {
    let gap = match (cursor, first) {
        (Some(c), Some(d)) => d.prev != c,
        (None, Some(d)) => !after(since, d.prev),
        // Marked due, yet nothing from then on is left: it went before it was read.
        (None, None) => empty,
        (Some(_), None) => false,
    };
    if gap {
        shared.metrics.dropped("trimmed");
        tracing::warn!(
            webhook = %shared.name,
            "events were trimmed from a stream (or it expired) before they were delivered; dropped"
        );
    }
}

/// Delivers a batch: each conversation's events in order, the conversations concurrently.
/// False if `cancel` fired before every event was delivered or dropped.
async fn deliver_batch(
    shared: &Arc<Common>,
    stream: &[u8],
    deliveries: Vec<Delivery>,
    cancel: &CancellationToken,
    jitter: &mut Jitter,
) -> bool {
    let mut groups: Vec<Vec<Delivery>> = Vec::new();
    let mut index: HashMap<Option<String>, usize> = HashMap::new();
    for d in deliveries {
        let i = *index.entry(d.conversation.clone()).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[i].push(d);
    }
    let runs = groups.into_iter().map(|group| {
        let mut jitter = Jitter::new(seed(stream) ^ jitter.sample().to_bits());
        async move {
            for d in group {
                if !deliver(shared, stream, d, cancel, &mut jitter).await {
                    return false;
                }
            }
            true
        }
    });
    join_all(runs).await.into_iter().all(|done| done)
}

/// Posts one event until a 2xx answers or it expires. False if `cancel` fired first.
async fn deliver(
    shared: &Common,
    stream: &[u8],
    d: Delivery,
    cancel: &CancellationToken,
    jitter: &mut Jitter,
) -> bool {
    let id = webhook_id(stream, &d.id.to_string());
    let body = Bytes::from(d.body);
    let mut failures = 0u32;
    loop {
        if retry::expired(d.id.ms, shared.clock.now_ms(), shared.retry_for) {
            shared.metrics.dropped("expired");
            tracing::warn!(
                webhook = %shared.name,
                failures,
                "an event was not delivered within retry_for; dropped"
            );
            return true;
        }
        let answer = tokio::select! {
            () = cancel.cancelled() => return false,
            answer = attempt(shared, &id, &body) => answer,
        };
        let retry_after = match answer {
            Posted::Status { status, .. } if retry::delivered(status) => {
                shared.metrics.outcome("delivered");
                let recovered = shared.failing.swap(false, Ordering::Relaxed);
                if recovered {
                    tracing::info!(webhook = %shared.name, "the webhook's receiver accepts events again");
                }
                shared.receiver_accepted(recovered);
                return true;
            }
            Posted::Status { retry_after, .. } => retry_after,
            _ => None,
        };
        let status = match answer {
            Posted::Status { status, .. } => Some(status),
            _ => None,
        };
        let wakes = retry::wakes_on_recovery(status, retry_after);
        failures += 1;
        shared.metrics.outcome("retried");
        if !shared.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                webhook = %shared.name,
                result = %describe(&answer),
                "the webhook's receiver did not accept an event; retrying with backoff"
            );
        }
        let wait = retry::wait(failures, retry_after, jitter.sample());
        let recovered = async {
            match wakes {
                true => shared.recovered.notified().await,
                false => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return false,
            () = tokio::time::sleep(wait) => {}
            () = recovered => {}
        }
    }
}

/// One POST, within a permit of the endpoint's `concurrency`, signed afresh.
async fn attempt(shared: &Common, id: &str, body: &Bytes) -> Posted {
    let Ok(_permit) = shared.permits.acquire().await else {
        return Posted::Failed("the endpoint is stopping".into());
    };
    let timestamp = unix_seconds();
    let signed = Signed {
        id,
        timestamp,
        signature: shared.signer.sign(id, timestamp, body),
    };
    let started = now();
    let answer = shared.client.post(&signed, body.clone()).await;
    shared
        .metrics
        .attempt(answer.label(), now().duration_since(started).as_secs_f64());
    answer
}

/// An attempt's result for a log line (no ids).
fn describe(answer: &Posted) -> String {
    match answer {
        Posted::Status { status, .. } => format!("HTTP {status}"),
        Posted::TimedOut => "no answer within the timeout".into(),
        Posted::Failed(why) => why.clone(),
    }
}

/// Runs a Redis call until it succeeds (a failure is counted and waited out, with backoff), or
/// `None` once `cancel` fires.
pub async fn redis_retrying<T, F: Future<Output = Result<T, StoreError>>>(
    shared: &Common,
    cancel: &CancellationToken,
    mut call: impl FnMut() -> F,
) -> Option<T> {
    let mut wait = REDIS_RETRY_FIRST;
    loop {
        let result = tokio::select! {
            () = cancel.cancelled() => return None,
            r = call() => r,
        };
        match result {
            Ok(v) => return Some(v),
            Err(e) => {
                shared.metrics.redis_error();
                tracing::debug!(webhook = %shared.name, error = %e, "a delivery's Redis call failed; retrying");
                tokio::select! {
                    () = cancel.cancelled() => return None,
                    () = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(REDIS_RETRY_MAX);
            }
        }
    }
}

/// A seed for a stream's jitter: its name and the time, so that replicas differ.
fn seed(stream: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in stream {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    h ^ std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
