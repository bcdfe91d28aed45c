//! What goes out of one primary's loop, with no Redis: every request's result is handed back
//! by the test, on instants it chooses, and the tasks are read as short lines.

mod checks;
mod walks;

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::check::{Counts, Purpose};
use crate::index::Capacity;
use crate::keyspace::{Change, channel_prefix};
use crate::plan::KeyState;
use crate::primary::canary::Reading;
use crate::primary::coordinator::{Setup, Shared};
use crate::primary::testing::{NoBeat, Said, SweepLog, TestError, TestIo, job, node};
use crate::read::{KeyRead, KeyStatus, Reads};
use crate::scan::Page;

type W = Work<TestIo>;

/// Redis's clock when it first answers, in seconds.
const REDIS_T0: f64 = 1000.0;
/// How often the tests' primary reconciles.
const RECONCILE: Duration = Duration::from_secs(60);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn at(t: Instant) -> Now {
    Now { at: t, unix: 0.0 }
}

/// How a test's work is shaped.
#[derive(Clone, Copy)]
struct Shape {
    batch: usize,
    depth: usize,
    /// The window's ceiling; the shapes below keep it at `depth` (a fixed window).
    max_depth: usize,
    /// Keys every index together may track.
    capacity: usize,
    keys_per_second: Option<f64>,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            batch: 10,
            depth: 4,
            max_depth: 4,
            capacity: 100,
            keys_per_second: None,
        }
    }
}

impl Shape {
    /// The default shape with `batch` keys per check and `depth` requests in flight.
    fn batching(batch: usize, depth: usize) -> Self {
        Self {
            batch,
            depth,
            max_depth: depth,
            ..Self::default()
        }
    }
}

/// Work started at `t0` without notifications, running the sweeps `names`, and their reports.
fn work(t0: Instant, shape: Shape, names: &[&str]) -> (W, Vec<Arc<SweepLog>>) {
    let setup = Setup {
        node: node(),
        reconcile_interval: RECONCILE,
        notifications_off: true,
        notifications_expected: false,
        inherited_outage: None,
        takes_over: false,
    };
    let coord = Coordinator::new(
        t0,
        setup,
        Box::new(Said::default()),
        Arc::new(Shared::default()),
    );
    let sweeps = Sweeps::new(node(), 0, Capacity::new(shape.capacity), Arc::new(NoBeat));
    let settings = Settings {
        batching: Batching {
            batch: shape.batch,
            depth: shape.depth,
            max_depth: shape.max_depth,
        },
        keys_per_second: shape.keys_per_second,
        max_keys: shape.capacity,
        alive_every: secs(5),
        spread_first: false,
    };
    let mut w = W::new(coord, sweeps, settings, Arc::new(NoBeat));
    let (jobs, logs): (Vec<_>, Vec<_>) = names.iter().map(|n| job(n)).unzip();
    w.on_jobs(t0, jobs);
    (w, logs)
}

/// Work whose first probe Redis answered at `t0` ([`REDIS_T0`]); its first walk is under way.
fn answered(t0: Instant, shape: Shape) -> (W, Arc<SweepLog>) {
    let (mut w, mut logs) = work(t0, shape, &["online"]);
    assert_eq!(turn(&mut w, t0), ["scan presence:*:online", "probe"]);
    w.on_probe(at(t0), evidence(REDIS_T0));
    (w, logs.remove(0))
}

/// Work whose first walk found `ids` at `t0` and ended; the keys come due at
/// `t0` + the batch window.
fn walked(t0: Instant, shape: Shape, ids: &[&str]) -> (W, Arc<SweepLog>) {
    let (mut w, log) = answered(t0, shape);
    w.on_page(at(t0), Some(Ok(page(ids, REDIS_T0))));
    w.on_page(at(t0), None);
    assert_eq!(turn(&mut w, t0), ["scan over"]);
    assert_eq!(log.said.take(), [format!("walk ok {}", ids.len())]);
    (w, log)
}

/// The instant the keys found at `t0` are checked: their deadline, then the batch window.
fn window(t0: Instant) -> Instant {
    t0 + ms(50)
}

fn evidence(time: f64) -> Result<Evidence, TestError> {
    Ok(Evidence {
        time,
        canary: Reading::Count(1),
        run_id: Some("a".into()),
    })
}

fn page(ids: &[&str], time: f64) -> Page {
    Page {
        keys: ids.iter().map(|id| key(id)).collect(),
        time,
    }
}

fn key(id: &str) -> Vec<u8> {
    format!("presence:{id}:online").into_bytes()
}

/// A notice that `id`'s key was written.
fn written(id: &str) -> Notice {
    Notice {
        pattern: format!("{}presence:*:online", channel_prefix(0)).into_bytes(),
        key: key(id),
        change: Change::Written,
    }
}

/// A check's result at Redis's `time`: every key live, its oldest member heartbeating at
/// `oldest`.
fn live(n: usize, time: f64, oldest: f64) -> Checked<TestError> {
    Checked {
        counts: Counts::default(),
        states: vec![
            KeyState::Live {
                card: 2,
                oldest: Some(oldest),
            };
            n
        ],
        time: Some(time),
        expires_in: Vec::new(),
        hold_until: None,
        error: None,
    }
}

fn failed(n: usize, e: TestError) -> Checked<TestError> {
    Checked {
        states: vec![KeyState::Unknown; n],
        time: None,
        error: Some(e),
        ..live(0, 0.0, 0.0)
    }
}

/// Reads of `n` keys, each holding `card` members, the oldest at `oldest`.
fn reads(n: usize, card: u64, oldest: Option<f64>) -> Reads {
    let read = KeyRead {
        stale: 0,
        card,
        oldest,
        newest: None,
        expires_in: None,
        id_bytes: 1,
    };
    Reads {
        keys: vec![KeyStatus::Set(read); n],
        time: Some(REDIS_T0),
        pttl_refused: 0,
    }
}

/// Turns at `t`: the tasks, as lines.
fn turn(w: &mut W, t: Instant) -> Vec<String> {
    lines(&turn_tasks(w, t))
}

/// Turns at `t` as a Redis that answers at once: a probe among the tasks is answered at `t`
/// and left out of the lines.
fn steady(w: &mut W, t: Instant) -> Vec<String> {
    let mut lines = turn(w, t);
    lines.retain(|line| {
        let probe = line == "probe";
        if probe {
            w.on_probe(at(t), evidence(redis(t)));
        }
        !probe
    });
    lines
}

/// Redis's clock at `t`, which reads [`REDIS_T0`] at the test's start.
fn redis(t: Instant) -> f64 {
    REDIS_T0 + t.duration_since(crate::testing::now()).as_secs_f64()
}

/// Turns at `t`: the tasks.
fn turn_tasks(w: &mut W, t: Instant) -> Vec<Task<TestIo>> {
    w.turn(at(t), false, |_, _| Box::pin(std::future::pending()))
}

fn lines(tasks: &[Task<TestIo>]) -> Vec<String> {
    tasks.iter().map(line).collect()
}

/// A task as a short line: what it is, the sweep it serves and the ids it names.
fn line(task: &Task<TestIo>) -> String {
    let keys = |b: &Batch<TestIo>| {
        let ids: Vec<Vec<u8>> = (b.keys.iter())
            .map(|k| b.job.pattern().conversation_id(k).expect("a key").to_vec())
            .collect();
        format!("{} {}", b.job.name(), ids_of(&ids))
    };
    match task {
        Task::Probe => "probe".into(),
        Task::ProvePermissions(jobs) => format!("prove {}", jobs.len()),
        Task::Refresh(failure) => format!("refresh {}", failure.is_some()),
        Task::Suspect => "suspect".into(),
        Task::Scan { glob } => format!("scan {glob}"),
        Task::ScanOver => "scan over".into(),
        Task::Check { batch, .. } => format!("check {}", keys(batch)),
        Task::Direct { batch, .. } => format!("direct {}", keys(batch)),
        Task::Verify { ids, .. } => format!("verify {}", ids_of(ids)),
        Task::Unseen { ids, .. } => format!("unseen {}", ids_of(ids)),
    }
}

fn ids_of(ids: &[Vec<u8>]) -> String {
    ids.iter()
        .map(|id| String::from_utf8_lossy(id).into_owned())
        .collect::<Vec<_>>()
        .join(",")
}

/// The checks among `tasks`: their sweep's epoch, tickets and options.
fn checks(tasks: Vec<Task<TestIo>>) -> Vec<(u64, Vec<Ticket>, CheckOpts)> {
    tasks
        .into_iter()
        .filter_map(|t| match t {
            Task::Check {
                epoch,
                tickets,
                batch,
            } => Some((epoch, tickets, batch.opts)),
            _ => None,
        })
        .collect()
}

/// The purpose of a check's options, when it is a deadline check: whether it reads `TIME`.
fn reads_time(opts: &CheckOpts) -> bool {
    matches!(
        opts.purpose,
        Purpose::Deadline {
            read_time: true,
            ..
        }
    )
}
