//! The deadline index of one sweep on one primary: every known presence key and the instant its
//! oldest member's window closes (its lowest score + ttl, on Redis's clock).
//!
//! The daemon checks a key when its deadline comes, not because a timer fired for the whole
//! keyspace: Redis's work follows presence activity. A check's reply names the key's new lowest
//! score, which schedules it again, or says it is gone, which forgets it. Apps write scores from
//! Redis `TIME`, and a heartbeat only raises a score, so a tracked deadline is never later than
//! the key's true earliest one; the rare score written in the past is found by reconciliation.
//!
//! Keys leave the index as soon as something shows them gone, so that the gauges follow the
//! keyspace: a check that finds the key gone (a check also comes when the key's own TTL ends),
//! a `del`/`expired` notification, or a walk that did not find it ([`Index::walk_started`],
//! [`Index::unseen`]) once a read confirms it is gone ([`Index::gone`]).
//!
//! Memory is what bounds it, so keys are stored compactly: the conversation id only (the sweep's
//! pattern rebuilds the key), inline when it fits in 16 bytes; a slab of fixed-size slots; a
//! hash table of 4-byte slot numbers; and the deadlines in rings of buckets (a millisecond each
//! over the next minute, a second each over the next 18 hours) whose lists run through the
//! slots themselves: at most about 70 bytes per key in all (`python3 benches/steady.py
//! --scenarios big`). A cap shared by every index ([`Capacity`])
//! bounds the total; keys past it are left to scheduled walks.

mod queue;

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::{DefaultHashBuilder, HashTable};
use smallvec::SmallVec;

use crate::read::Probing;
use queue::{Link, Links, Queue};

/// A deadline that never comes: a key whose lowest score is `+inf`, kept but never checked
/// except by reconciliation.
pub const NEVER: u64 = u64::MAX;

/// Slots [`Index::unseen`] looks at in one call, so that the loop is never held long.
pub const UNSEEN_SPAN: usize = 16_384;

/// How many keys every index together may track.
#[derive(Debug)]
pub struct Capacity {
    max: usize,
    used: AtomicUsize,
}

impl Capacity {
    /// Room for `max` keys in all.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            used: AtomicUsize::new(0),
        })
    }

    /// Keys tracked now, over every index.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn take(&self) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
    }
}

/// What [`Index::track`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// The key is new to the index, due at once.
    Added,
    /// The index knew it already.
    Known,
    /// The index is full: the key is left to scheduled walks.
    Full,
}

/// When a checked key is due again, and what its check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    /// Milliseconds on Redis's clock; [`NEVER`] for no deadline.
    pub at: u64,
    /// Members.
    pub card: u64,
    /// What the check read of its own TTL.
    pub ttl: TtlSeen,
}

/// What a check read of a key's own TTL, for the index to know when its checks read it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlSeen {
    /// Not read.
    Unread,
    /// None.
    None,
    /// One that ends no sooner than this many more checks of the key could come: the key's
    /// checks are at most a ttl apart while its scores are not ahead of Redis's clock, so
    /// until then none of them needs to read it.
    EndsAfter(u8),
}

/// A key handed out for a check, until [`Index::checked`] gives it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    slot: u32,
}

#[derive(Debug)]
struct Slot {
    id: SmallVec<[u8; 16]>,
    /// Milliseconds on Redis's clock; [`NEVER`] for no deadline.
    deadline: u64,
    /// Members at the last check.
    card: u32,
    state: Phase,
    /// [`WRITTEN`], [`SEEN`] and the key's step in spreading its checks ([`SPREAD_STEP`]), in
    /// one byte: the slot stays at 48 bytes.
    flags: u8,
    /// Whether its next checks read its own TTL: 0, the next does; below [`TTL_NONE`], how
    /// many of them need not (its TTL ends later); from [`TTL_NONE`] up, it had none, and the
    /// check at which the count is down to [`TTL_NONE`] reads it again.
    ttl_reads: u8,
    /// Its place among the keys due in the same millisecond, while it waits for a deadline.
    link: Link,
}

impl Links for Vec<Slot> {
    fn link(&mut self, slot: u32) -> &mut Link {
        &mut self[slot as usize].link
    }

    fn get(&self, slot: u32) -> Link {
        self[slot as usize].link
    }

    fn deadline(&self, slot: u32) -> u64 {
        self[slot as usize].deadline
    }
}

/// A keyspace notification said the key was written since its last check: a score written in
/// the past may have moved its deadline earlier, so reconciliation reads it.
const WRITTEN: u8 = 1;
/// The walk in flight found it, or it was tracked or written since that walk started: it is
/// there. Cleared at each walk's start.
const SEEN: u8 = 2;
/// Two bits: which check of the key spreads it ([`Spread`]). 0: none (done, or its first
/// check, which a size of 0 tells); [`LOOKING`]: its first check is done, and the next is the
/// look that one set (or its deadline, where no look was set); [`AGAIN`]: the next check whose
/// spreading is asked for ([`Index::spread`]) spreads it again over its own cycle. That is the
/// check at the deadline after the look, unless it was spared (an outage's credit, the storm
/// guard's hold) or came early (a retry, a write noticed): then the time to its next deadline
/// is not quite its cycle, and the look is merely somewhere within it.
const SPREAD_STEP: u8 = 0b1100;
const LOOKING: u8 = 0b0100;
const AGAIN: u8 = 0b1000;
/// Two bits: how many checks at [`AGAIN`] have let the second look wait. Each key waits its own
/// number of cycles, 0 to [`CYCLES_APART`] - 1, so that keys first checked together (a million
/// new at once) take their second looks over that many cycles, not all in one.
const WAITED: u8 = 0b11_0000;
const WAITED_ONE: u8 = 0b01_0000;
/// Over how many cycles keys first checked together take their second looks: each adds a
/// check per key to the cycle it falls in.
const CYCLES_APART: u64 = 4;

impl Slot {
    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    fn step(&self) -> u8 {
        self.flags & SPREAD_STEP
    }

    fn set_step(&mut self, step: u8) {
        self.flags = (self.flags & !SPREAD_STEP) | step;
    }
}

/// Which check of a key spreads its later checks over time, and how (see
/// [`crate::primary::deadlines::spread_first`]). Each fraction is in [0, 1), from the hash of
/// the key's id.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spread {
    /// Its first check since it was tracked (or found gone while it was written anew): a look
    /// within a ttl of its oldest score.
    First(f64),
    /// The first check at a deadline after that look, due at `due` (ms on Redis's clock): the
    /// time from there to the next deadline is the key's own cycle, and a look within it
    /// spreads the phases evenly.
    Again { fraction: f64, due: u64 },
}

/// [`Slot::ttl_reads`] from this up: a key that had no TTL of its own at its last read. Each
/// key counts down on its own, so every key has its TTL read at one check in
/// [`Probing::TTL_SAMPLE`].
const TTL_NONE: u8 = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Free,
    /// Waiting for its deadline (queued in the index's `due` unless [`NEVER`]).
    Scheduled,
    /// Handed out for a check; `rewritten` if the key was written meanwhile, so that a check
    /// that found it gone looks again (it may have been created anew).
    InFlight {
        rewritten: bool,
    },
}

/// The deadline index of one sweep on one primary.
#[derive(Debug)]
pub struct Index {
    hasher: DefaultHashBuilder,
    table: HashTable<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The slots waiting for a deadline other than [`NEVER`], by deadline.
    due: Queue,
    members: u64,
    capacity: Arc<Capacity>,
    /// Whether writes may have gone unnoticed (notifications not in use, or lost for a while):
    /// reconciliation then reads every key, not only those written since their checks.
    unnoticed: bool,
}

impl Index {
    /// An empty index whose keys count against `capacity`.
    pub fn new(capacity: Arc<Capacity>) -> Self {
        Self {
            hasher: DefaultHashBuilder::default(),
            table: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            due: Queue::default(),
            members: 0,
            capacity,
            unnoticed: true,
        }
    }

    /// The ids of up to `n` keys with the latest deadlines: those whose oldest member was
    /// freshest when last checked, the likeliest to hold members who heartbeat.
    pub fn latest(&self, n: usize) -> impl Iterator<Item = &[u8]> {
        self.due
            .latest(&self.slots, n)
            .into_iter()
            .map(|(_, slot)| self.slots[slot as usize].id.as_slice())
    }

    /// Makes the `n` keys with the latest deadlines due at `at` (ms, Redis's clock), when that
    /// is earlier: after a backward step of Redis's clock their scores may lie in its future,
    /// and their checks say how far.
    pub fn recheck_latest(&mut self, n: usize, at: u64) {
        for (deadline, s) in self.due.latest(&self.slots, n) {
            if deadline > at {
                self.schedule(s, at);
            }
        }
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Members of the tracked keys, as of their last checks or reconciliation reads.
    pub fn members(&self) -> u64 {
        self.members
    }

    fn find(&self, id: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(id);
        self.table
            .find(hash, |&s| self.slots[s as usize].id.as_slice() == id)
            .copied()
    }

    /// Whether `id` is tracked.
    #[cfg(test)]
    fn contains(&self, id: &[u8]) -> bool {
        self.find(id).is_some()
    }

    /// Tracks `id`, due at `due` (milliseconds on Redis's clock, no later than now), unless it
    /// is known already or every index together is full.
    pub fn track(&mut self, id: &[u8], due: u64) -> Track {
        if self.find(id).is_some() {
            return Track::Known;
        }
        if !self.capacity.take() {
            return Track::Full;
        }
        let slot = Slot {
            id: SmallVec::from_slice(id),
            deadline: NEVER,
            card: 0,
            state: Phase::Scheduled,
            flags: SEEN,
            ttl_reads: 0,
            link: Link::default(),
        };
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = slot;
                s
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        let hash = self.hasher.hash_one(id);
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.table.insert_unique(hash, s, |&t| {
            hasher.hash_one(slots[t as usize].id.as_slice())
        });
        // The deadline ring follows the clock from here too, not only from the checks: a walk
        // tracks a million keys before the first check, and their deadlines belong in it.
        self.due.catch_up(&mut self.slots, due);
        self.schedule(s, due);
        Track::Added
    }

    fn schedule(&mut self, s: u32, deadline: u64) {
        let slot = &mut self.slots[s as usize];
        if slot.state == Phase::Scheduled && slot.deadline != NEVER {
            let old = slot.deadline;
            self.due.remove(&mut self.slots, s, old);
        }
        let slot = &mut self.slots[s as usize];
        slot.deadline = deadline;
        slot.state = Phase::Scheduled;
        if deadline != NEVER {
            self.due.insert(&mut self.slots, s, deadline);
        }
    }

    /// The earliest deadline of a key waiting for one.
    pub fn next_due(&self) -> Option<u64> {
        self.due.first()
    }

    /// The deadline of the `n`-th key to come due (1: the next), if that many wait.
    pub fn nth_due(&self, n: usize) -> Option<u64> {
        if self.due.len() < n {
            return None;
        }
        self.due.nth(n)
    }

    /// Hands out up to `max` keys due at or before `now` for a check: `each` is given each
    /// one's ticket, id (borrowed: the caller builds the key from it, with no copy of the id
    /// in between) and what its read must ask. They wait for no deadline until
    /// [`Index::checked`] gives them back.
    pub fn take_due(&mut self, now: u64, max: usize, mut each: impl FnMut(Ticket, &[u8], Probing)) {
        for _ in 0..max {
            let Some((_, s)) = self.due.pop_due(&mut self.slots, now) else {
                return;
            };
            let slot = &mut self.slots[s as usize];
            slot.state = Phase::InFlight { rewritten: false };
            // A size of 0 is a key never checked (a check that finds a key empty forgets it).
            let probing = match slot.card {
                0 => Probing::FULL,
                card => Probing {
                    single: card == 1,
                    ttl: slot.ttl_reads == 0 || slot.ttl_reads == TTL_NONE,
                },
            };
            each(Ticket { slot: s }, &slot.id, probing);
        }
    }

    /// Whether the check of `ticket` spreads its key's later checks ([`Spread`]): its first
    /// since it was tracked, or one at a deadline after the look that one set, the key's own
    /// number of cycles later (0 to 3; this call counts them and uses the step up: ask only
    /// where the spreading is applied). Each fraction is the same for the key while it is
    /// tracked, and spread evenly over keys. `None` for any other check.
    pub fn spread(&mut self, ticket: Ticket) -> Option<Spread> {
        let slot = &self.slots[ticket.slot as usize];
        let (card, step) = (slot.card, slot.step());
        if card != 0 && step != AGAIN {
            // Most checks: no hash of the id.
            return None;
        }
        // The high half of the hash for the first, the low half for the second: had both looks
        // the same fraction, the phases each sets would go together, and the second would undo
        // the first as often as not.
        let hash = self.hasher.hash_one(slot.id.as_slice());
        let (high, low) = ((hash >> 32) as u32, hash as u32);
        let fraction = |half: u32| f64::from(half) / (1u64 << 32) as f64;
        match (card, step) {
            (0, _) => Some(Spread::First(fraction(high))),
            (_, AGAIN) => {
                let due = slot.deadline;
                // Bits of the high half the first fraction hardly depends on.
                let wait = u64::from(high) % CYCLES_APART;
                let waited = u64::from((slot.flags & WAITED) / WAITED_ONE);
                let slot = &mut self.slots[ticket.slot as usize];
                if waited < wait {
                    slot.flags += WAITED_ONE;
                    return None;
                }
                slot.flags &= !WAITED;
                slot.set_step(0);
                Some(Spread::Again {
                    fraction: fraction(low),
                    due,
                })
            }
            _ => None,
        }
    }

    /// A check of `ticket` came back: the key is due again at `next.at` (milliseconds on
    /// Redis's clock, [`NEVER`] for no deadline) with `next.card` members, or gone (`None`) and
    /// forgotten. `written_by` is the check's instant plus the sweep's ttl: a write noticed
    /// while the check ran may have come after its read (as in [`Index::written`]), and a key
    /// whose TTL a check skipped because it ends later ([`TtlSeen::EndsAfter`]) is looked at
    /// again by then, since the TTL is known to last only while its checks are at most a ttl
    /// apart.
    pub fn checked(&mut self, ticket: Ticket, next: Option<Next>, written_by: u64) {
        let s = ticket.slot;
        let slot = &mut self.slots[s as usize];
        let Phase::InFlight { rewritten } = slot.state else {
            return;
        };
        // The check read the key as it is: its deadline holds every write before it.
        slot.set(WRITTEN, rewritten);
        // The steps of spreading: after the first check, the look it set; after that, the
        // check at the next deadline, until [`Index::spread`] uses it up.
        let step = match (slot.card, slot.step()) {
            (0, _) => LOOKING,
            (_, LOOKING | AGAIN) => AGAIN,
            (_, step) => step,
        };
        slot.set_step(step);
        match next {
            Some(Next {
                at: deadline,
                card,
                ttl,
            }) => {
                let skipped = (1..TTL_NONE).contains(&slot.ttl_reads);
                slot.ttl_reads = match ttl {
                    TtlSeen::Unread if slot.ttl_reads > TTL_NONE || skipped => slot.ttl_reads - 1,
                    TtlSeen::Unread => slot.ttl_reads,
                    TtlSeen::None => TTL_NONE + (Probing::TTL_SAMPLE - 1) as u8,
                    TtlSeen::EndsAfter(checks) => checks.min(TTL_NONE - 1),
                };
                let card = u32::try_from(card).unwrap_or(u32::MAX);
                self.members = self.members + u64::from(card) - u64::from(slot.card);
                slot.card = card;
                let skipped_ttl = skipped && ttl == TtlSeen::Unread;
                let deadline = if rewritten || skipped_ttl {
                    deadline.min(written_by)
                } else {
                    deadline
                };
                self.schedule(s, deadline);
            }
            // Written while the check ran: it may exist anew. Look again at once.
            None if rewritten => {
                self.members -= u64::from(slot.card);
                slot.card = 0;
                self.schedule(s, 0);
            }
            None => self.remove(s),
        }
    }

    /// A check of `ticket` failed: look again at `retry`.
    pub fn retry(&mut self, ticket: Ticket, retry: u64) {
        if matches!(
            self.slots[ticket.slot as usize].state,
            Phase::InFlight { .. }
        ) {
            self.schedule(ticket.slot, retry);
        }
    }

    /// A keyspace notification said `id` was written; a score written now makes it due by
    /// `by` at the latest (now + ttl). Returns whether it is tracked.
    ///
    /// A key due later than `by` (its members pinned or scored ahead, or a key lost in a
    /// restart and created anew) is due at `by` instead, so the new member leaves on time. A key
    /// in flight is marked, so that its check's reply is held to `by` too and, if it found the
    /// key gone, looks again.
    pub fn written(&mut self, id: &[u8], by: u64) -> bool {
        let Some(s) = self.find(id) else {
            return false;
        };
        let slot = &mut self.slots[s as usize];
        slot.set(WRITTEN, true);
        slot.set(SEEN, true);
        match &mut slot.state {
            Phase::InFlight { rewritten } => *rewritten = true,
            Phase::Scheduled if slot.deadline > by => self.schedule(s, by),
            Phase::Scheduled | Phase::Free => {}
        }
        true
    }

    /// Writes to the keys may have gone unnoticed from now on (`true`: notifications are not in
    /// use, or were lost), or every write is noticed again (`false`: after a reconciliation
    /// that read every key, with notifications in use throughout).
    pub fn set_unnoticed(&mut self, unnoticed: bool) {
        self.unnoticed = unnoticed;
    }

    /// A walk found `id`. Returns whether reconciliation must read its lowest score: it is
    /// tracked, and it may have been written since its last check (a score in the past moves a
    /// deadline earlier); `None` if it is not tracked.
    pub fn found(&mut self, id: &[u8]) -> Option<bool> {
        let s = self.find(id)?;
        let slot = &mut self.slots[s as usize];
        slot.set(SEEN, true);
        Some(self.unnoticed || slot.has(WRITTEN))
    }

    /// A walk starts: from now on it, a track or a write marks each key it finds as seen. A
    /// full walk returns every key that exists throughout it (SCAN's guarantee), so a key
    /// unseen at its end was gone at some moment of it.
    pub fn walk_started(&mut self) {
        for slot in &mut self.slots {
            slot.set(SEEN, false);
        }
    }

    /// After a full walk: appends to `out` up to `max` ids of keys it did not see, from slot
    /// `from` on, looking at no more than [`UNSEEN_SPAN`] slots. Returns where to go on, or
    /// `None` at the end. Keys in flight are left to their checks.
    pub fn unseen(&self, from: usize, max: usize, out: &mut Vec<Vec<u8>>) -> Option<usize> {
        let end = self.slots.len().min(from.saturating_add(UNSEEN_SPAN));
        let limit = out.len().saturating_add(max);
        for (s, slot) in self.slots.iter().enumerate().take(end).skip(from) {
            if out.len() >= limit {
                return Some(s);
            }
            if slot.state == Phase::Scheduled && !slot.has(SEEN) {
                out.push(slot.id.to_vec());
            }
        }
        (end < self.slots.len()).then_some(end)
    }

    /// A read after a walk found `id` gone (it did not see it): forget it, unless it was seen
    /// since (tracked or written anew) or a check is in flight. Returns whether it was.
    pub fn gone(&mut self, id: &[u8]) -> bool {
        let Some(s) = self.find(id) else {
            return false;
        };
        let slot = &self.slots[s as usize];
        if slot.has(SEEN) || slot.state != Phase::Scheduled {
            return false;
        }
        self.remove(s);
        true
    }

    /// A keyspace notification said `id` was deleted: forget it, unless a check is in flight
    /// (its reply decides).
    pub fn deleted(&mut self, id: &[u8]) {
        if let Some(s) = self.find(id)
            && self.slots[s as usize].state == Phase::Scheduled
        {
            self.remove(s);
        }
    }

    /// Reconciliation read `id`: it holds `card` members, and is due at `deadline` (its
    /// lowest score's) if that is earlier than the deadline it waits for (a score written in
    /// the past). Returns whether the deadline moved.
    ///
    /// The roster size follows the read too: a key written since its check (a member joined,
    /// or the key was flushed and written anew) may hold more or fewer members than the check
    /// counted, and its next check can be a ttl away.
    pub fn due_by(&mut self, id: &[u8], deadline: u64, card: u64) -> bool {
        let Some(s) = self.find(id) else {
            return false;
        };
        let slot = &mut self.slots[s as usize];
        if slot.state != Phase::Scheduled {
            return false;
        }
        slot.set(WRITTEN, false);
        let card = u32::try_from(card).unwrap_or(u32::MAX);
        self.members = self.members + u64::from(card) - u64::from(slot.card);
        slot.card = card;
        if slot.deadline <= deadline {
            return false;
        }
        self.schedule(s, deadline);
        true
    }

    fn remove(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        if slot.state == Phase::Scheduled && slot.deadline != NEVER {
            let old = slot.deadline;
            self.due.remove(&mut self.slots, s, old);
        }
        let slot = &mut self.slots[s as usize];
        self.members -= u64::from(slot.card);
        let id = std::mem::take(&mut slot.id);
        slot.state = Phase::Free;
        slot.card = 0;
        let hash = self.hasher.hash_one(id.as_slice());
        if let Ok(entry) = self.table.find_entry(hash, |&t| t == s) {
            entry.remove();
        }
        self.free.push(s);
        self.capacity.give_back(1);
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        self.capacity.give_back(self.table.len());
    }
}

#[cfg(test)]
mod recheck_tests {
    use super::*;

    #[test]
    fn the_latest_deadlines_come_due_first() {
        let mut index = Index::new(Capacity::new(10));
        for (i, due) in [100, 900, 500, 700].into_iter().enumerate() {
            index.track(format!("c{i}").as_bytes(), due);
        }
        index.recheck_latest(2, 50);
        let mut out = Vec::new();
        index.take_due(50, 10, |t, id, _| out.push((t, id.to_vec())));
        let ids: Vec<&[u8]> = out.iter().map(|(_, id)| id.as_slice()).collect();
        assert_eq!(ids, [b"c1".as_slice(), b"c3"], "900 and 700");
        assert_eq!(index.next_due(), Some(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(max: usize) -> Index {
        Index::new(Capacity::new(max))
    }

    /// Due again at `at` with `card` members and no TTL of its own.
    fn due_at(at: u64, card: u64) -> Option<Next> {
        Some(Next {
            at,
            card,
            ttl: TtlSeen::None,
        })
    }

    fn due(i: &mut Index, now: u64) -> Vec<(Ticket, Vec<u8>)> {
        let mut out = Vec::new();
        i.take_due(now, usize::MAX, |t, id, _| out.push((t, id.to_vec())));
        out
    }

    #[test]
    fn a_key_spreads_at_its_first_check_and_at_the_deadline_after_its_look() {
        let mut i = index(10);
        i.track(b"c1", 1000);
        let check = |i: &mut Index, now: u64, next: u64| {
            let (t, _) = due(i, now).pop().expect("due");
            let spread = i.spread(t);
            i.checked(t, due_at(next, 1), now + 45_000);
            spread
        };
        // Its first check sets a look at 20,000.
        let Some(Spread::First(f)) = check(&mut i, 1000, 20_000) else {
            panic!("the first check spreads");
        };
        assert!((0.0..1.0).contains(&f));
        // The look finds the key due at 66,000. The check then is spared (an outage's
        // credit): its spreading is not asked for. The checks at the next deadlines, 40 s
        // apart (its cycle), let the second look wait the key's own number of cycles, at
        // most CYCLES_APART - 1, then one sets it.
        assert_eq!(check(&mut i, 20_000, 66_000), None, "the look");
        let (t, _) = due(&mut i, 66_000).pop().expect("due");
        i.checked(t, due_at(106_000, 1), 66_000 + 45_000);
        let mut at = 106_000;
        let (fraction, was_due) = loop {
            assert!(at < 106_000 + CYCLES_APART * 40_000, "waited too long");
            match check(&mut i, at, at + 40_000) {
                None => at += 40_000,
                Some(Spread::Again { fraction, due }) => break (fraction, due),
                Some(other) => panic!("{other:?}"),
            }
        };
        assert_eq!(was_due, at);
        assert!((0.0..1.0).contains(&fraction) && fraction != f);
        for n in 1..=6 {
            let now = at + n * 40_000;
            assert_eq!(
                check(&mut i, now, now + 40_000),
                None,
                "spread twice, then never"
            );
        }
        assert_eq!(std::mem::size_of::<Slot>(), 48);
    }

    #[test]
    fn keys_come_due_in_deadline_order_and_are_rescheduled_or_forgotten() {
        let mut i = index(10);
        assert_eq!(i.track(b"c1", 300), Track::Added);
        assert_eq!(i.track(b"c2", 100), Track::Added);
        assert_eq!(
            i.track(b"a-long-conversation-id-of-40-bytes.......", 200),
            Track::Added
        );
        assert_eq!(i.track(b"c1", 0), Track::Known);
        assert_eq!(i.next_due(), Some(100));
        assert!(due(&mut i, 99).is_empty());
        let first = due(&mut i, 250);
        let ids: Vec<&[u8]> = first.iter().map(|(_, id)| id.as_slice()).collect();
        assert_eq!(
            ids,
            [&b"c2"[..], b"a-long-conversation-id-of-40-bytes......."]
        );
        assert_eq!(
            i.next_due(),
            Some(300),
            "keys in flight wait for no deadline"
        );
        i.checked(first[0].0, due_at(1000, 4), NEVER);
        i.checked(first[1].0, None, NEVER);
        assert_eq!((i.len(), i.members()), (2, 4));
        assert!(!i.contains(b"a-long-conversation-id-of-40-bytes......."));
        let next = due(&mut i, 1000);
        assert_eq!(next.len(), 2);
        i.checked(next[0].0, due_at(NEVER, 2), NEVER);
        i.retry(next[1].0, 5000);
        assert_eq!(i.next_due(), Some(5000));
        assert_eq!(i.members(), 6);
    }

    #[test]
    fn the_latest_deadlines_are_the_witnesses() {
        let mut i = index(10);
        for (id, due) in [(&b"a"[..], 300), (b"b", 100), (b"c", 200), (b"d", 400)] {
            i.track(id, due);
        }
        let latest: Vec<&[u8]> = i.latest(2).collect();
        assert_eq!(latest, [&b"d"[..], b"a"]);
        assert_eq!(i.latest(10).count(), 4);
    }

    #[test]
    fn the_cap_is_shared_and_given_back() {
        let cap = Capacity::new(2);
        let mut a = Index::new(cap.clone());
        let mut b = Index::new(cap.clone());
        assert_eq!(a.track(b"1", 0), Track::Added);
        assert_eq!(b.track(b"2", 0), Track::Added);
        assert_eq!(b.track(b"3", 0), Track::Full);
        a.deleted(b"1");
        assert_eq!(cap.used(), 1);
        assert_eq!(b.track(b"3", 0), Track::Added);
        drop(b);
        assert_eq!(cap.used(), 0);
        drop(a);
        assert_eq!(cap.used(), 0);
    }

    #[test]
    fn a_key_written_while_checked_is_looked_at_again_if_found_gone() {
        let mut i = index(10);
        i.track(b"c1", 0);
        let [(ticket, _)] = due(&mut i, 0).try_into().unwrap();
        i.deleted(b"c1");
        assert!(i.contains(b"c1"), "a key in flight is decided by its check");
        assert!(i.written(b"c1", NEVER));
        i.checked(ticket, None, NEVER);
        assert!(i.contains(b"c1"));
        assert_eq!(i.next_due(), Some(0));
        assert!(!i.written(b"other", NEVER));
    }

    #[test]
    fn a_write_holds_a_later_deadline_to_now_plus_the_ttl() {
        let mut i = index(10);
        // Pinned members: no deadline, or the hourly recheck.
        i.track(b"pinned", NEVER);
        i.track(b"ahead", 9000);
        i.track(b"due", 1000);
        for id in [&b"pinned"[..], b"ahead", b"due"] {
            assert!(i.written(id, 5000));
        }
        assert_eq!(i.next_due(), Some(1000), "an earlier deadline stands");
        let taken = due(&mut i, 5000);
        assert_eq!(taken.len(), 3, "the later ones are due by the write's ttl");
        // A write noticed while a check was in flight holds its reply's deadline too: the
        // write may have come after the read.
        let (racing, quiet) = (taken[0].0, taken[1].0);
        i.written(b"due", 7000);
        i.checked(racing, due_at(NEVER, 1), 7000);
        i.checked(quiet, due_at(NEVER, 1), 7000);
        assert_eq!(i.next_due(), Some(7000));
        assert_eq!(
            i.due.len(),
            1,
            "a check with no write since keeps its reply's deadline"
        );
    }

    #[test]
    fn reconciliation_only_moves_deadlines_earlier() {
        let mut i = index(10);
        i.track(b"c1", 500);
        assert!(!i.due_by(b"c1", 600, 1));
        assert!(i.due_by(b"c1", 400, 1));
        assert_eq!(i.next_due(), Some(400));
        assert!(!i.due_by(b"unknown", 0, 1));
    }

    #[test]
    fn with_every_write_noticed_only_written_keys_are_read_again() {
        let mut i = index(10);
        i.track(b"quiet", 0);
        i.track(b"busy", 0);
        for (t, _) in due(&mut i, 0) {
            i.checked(t, due_at(1000, 1), NEVER);
        }
        assert_eq!(i.found(b"quiet"), Some(true), "unnoticed at first");
        i.set_unnoticed(false);
        assert_eq!(i.found(b"quiet"), Some(false));
        assert!(i.written(b"busy", NEVER));
        assert_eq!(i.found(b"busy"), Some(true));
        i.due_by(b"busy", 2000, 1);
        assert_eq!(i.found(b"busy"), Some(false), "read, it is up to date");
        assert_eq!(i.found(b"unknown"), None);
        // Written while its check ran: the check may not have seen the write.
        i.track(b"racing", 0);
        let [(t, _)] = due(&mut i, 0).try_into().unwrap();
        i.written(b"racing", NEVER);
        i.checked(t, due_at(3000, 1), NEVER);
        assert_eq!(i.found(b"racing"), Some(true));
    }

    /// Tracks `ids`, each checked with `card` members and due at 1000.
    fn tracked(i: &mut Index, ids: &[&[u8]], card: u64) {
        for id in ids {
            i.track(id, 0);
        }
        for (t, _) in due(i, 0) {
            i.checked(t, due_at(1000, card), NEVER);
        }
    }

    fn unseen_all(i: &Index) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut from = Some(0);
        while let Some(f) = from {
            from = i.unseen(f, usize::MAX, &mut out);
        }
        out
    }

    #[test]
    fn a_key_a_walk_did_not_find_is_forgotten_once_read_gone() {
        let mut i = index(10);
        tracked(&mut i, &[b"a", b"b", b"c"], 2);
        assert_eq!((i.len(), i.members()), (3, 6));
        i.walk_started();
        assert_eq!(i.found(b"a"), Some(true));
        assert_eq!(i.found(b"unknown"), None);
        assert_eq!(unseen_all(&i), [b"b".to_vec(), b"c".to_vec()]);
        assert!(i.gone(b"b"));
        assert!(!i.gone(b"a"), "found by the walk");
        assert!(!i.gone(b"b"), "forgotten already");
        assert_eq!((i.len(), i.members()), (2, 4));
        assert_eq!(unseen_all(&i), [b"c".to_vec()]);
    }

    #[test]
    fn a_key_tracked_or_written_during_the_walk_is_kept() {
        let mut i = index(10);
        tracked(&mut i, &[b"a", b"b"], 1);
        i.walk_started();
        // Written after the walk passed it (or deleted and created anew): a read that found
        // it gone before the write must not forget it.
        assert!(i.written(b"a", NEVER));
        i.track(b"new", 0);
        assert_eq!(unseen_all(&i), [b"b".to_vec()]);
        assert!(!i.gone(b"a"));
        assert!(!i.gone(b"new"));
        // The next walk starts afresh.
        i.walk_started();
        assert_eq!(unseen_all(&i).len(), 3);
    }

    #[test]
    fn a_key_in_flight_is_left_to_its_check() {
        let mut i = index(10);
        tracked(&mut i, &[b"a"], 1);
        i.walk_started();
        let [(ticket, _)] = due(&mut i, 1000).try_into().unwrap();
        assert!(unseen_all(&i).is_empty());
        assert!(!i.gone(b"a"));
        i.checked(ticket, None, NEVER);
        assert_eq!((i.len(), i.members()), (0, 0), "its check found it gone");
    }

    #[test]
    fn unseen_keys_come_in_bounded_batches_and_resume() {
        let mut i = index(UNSEEN_SPAN + 100);
        for k in 0..UNSEEN_SPAN + 10 {
            i.track(format!("c{k}").as_bytes(), NEVER);
        }
        i.walk_started();
        for k in 0..UNSEEN_SPAN {
            i.found(format!("c{k}").as_bytes());
        }
        let mut out = Vec::new();
        let next = i.unseen(0, 4, &mut out);
        assert_eq!(
            (next, out.len()),
            (Some(UNSEEN_SPAN), 0),
            "one call looks at a span of slots at most"
        );
        let next = i.unseen(UNSEEN_SPAN, 4, &mut out);
        assert_eq!((next, out.len()), (Some(UNSEEN_SPAN + 4), 4));
        let next = i.unseen(UNSEEN_SPAN + 4, 4, &mut out);
        assert_eq!((next, out.len()), (Some(UNSEEN_SPAN + 8), 8));
        assert_eq!(i.unseen(UNSEEN_SPAN + 8, 4, &mut out), None);
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn a_deletion_notice_forgets_a_waiting_key_and_its_members() {
        let mut i = index(10);
        tracked(&mut i, &[b"a", b"b"], 3);
        i.deleted(b"a");
        assert_eq!((i.len(), i.members()), (1, 3));
        assert_eq!(i.next_due(), Some(1000));
    }

    /// What each check of a key asks, as the index hands it out.
    fn probing(i: &mut Index, now: u64) -> Vec<(Ticket, Probing)> {
        let mut out = Vec::new();
        i.take_due(now, usize::MAX, |t, _, p| out.push((t, p)));
        out
    }

    #[test]
    fn a_check_asks_the_size_and_ttl_only_of_keys_that_need_them() {
        let mut i = index(10);
        i.track(b"one", 0);
        i.track(b"many", 0);
        i.track(b"expiring", 0);
        let first = probing(&mut i, 0);
        assert!(
            first.iter().all(|&(_, p)| p == Probing::FULL),
            "a first check knows nothing: {first:?}"
        );
        let [one, many, expiring] = [first[0].0, first[1].0, first[2].0];
        i.checked(one, due_at(10, 1), NEVER);
        i.checked(many, due_at(10, 3), NEVER);
        let ttl = Next {
            at: 10,
            card: 1,
            ttl: TtlSeen::EndsAfter(0),
        };
        i.checked(expiring, Some(ttl), NEVER);
        let p: Vec<Probing> = probing(&mut i, 10).into_iter().map(|(_, p)| p).collect();
        let (single, sized) = (
            |ttl| Probing { single: true, ttl },
            Probing {
                single: false,
                ttl: false,
            },
        );
        assert_eq!(p, [single(false), sized, single(true)]);
    }

    #[test]
    fn one_check_in_a_sample_reads_the_ttl_of_a_key_without_one() {
        let mut i = index(10);
        i.track(b"a", 0);
        let mut reads = Vec::new();
        for round in 0..Probing::TTL_SAMPLE * 4 {
            let [(t, p)] = probing(&mut i, u64::from(round)).try_into().unwrap();
            if p.ttl {
                reads.push(round);
            }
            let next = Next {
                at: u64::from(round) + 1,
                card: 1,
                ttl: if p.ttl {
                    TtlSeen::None
                } else {
                    TtlSeen::Unread
                },
            };
            i.checked(t, Some(next), NEVER);
        }
        // The first check, then one in a sample, for this key whatever the others do.
        assert_eq!(reads, [0, 32, 64, 96]);
        assert_eq!(
            i.next_due(),
            Some(128),
            "a key without a TTL keeps its deadline"
        );
    }

    #[test]
    fn a_ttl_that_ends_later_is_read_again_before_the_checks_can_reach_it() {
        let mut i = index(10);
        i.track(b"a", 0);
        let [(t, _)] = probing(&mut i, 0).try_into().unwrap();
        let ends_after = |checks| Next {
            at: 100,
            card: 1,
            ttl: TtlSeen::EndsAfter(checks),
        };
        i.checked(t, Some(ends_after(3)), 1_000);
        let (mut now, mut reads) = (100, Vec::new());
        for _ in 0..4 {
            let [(t, p)] = probing(&mut i, now).try_into().unwrap();
            reads.push(p.ttl);
            // A score ahead of Redis's clock: its deadline is far, but a check that skipped
            // the TTL looks again within the ttl (the horizon given), where the TTL may end.
            let far = Next {
                at: now + 10_000,
                card: 1,
                ttl: if p.ttl {
                    TtlSeen::EndsAfter(3)
                } else {
                    TtlSeen::Unread
                },
            };
            i.checked(t, Some(far), now + 500);
            let next = i.next_due().unwrap();
            assert_eq!(next, if p.ttl { now + 10_000 } else { now + 500 });
            now = next;
        }
        assert_eq!(
            reads,
            [false, false, false, true],
            "three skipped, then read"
        );
    }

    #[test]
    fn the_seen_mark_costs_no_memory() {
        assert_eq!(std::mem::size_of::<Slot>(), 48);
    }

    #[test]
    fn slots_are_reused() {
        let mut i = index(100);
        for round in 0..5u64 {
            for k in 0..50u64 {
                i.track(format!("c{k}").as_bytes(), round);
            }
            for (t, _) in due(&mut i, round) {
                i.checked(t, None, NEVER);
            }
        }
        assert_eq!((i.len(), i.slots.len()), (0, 50));
    }
}
