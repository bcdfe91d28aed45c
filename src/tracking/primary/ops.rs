//! The I/O of one primary's loop: each is a future that owns what it needs and reports what it
//! came to as a [`Done`] (or a subscription [`Outcome`]), for the loop to apply.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::evict::read::{self, Read, Reads};
use crate::store::{Node, Packed, SendPacked, Store, reply};
use crate::sweep::{CheckCtx, CheckOpts, Checked, Sweep};
use crate::tracking::index::Ticket;
use crate::tracking::keyspace::{self, Availability, Subscription};

use super::Settings;
use super::canary::{self, Reading};
use super::checks::WITNESSES;
use super::notifications::{Config, Op, Outcome};
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
        let cancel = self.cancel.clone();
        async move {
            let ctx = CheckCtx {
                store: &store,
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
        self.read_keys(keys, Read::Oldest, move |reads| Done::Verified {
            epoch,
            ids,
            reads,
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
        self.read_keys(keys, Read::Members, move |reads| Done::Unseen {
            epoch,
            ids,
            reads,
        })
    }

    /// Reads `keys` as `how` says, and makes of the reads what the loop is told.
    fn read_keys(
        &self,
        keys: Vec<Vec<u8>>,
        how: Read<'static>,
        done: impl FnOnce(Result<Reads, Error>) -> Done + Send + 'static,
    ) -> BoxFuture<'static, Done> {
        let mut node = self.node.clone();
        Box::pin(async move {
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            done(read::read(&mut node, &refs, how).await)
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
                Box::pin(async move { Outcome::Looked(sub, look(node, &settings).await) })
            }
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

/// A look at the server's settings, on the primary's own connection (no new connection: it
/// comes every [`super::notifications::QUIET`] on a quiet keyspace), within the command
/// timeout. Turns them on again if the configuration allows.
async fn look(mut node: Node, settings: &Settings) -> Config {
    let look = async {
        match keyspace::availability(&mut node).await? {
            Availability::On => Ok(Config::On),
            Availability::Off(flags) if settings.tracking.configure_notifications => {
                let set = keyspace::enable(&mut node, &flags).await?;
                tracing::info!(node = %node.id(), flags = %set, "turned keyspace notifications on (tracking.configure_notifications)");
                Ok(Config::On)
            }
            Availability::Off(flags) => Ok(Config::Off(flags)),
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
    let config = match look(node.clone(), &settings).await {
        Config::NoAnswer => {
            return Outcome::Failed(Error::Redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "Redis did not answer CONFIG GET notify-keyspace-events",
            ))));
        }
        config => config,
    };
    // The canary's own notices (the liveness probe writes it about once a second) prove that
    // notifications flow on a quiet keyspace. A pattern, not the key: the key is learnt by the
    // first probe, and each primary publishes only its own keys' events. An ACL without that
    // channel still gets the sweeps' notices.
    let canary = format!("{}{}*", keyspace::channel_prefix(node.db()), canary::PREFIX);
    let attempt = async {
        let with_canary: Vec<String> = patterns.iter().cloned().chain([canary]).collect();
        let pubsub = store.subscriber(&node).await?;
        let timeout = settings.command_timeout;
        match Subscription::start(pubsub, node.db(), &with_canary, timeout).await {
            Err(Error::Permission { .. }) => {
                let pubsub = store.subscriber(&node).await?;
                Subscription::start(pubsub, node.db(), &patterns, timeout).await
            }
            started => started,
        }
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
