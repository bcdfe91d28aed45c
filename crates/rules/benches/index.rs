//! The deadline index at scale, with no Redis: `cargo bench -p presence-sweeper-rules --bench
//! index [-- KEYS [SECONDS]]`.
//!
//! Scenario `live` as the index sees it: KEYS keys (1,000,000 by default) of one member each,
//! heartbeating every 20 s on phases of their own, ttl 45 s. Each simulated millisecond step
//! hands out the keys that came due in batches of 400 (asking, as the daemon does per batch,
//! when the next full batch is ripe, and spelling each batch's keys for its check), and gives
//! each back with the deadline its check would have read: its latest heartbeat + ttl. After a
//! minute of warm-up it prints the wall time per check over SECONDS (120 by default) of
//! simulated time, and the memory the index took per key.
//!
//! Wall times drift on a shared machine: compare two builds in one run, alternately.

use std::time::{Duration, Instant};

use presence_sweeper_rules::index::{Capacity, Index, Next, TtlSeen};
use presence_sweeper_rules::keys::Keys;
use presence_sweeper_rules::pattern::KeyPattern;

/// The process's resident memory in bytes, from `/proc/self/statm` (0 where there is none).
fn resident() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = statm
        .split(' ')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// `f`'s result and its wall time: a bench, unlike the rules, reads the machine's clock.
#[expect(
    clippy::disallowed_methods,
    reason = "a bench measures wall time; the rules themselves never read a clock"
)]
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

const HEARTBEAT_MS: u64 = 20_000;
const TTL_MS: u64 = 45_000;
const BATCH: usize = 400;
const START: u64 = 1_700_000_000_000;

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let keys: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(120);

    // Each key's heartbeat phase, from a fixed-seed xorshift so that runs compare.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let phases: Vec<u64> = (0..keys)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % HEARTBEAT_MS
        })
        .collect();
    let before = resident();
    let mut index = Index::new(Capacity::new(keys as usize));
    for k in 0..keys {
        index.track(k.to_string().as_bytes(), START);
    }

    let mut now = START;
    let pattern = KeyPattern::parse("presence:*:online").expect("a valid pattern");
    let mut run = |index: &mut Index, until: u64| {
        let mut checks = 0u64;
        let mut tickets = Vec::with_capacity(BATCH);
        while now < until {
            now += 1;
            // As the daemon asks before each batch: when is the next one ripe?
            std::hint::black_box((index.next_due(), index.nth_due(BATCH)));
            loop {
                tickets.clear();
                // The batch's keys, spelled as the daemon spells them for the check.
                let mut keys = Keys::with_capacity(BATCH, pattern.key_len(36));
                index.take_due(now, BATCH, |ticket, id, _| {
                    pattern.push_key(id, &mut keys);
                    let k: usize = std::str::from_utf8(id).unwrap().parse().unwrap();
                    tickets.push((ticket, phases[k]));
                });
                std::hint::black_box(keys);
                if tickets.is_empty() {
                    break;
                }
                for &(ticket, phase) in &tickets {
                    let latest = now - (now + HEARTBEAT_MS - phase) % HEARTBEAT_MS;
                    let next = Next {
                        at: latest + TTL_MS,
                        card: 1,
                        ttl: TtlSeen::Unread,
                    };
                    index.checked(ticket, Some(next), now + TTL_MS);
                    checks += 1;
                }
            }
        }
        checks
    };

    run(&mut index, START + 60_000);
    let bytes = resident() - before;
    let (checks, elapsed) = timed(|| run(&mut index, START + 60_000 + seconds * 1_000));
    println!(
        "{keys} keys, {seconds} s simulated: {checks} checks, {:.0} ns a check; the index's resident memory {:.1} bytes a key",
        elapsed.as_nanos() as f64 / checks as f64,
        bytes as f64 / keys as f64,
    );
}
