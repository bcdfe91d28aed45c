//! The I/O of one primary's loop: what its futures share ([`Ops`]) and what each reports when
//! it finishes ([`Done`]), for the loop to hand to the part it concerns. The futures of each part
//! are beside it: `standing_io`, `notifications_io`, `walks_io`; the check and the look at the
//! primary are here.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use presence_sweeper_redis::{Error, Node, Store};
use presence_sweeper_rules::check::{CheckOpts, Checked};
use presence_sweeper_rules::index::Ticket;
use presence_sweeper_rules::primary::Job as _;
use presence_sweeper_rules::primary::coordinator::Refreshed;
use presence_sweeper_rules::primary::deadlines::WITNESSES;
use presence_sweeper_rules::primary::tracked::Tracked;
use presence_sweeper_rules::read::Reads;
use tokio_util::sync::CancellationToken;

use super::Settings;
use super::io::Redis;
use super::standing_io::Probed;
use crate::evictor::CheckCtx;

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
    Walked { epoch: u64, walked: Walked },
}

/// What a future of the walk in flight finished.
pub(crate) enum Walked {
    /// A check of keys the walk could not track.
    Direct(Checked<Error>),
    /// A reconciliation's read of the lowest scores of tracked keys (the ids `.0`).
    Verified(Vec<Vec<u8>>, Result<Reads, Error>),
    /// A read of the size of tracked keys the walk did not find: 0 for a key that is gone.
    Unseen(Vec<Vec<u8>>, Result<Reads, Error>),
}

/// Where the loop's futures go, and what they share.
pub(crate) struct Ops {
    pub(crate) store: Store,
    pub(crate) node: Node,
    pub(crate) settings: Arc<Settings>,
    pub(crate) cancel: CancellationToken,
}

impl Ops {
    /// A check of `keys` of sweep `t`. When the storm guard suspects the sweep went silent, a
    /// few busy keys go with it as witnesses.
    pub(crate) fn check(
        &self,
        t: &Tracked<Redis>,
        keys: Vec<Vec<u8>>,
        opts: CheckOpts,
    ) -> impl Future<Output = Checked<Error>> + Send + 'static {
        let witnesses: Vec<Vec<u8>> =
            if opts.purpose.may_hold() && t.job.guard().suspects_silence(opts.judge_at) {
                let pattern = t.job.pattern();
                t.index
                    .latest(WITNESSES)
                    .map(|id| pattern.key(id))
                    .collect()
            } else {
                Vec::new()
            };
        let sweep = t.job.evictor.clone();
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
