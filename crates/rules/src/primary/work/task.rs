//! What [`Work`](super::Work) hands the loop to do, and what the loop hands back from the work
//! of a walk: the vocabulary between the rules and the I/O that applies them.

use std::sync::Arc;
use std::time::Instant;

use crate::check::{CheckOpts, Checked};
use crate::index::Ticket;
use crate::keys::Keys;
use crate::primary::Io;
use crate::read::{Probing, Reads};
use crate::report::Observer;

/// Something for the loop to do. The tasks that make a request (all but [`Task::Suspect`],
/// [`Task::Scan`] and [`Task::ScanOver`]) count as in flight until their result is handed back.
pub enum Task<I: Io> {
    /// Send the standing probe (`TIME`, the canary, the `run_id`); its result goes to
    /// [`Work::on_probe`](super::Work::on_probe).
    Probe,
    /// Prove these sweeps' permissions (after a refusal); the result goes to
    /// [`Work::on_permitted`](super::Work::on_permitted).
    ProvePermissions(Vec<Arc<I::Job>>),
    /// Look the primary up again, recovering from this failure first; the result goes to
    /// [`Work::on_refreshed`](super::Work::on_refreshed).
    Refresh(Option<I::Error>),
    /// The topology may have changed (a failover): tell the engine.
    Suspect,
    /// A walk starts: read the SCAN pages of keys matching `glob`, handing each to
    /// [`Work::on_page`](super::Work::on_page) when [`Work::wants_page`](super::Work::wants_page)
    /// says.
    Scan { glob: String },
    /// The walk ended: its pages are no longer wanted.
    ScanOver,
    /// Check keys the index of sweep `epoch` handed out at their deadlines; the result goes
    /// to [`Work::on_checked`](super::Work::on_checked) with `tickets`.
    Check {
        epoch: u64,
        tickets: Vec<Ticket>,
        batch: Batch<I>,
    },
    /// Check keys the walk found but could not track; the result goes to
    /// [`Work::on_walked`](super::Work::on_walked) as [`Walked::Direct`].
    Direct { epoch: u64, batch: Batch<I> },
    /// Read the lowest score of each of `keys` (the ids `ids` of sweep `epoch`); the result
    /// goes back as [`Walked::Verified`].
    Verify {
        epoch: u64,
        ids: Vec<Vec<u8>>,
        keys: Vec<Vec<u8>>,
    },
    /// Read the size of each of `keys` (the ids `ids` of sweep `epoch`), which the walk did
    /// not find; the result goes back as [`Walked::Unseen`].
    Unseen {
        epoch: u64,
        ids: Vec<Vec<u8>>,
        keys: Vec<Vec<u8>>,
    },
}

/// A check of keys, with all it needs: its sweep, where it reports, how it judges, and the
/// keys that witness the sweep's traffic when the storm guard suspects silence.
pub struct Batch<I: Io> {
    pub job: Arc<I::Job>,
    pub observer: Arc<dyn Observer>,
    /// The keys to check; the `i`-th state of the result is the `i`-th key's.
    pub keys: Keys,
    /// For a deadline check, what each key's read asks besides its lowest score; empty for
    /// the others.
    pub probing: Vec<Probing>,
    pub witnesses: Vec<Vec<u8>>,
    pub opts: CheckOpts,
}

/// What a request of the walk in flight came back with.
pub enum Walked<E> {
    /// A check of keys the walk could not track.
    Direct(Checked<E>),
    /// A reconciliation's read of the lowest scores of tracked keys (the ids `.0`).
    Verified(Vec<Vec<u8>>, Result<Reads, E>),
    /// A read of the size of tracked keys the walk did not find: 0 for a key that is gone.
    Unseen(Vec<Vec<u8>>, Result<Reads, E>),
}

/// When something is handed in: the loop's instant, and the wall clock (Unix seconds) for
/// the figures that show it (a walk's last success).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub at: Instant,
    pub unix: f64,
}
