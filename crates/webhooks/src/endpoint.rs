//! One endpoint's deliverer: claims due streams (four per request its `concurrency` allows in
//! flight), runs a worker per claimed stream, renews its claims a third of the way through their
//! lease, and on shutdown gives them back so that another replica goes on at once. On a cluster
//! it claims from the due sets of the slots it knows to hold streams ([`Slots`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
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
use crate::hints::DueSlots;
use crate::metrics::DeliveryMetrics;
use crate::signing::{BadSecret, Signer};
use crate::store::{Claims, DeliveryStore, StoreError};
use crate::worker::{self, Common};

/// How often an idle deliverer looks for due streams: well within the 100 ms a webhook may
/// trail its pub/sub event by.
pub const POLL: Duration = Duration::from_millis(50);
/// How long shutdown waits for attempts in flight before it gives the claims back.
const DRAIN: Duration = Duration::from_secs(2);
/// Streams worked on at once, per request allowed in flight: a worker spends part of its time
/// on Redis (reading, moving its cursor), during which others can use the permits.
const STREAMS_PER_PERMIT: usize = 4;
/// On a cluster, how often every slot's due set is looked at (16,384 `EXISTS`, split among the
/// primaries): what finds the streams another replica (or a predecessor) marked due. This
/// process's own evictions are heard at once ([`DueSlots`]).
pub const DISCOVER: Duration = Duration::from_secs(1);
/// How long after a discovery that a primary failed the next one waits: an unreachable
/// primary holds each discovery (and the looks behind it) for its wire's timeout.
const DISCOVER_FAILING: Duration = Duration::from_secs(10);
/// On a cluster, the most slots one look claims from, so that a look stays a bounded number of
/// calls however many slots hold streams; the next look goes on where this one stopped.
const SLOTS_PER_LOOK: usize = 64;

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
    /// The slots this process's evictions marked due.
    pub hints: DueSlots,
}

/// One endpoint's deliveries.
pub struct Deliverer {
    shared: Arc<Common>,
    /// The most streams worked on at once.
    streams: usize,
    lease: Duration,
    hints: DueSlots,
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
            recovered: tokio::sync::Notify::new(),
            woken: std::sync::Mutex::new((None, false)),
        };
        Ok(Self {
            shared: Arc::new(shared),
            streams: concurrency * STREAMS_PER_PERMIT,
            lease: claiming.lease,
            hints: claiming.hints.clone(),
        })
    }

    /// On a cluster, looks for the slots whose due sets hold streams this process has not
    /// heard of. A primary that fails hides only its own.
    async fn discover(&self, slots: &mut Slots) {
        let shared = &self.shared;
        let (found, failed) = shared.store.discover(&slots.known()).await;
        slots.found(found);
        slots.discovered(failed.is_some());
        if let Some(e) = failed {
            shared.metrics.redis_error();
            tracing::debug!(webhook = %shared.name, error = %e, "looking for due slots failed on a primary; the others' were found; retrying");
        }
    }

    /// Delivers until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let shared = &self.shared;
        let mut workers: JoinSet<()> = JoinSet::new();
        let mut active: HashMap<Vec<u8>, CancellationToken> = HashMap::new();
        let mut ids: HashMap<tokio::task::Id, Vec<u8>> = HashMap::new();
        let mut slots = Slots::new(shared.store.per_slot());
        let renew_every = self.lease / 3;
        let mut renewed = now();
        let mut trouble = ClaimTrouble::default();
        let mut looked: Option<std::time::Instant> = None;
        while !cancel.is_cancelled() {
            if slots.per_slot {
                slots.hear(self.hints.take(&shared.name));
                if slots.discovery_due() {
                    self.discover(&mut slots).await;
                }
            }
            // A claim reads a window of the due set: look again once a quarter of the slots is
            // free, or every POLL, not at every stream done (that cost Redis more than the
            // deliveries did).
            let mut free = self.streams - active.len();
            let due_to_look = looked.is_none_or(|at| now().duration_since(at) >= POLL);
            if free > 0 && (free >= self.streams / 4 || due_to_look) {
                looked = Some(now());
                for in_slot in slots.next_turn() {
                    if free == 0 {
                        break;
                    }
                    // A slot of a primary that failed earlier in this look.
                    if slots.resting(in_slot) {
                        continue;
                    }
                    slots.visited(in_slot);
                    let window = active.len() + 2 * free;
                    match shared.store.claim(in_slot, free, window).await {
                        Ok(claims) => {
                            trouble.worked(&shared.name, in_slot);
                            shared.clock.observe(claims.now_ms);
                            let (due, oldest_ms) = (claims.due, claims.oldest_ms);
                            let started =
                                self.start(claims, &mut workers, &mut active, &mut ids, &cancel);
                            slots.saw(in_slot, due, oldest_ms, started);
                            free -= started;
                        }
                        Err(e) => {
                            shared.metrics.redis_error();
                            // Its primary's other slots would fail alike: they rest too, and
                            // the look goes on with the other primaries' slots.
                            let same = in_slot
                                .map(|s| shared.store.same_primary(s, slots.known()))
                                .unwrap_or_default();
                            trouble.failed(&shared.name, &e, in_slot, &same);
                            slots.failed(in_slot, same);
                            continue;
                        }
                    }
                }
                let (due, oldest_ms) = slots.backlog();
                let age = oldest_ms.map_or(0, |ms| shared.clock.now_ms().saturating_sub(ms) / 1000);
                shared.metrics.backlog(due, age);
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

    /// Starts a worker for each stream claimed that none works on yet; returns how many.
    fn start(
        &self,
        claims: Claims,
        workers: &mut JoinSet<()>,
        active: &mut HashMap<Vec<u8>, CancellationToken>,
        ids: &mut HashMap<tokio::task::Id, Vec<u8>>,
        cancel: &CancellationToken,
    ) -> usize {
        let mut started = 0;
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
            started += 1;
        }
        started
    }

    /// Renews the claims of `active` (or gives them back); a worker whose claim went to
    /// another replica stops.
    async fn renew(&self, active: &HashMap<Vec<u8>, CancellationToken>, release: bool) {
        if active.is_empty() {
            return;
        }
        let streams: Vec<&[u8]> = active.keys().map(Vec::as_slice).collect();
        let (now_ms, held, failed) = self.shared.store.renew(&streams, release).await;
        if now_ms > 0 {
            self.shared.clock.observe(now_ms);
        }
        for (stream, held) in streams.iter().zip(held) {
            if !held {
                tracing::info!(webhook = %self.shared.name, "another replica took over a stream's deliveries");
                active[*stream].cancel();
            }
        }
        if let Some(e) = failed {
            self.shared.metrics.redis_error();
            tracing::debug!(webhook = %self.shared.name, error = %e, "renewing claims failed");
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

/// Claims that fail, as the log tells them: a warning at most every [`WARN_EVERY`] (on a
/// cluster with one primary down, its slots fail look after look while the others' succeed in
/// between), and once every due set that failed since works again, a line that says so.
#[derive(Debug, Default)]
struct ClaimTrouble {
    /// When the warning was last logged.
    warned: Option<std::time::Instant>,
    /// The due sets whose claims failed (with the other known slots of their primaries, which
    /// would fail alike), each until a claim on it works again. Each is looked at again once
    /// it has rested, so the set empties once Redis is back.
    failing: BTreeSet<Option<u16>>,
    /// Whether the warning told of them.
    told: bool,
}

impl ClaimTrouble {
    fn failed(&mut self, webhook: &str, e: &StoreError, in_slot: Option<u16>, same: &[u16]) {
        if self
            .warned
            .is_none_or(|at| now().duration_since(at) >= WARN_EVERY)
        {
            tracing::warn!(webhook, error = %e, "cannot look for events to deliver; retrying");
            self.warned = Some(now());
            self.told = true;
        }
        self.failing.insert(in_slot);
        self.failing.extend(same.iter().map(|&s| Some(s)));
    }

    fn worked(&mut self, webhook: &str, in_slot: Option<u16>) {
        if self.failing.remove(&in_slot)
            && self.failing.is_empty()
            && std::mem::take(&mut self.told)
        {
            tracing::info!(webhook, "looking for events to deliver works again");
            // A failure soon after is said again.
            self.warned = None;
        }
    }
}

/// The due sets a deliverer claims from: the only one, or on a cluster those of the slots known
/// to hold streams (heard from this process's evictions or found by discovery), each with what
/// its last claim saw for the backlog series.
struct Slots {
    per_slot: bool,
    /// Per due set: what its last claim saw, and until when it is left alone.
    seen: BTreeMap<Option<u16>, Seen>,
    /// The last slot a look claimed from: the next look goes on after it.
    last: Option<u16>,
    /// When the next discovery is due; `None`: at once.
    discover_at: Option<std::time::Instant>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    /// Its due streams.
    due: u64,
    /// When its oldest undelivered entry was appended, ms.
    oldest_ms: Option<u64>,
    /// Its due streams were all held by other replicas: not looked at again before this.
    rest_until: Option<std::time::Instant>,
}

impl Seen {
    /// Whether the slot is left out of the looks at `at`.
    fn resting_at(&self, at: std::time::Instant) -> bool {
        self.rest_until.is_some_and(|until| until > at)
    }
}

/// How long a slot whose due streams were all held elsewhere is left out of the looks.
const REST: Duration = Duration::from_secs(1);
/// How long a slot whose claim failed (its primary down or unreachable) is left out of the
/// looks, so that they go on with the other primaries' slots rather than stop at it again.
const FAILED_REST: Duration = Duration::from_secs(5);
/// A failing Redis is logged at warn at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

impl Slots {
    fn new(per_slot: bool) -> Self {
        let mut seen = BTreeMap::new();
        if !per_slot {
            seen.insert(None, Seen::default());
        }
        Self {
            per_slot,
            seen,
            last: None,
            discover_at: None,
        }
    }

    /// Slots this process marked due: new events, so each is looked at again at once.
    fn hear(&mut self, marked: impl IntoIterator<Item = u16>) {
        for s in marked {
            self.seen.entry(Some(s)).or_default().rest_until = None;
        }
    }

    fn discovery_due(&self) -> bool {
        self.discover_at.is_none_or(|at| now() >= at)
    }

    /// A discovery ended, `failing` on some primary: the next comes [`DISCOVER`] after its
    /// end, or [`DISCOVER_FAILING`] while a primary fails.
    fn discovered(&mut self, failing: bool) {
        let wait = if failing { DISCOVER_FAILING } else { DISCOVER };
        self.discover_at = Some(now() + wait);
    }

    fn known(&self) -> Vec<u16> {
        self.seen.keys().filter_map(|s| *s).collect()
    }

    fn found(&mut self, slots: Vec<u16>) {
        for s in slots {
            self.seen.entry(Some(s)).or_default();
        }
    }

    /// The due sets to claim from now: the only one, or at most [`SLOTS_PER_LOOK`] slots in
    /// turn after the last one claimed from, leaving out those resting.
    fn next_turn(&self) -> Vec<Option<u16>> {
        if !self.per_slot {
            return vec![None];
        }
        let at = now();
        let after = self.last.map_or(0, |l| u32::from(l) + 1);
        let (later, earlier): (Vec<Option<u16>>, Vec<Option<u16>>) = self
            .seen
            .iter()
            .filter(|(_, s)| !s.resting_at(at))
            .map(|(k, _)| *k)
            .partition(|k| k.is_some_and(|s| u32::from(s) >= after));
        later
            .into_iter()
            .chain(earlier)
            .take(SLOTS_PER_LOOK)
            .collect()
    }

    /// A claim on `in_slot` failed. On a cluster the slot rests [`FAILED_REST`], with `same`
    /// (the known slots of its primary, which would fail alike); outside one it is the only
    /// due set, and is looked at again as before.
    fn failed(&mut self, in_slot: Option<u16>, same: Vec<u16>) {
        let Some(slot) = in_slot else {
            return;
        };
        let until = now() + FAILED_REST;
        for s in std::iter::once(slot).chain(same) {
            self.seen.entry(Some(s)).or_default().rest_until = Some(until);
        }
    }

    /// Whether `in_slot` is left out of the looks for now.
    fn resting(&self, in_slot: Option<u16>) -> bool {
        self.seen.get(&in_slot).is_some_and(|s| s.resting_at(now()))
    }

    /// A look claims from `in_slot`: the next one begins after it.
    fn visited(&mut self, in_slot: Option<u16>) {
        if let Some(s) = in_slot {
            self.last = Some(s);
        }
    }

    /// What a claim on `in_slot` saw (`due` streams, the oldest appended at `oldest_ms`), and
    /// how many streams it started. A slot's due set found empty is forgotten until it is heard
    /// of or found again; one whose streams were all held elsewhere rests a while.
    fn saw(&mut self, in_slot: Option<u16>, due: u64, oldest_ms: Option<u64>, started: usize) {
        if in_slot.is_some() && due == 0 {
            self.seen.remove(&in_slot);
            return;
        }
        let rest_until = (in_slot.is_some() && started == 0).then(|| now() + REST);
        self.seen.insert(
            in_slot,
            Seen {
                due,
                oldest_ms,
                rest_until,
            },
        );
    }

    /// Due streams in all, and the oldest one's score (ms).
    fn backlog(&self) -> (u64, Option<u64>) {
        let due = self.seen.values().map(|s| s.due).sum();
        let oldest = self.seen.values().filter_map(|s| s.oldest_ms).min();
        (due, oldest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_server_has_one_due_set_always() {
        let mut slots = Slots::new(false);
        assert_eq!(slots.next_turn(), [None]);
        slots.saw(None, 0, None, 0);
        assert_eq!(slots.next_turn(), [None]);
        slots.saw(None, 2, Some(5), 0);
        assert_eq!(slots.next_turn(), [None], "never rests");
        assert_eq!(slots.backlog(), (2, Some(5)));
    }

    #[test]
    fn a_slot_whose_claim_failed_rests_while_the_others_go_on() {
        let mut slots = Slots::new(true);
        slots.hear([7, 8, 9, 10]);
        slots.visited(Some(7));
        // 7 and 9 are on the primary that failed.
        slots.failed(Some(7), vec![7, 9]);
        assert!(slots.resting(Some(9)) && !slots.resting(Some(8)));
        assert_eq!(slots.next_turn(), [Some(8), Some(10)]);
        // Heard of anew (this process's evictor marked it due): looked at again at once.
        slots.hear([7]);
        assert_eq!(slots.next_turn(), [Some(8), Some(10), Some(7)]);
        // Outside a cluster the one due set never rests.
        let mut one = Slots::new(false);
        one.failed(None, Vec::new());
        assert_eq!(one.next_turn(), [None]);
    }

    #[test]
    fn a_clusters_slots_each_get_their_turn_and_empty_ones_are_forgotten() {
        let mut slots = Slots::new(true);
        assert!(slots.next_turn().is_empty());
        slots.hear(0..100);
        let first = slots.next_turn();
        assert_eq!(first.len(), SLOTS_PER_LOOK);
        assert_eq!(first[0], Some(0));
        // A look that stopped after 3 slots (no room left): the next goes on after them.
        for s in &first[..3] {
            slots.visited(*s);
        }
        assert_eq!(slots.next_turn()[0], Some(3));
        // Round the end: on from the start.
        slots.visited(Some(99));
        assert_eq!(slots.next_turn()[0], Some(0));
        slots.saw(Some(3), 2, Some(500), 1);
        slots.saw(Some(4), 1, Some(400), 1);
        slots.saw(Some(5), 0, None, 0);
        assert!(!slots.known().contains(&5));
        assert_eq!(slots.backlog(), (3, Some(400)));
    }

    #[test]
    fn a_slot_held_elsewhere_rests_until_marked_again() {
        let mut slots = Slots::new(true);
        slots.hear([7, 8]);
        slots.saw(Some(7), 3, Some(100), 0);
        assert_eq!(
            slots.next_turn(),
            [Some(8)],
            "7 rests: its streams are held elsewhere"
        );
        slots.hear([7]);
        assert_eq!(slots.next_turn(), [Some(7), Some(8)]);
    }
}
