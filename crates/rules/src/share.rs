//! How replicas share a sweep's primaries when each (sweep, primary) has a lease
//! (`coordination.lease` on more than one primary): every replica computes the same assignment
//! from the same live replicas and primaries, and tries to hold only the leases assigned to it.
//! A replica that holds one assigned elsewhere gives it up, so a joining replica gets its share
//! at its holders' next attempts; a dead replica leaves the live set when its membership ends,
//! and its primaries go to the others once its leases expire.
//!
//! The assignment is balanced: with `p` primaries and `r` replicas each replica gets `p / r`
//! rounded down or up. The sweep's name turns the wheel, so that the sweeps of a daemon with
//! fewer primaries than replicas do not all land on the same replicas. Two replicas that see
//! different live sets for a moment may both want a lease: its `SET NX` lets one of them have
//! it, and the other waits for it to be given up.

use crate::node::NodeId;

/// The primaries of `primaries` assigned to replica `me` among the live `replicas` (`me` counts
/// as live whether or not it is listed), for `sweep`.
pub fn assigned(me: &str, replicas: &[String], primaries: &[NodeId], sweep: &str) -> Vec<NodeId> {
    let mut live: Vec<&str> = replicas.iter().map(String::as_str).collect();
    if !live.contains(&me) {
        live.push(me);
    }
    live.sort_unstable();
    live.dedup();
    let mut ordered: Vec<&NodeId> = primaries.iter().collect();
    ordered.sort_unstable();
    ordered.dedup();
    let turn = (fnv1a(sweep.as_bytes()) % live.len() as u64) as usize;
    ordered
        .into_iter()
        .enumerate()
        .filter(|(i, _)| live[(i + turn) % live.len()] == me)
        .map(|(_, p)| p.clone())
        .collect()
}

/// FNV-1a, 64 bits: the same on every replica and every build, unlike std's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<NodeId> {
        (0..n)
            .map(|i| NodeId::new(format!("10.0.0.{i}:6379")))
            .collect()
    }

    fn replicas(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("replica-{i}")).collect()
    }

    #[test]
    fn each_primary_goes_to_exactly_one_replica_and_shares_are_balanced() {
        for (p, r) in [(3, 3), (3, 2), (6, 4), (1, 3), (2, 5), (16, 3)] {
            let (primaries, live) = (nodes(p), replicas(r));
            for sweep in ["online", "typing"] {
                let shares: Vec<Vec<NodeId>> = live
                    .iter()
                    .map(|me| assigned(me, &live, &primaries, sweep))
                    .collect();
                let mut all: Vec<NodeId> = shares.iter().flatten().cloned().collect();
                all.sort();
                let mut expected = primaries.clone();
                expected.sort();
                assert_eq!(all, expected, "{p} primaries, {r} replicas, {sweep}");
                let (least, most) = (p / r, p.div_ceil(r));
                assert!(
                    shares.iter().all(|s| (least..=most).contains(&s.len())),
                    "{p} primaries, {r} replicas: {shares:?}"
                );
            }
        }
    }

    #[test]
    fn every_replica_computes_the_same_whatever_the_order_it_sees() {
        let primaries = nodes(5);
        let live = replicas(3);
        let mut shuffled = live.clone();
        shuffled.reverse();
        let mut backwards = primaries.clone();
        backwards.reverse();
        for me in &live {
            assert_eq!(
                assigned(me, &live, &primaries, "online"),
                assigned(me, &shuffled, &backwards, "online")
            );
        }
    }

    #[test]
    fn a_replica_not_yet_listed_counts_itself() {
        let primaries = nodes(2);
        let others = replicas(1);
        let me = "replica-9";
        let mine = assigned(me, &others, &primaries, "online");
        let theirs = assigned(
            "replica-0",
            &[others[0].clone(), me.into()],
            &primaries,
            "online",
        );
        assert_eq!(mine.len() + theirs.len(), 2);
        assert!(mine.iter().all(|p| !theirs.contains(p)));
        // Alone, it holds everything.
        assert_eq!(assigned(me, &[], &primaries, "online"), primaries);
    }

    #[test]
    fn sweeps_turn_the_wheel_differently() {
        let primaries = nodes(1);
        let live = replicas(4);
        let holders: std::collections::BTreeSet<&String> = ["online", "typing", "a", "b", "c"]
            .iter()
            .filter_map(|sweep| {
                live.iter()
                    .find(|me| !assigned(me, &live, &primaries, sweep).is_empty())
            })
            .collect();
        assert!(
            holders.len() > 1,
            "one primary, several sweeps: not all on one replica"
        );
    }
}
