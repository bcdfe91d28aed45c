//! The I/O of one primary's loop: each is a future that owns what it needs and reports what it
//! came to as a [`Done`] (or a subscription [`Outcome`]), for the loop to apply.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::evict::read::{self, Read, Reads};
use crate::store::{Conn, Node, Packed, SendPacked, Store, reply};
use crate::sweep::{CheckCtx, CheckOpts, Checked, Sweep};
use crate::tracking::index::Ticket;
use crate::tracking::keyspace::{self, Availability, Subscription};

use super::Settings;
use super::canary::{self, Reading};
use super::checks::WITNESSES;
use super::notifications::{Op, Outcome};
use super::tracked::Tracked;

/// What a future of the loop finished.
pub(crate) enum Done {
    /// A probe asked to show Redis still answers, and still holds its data.
    Probe(Result<Probed, Error>),
    /// After a refusal: whether the Redis user may now do all that every sweep's checks do.
    Permitted(Result<(), Error>),
    /// A check of keys the index handed out.
    Checked {
        epoch: u64,
        tickets: Vec<Ticket>,
        checked: Checked,
    },
    /// A walk checked keys it could not track.
    Direct { epoch: u64, checked: Checked },
    /// A reconciliation walk read the lowest scores of tracked keys.
    Verified {
        epoch: u64,
        ids: Vec<Vec<u8>>,
        reads: Result<Reads, Error>,
    },
    /// A walk read the size of tracked keys it did not find: 0 for a key that is gone.
    Unseen {
        epoch: u64,
        ids: Vec<Vec<u8>>,
        reads: Result<Reads, Error>,
    },
}

/// Where the loop's futures go, and what they share.
pub(crate) struct Io {
    pub(crate) store: Store,
    pub(crate) node: Node,
    /// The store's routed connection (see [`CheckCtx::routed`]).
    pub(crate) routed: Conn,
    pub(crate) settings: Arc<Settings>,
    pub(crate) cancel: CancellationToken,
}

impl Io {
    /// The liveness probe, in one round trip: `TIME`, the canary's `ZINCRBY` on `key` (looked
    /// up first in a cluster, when not known yet) and `INFO server` for the `run_id`. Only
    /// `TIME` must answer; the others are evidence when they do.
    pub(crate) fn probe(&self, key: Option<Vec<u8>>) -> BoxFuture<'static, Done> {
        let mut node = self.node.clone();
        Box::pin(async move { Done::Probe(probe(&mut node, key).await) })
    }

    /// Proves every sweep's permissions, on a key of each sweep's pattern that need not exist:
    /// nothing runs, the commands are only queued and discarded.
    pub(crate) fn prove_permissions(&self, sweeps: Vec<Arc<Sweep>>) -> BoxFuture<'static, Done> {
        let (store, node) = (self.store.clone(), self.node.clone());
        Box::pin(async move {
            for sweep in sweeps {
                let key = sweep
                    .config()
                    .pattern
                    .key(b"presence-sweeper-permission-check");
                sweep.forget_preflight(&node);
                if let Err(e) = sweep.preflight(&store, &node, &key).await {
                    return Done::Permitted(Err(e));
                }
            }
            Done::Permitted(Ok(()))
        })
    }

    /// A check of `keys` of sweep `t`. When the storm guard suspects the sweep went silent, a
    /// few busy keys go with it as witnesses.
    pub(crate) fn check(
        &self,
        t: &Tracked,
        keys: Vec<Vec<u8>>,
        opts: CheckOpts,
    ) -> impl Future<Output = Checked> + Send + 'static {
        let witnesses: Vec<Vec<u8>> =
            if opts.purpose.may_hold() && t.job.sweep.guard().suspects_silence(opts.judge_at) {
                let pattern = &t.job.sweep.config().pattern;
                t.index
                    .latest(WITNESSES)
                    .map(|id| pattern.key(id))
                    .collect()
            } else {
                Vec::new()
            };
        let sweep = t.job.sweep.clone();
        let observer = t.observer.clone();
        let node = self.node.clone();
        let store = self.store.clone();
        let routed = self.routed.clone();
        let cancel = self.cancel.clone();
        async move {
            let ctx = CheckCtx {
                store: &store,
                routed: &routed,
                observer: &*observer,
                cancel: &cancel,
                witnesses: &witnesses,
            };
            sweep.check(node, keys, opts, ctx).await
        }
    }

    /// Reads the lowest score of each of `keys` (the ids `ids` of sweep `epoch`).
    pub(crate) fn verify(
        &self,
        epoch: u64,
        ids: Vec<Vec<u8>>,
        keys: Vec<Vec<u8>>,
    ) -> BoxFuture<'static, Done> {
        let mut node = self.node.clone();
        Box::pin(async move {
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let reads = read::read(&mut node, &refs, Read::Oldest).await;
            Done::Verified { epoch, ids, reads }
        })
    }

    /// Reads the size of each of `keys` (the ids `ids` of sweep `epoch`), which a walk did not
    /// find: `ZCARD` is as cheap as `EXISTS`, and the README's ACL grants it.
    pub(crate) fn unseen(
        &self,
        epoch: u64,
        ids: Vec<Vec<u8>>,
        keys: Vec<Vec<u8>>,
    ) -> BoxFuture<'static, Done> {
        let mut node = self.node.clone();
        Box::pin(async move {
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let reads = read::read(&mut node, &refs, Read::Members).await;
            Done::Unseen { epoch, ids, reads }
        })
    }

    /// The future of a subscription operation, on `patterns`.
    pub(crate) fn subscription(
        &self,
        op: Op<Subscription>,
        patterns: Vec<String>,
    ) -> BoxFuture<'static, Outcome<Subscription>> {
        let (store, node, settings) =
            (self.store.clone(), self.node.clone(), self.settings.clone());
        match op {
            Op::Subscribe => Box::pin(subscribe(store, node, patterns, settings)),
            Op::Ping(mut sub) => Box::pin(async move {
                match sub.ping(settings.command_timeout).await {
                    Ok(()) => Outcome::Kept(sub),
                    Err(e) => Outcome::Failed(e),
                }
            }),
            Op::Recheck(sub) => Box::pin(recheck(store, node, patterns, settings, sub)),
        }
    }
}

/// What a probe found.
#[derive(Debug)]
pub(crate) struct Probed {
    /// Redis's clock.
    pub(crate) time: f64,
    pub(crate) canary: Reading,
    /// The canary's key, once known (the loop keeps it for the next probes).
    pub(crate) key: Option<Vec<u8>>,
    /// `None` when `INFO` was refused or said nothing of it.
    pub(crate) run_id: Option<String>,
}

async fn probe(node: &mut Node, key: Option<Vec<u8>>) -> Result<Probed, Error> {
    let key = match key {
        Some(k) => Some(k),
        None => canary_key(node).await?,
    };
    let mut batch = Packed::default();
    batch.command(&[b"TIME"]);
    batch.command(&[b"INFO", b"server"]);
    if let Some(k) = &key {
        batch.command(&[b"ZINCRBY", k, b"1", canary::MEMBER]);
    }
    let replies = node.send_packed(batch).await?;
    let time = reply::time(replies.first())?;
    let run_id = replies.get(1).and_then(canary::run_id);
    let canary = replies.get(2).map_or(Reading::Unknown, Reading::from_reply);
    // A redirection (the cluster was resharded): look the key up again next time.
    let key = key.filter(|_| canary != Reading::Unknown);
    Ok(Probed {
        time,
        canary,
        key,
        run_id,
    })
}

/// The canary's key for `node`: in a cluster, tagged for a slot the node serves.
async fn canary_key(node: &mut Node) -> Result<Option<Vec<u8>>, Error> {
    let Some((host, port)) = node.host_port().map(|(h, p)| (h.to_owned(), p)) else {
        return Ok(Some(canary::key(None)));
    };
    let mut batch = Packed::default();
    batch.command(&[b"CLUSTER", b"SLOTS"]);
    let replies = node.send_packed(batch).await?;
    Ok(replies
        .first()
        .and_then(|slots| canary::first_slot(slots, &host, port))
        .map(|slot| canary::key(Some(slot))))
}

/// At each reconciliation: are notifications still on (or on now)? Notifications switched off
/// at runtime are noticed here, within one `tracking.reconcile_interval`.
async fn recheck(
    store: Store,
    node: Node,
    patterns: Vec<String>,
    settings: Arc<Settings>,
    sub: Box<Subscription>,
) -> Outcome<Subscription> {
    let on = async {
        let mut con = store.dedicated(&node).await?;
        keyspace::availability(&mut con).await
    };
    match on.await {
        // Redis away: keep the subscription; its pings tell.
        Ok(Availability::On) | Err(_) => Outcome::Kept(sub),
        Ok(Availability::Off(_)) if settings.tracking.configure_notifications => {
            drop(sub);
            subscribe(store, node, patterns, settings).await
        }
        Ok(Availability::Off(flags)) => Outcome::Unavailable {
            why: format!("notify-keyspace-events was changed to {flags:?}"),
            refused: false,
        },
        Ok(Availability::Unknown(why)) => Outcome::Unavailable { why, refused: true },
    }
}

/// Subscribes to `patterns` on `node`'s server if its notifications are on (turning them on if
/// the configuration allows).
async fn subscribe(
    store: Store,
    node: Node,
    patterns: Vec<String>,
    settings: Arc<Settings>,
) -> Outcome<Subscription> {
    let attempt = async {
        let mut con = store.dedicated(&node).await?;
        match keyspace::availability(&mut con).await? {
            Availability::On => {}
            Availability::Off(flags) if settings.tracking.configure_notifications => {
                let set = keyspace::enable(&mut con, &flags).await?;
                tracing::info!(node = %node.id(), flags = %set, "turned keyspace notifications on (tracking.configure_notifications)");
            }
            Availability::Off(flags) => {
                return Ok(Err((
                    format!("notify-keyspace-events is {flags:?}, without K and z (or K and A)"),
                    false,
                )));
            }
            Availability::Unknown(why) => return Ok(Err((why, true))),
        }
        let pubsub = store.subscriber(&node).await?;
        match Subscription::start(pubsub, node.db(), &patterns, settings.command_timeout).await {
            Ok(sub) => Ok::<_, Error>(Ok(sub)),
            Err(Error::Permission { .. }) => Ok(Err((
                format!(
                    "the Redis user may not PSUBSCRIBE {} (add each to its ACL as a channel: &{})",
                    patterns.join(", "),
                    patterns.join(" &")
                ),
                true,
            ))),
            Err(e) => Err(e),
        }
    };
    match attempt.await {
        Ok(Ok(sub)) => Outcome::Subscribed(Box::new(sub)),
        Ok(Err((why, refused))) => Outcome::Unavailable { why, refused },
        Err(e) => Outcome::Failed(e),
    }
}
