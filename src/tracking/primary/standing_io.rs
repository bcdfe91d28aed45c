//! The I/O of Redis's standing: the probe that shows Redis answers and still holds its data, and
//! the proof of the permissions after a refusal.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use presence_sweeper_redis::{Error, Node, Packed, SendPacked, reply};
use presence_sweeper_rules::primary::canary::{self, Reading};
use presence_sweeper_rules::primary::standing::Evidence;

use super::canary::{first_slot, reading, run_id};
use super::ops::{Done, Ops, Probed};
use crate::evictor::Evictor;

impl Ops {
    /// The standing probe, in one round trip: `TIME`, the canary's `ZINCRBY` on `key` (looked
    /// up first in a cluster, when not known yet) and `INFO server` for the `run_id`. Only
    /// `TIME` must answer; the others are evidence when they do.
    pub(crate) fn probe(&self, key: Option<Vec<u8>>) -> BoxFuture<'static, Done> {
        let mut node = self.node.clone();
        Box::pin(async move { Done::Probe(probe(&mut node, key).await) })
    }

    /// Proves every sweep's permissions, on a key of each sweep's pattern that need not exist:
    /// nothing runs, the commands are only queued and discarded.
    pub(crate) fn prove_permissions(&self, sweeps: Vec<Arc<Evictor>>) -> BoxFuture<'static, Done> {
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
    let run_id = replies.get(1).and_then(run_id);
    let canary = replies.get(2).map_or(Reading::Unknown, reading);
    // A redirection (the cluster was resharded): look the key up again next time.
    let key = key.filter(|_| canary != Reading::Unknown);
    Ok(Probed {
        evidence: Evidence {
            time,
            canary,
            run_id,
        },
        key,
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
        .and_then(|slots| first_slot(slots, &host, port))
        .map(|slot| canary::key(Some(slot))))
}
