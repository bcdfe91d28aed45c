//! The I/O of one primary's loop: what its futures share ([`Ops`]) and what each reports when
//! it finishes ([`Done`]), for the loop to hand to the part it concerns. The futures of each part
//! are beside it: `standing_io`, `notifications_io`, `walks_io`; the check and the look at the
//! primary are here.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use presence_sweeper_redis::{Error, Node, Store};
use presence_sweeper_rules::check::Checked;
use presence_sweeper_rules::index::Ticket;
use presence_sweeper_rules::primary::coordinator::Refreshed;
use presence_sweeper_rules::primary::standing::Evidence;
use presence_sweeper_rules::primary::work::{Batch, Walked};
use tokio_util::sync::CancellationToken;

use super::io::RedisIo;
use super::settings::LoopSettings;
use crate::evictor::CheckCtx;

/// What a probe found.
#[derive(Debug)]
pub(crate) struct Probed {
    pub(crate) evidence: Evidence,
    /// The canary's key, once known (the loop keeps it for the next probes).
    pub(crate) key: Option<Vec<u8>>,
}

/// What a future of the loop finished.
pub(crate) enum Done {
    /// A probe asked to show Redis still answers, and still holds its data.
    Probe(Result<Probed, Error>),
    /// After a refusal: whether the Redis user may now do all that every sweep's checks do.
    Permitted(Result<(), Error>),
    /// The primary was looked up again: the node to use from now on, if it changed.
    Refreshed(Refreshed<Error>, Option<Node>),
    /// A check of keys the index handed out, sent at `sent`.
    Checked {
        epoch: u64,
        tickets: Vec<Ticket>,
        checked: Checked<Error>,
        sent: Instant,
    },
    /// Work of the walk in flight, for the sweep of `epoch`.
    Walked { epoch: u64, walked: Walked<Error> },
}

/// Where the loop's futures go, and what they share.
pub(crate) struct Ops {
    pub(crate) store: Store,
    pub(crate) node: Node,
    pub(crate) settings: Arc<LoopSettings>,
    pub(crate) cancel: CancellationToken,
}

impl Ops {
    /// The check `batch`.
    pub(crate) fn check(
        &self,
        batch: Batch<RedisIo>,
    ) -> impl Future<Output = Checked<Error>> + Send + 'static {
        let Batch {
            job,
            observer,
            keys,
            probing,
            witnesses,
            opts,
        } = batch;
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
            job.evictor.check(node, keys, &probing, opts, ctx).await
        }
    }

    /// Looks the primary up again, recovering the store from `failure` first (behind Sentinel,
    /// a READONLY reply or a lost connection asks where the primary is now). Ends at once on
    /// shutdown, and fails after a few command timeouts: nothing is judged while it runs, so it
    /// must not run forever.
    pub(crate) fn refresh(&self, failure: Option<Error>) -> BoxFuture<'static, Done> {
        let (store, node, cancel) = (self.store.clone(), self.node.clone(), self.cancel.clone());
        let limit = self.settings.command_timeout.saturating_mul(3);
        Box::pin(async move {
            let look = async {
                if let Some(e) = &failure {
                    store.recover(e).await;
                }
                store.node(node.id()).await
            };
            let found = tokio::select! {
                () = cancel.cancelled() => return Done::Refreshed(Refreshed::Cancelled, None),
                found = tokio::time::timeout(limit, look) => found.unwrap_or_else(|_| {
                    Err(Error::Redis(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "looking the primary up again took too long",
                    ))))
                }),
            };
            match found {
                Ok(Some(new)) if new.server() != node.server() => {
                    Done::Refreshed(Refreshed::Moved(new.server().to_string()), Some(new))
                }
                Ok(Some(same)) => Done::Refreshed(Refreshed::Same, Some(same)),
                Ok(None) => Done::Refreshed(Refreshed::NotPrimary, None),
                Err(e) => Done::Refreshed(Refreshed::Failed(e), None),
            }
        })
    }
}
