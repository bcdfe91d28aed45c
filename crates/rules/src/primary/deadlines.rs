//! Deadlines: which keys are due, how they are batched, how many checks go in flight, and when
//! a checked key is looked at again. No I/O: the loop takes due keys from the index with these
//! numbers and applies what [`next_look`] says to each checked key.

use std::time::Duration;

use super::standing::Verdict;
use crate::check::{CheckOpts, Expiry, Purpose};
use crate::index::{NEVER, TtlSeen};
use crate::plan::KeyState;

/// How long after a failed check its keys are checked again.
pub const RETRY: Duration = Duration::from_secs(1);
/// A key is checked no sooner than this after its deadline: long enough that Redis's clock is
/// past it (the estimate lags by a reply's travel), so the check finds the zombie stale.
const DEADLINE_MARGIN_MS: u64 = 3;
/// Keys coming due within this long of each other are checked in one batch: each batch costs
/// Redis a round trip's fixed work, and a zombie a few milliseconds more lag is no one's loss.
const BATCH_WINDOW_MS: u64 = 50;
/// A check reads Redis's clock anew when the last reading is older than this.
pub const CLOCK_REFRESH: Duration = Duration::from_secs(1);
/// A key found due but not stale (a heartbeat raced its deadline, or clocks disagree) is looked
/// at again no sooner than this, so no disagreement can make the loop spin.
const MIN_RECHECK_MS: u64 = 20;
/// Keys whose newest heartbeat a check reads when the storm guard suspects silence.
pub const WITNESSES: usize = 16;
/// How often a key whose every member is pinned (a score of `+inf`) is checked: it has no
/// deadline, but it may vanish without a notification (a restart), and must not stay tracked.
const PINNED_RECHECK_MS: u64 = 3_600_000;

/// `evict.batch_keys`, `evict.pipeline_depth` and `evict.max_pipeline_depth`: how many keys go
/// in one check, and how many checks and reads are in flight at once (a [`Window`] between the
/// two depths).
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    pub batch: usize,
    pub depth: usize,
    /// The most the window grows to; below `depth`, the window stays at `depth`.
    pub max_depth: usize,
}

impl Batching {
    /// Whether a walk with `queued` keys waiting may ask for another page.
    pub fn room_for_page(&self, queued: usize) -> bool {
        crate::scan::room_for_page(queued, self.batch, self.depth)
    }

    /// When (ms, Redis's clock) a sweep's next batch is checked, given the deadline of its
    /// earliest key (`first`) and of its `batch`-th (`full`): a batch waits up to its window for
    /// keys due close together to go together, but a full one goes at once. At a high rate of
    /// deadlines the window would only add its length to every zombie's lag.
    pub fn ripe_at(first: Option<u64>, full: Option<u64>) -> Option<u64> {
        let window = first?.saturating_add(BATCH_WINDOW_MS);
        Some(full.map_or(window, |full| {
            window.min(full.saturating_add(DEADLINE_MARGIN_MS))
        }))
    }

    /// Keys due by this (ms, Redis's clock) are taken into a batch at `now_ms`.
    pub fn due_by(now_ms: u64) -> u64 {
        now_ms.saturating_sub(DEADLINE_MARGIN_MS)
    }
}

/// How many requests one primary keeps in flight. It starts at `evict.pipeline_depth` and grows
/// by one for each request that lands while due keys wait for room, up to
/// `evict.max_pipeline_depth`; it shrinks by one for each that lands with none waiting, and back
/// to `pipeline_depth` when a check fails. Round trips grow when Redis is busy, and a fixed
/// window then checks fewer keys a second than come due: the lag grows without bound although
/// neither Redis nor the sweeper is saturated. Growing by one per landing follows the round
/// trip within a few of them; it never floods a Redis that is slow because it is saturated,
/// since then nothing lands sooner for being asked more.
#[derive(Debug, Clone)]
pub struct Window {
    floor: usize,
    ceiling: usize,
    depth: usize,
    /// Due keys wait for room: as a dispatch last found them.
    waiting: bool,
}

impl Window {
    pub fn new(b: &Batching) -> Self {
        Self {
            floor: b.depth,
            ceiling: b.max_depth.max(b.depth),
            depth: b.depth,
            waiting: false,
        }
    }

    /// Whether another request may go out, with `in_flight` out already.
    pub fn room(&self, in_flight: usize) -> bool {
        in_flight < self.depth
    }

    /// Whether due keys wait for room, as a dispatch of checks leaves them. It holds until the
    /// next dispatch: landings in between all see the same backlog.
    pub fn waiting(&mut self, waiting: bool) {
        self.waiting = waiting;
    }

    /// A request came back; `failed`: a check that failed (Redis in trouble: ask less of it).
    pub fn landed(&mut self, failed: bool) {
        self.depth = if failed {
            self.floor
        } else if self.waiting {
            (self.depth + 1).min(self.ceiling)
        } else {
            self.depth.saturating_sub(1).max(self.floor)
        };
    }

    /// The requests allowed in flight now.
    pub fn depth(&self) -> usize {
        self.depth
    }
}

/// The options of a check of tracked keys at their deadlines, as `verdict` allows; it reads
/// Redis's clock anew if `read_time`. With [`walk_opts`], the only places the loop builds
/// [`CheckOpts`].
pub fn deadline_opts(verdict: Verdict, read_time: bool) -> CheckOpts {
    CheckOpts {
        judge_at: verdict.judge_at,
        spare_until: verdict.spare_until,
        purpose: Purpose::Deadline {
            read_time,
            held_back: verdict.held_back,
        },
    }
}

/// The options of a check of keys a walk found at Redis's `page_time` but could not track, as
/// `verdict` allows: judged no later than the page was read.
pub fn walk_opts(verdict: Verdict, page_time: f64) -> CheckOpts {
    CheckOpts {
        judge_at: verdict.judge_at.min(page_time),
        spare_until: verdict.spare_until,
        purpose: Purpose::Walk {
            held_back: verdict.held_back,
        },
    }
}

/// What becomes of a checked key in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Gone (or moved to another primary, whose walk finds it): forget it.
    Forget,
    /// Look again at this instant (ms, Redis's clock); it holds `card` members.
    At { next: u64, card: u64 },
    /// The check could not tell: try again at this instant.
    Retry(u64),
}

/// When a key checked at `now_ms` in state `state` is looked at again. `spared_until`: members
/// an outage kept from heartbeating, or the storm guard holds, are spared until then.
/// `expires_in`: the key's own TTL as the check read it (ms); a key that expires then is looked
/// at then, found gone and forgotten, even if the server publishes no `expired` event.
pub fn next_look(
    state: &KeyState,
    now_ms: u64,
    ttl_ms: u64,
    spared_until: Option<u64>,
    expires_in: Option<u64>,
) -> Look {
    match *state {
        KeyState::Gone | KeyState::Moved => Look::Forget,
        KeyState::Live {
            card,
            oldest: Some(oldest),
        } => {
            let deadline = deadline_ms(oldest, ttl_ms);
            let next = match spared_until {
                // Pinned members (`+inf`) never come due; the key is still looked at now and
                // then, so that one lost in a restart is forgotten.
                _ if deadline == NEVER => now_ms + PINNED_RECHECK_MS,
                _ if deadline > now_ms => deadline,
                Some(until) => until + DEADLINE_MARGIN_MS,
                None => now_ms + MIN_RECHECK_MS,
            };
            // Read before `now_ms`: the key expires no later than this. Redis expires a key
            // when it is accessed, so the check finds it gone.
            let expiry = expires_in.map_or(NEVER, |ms| {
                now_ms.saturating_add(ms).saturating_add(DEADLINE_MARGIN_MS)
            });
            Look::At {
                next: next.min(expiry),
                card,
            }
        }
        KeyState::Live { oldest: None, .. } | KeyState::Unknown => {
            Look::Retry(now_ms + RETRY.as_millis() as u64)
        }
    }
}

/// What a check at `now_ms` that looks at its key again at `next` (ms) read of the key's own
/// TTL, for the index. A key written as the README says carries a TTL about ten ttls long,
/// refreshed as it runs half down: while its members heartbeat it never ends, and when they
/// stop, the check at their deadline evicts them, which deletes the key. So its TTL need not
/// be read at every check, only before its checks could reach its end: they come at most a
/// ttl apart while no score is ahead of Redis's clock (the index looks at a key no later than
/// a ttl after a check that skipped its TTL).
pub fn ttl_seen(expiry: Expiry, now_ms: u64, next: u64, ttl_ms: u64) -> TtlSeen {
    match expiry {
        Expiry::Unread => TtlSeen::Unread,
        Expiry::Never => TtlSeen::None,
        // A look more than a ttl away (scores ahead of Redis's clock, pinned members, a hold)
        // keeps its own schedule, and reads the TTL when it comes.
        Expiry::In(_) if next > now_ms.saturating_add(ttl_ms) => TtlSeen::EndsAfter(0),
        Expiry::In(ms) => {
            let ends = now_ms.saturating_add(ms);
            let checks = ends.saturating_sub(next) / ttl_ms.max(1);
            TtlSeen::EndsAfter(u8::try_from(checks).unwrap_or(u8::MAX))
        }
    }
}

/// When a key first checked at `now_ms` is looked at again, given its deadline `next` (its
/// oldest score + `ttl_ms`) and its own fraction `spread` in [0, 1): that fraction of a ttl
/// after its oldest score, if that is still to come, else at its deadline.
///
/// A live key is checked every few heartbeat periods at a phase its first check sets: with a
/// heartbeat of 20 s and a ttl of 45 s, its oldest heartbeat is 5 s old at its deadline, and
/// its next deadline is 40 s later. Keys first checked together (a walk at start or after a
/// takeover, every client reconnecting at once) would stay together: a million keys first
/// checked within 20 s would be checked in the same 20 s of every 40, at twice the average
/// rate, with the other 20 s idle. On a Redis the apps keep busy, the twice is what saturates
/// it and makes zombies wait (`benches/busy.py`). A look before the deadline finds the
/// heartbeats since, and sets the key's phase anew. A look that finds no new heartbeat leaves
/// the key's deadline as it was.
///
/// A look within a ttl is not quite even: where the ttl is not a whole number of heartbeat
/// periods, the part left over finds the same phase as no heartbeat at all (20 s and 45 s: 25
/// of 45 keys keep their phase, 20 move half a cycle), so [`respread`] looks once more: two
/// checks at most per key tracked. A check that comes late by more than a look's lead skips
/// that look, and its key keeps its phase: a small bias, only while checks run late.
pub fn spread_first(now_ms: u64, next: u64, ttl_ms: u64, spread: f64) -> u64 {
    look_within(now_ms, next, ttl_ms, spread)
}

/// When a key is looked at again after the first check at a deadline that followed its first
/// look, due at `due` and now due at `next`: a look within its own cycle (`next - due`, a
/// whole number of heartbeat periods for a key with one user), at its fraction `spread`.
/// Looks spread evenly over a whole number of periods find each phase equally often, whatever
/// the period, so the keys' checks come at an even rate (`benches/busy.py --timeline` counts
/// them each second). A cycle of nothing or over a ttl (a late check, many users, scores ahead)
/// looks no earlier.
pub fn respread(now_ms: u64, next: u64, due: u64, ttl_ms: u64, spread: f64) -> u64 {
    let cycle = next.saturating_sub(due);
    if next == NEVER || cycle == 0 || cycle > ttl_ms {
        return next;
    }
    look_within(now_ms, next, cycle, spread)
}

/// A look `spread` of `span` after `next - span`, or `next` if that is too soon.
fn look_within(now_ms: u64, next: u64, span: u64, spread: f64) -> u64 {
    if next == NEVER {
        return next;
    }
    let early = (span as f64 * (1.0 - spread.clamp(0.0, 1.0))) as u64;
    let look = next.saturating_sub(early);
    if look < now_ms.saturating_add(MIN_RECHECK_MS) {
        next
    } else {
        look
    }
}

/// Until when (ms, Redis's clock) the members of a check are spared: an outage's credit for a
/// sweep of window `ttl_ms`, or the storm guard's hold (`hold_until`, seconds), whichever is
/// later, if still ahead of `now_ms`.
pub fn spared_until(
    credit_until_s: Option<f64>,
    hold_until: Option<f64>,
    now_ms: u64,
) -> Option<u64> {
    credit_until_s
        .into_iter()
        .chain(hold_until)
        .map(|until| (until * 1000.0) as u64)
        .filter(|&until| until > now_ms)
        .max()
}

/// A key whose oldest member scored `oldest` (Unix seconds) is due at this many milliseconds
/// on Redis's clock.
pub fn deadline_ms(oldest: f64, ttl_ms: u64) -> u64 {
    let at = oldest * 1000.0 + ttl_ms as f64;
    if at.is_nan() || at <= 0.0 {
        0
    } else if at >= NEVER as f64 {
        NEVER
    } else {
        at.ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_460_000_000;

    fn live(oldest: f64) -> KeyState {
        KeyState::Live {
            card: 3,
            oldest: Some(oldest),
        }
    }

    /// Keys heartbeating every 20 s with a ttl of 45 s, one at each fraction: how many land in
    /// each half of the 40 s cycle after a look at `look(fraction, latest, next)`.
    fn halves(look: impl Fn(f64, u64, u64) -> u64) -> [usize; 2] {
        let (period, ttl) = (20_000, 45_000);
        let mut halves = [0; 2];
        for n in 0..1000 {
            let latest = NOW;
            let next = latest + ttl;
            let at = look(n as f64 / 1000.0, latest, next);
            // The look finds the latest heartbeat by then; no look keeps the phase.
            let found = latest + (at.min(next) - latest) / period * period;
            let phase = (found - latest) % (2 * period);
            halves[(phase / period) as usize] += 1;
        }
        halves
    }

    #[test]
    fn a_look_within_the_key_s_cycle_finds_each_phase_equally_often() {
        let first = halves(|f, latest, next| spread_first(latest, next, 45_000, f));
        assert_eq!(first, [556, 444], "the 5 s over two periods keep the phase");
        // The check at the deadline after the first look: due 40 s before `next`.
        let again = halves(|f, _, next| respread(next - 40_000, next, next - 40_000, 45_000, f));
        assert!(again[0].abs_diff(again[1]) <= 2, "{again:?}");
        // A cycle that is no cycle: no look.
        assert_eq!(
            respread(NOW, NOW + 45_000, NOW + 45_000, 45_000, 0.5),
            NOW + 45_000
        );
        assert_eq!(respread(NOW, NOW + 99_000, NOW, 45_000, 0.5), NOW + 99_000);
        assert_eq!(respread(NOW, NEVER, NOW, 45_000, 0.5), NEVER);
    }

    #[test]
    fn a_ttl_read_says_how_many_checks_need_not_read_it_again() {
        let ttl = 45_000;
        let next = NOW + 40_000;
        // The README's key TTL (ten ttls, refreshed at half): 225 s at least.
        let readme = Expiry::In(225_000);
        assert_eq!(ttl_seen(readme, NOW, next, ttl), TtlSeen::EndsAfter(4));
        assert_eq!(
            ttl_seen(Expiry::In(30_000), NOW, NOW + 30_000, ttl),
            TtlSeen::EndsAfter(0),
            "ending at the next look: read again"
        );
        assert_eq!(
            ttl_seen(Expiry::In(u64::MAX / 2), NOW, NOW + 1, 1),
            TtlSeen::EndsAfter(u8::MAX)
        );
        let pinned = NOW + 3_600_000;
        assert_eq!(
            ttl_seen(Expiry::In(86_400_000), NOW, pinned, ttl),
            TtlSeen::EndsAfter(0),
            "a look beyond a ttl keeps its schedule, and reads the TTL then"
        );
        assert_eq!(ttl_seen(Expiry::Never, NOW, next, ttl), TtlSeen::None);
        assert_eq!(ttl_seen(Expiry::Unread, NOW, next, ttl), TtlSeen::Unread);
    }

    #[test]
    fn a_deadline_check_judges_as_the_verdict_says() {
        let verdict = Verdict {
            judge_at: 1000.0,
            held_back: true,
            spare_until: Some(1040.0),
        };
        let opts = deadline_opts(verdict, true);
        assert_eq!((opts.judge_at, opts.spare_until), (1000.0, Some(1040.0)));
        assert!(matches!(
            opts.purpose,
            Purpose::Deadline {
                read_time: true,
                held_back: true
            }
        ));
    }

    #[test]
    fn a_walk_check_judges_no_later_than_its_page_was_read() {
        let verdict = Verdict {
            judge_at: 1000.0,
            held_back: false,
            spare_until: None,
        };
        assert_eq!(walk_opts(verdict, 999.5).judge_at, 999.5);
        assert_eq!(walk_opts(verdict, 1001.0).judge_at, 1000.0);
        assert!(matches!(
            walk_opts(verdict, 1001.0).purpose,
            Purpose::Walk { held_back: false }
        ));
    }

    #[test]
    fn deadlines_from_scores() {
        assert_eq!(deadline_ms(1_764_460_000.25, 45_000), 1_764_460_045_250);
        assert_eq!(deadline_ms(f64::NEG_INFINITY, 45_000), 0);
        assert_eq!(deadline_ms(f64::INFINITY, 45_000), NEVER);
        assert_eq!(deadline_ms(f64::NAN, 45_000), 0);
    }

    #[test]
    fn a_batch_waits_for_its_window_unless_it_is_full() {
        assert_eq!(Batching::ripe_at(None, None), None);
        assert_eq!(
            Batching::ripe_at(Some(NOW), None),
            Some(NOW + BATCH_WINDOW_MS),
            "keys due together go together"
        );
        assert_eq!(
            Batching::ripe_at(Some(NOW), Some(NOW + 10)),
            Some(NOW + 10 + DEADLINE_MARGIN_MS),
            "a full batch goes once its last key is past the margin"
        );
        assert_eq!(
            Batching::ripe_at(Some(NOW), Some(NOW + 10 * BATCH_WINDOW_MS)),
            Some(NOW + BATCH_WINDOW_MS)
        );
        assert_eq!(Batching::due_by(NOW), NOW - DEADLINE_MARGIN_MS);
        assert_eq!(
            Batching::ripe_at(Some(u64::MAX), Some(u64::MAX)),
            Some(u64::MAX)
        );
    }

    #[test]
    fn the_window_grows_while_keys_wait_and_shrinks_back() {
        let b = Batching {
            batch: 10,
            depth: 2,
            max_depth: 4,
        };
        let mut w = Window::new(&b);
        assert!(w.room(1) && !w.room(2));
        w.waiting(true);
        for _ in 0..5 {
            w.landed(false);
        }
        assert_eq!(w.depth(), 4, "grows by one a landing, up to max_depth");
        w.waiting(false);
        w.landed(false);
        assert_eq!(
            w.depth(),
            3,
            "shrinks by one a landing with nothing waiting"
        );
        w.waiting(true);
        w.landed(true);
        w.waiting(false);
        assert_eq!(w.depth(), 2, "a failed check: back to pipeline_depth");
        for _ in 0..3 {
            w.landed(false);
        }
        assert_eq!(w.depth(), 2, "never below pipeline_depth");
        let fixed = Window::new(&Batching { max_depth: 1, ..b });
        assert_eq!(fixed.depth(), 2, "max_depth below depth: a fixed window");
    }

    #[test]
    fn queued_work_is_bounded() {
        let c = Batching {
            batch: 10,
            depth: 2,
            max_depth: 2,
        };
        assert!(c.room_for_page(19) && !c.room_for_page(20));
    }

    #[test]
    fn a_live_key_is_looked_at_again_at_its_deadline() {
        let look = next_look(&live(NOW as f64 / 1000.0), NOW, 45_000, None, None);
        assert_eq!(
            look,
            Look::At {
                next: NOW + 45_000,
                card: 3
            }
        );
        assert_eq!(
            next_look(&KeyState::Gone, NOW, 45_000, None, None),
            Look::Forget
        );
        assert_eq!(
            next_look(&KeyState::Moved, NOW, 45_000, None, None),
            Look::Forget
        );
        assert_eq!(
            next_look(&KeyState::Unknown, NOW, 45_000, None, None),
            Look::Retry(NOW + 1000)
        );
    }

    #[test]
    fn a_due_key_found_not_stale_does_not_spin() {
        let overdue = live((NOW - 50_000) as f64 / 1000.0);
        assert_eq!(
            next_look(&overdue, NOW, 45_000, None, None),
            Look::At {
                next: NOW + MIN_RECHECK_MS,
                card: 3
            }
        );
        assert_eq!(
            next_look(&overdue, NOW, 45_000, Some(NOW + 9_000), None),
            Look::At {
                next: NOW + 9_000 + DEADLINE_MARGIN_MS,
                card: 3
            },
            "spared members come due when the credit ends"
        );
        assert_eq!(
            next_look(&live(f64::INFINITY), NOW, 45_000, Some(NOW + 9_000), None),
            Look::At {
                next: NOW + PINNED_RECHECK_MS,
                card: 3
            }
        );
    }

    #[test]
    fn a_key_that_expires_before_its_deadline_is_looked_at_when_it_expires() {
        let fresh = live(NOW as f64 / 1000.0);
        assert_eq!(
            next_look(&fresh, NOW, 45_000, None, Some(5_000)),
            Look::At {
                next: NOW + 5_000 + DEADLINE_MARGIN_MS,
                card: 3
            }
        );
        assert_eq!(
            next_look(&fresh, NOW, 45_000, None, Some(60_000)),
            Look::At {
                next: NOW + 45_000,
                card: 3
            },
            "an earlier deadline stands"
        );
        assert_eq!(
            next_look(&live(f64::INFINITY), NOW, 45_000, None, Some(1_000)),
            Look::At {
                next: NOW + 1_000 + DEADLINE_MARGIN_MS,
                card: 3
            },
            "pinned members leave with their key"
        );
        assert_eq!(
            next_look(&KeyState::Gone, NOW, 45_000, None, Some(1_000)),
            Look::Forget
        );
    }

    #[test]
    fn members_are_spared_until_the_later_of_credit_and_hold() {
        let now_s = NOW as f64 / 1000.0;
        assert_eq!(spared_until(None, None, NOW), None);
        assert_eq!(spared_until(Some(now_s - 1.0), None, NOW), None, "over");
        assert_eq!(
            spared_until(Some(now_s + 5.0), Some(now_s + 2.0), NOW),
            Some(NOW + 5_000)
        );
        assert_eq!(
            spared_until(None, Some(now_s + 2.0), NOW),
            Some(NOW + 2_000)
        );
    }
}
