//! The index's keys in deadline order ([`Queue`]): a ring of millisecond buckets over the next
//! [`SPAN`] ms, each a list threaded through the keys' own slots, with B-trees for the rare
//! deadlines before the ring (a retry, a look at once) and past it (a long ttl, a score ahead).
//!
//! A B-tree of a million deadlines missed the cache at nearly every insert: a check's new
//! deadline lands anywhere in the next ttl, and the tree's lower levels do not fit in the cache.
//! Nearly a third of the daemon's CPU went there on a slow hour. A bucket is found by the
//! deadline alone, and its key's links sit in the slot the check has just read, so an insert
//! touches the bucket and the slot of the key at its head. `cargo bench -p
//! presence-sweeper-rules --bench index` on 1,000,000 keys (docs/capacity.md has the figures).

use std::collections::BTreeSet;

/// The ring's length in milliseconds (65.5 s): past a ttl of 45 s and the looks within it, so
/// that the keys of the default sweeps are never in the B-trees.
const SPAN_BITS: u32 = 16;
const SPAN: u64 = 1 << SPAN_BITS;
const MASK: u64 = SPAN - 1;
const WORDS: usize = (SPAN / 64) as usize;

/// No slot: the end of a list.
const NIL: u32 = u32::MAX;

/// A key's place in its bucket's list; it lives in the key's slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Link {
    prev: u32,
    next: u32,
}

impl Default for Link {
    fn default() -> Self {
        Self {
            prev: NIL,
            next: NIL,
        }
    }
}

/// Where the queue finds each slot's [`Link`].
pub(crate) trait Links {
    fn link(&mut self, slot: u32) -> &mut Link;
    fn get(&self, slot: u32) -> Link;
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    head: u32,
    tail: u32,
    len: u32,
}

const EMPTY: Bucket = Bucket {
    head: NIL,
    tail: NIL,
    len: 0,
};

/// Slots by deadline (ms): [`Queue::pop_due`] gives the earliest first; of those due in the same
/// millisecond, the first queued (by slot in the B-trees).
#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// The ring holds the deadlines in `[base, base + SPAN)`; `base` never goes back.
    base: u64,
    /// [`SPAN`] buckets, allocated at the first deadline in the ring (an index that never holds
    /// a key costs nothing); bucket `d & MASK` for deadline `d`.
    ring: Vec<Bucket>,
    /// A bit per bucket that holds a key, and a bit per word of those that has one.
    occupied: Vec<u64>,
    summary: [u64; WORDS / 64],
    in_ring: usize,
    /// Deadlines before `base`.
    early: BTreeSet<(u64, u32)>,
    /// Deadlines from `base + SPAN` on.
    far: BTreeSet<(u64, u32)>,
}

impl Queue {
    pub(crate) fn len(&self) -> usize {
        self.early.len() + self.in_ring + self.far.len()
    }

    /// Queues `slot` for `deadline`; it must not be queued already.
    pub(crate) fn insert(&mut self, links: &mut impl Links, slot: u32, deadline: u64) {
        if deadline < self.base {
            self.early.insert((deadline, slot));
        } else if deadline - self.base >= SPAN {
            self.far.insert((deadline, slot));
        } else {
            self.push(links, slot, deadline);
        }
    }

    /// Takes `slot`, queued for `deadline`, out.
    pub(crate) fn remove(&mut self, links: &mut impl Links, slot: u32, deadline: u64) {
        if deadline < self.base {
            self.early.remove(&(deadline, slot));
        } else if deadline - self.base >= SPAN {
            self.far.remove(&(deadline, slot));
        } else {
            self.unlink(links, slot, deadline);
        }
    }

    /// The earliest deadline.
    pub(crate) fn first(&self) -> Option<u64> {
        if let Some(&(d, _)) = self.early.first() {
            return Some(d);
        }
        self.first_in_ring()
            .or_else(|| self.far.first().map(|&(d, _)| d))
    }

    /// The deadline of the `n`-th to come (1: the first), if that many are queued.
    pub(crate) fn nth(&self, n: usize) -> Option<u64> {
        let mut left = n.checked_sub(1)?;
        if left < self.early.len() {
            return self.early.iter().nth(left).map(|&(d, _)| d);
        }
        left -= self.early.len();
        if left < self.in_ring {
            let mut at = self.base;
            while let Some(d) = self.next_in_ring(at) {
                let len = self.ring[(d & MASK) as usize].len as usize;
                if left < len {
                    return Some(d);
                }
                left -= len;
                at = d + 1;
            }
        }
        left -= self.in_ring;
        self.far.iter().nth(left).map(|&(d, _)| d)
    }

    /// Takes out the earliest slot if its deadline is at or before `now`, with that deadline.
    pub(crate) fn pop_due(&mut self, links: &mut impl Links, now: u64) -> Option<(u64, u32)> {
        if let Some(&(d, s)) = self.early.first() {
            // Before `base`, and so before everything else.
            if d > now {
                return None;
            }
            self.early.pop_first();
            return Some((d, s));
        }
        self.catch_up(links, now);
        let d = self.first_in_ring()?;
        if d > now {
            return None;
        }
        let bucket = &mut self.ring[(d & MASK) as usize];
        let s = bucket.head;
        let next = std::mem::take(links.link(s)).next;
        bucket.head = next;
        bucket.len -= 1;
        if next == NIL {
            bucket.tail = NIL;
            self.clear_bit(d);
        } else {
            links.link(next).prev = NIL;
        }
        self.in_ring -= 1;
        Some((d, s))
    }

    /// Moves the ring on towards `now`, an instant the caller's clock has reached: to `now`,
    /// or to the first deadline queued if that is earlier, taking in the far deadlines it
    /// reaches. Not past `now`, so that the deadlines set from now on (a key tracked, due at
    /// once) land in the ring, not before it.
    pub(crate) fn catch_up(&mut self, links: &mut impl Links, now: u64) {
        let first = self
            .first_in_ring()
            .or_else(|| self.far.first().map(|&(d, _)| d));
        let to = first.map_or(now, |f| f.min(now));
        if to > self.base {
            self.advance(links, to);
        }
    }

    /// Up to `n` slots with the latest deadlines, latest first.
    pub(crate) fn latest(&self, links: &impl Links, n: usize) -> Vec<(u64, u32)> {
        let mut out: Vec<(u64, u32)> = self.far.iter().rev().take(n).copied().collect();
        let mut at = self.base + SPAN;
        while out.len() < n
            && let Some(d) = self.prev_in_ring(at)
        {
            let mut s = self.ring[(d & MASK) as usize].head;
            while s != NIL && out.len() < n {
                out.push((d, s));
                s = links.get(s).next;
            }
            at = d;
        }
        out.extend(self.early.iter().rev().take(n - out.len()));
        out
    }

    fn push(&mut self, links: &mut impl Links, slot: u32, deadline: u64) {
        if self.ring.is_empty() {
            self.ring = vec![EMPTY; SPAN as usize];
            self.occupied = vec![0; WORDS];
        }
        let i = (deadline & MASK) as usize;
        let tail = self.ring[i].tail;
        *links.link(slot) = Link {
            prev: tail,
            next: NIL,
        };
        if tail == NIL {
            self.set_bit(deadline);
            self.ring[i].head = slot;
        } else {
            links.link(tail).next = slot;
        }
        let bucket = &mut self.ring[i];
        bucket.tail = slot;
        bucket.len += 1;
        self.in_ring += 1;
    }

    fn unlink(&mut self, links: &mut impl Links, slot: u32, deadline: u64) {
        let Link { prev, next } = std::mem::take(links.link(slot));
        let bucket = &mut self.ring[(deadline & MASK) as usize];
        if prev == NIL {
            bucket.head = next;
        } else {
            links.link(prev).next = next;
        }
        if next == NIL {
            bucket.tail = prev;
        } else {
            links.link(next).prev = prev;
        }
        bucket.len -= 1;
        if bucket.len == 0 {
            self.clear_bit(deadline);
        }
        self.in_ring -= 1;
    }

    /// Moves `base` on to `to`; nothing may be queued before `to`.
    fn advance(&mut self, links: &mut impl Links, to: u64) {
        self.base = to;
        while let Some(&(d, s)) = self.far.first() {
            if d - self.base >= SPAN {
                break;
            }
            self.far.pop_first();
            self.push(links, s, d);
        }
    }

    fn set_bit(&mut self, deadline: u64) {
        let bit = (deadline & MASK) as usize;
        self.occupied[bit / 64] |= 1 << (bit % 64);
        self.summary[bit / 4096] |= 1 << (bit / 64 % 64);
    }

    fn clear_bit(&mut self, deadline: u64) {
        let bit = (deadline & MASK) as usize;
        let word = &mut self.occupied[bit / 64];
        *word &= !(1 << (bit % 64));
        if *word == 0 {
            self.summary[bit / 4096] &= !(1 << (bit / 64 % 64));
        }
    }

    fn first_in_ring(&self) -> Option<u64> {
        self.next_in_ring(self.base)
    }

    /// The deadline that bucket `bit` stands for.
    fn deadline_of(&self, bit: usize) -> u64 {
        self.base + ((bit as u64).wrapping_sub(self.base) & MASK)
    }

    /// The earliest deadline in the ring at or after `at` (within `[base, base + SPAN)`).
    fn next_in_ring(&self, at: u64) -> Option<u64> {
        if self.in_ring == 0 || at >= self.base + SPAN {
            return None;
        }
        // The ring wraps at `base`'s bucket: from `at`'s to the end, then from the start to
        // `base`'s, unless `at`'s is past the wrap already.
        let from = (at & MASK) as usize;
        let start = (self.base & MASK) as usize;
        let found = if from >= start {
            self.next_bit(from, SPAN as usize)
                .or_else(|| self.next_bit(0, start))
        } else {
            self.next_bit(from, start)
        }?;
        Some(self.deadline_of(found))
    }

    /// The latest deadline in the ring before `at` (within `(base, base + SPAN]`).
    fn prev_in_ring(&self, at: u64) -> Option<u64> {
        if self.in_ring == 0 || at <= self.base {
            return None;
        }
        let to = (at & MASK) as usize;
        let start = (self.base & MASK) as usize;
        let found = if to > start {
            self.prev_bit(start, to)
        } else {
            self.prev_bit(0, to)
                .or_else(|| self.prev_bit(start, SPAN as usize))
        }?;
        Some(self.deadline_of(found))
    }

    /// The first set bit in `[from, to)`.
    fn next_bit(&self, from: usize, to: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = self.occupied[word] & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                let bit = word * 64 + bits.trailing_zeros() as usize;
                return (bit < to).then_some(bit);
            }
            // The next word with a bit, from the summary.
            word += 1;
            if word * 64 >= to {
                return None;
            }
            let group = word / 64;
            let mut marks = self.summary[group] & (!0u64 << (word % 64));
            let mut g = group;
            while marks == 0 {
                g += 1;
                if g * 4096 >= to || g >= self.summary.len() {
                    return None;
                }
                marks = self.summary[g];
            }
            word = g * 64 + marks.trailing_zeros() as usize;
            bits = self.occupied[word];
        }
    }

    /// The last set bit in `[from, to)`.
    fn prev_bit(&self, from: usize, to: usize) -> Option<usize> {
        // Rare (the storm guard's witnesses, a clock that stepped back): word by word.
        let mut bit = to;
        while bit > from {
            let word = (bit - 1) / 64;
            let below = bit - word * 64;
            let mask = if below == 64 { !0 } else { (1u64 << below) - 1 };
            let bits = self.occupied[word] & mask;
            if bits != 0 {
                let found = word * 64 + 63 - bits.leading_zeros() as usize;
                return (found >= from).then_some(found);
            }
            bit = word * 64;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    struct Slots(Vec<Link>);

    impl Links for Slots {
        fn link(&mut self, slot: u32) -> &mut Link {
            &mut self.0[slot as usize]
        }

        fn get(&self, slot: u32) -> Link {
            self.0[slot as usize]
        }
    }

    const T0: u64 = 1_764_460_000_000;

    #[derive(Debug, Clone)]
    enum Op {
        /// Queue a slot not queued, this many ms from now (negative: overdue).
        Insert(i64),
        /// Take out the n-th queued slot, modulo their number.
        Remove(usize),
        /// Move now on by this many ms, then pop what is due.
        Pop(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (-2_000i64..70_000).prop_map(Op::Insert),
            1 => (-100_000i64..300_000).prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Remove),
            3 => prop_oneof![0u64..50, 0u64..5_000, 60_000u64..200_000].prop_map(Op::Pop),
        ]
    }

    proptest! {
        /// Against a B-tree of (deadline, slot): the same deadlines come out in the same
        /// order, and the first, the n-th and the latest agree at every step, across the
        /// ring's wrap, its jumps and the deadlines before and past it.
        #[test]
        fn it_orders_deadlines_as_a_b_tree_does(ops in proptest::collection::vec(op(), 1..300)) {
            const SLOTS: u32 = 64;
            let mut links = Slots(vec![Link::default(); SLOTS as usize]);
            let mut queue = Queue::default();
            let mut model: BTreeSet<(u64, u32)> = BTreeSet::new();
            let mut queued: Vec<Option<u64>> = vec![None; SLOTS as usize];
            let mut now = T0;
            for op in ops {
                match op {
                    Op::Insert(ahead) => {
                        let Some(s) = (0..SLOTS).find(|&s| queued[s as usize].is_none()) else {
                            continue;
                        };
                        let d = now.saturating_add_signed(ahead);
                        queue.insert(&mut links, s, d);
                        model.insert((d, s));
                        queued[s as usize] = Some(d);
                    }
                    Op::Remove(n) => {
                        if model.is_empty() {
                            continue;
                        }
                        let &(d, s) = model.iter().nth(n % model.len()).unwrap();
                        queue.remove(&mut links, s, d);
                        model.remove(&(d, s));
                        queued[s as usize] = None;
                    }
                    Op::Pop(by) => {
                        now += by;
                        while let Some((d, s)) = queue.pop_due(&mut links, now) {
                            prop_assert_eq!(Some(d), model.first().map(|&(d, _)| d));
                            prop_assert!(model.remove(&(d, s)), "{} was not queued", s);
                            queued[s as usize] = None;
                        }
                        prop_assert!(model.first().is_none_or(|&(d, _)| d > now));
                    }
                }
                prop_assert_eq!(queue.len(), model.len());
                prop_assert_eq!(queue.first(), model.first().map(|&(d, _)| d));
                for n in [1, 2, 5, model.len(), model.len() + 1] {
                    prop_assert_eq!(queue.nth(n), model.iter().nth(n.wrapping_sub(1)).map(|&(d, _)| d));
                }
                let latest: Vec<u64> = queue.latest(&links, 7).into_iter().map(|(d, _)| d).collect();
                let expected: Vec<u64> = model.iter().rev().take(7).map(|&(d, _)| d).collect();
                prop_assert_eq!(latest, expected);
            }
        }
    }

    #[test]
    fn keys_due_in_the_same_millisecond_come_in_the_order_they_were_queued() {
        let mut links = Slots(vec![Link::default(); 8]);
        let mut queue = Queue::default();
        // The ring starts where the first look for due keys was.
        assert_eq!(queue.pop_due(&mut links, T0), None);
        for s in [5, 2, 7, 0] {
            queue.insert(&mut links, s, T0 + 10);
        }
        queue.remove(&mut links, 7, T0 + 10);
        let out: Vec<u32> = std::iter::from_fn(|| queue.pop_due(&mut links, T0 + 10))
            .map(|(_, s)| s)
            .collect();
        assert_eq!(out, [5, 2, 0]);
    }

    #[test]
    fn an_index_that_never_holds_a_key_allocates_no_ring() {
        let mut links = Slots(Vec::new());
        let mut queue = Queue::default();
        assert_eq!(queue.pop_due(&mut links, T0), None);
        assert!(queue.ring.is_empty() && queue.occupied.is_empty());
    }
}
