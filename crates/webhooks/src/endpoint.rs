//! One endpoint's deliverer: claims due streams (four per request its `concurrency` allows in
//! flight), runs a worker per claimed stream, renews its claims a third of the way through their
//! lease, and on shutdown gives them back so that another replica goes on at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use presence_sweeper_config::Webhook;
use presence_sweeper_redis::Store;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::client::{Client, ClientError};
use crate::clock::{RedisOffset, now};
use crate::metrics::DeliveryMetrics;
use crate::signing::{BadSecret, Signer};
use crate::store::{Claims, DeliveryStore};
use crate::worker::{self, Common};

/// How often an idle deliverer looks for due streams: well within the 100 ms a webhook may
/// trail its pub/sub event by.
pub const POLL: Duration = Duration::from_millis(50);
/// How long shutdown waits for attempts in flight before it gives the claims back.
const DRAIN: Duration = Duration::from_secs(2);
/// Streams worked on at once, per request allowed in flight: a worker spends part of its time
/// on Redis (reading, moving its cursor), during which others can use the permits.
const STREAMS_PER_PERMIT: usize = 4;

/// Why an endpoint cannot start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Its secret.
    #[error(transparent)]
    Secret(#[from] BadSecret),
    /// Its client (url, certificates).
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// How an endpoint's deliverer shares the work with other replicas.
#[derive(Debug, Clone)]
pub struct Claiming {
    /// This replica's name in claims.
    pub owner: String,
    /// How long a claim outlives its holder's last renewal.
    pub lease: Duration,
    /// The bound of each Redis call.
    pub command_timeout: Duration,
}

/// One endpoint's deliveries.
pub struct Deliverer {
    shared: Arc<Common>,
    /// The most streams worked on at once.
    streams: usize,
    lease: Duration,
}

impl Deliverer {
    /// The deliverer of `hook`.
    pub fn new(
        hook: &Webhook,
        store: Store,
        metrics: &DeliveryMetrics,
        claiming: &Claiming,
    ) -> Result<Self, EndpointError> {
        let concurrency = hook.concurrency.max(1) as usize;
        let shared = Common {
            name: hook.name.clone(),
            client: Client::new(hook)?,
            signer: Signer::new(&hook.name, &hook.secrets)?,
            store: DeliveryStore::new(
                store,
                &hook.name,
                claiming.owner.clone(),
                claiming.lease,
                claiming.command_timeout,
            ),
            metrics: metrics.endpoint(&hook.name),
            clock: RedisOffset::default(),
            permits: Semaphore::new(concurrency),
            retry_for: hook.retry_for,
            failing: AtomicBool::new(false),
        };
        Ok(Self {
            shared: Arc::new(shared),
            streams: concurrency * STREAMS_PER_PERMIT,
            lease: claiming.lease,
        })
    }

    /// Delivers until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let shared = &self.shared;
        let mut workers: JoinSet<()> = JoinSet::new();
        let mut active: HashMap<Vec<u8>, CancellationToken> = HashMap::new();
        let mut ids: HashMap<tokio::task::Id, Vec<u8>> = HashMap::new();
        let renew_every = self.lease / 3;
        let mut renewed = now();
        let mut redis_failing = false;
        let mut looked: Option<std::time::Instant> = None;
        while !cancel.is_cancelled() {
            // A claim reads a window of the due set: look again once a quarter of the slots is
            // free, or every POLL, not at every stream done (that cost Redis more than the
            // deliveries did).
            let free = self.streams - active.len();
            let due_to_look = looked.is_none_or(|at| now().duration_since(at) >= POLL);
            if free > 0 && (free >= self.streams / 4 || due_to_look) {
                looked = Some(now());
                let window = active.len() + 2 * free;
                match shared.store.claim(free, window).await {
                    Ok(claims) => {
                        redis_failing = false;
                        self.start(claims, &mut workers, &mut active, &mut ids, &cancel);
                    }
                    Err(e) => {
                        shared.metrics.redis_error();
                        if !redis_failing {
                            tracing::warn!(webhook = %shared.name, error = %e, "cannot look for events to deliver; retrying");
                        }
                        redis_failing = true;
                    }
                }
            }
            shared.metrics.claimed(active.len());
            tokio::select! {
                () = cancel.cancelled() => break,
                Some(done) = workers.join_next_with_id() => {
                    finished(done, &mut active, &mut ids);
                    while let Some(done) = workers.try_join_next_with_id() {
                        finished(done, &mut active, &mut ids);
                    }
                }
                () = tokio::time::sleep(POLL) => {}
            }
            if now().duration_since(renewed) >= renew_every {
                renewed = now();
                self.renew(&active, false).await;
            }
        }
        for token in active.values() {
            token.cancel();
        }
        let _ = tokio::time::timeout(DRAIN, async {
            while workers.join_next().await.is_some() {}
        })
        .await;
        workers.abort_all();
        self.renew(&active, true).await;
        shared.metrics.claimed(0);
    }

    /// Starts a worker for each stream claimed that none works on yet.
    fn start(
        &self,
        claims: Claims,
        workers: &mut JoinSet<()>,
        active: &mut HashMap<Vec<u8>, CancellationToken>,
        ids: &mut HashMap<tokio::task::Id, Vec<u8>>,
        cancel: &CancellationToken,
    ) {
        let shared = &self.shared;
        shared.clock.observe(claims.now_ms);
        let age = claims
            .oldest_ms
            .map_or(0, |ms| claims.now_ms.saturating_sub(ms) / 1000);
        shared.metrics.backlog(claims.due, age);
        for claimed in claims.claimed {
            if active.contains_key(&claimed.stream) {
                continue;
            }
            let token = cancel.child_token();
            active.insert(claimed.stream.clone(), token.clone());
            let shared = self.shared.clone();
            let stream = claimed.stream.clone();
            let task = workers.spawn(worker::run(shared, claimed, token));
            ids.insert(task.id(), stream);
        }
    }

    /// Renews the claims of `active` (or gives them back); a worker whose claim went to
    /// another replica stops.
    async fn renew(&self, active: &HashMap<Vec<u8>, CancellationToken>, release: bool) {
        if active.is_empty() {
            return;
        }
        let streams: Vec<&[u8]> = active.keys().map(Vec::as_slice).collect();
        match self.shared.store.renew(&streams, release).await {
            Ok((now_ms, held)) => {
                self.shared.clock.observe(now_ms);
                for (stream, held) in streams.iter().zip(held) {
                    if !held {
                        tracing::info!(webhook = %self.shared.name, "another replica took over a stream's deliveries");
                        active[*stream].cancel();
                    }
                }
            }
            Err(e) => {
                self.shared.metrics.redis_error();
                tracing::debug!(webhook = %self.shared.name, error = %e, "renewing claims failed");
            }
        }
    }
}

/// Forgets a worker that ended, however it ended (a panic too: its stream must not stay
/// claimed and renewed by a worker that is gone).
fn finished(
    done: Result<(tokio::task::Id, ()), tokio::task::JoinError>,
    active: &mut HashMap<Vec<u8>, CancellationToken>,
    ids: &mut HashMap<tokio::task::Id, Vec<u8>>,
) {
    let id = match done {
        Ok((id, ())) => id,
        Err(e) => {
            tracing::error!(error = %e, "a webhook worker failed; its stream is claimed again");
            e.id()
        }
    };
    if let Some(stream) = ids.remove(&id) {
        active.remove(&stream);
    }
}
