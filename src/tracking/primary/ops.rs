//! The I/O of one primary's loop: each is a future that owns what it needs and reports what it
//! came to as a [`Done`] (or a subscription [`Outcome`]), for the loop to apply.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::evict::read::{self, Read, Reads};
use crate::store::{Conn, Node, Store};
use crate::sweep::{CheckCtx, CheckOpts, Checked, Sweep};
use crate::tracking::index::Ticket;
use crate::tracking::keyspace::{self, Availability, Subscription};

use super::Settings;
use super::checks::WITNESSES;
use super::notifications::{Config, Op, Outcome};
use super::tracked::Tracked;

/// What a future of the loop finished.
pub(crate) enum Done {
    /// A `TIME` asked to show Redis still answers.
    Probe(Result<f64, Error>),
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
    pub(crate) fn probe(&self) -> BoxFuture<'static, Done> {
        let mut node = self.node.clone();
        Box::pin(async move { Done::Probe(crate::store::clock::redis_time(&mut node).await) })
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
            Op::Recheck(sub) => {
                drop((store, patterns));
                Box::pin(async move { Outcome::Looked(sub, look(node, &settings, false).await) })
            }
        }
    }
}

/// A look at the server's settings, on the primary's own connection (no new connection: it
/// comes every [`super::notifications::QUIET`] on a quiet keyspace), within the command
/// timeout. Turns them on again if the configuration allows.
/// `subscribing`: a first look, whose "off" is no change.
async fn look(mut node: Node, settings: &Settings, subscribing: bool) -> Config {
    let look = async {
        match keyspace::availability(&mut node).await? {
            Availability::On => Ok(Config::On),
            Availability::Off(flags) if settings.tracking.configure_notifications => {
                let set = keyspace::enable(&mut node, &flags).await?;
                tracing::info!(node = %node.id(), flags = %set, "turned keyspace notifications on (tracking.configure_notifications)");
                Ok(Config::On)
            }
            Availability::Off(flags) => Ok(Config::Off(format!(
                "notify-keyspace-events {} {flags:?}, without K and z (or K and A)",
                if subscribing { "is" } else { "was changed to" }
            ))),
            Availability::Unknown(why) => Ok::<_, Error>(Config::Refused(why)),
        }
    };
    match tokio::time::timeout(settings.command_timeout, look).await {
        Ok(Ok(config)) => config,
        Ok(Err(e)) => {
            tracing::debug!(node = %node.id(), error = %e, "could not look at notify-keyspace-events");
            Config::NoAnswer
        }
        Err(_) => Config::NoAnswer,
    }
}

/// Subscribes to `patterns` on `node`'s server, whatever its settings say: where they are off
/// the subscription waits for them to be switched on, and where the server will not say,
/// notices arriving tell. A look at the settings goes first (turning notifications on if the
/// configuration allows); a server that does not answer it is tried again later.
async fn subscribe(
    store: Store,
    node: Node,
    patterns: Vec<String>,
    settings: Arc<Settings>,
) -> Outcome<Subscription> {
    let config = match look(node.clone(), &settings, true).await {
        Config::NoAnswer => {
            return Outcome::Failed(Error::Redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "Redis did not answer CONFIG GET notify-keyspace-events",
            ))));
        }
        config => config,
    };
    let attempt = async {
        let pubsub = store.subscriber(&node).await?;
        Subscription::start(pubsub, node.db(), &patterns, settings.command_timeout).await
    };
    match attempt.await {
        Ok(sub) => Outcome::Subscribed(Box::new(sub), config),
        Err(Error::Permission { .. }) => Outcome::Unavailable {
            why: format!(
                "the Redis user may not PSUBSCRIBE {} (add each to its ACL as a channel: &{})",
                patterns.join(", "),
                patterns.join(" &")
            ),
            refused: true,
        },
        Err(e) => Outcome::Failed(e),
    }
}
