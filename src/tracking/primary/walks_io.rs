//! The I/O of walks: the SCAN pages of a walk, and the reads a walk makes of tracked keys.

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

use presence_sweeper_redis::evict::read::{self, Read};
use presence_sweeper_redis::{Error, scan};
use presence_sweeper_rules::primary::work::Walked;
use presence_sweeper_rules::read::Reads;
use presence_sweeper_rules::scan::Page;

use super::ops::{Done, Ops};

impl Ops {
    /// The SCAN pages of a walk: the keys matching `glob`.
    pub(crate) fn pages(&self, glob: String) -> BoxStream<'static, Result<Page, Error>> {
        scan::pages(self.node.clone(), glob, self.settings.scan.count).boxed()
    }

    /// Reads the lowest score of each of `keys` (the ids `ids` of sweep `epoch`).
    pub(crate) fn verify(
        &self,
        epoch: u64,
        ids: Vec<Vec<u8>>,
        keys: Vec<Vec<u8>>,
    ) -> BoxFuture<'static, Done> {
        self.read_keys(keys, Read::Oldest, move |reads| Done::Walked {
            epoch,
            walked: Walked::Verified(ids, reads),
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
        self.read_keys(keys, Read::Members, move |reads| Done::Walked {
            epoch,
            walked: Walked::Unseen(ids, reads),
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
}
