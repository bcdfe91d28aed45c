//! The fast eviction path: `MULTI`/`EXEC` transactions for the keys of a batch that hold a few
//! zombies.
//!
//! Per key, inside the transaction: `ZRANGE key -inf (cutoff BYSCORE WITHSCORES` (the zombies and
//! their last heartbeats), `ZREMRANGEBYSCORE key -inf (cutoff` (exactly those, since nothing runs
//! in between), `ZRANGE key -100 -1` (the roster, which also gives the count when it holds fewer
//! than 100; fewer are read when the ids are long, see `sweep::sizing`), and for a deadline index `ZRANGE key 0 0 WITHSCORES` (the lowest remaining score:
//! the key's next deadline). `TIME` first gives the eviction instant.
//!
//! The roster is read oldest first and reversed here, because walking a small set forwards costs
//! Redis's single thread, which every other client waits on, less than walking it backwards
//! (`REV`). The highest 100 ranks, reversed, are exactly what `ZRANGE key 0 99 REV` answers.
//!
//! The range is not LIMITed: only keys whose precheck counted at most `evict.max_members_per_call`
//! zombies come here; bigger ones go to the bounded script.

use crate::Error;
use presence_sweeper_rules::event::ROSTER_LIMIT;
use presence_sweeper_rules::event::Roster;
use presence_sweeper_rules::score::Cutoff;

use crate::reply::{ReplyError, is_moved, number};
use crate::resp::{ErrorLine, Item, Reader};
use crate::{Node, Packed, Wait};

/// What became of one key of a transaction.
#[derive(Debug)]
pub enum TxKey {
    /// It went through.
    Done(Evicted),
    /// The key is no longer a sorted set.
    NotZset,
    /// In a cluster, its slot is served by another primary now: nothing ran.
    Moved,
}

/// What the transaction did to one key.
#[derive(Debug)]
pub struct Evicted {
    /// Removed members and their scores, in the score unit.
    pub removed: Vec<(Vec<u8>, f64)>,
    /// Up to the asked number of remaining members (at most [`ROSTER_LIMIT`]), most recently seen first.
    pub roster: Roster,
    /// Members left in the set; `None` if the roster is full, so it may not be the whole set and
    /// the caller must count the members with `ZCARD`.
    pub card: Option<u64>,
    /// The lowest remaining score, in the score unit, when it was asked for and any member is
    /// left.
    pub oldest: Option<f64>,
}

/// Evicts the zombies of `groups` of keys, one `MULTI`/`EXEC` per group, all in one pipeline.
/// A group is the whole batch on a single server; in a cluster it is the keys of one hash slot,
/// since a transaction may not span slots. Returns the eviction instant (Unix seconds, from a
/// `TIME` just before the transactions) and, per key in group order, what was removed (a key
/// whose slot moved in a cluster is found on its new node by that node's walk).
/// With `oldest`, each key's lowest remaining score is read too.
pub async fn evict(
    con: &mut Node,
    groups: &[Vec<&[u8]>],
    cutoff: &Cutoff,
    oldest: bool,
    roster: usize,
) -> Result<(f64, Vec<TxKey>), Error> {
    let batch = batch(groups, cutoff.below.as_bytes(), oldest, roster);
    // The replies are read in place: a roster's members go straight into its JSON.
    let raw = con.send_raw_with(batch, Wait::Outcome).await?;
    read_replies(&raw, groups, oldest, roster)
}

/// `TIME`, then one `MULTI`/`EXEC` per group with three or four reads per key: ZRANGE of the
/// members below `below` (a cutoff such as `(1764460000.5`), their removal, the roster's ZRANGE
/// of up to `roster` members, and with `oldest` the lowest one.
fn batch(groups: &[Vec<&[u8]>], below: &[u8], oldest: bool, roster: usize) -> Packed {
    let roster_first = format!("-{roster}");
    let per_key = if oldest { 4 } else { 3 };
    // Three or four commands per key, each naming it; two carry the cutoff. Generous, so that the
    // batch is never copied as it grows: 170 bytes of fixed words, up to 10 of framing per
    // argument.
    let size: usize = groups
        .iter()
        .flatten()
        .map(|k| per_key * (k.len() + 10) + 2 * (below.len() + 10) + 176)
        .sum();
    let mut batch = Packed::with_capacity(64 + 32 * groups.len() + size);
    batch.command(&[b"TIME"]);
    for keys in groups {
        batch.command(&[b"MULTI"]);
        for key in keys {
            batch
                .command(&[b"ZRANGE", key, b"-inf", below, b"BYSCORE", b"WITHSCORES"])
                .command(&[b"ZREMRANGEBYSCORE", key, b"-inf", below])
                .command(&[b"ZRANGE", key, roster_first.as_bytes(), b"-1"]);
            if oldest {
                batch.command(&[b"ZRANGE", key, b"0", b"0", b"WITHSCORES"]);
            }
        }
        batch.command(&[b"EXEC"]);
    }
    batch
}

/// What the replies `raw` to [`batch`] say: the eviction instant and what became of each key.
fn read_replies(
    raw: &[u8],
    groups: &[Vec<&[u8]>],
    oldest: bool,
    roster: usize,
) -> Result<(f64, Vec<TxKey>), Error> {
    let per_key = if oldest { 4 } else { 3 };
    let mut r = Reader::new(raw);
    let now = crate::reply::read_time(&mut r)?;
    let mut out = Vec::with_capacity(groups.iter().map(Vec::len).sum());
    // The roster arrives oldest first; its members wait here to be written newest first.
    let mut ascending = Vec::with_capacity(ROSTER_LIMIT);
    for keys in groups {
        // MULTI, one QUEUED (or a refusal) per command, then EXEC's array (or EXECABORT).
        if let Item::Error(e) = r.item()? {
            return Err(multi_refused(&mut r, keys.len(), per_key, e));
        }
        let mut refusal = None;
        for _ in 0..keys.len() * per_key {
            match r.item()? {
                Item::Error(e) => {
                    refusal.get_or_insert(e);
                }
                item => r.skip_rest(&item)?,
            }
        }
        if let Some(e) = refusal
            && !is_moved(e.code())
        {
            // READONLY (a replica), NOPERM, OOM, a slot that cannot serve now: nothing was
            // removed, and the check must say why rather than skip the keys.
            return Err(redis::RedisError::from(e).into());
        }
        match r.item()? {
            Item::Array(n) if n == keys.len() * per_key => {
                for _ in 0..keys.len() {
                    out.push(match read_key(&mut r, &mut ascending, oldest, roster)? {
                        Some(evicted) => TxKey::Done(evicted),
                        None => TxKey::NotZset,
                    });
                }
            }
            Item::Error(e) => {
                tracing::debug!(error = %e, keys = keys.len(), "transaction refused: its slot moved");
                out.extend(keys.iter().map(|_| TxKey::Moved));
            }
            _ => return Err(ReplyError::new("EXEC did not answer an array").into()),
        }
    }
    Ok((now, out))
}

/// MULTI itself was refused (an ACL changed since the preflight), so the commands after it ran
/// one by one and EXEC failed. Whatever they removed cannot be announced exactly (nothing held the
/// read and the removal together): count it and say so, rather than report that nothing happened.
fn multi_refused(r: &mut Reader<'_>, keys: usize, per_key: usize, refusal: ErrorLine<'_>) -> Error {
    let mut removed = 0;
    let mut read = || -> redis::RedisResult<()> {
        for _ in 0..keys {
            r.skip()?;
            match r.item()? {
                Item::Int(n) => removed += n,
                other => r.skip_rest(&other)?,
            }
            for _ in 2..per_key {
                r.skip()?;
            }
        }
        r.skip()
    };
    let _ = read();
    if removed > 0 {
        return ReplyError::new(format!(
            "MULTI was refused ({refusal}), so the transaction's commands ran one by one: {removed} members were removed outside a transaction and cannot be announced"
        ))
        .into();
    }
    redis::RedisError::from(refusal).into()
}

/// `TIME` as Unix seconds.
/// One key's replies inside EXEC: the zombies with their scores, how many were removed, the
/// roster, and with `with_oldest` the lowest remaining member. `None` if the key was refused (it
/// changed type). `ascending` is scratch space for the roster's members, kept between keys.
fn read_key<'a>(
    r: &mut Reader<'a>,
    ascending: &mut Vec<&'a [u8]>,
    with_oldest: bool,
    roster_limit: usize,
) -> Result<Option<Evicted>, Error> {
    let mut failed = false;
    let removed = match r.item()? {
        Item::Array(n) if n % 2 == 0 => {
            let mut pairs = Vec::with_capacity(n / 2);
            for _ in 0..n / 2 {
                let (Item::Bulk(member), Item::Bulk(score)) = (r.item()?, r.item()?) else {
                    return Err(ReplyError::new("members with scores are not strings").into());
                };
                let score =
                    number(score).ok_or_else(|| ReplyError::new("a score is not a number"))?;
                pairs.push((member.to_vec(), score));
            }
            pairs
        }
        Item::Error(_) => {
            failed = true;
            Vec::new()
        }
        _ => return Err(ReplyError::new("members with scores are not an even array").into()),
    };
    let removed_count = match r.item()? {
        Item::Int(n) => n,
        Item::Error(_) => {
            failed = true;
            0
        }
        _ => return Err(ReplyError::new("the removed count is not an integer").into()),
    };
    let roster = match r.item()? {
        Item::Array(n) => {
            ascending.clear();
            for _ in 0..n {
                match r.item()? {
                    Item::Bulk(member) => ascending.push(member),
                    _ => return Err(ReplyError::new("a member is not a string").into()),
                }
            }
            let mut roster = Roster::with_capacity(ascending.iter().map(|m| m.len() + 3).sum());
            for member in ascending.iter().rev() {
                roster.push(member);
            }
            roster
        }
        Item::Error(_) => {
            failed = true;
            Roster::with_capacity(0)
        }
        _ => return Err(ReplyError::new("the roster is not an array").into()),
    };
    let oldest = match with_oldest {
        false => None,
        true => match r.item()? {
            Item::Array(0) => None,
            Item::Array(2) => {
                r.skip()?;
                match r.item()? {
                    Item::Bulk(score) => Some(
                        number(score).ok_or_else(|| ReplyError::new("a score is not a number"))?,
                    ),
                    _ => return Err(ReplyError::new("a score is not a string").into()),
                }
            }
            Item::Error(_) => {
                failed = true;
                None
            }
            _ => return Err(ReplyError::new("the lowest member is not a pair").into()),
        },
    };
    if failed {
        // Removed but not read: those members could not be announced. Say so loudly rather
        // than count the key as refused.
        if removed_count > 0 {
            return Err(ReplyError::new(format!(
                "{removed_count} members were removed but the transaction's reads failed, so they cannot be announced"
            ))
            .into());
        }
        return Ok(None);
    }
    if usize::try_from(removed_count).ok() != Some(removed.len()) {
        return Err(ReplyError::new(
            "removed count differs from the range read in the same transaction",
        )
        .into());
    }
    // A roster shorter than the limit is the whole set: its length is the count.
    let card = (roster.len() < roster_limit).then_some(roster.len() as u64);
    Ok(Some(Evicted {
        removed,
        roster,
        card,
        oldest,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const C1: &[u8] = b"presence:c1:online";
    const C2: &[u8] = b"presence:c2:online";
    const C3: &[u8] = b"presence:c3:online";
    const C4: &[u8] = b"presence:c4:online";
    const S1: &[u8] = b"presence:s1:online";

    /// The fixtures' requests and replies (`tests/fixtures/resp/capture.py`).
    macro_rules! fixture {
        ($path:literal) => {
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/resp/",
                $path
            ))
            .as_slice()
        };
    }

    const SERVERS: [(&str, [&[u8]; 3]); 2] = [
        (
            "Redis 7.0",
            [
                fixture!("redis-7.0/evict.reply"),
                fixture!("redis-7.0/wrongtype.reply"),
                fixture!("redis-7.0/noperm.reply"),
            ],
        ),
        (
            "Valkey 9.1",
            [
                fixture!("valkey-9.1/evict.reply"),
                fixture!("valkey-9.1/wrongtype.reply"),
                fixture!("valkey-9.1/noperm.reply"),
            ],
        ),
    ];

    fn evict_groups() -> Vec<Vec<&'static [u8]>> {
        vec![vec![C1, C2], vec![C3, C4]]
    }

    fn done(removed: &[(&str, f64)], roster: &[&str], oldest: Option<f64>) -> String {
        let evicted = Evicted {
            removed: removed
                .iter()
                .map(|(m, s)| (m.as_bytes().to_vec(), *s))
                .collect(),
            roster: Roster::of(
                &roster
                    .iter()
                    .map(|m| m.as_bytes().to_vec())
                    .collect::<Vec<_>>(),
            ),
            card: Some(roster.len() as u64),
            oldest,
        };
        format!("{:?}", TxKey::Done(evicted))
    }

    fn read(raw: &[u8], groups: &[Vec<&[u8]>]) -> Result<(f64, Vec<String>), Error> {
        let (now, keys) = read_replies(raw, groups, true, 100)?;
        Ok((now, keys.iter().map(|k| format!("{k:?}")).collect()))
    }

    /// The fixtures were captured with the very bytes the sweeper sends.
    #[test]
    fn the_fixtures_hold_the_transactions_the_sweeper_sends() {
        let sent = |groups: &[Vec<&[u8]>]| batch(groups, b"(1000", true, 100).into_bytes();
        assert_eq!(sent(&evict_groups()), fixture!("evict.request"));
        assert_eq!(sent(&[vec![C1, S1]]), fixture!("wrongtype.request"));
        assert_eq!(sent(&[vec![C2]]), fixture!("noperm.request"));
    }

    #[test]
    fn exec_replies_of_redis_and_valkey_read_alike() {
        for (server, [evict, wrongtype, noperm]) in SERVERS {
            let (now, keys) = read(evict, &evict_groups()).unwrap();
            assert!(now > 1.7e9, "{server}: TIME {now}");
            assert_eq!(
                keys,
                [
                    done(&[("u1", 100.0), ("u2", 150.0)], &["u4", "u3"], Some(2000.0)),
                    done(&[("z1", 50.0)], &["a"], Some(5000.0)),
                    done(&[], &["b"], Some(4000.0)),
                    done(&[], &[], None),
                ],
                "{server}"
            );
            let (_, keys) = read(wrongtype, &[vec![C1, S1]]).unwrap();
            let c1 = done(&[("u1", 100.0), ("u2", 150.0)], &["u4", "u3"], Some(2000.0));
            assert_eq!(keys, [c1, "NotZset".to_string()], "{server}");
            // A refused command: EXECABORT, nothing removed, and the check says why.
            match read(noperm, &[vec![C2]]) {
                Err(Error::Permission { detail, .. }) => {
                    assert!(detail.starts_with("NOPERM"), "{server}: {detail}");
                }
                other => panic!("{server}: {other:?}"),
            }
        }
    }

    /// Whatever the cut, a reply that is not whole is an error, never a panic nor a result.
    #[test]
    fn a_cut_reply_is_an_error() {
        let (_, [evict, ..]) = SERVERS[0];
        for cut in 0..evict.len() {
            assert!(
                read(&evict[..cut], &evict_groups()).is_err(),
                "cut at {cut}"
            );
        }
    }

    fn reply(parts: &[&str]) -> Vec<u8> {
        parts.concat().into_bytes()
    }

    const TIME: &str = "*2\r\n$10\r\n1764460046\r\n$6\r\n500000\r\n";
    const QUEUED3: &str = "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n";

    #[test]
    fn the_eviction_instant_is_time() {
        let raw = reply(&[TIME, QUEUED3, "*3\r\n*0\r\n:0\r\n*0\r\n"]);
        let (now, keys) = read_replies(&raw, &[vec![C1]], false, 100).unwrap();
        assert_eq!((now, keys.len()), (1_764_460_046.5, 1));
        let raw = reply(&[":1\r\n", QUEUED3, "*3\r\n*0\r\n:0\r\n*0\r\n"]);
        assert!(read_replies(&raw, &[vec![C1]], false, 100).is_err());
    }

    #[test]
    fn a_full_roster_leaves_the_count_to_zcard() {
        let raw = reply(&[
            TIME,
            QUEUED3,
            "*3\r\n*0\r\n:0\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n",
        ]);
        let (_, keys) = read_replies(&raw, &[vec![C1]], false, 2).unwrap();
        let [TxKey::Done(evicted)] = keys.as_slice() else {
            panic!("{keys:?}");
        };
        assert_eq!((evicted.card, evicted.roster.len()), (None, 2));
        let (_, keys) = read_replies(&raw, &[vec![C1]], false, 3).unwrap();
        let [TxKey::Done(evicted)] = keys.as_slice() else {
            panic!("{keys:?}");
        };
        assert_eq!(evicted.card, Some(2));
    }

    #[test]
    fn a_slot_that_moved_leaves_its_keys_to_their_new_node() {
        let raw = reply(&[
            TIME,
            "+OK\r\n-MOVED 1 127.0.0.1:7001\r\n-MOVED 1 127.0.0.1:7001\r\n",
            "-MOVED 1 127.0.0.1:7001\r\n-EXECABORT Transaction discarded\r\n",
        ]);
        let (_, keys) = read_replies(&raw, &[vec![C1]], false, 100).unwrap();
        assert!(matches!(keys.as_slice(), [TxKey::Moved]), "{keys:?}");
    }

    #[test]
    fn a_refusal_inside_the_transaction_fails_it() {
        let raw = reply(&[
            TIME,
            "+OK\r\n+QUEUED\r\n-READONLY You can't write against a read only replica.\r\n",
            "+QUEUED\r\n-EXECABORT Transaction discarded\r\n",
        ]);
        let e = read_replies(&raw, &[vec![C1]], false, 100).unwrap_err();
        assert!(e.to_string().contains("READONLY"), "{e}");
    }

    /// MULTI refused: the commands ran one by one, so what they removed cannot be announced.
    #[test]
    fn a_refused_multi_reports_what_ran_outside_it() {
        let raw = reply(&[
            TIME,
            "-NOPERM no MULTI for you\r\n*0\r\n:2\r\n*0\r\n-ERR EXEC without MULTI\r\n",
        ]);
        let e = read_replies(&raw, &[vec![C1]], false, 100).unwrap_err();
        assert!(e.to_string().contains("2 members were removed"), "{e}");
        let raw = reply(&[
            TIME,
            "-NOPERM no MULTI for you\r\n*0\r\n:0\r\n*0\r\n-ERR EXEC without MULTI\r\n",
        ]);
        let e = read_replies(&raw, &[vec![C1]], false, 100).unwrap_err();
        assert!(matches!(e, Error::Permission { .. }), "{e}");
    }

    #[test]
    fn replies_that_disagree_are_errors() {
        // Two members read, one removed.
        let raw = reply(&[
            TIME,
            QUEUED3,
            "*3\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n:1\r\n*0\r\n",
        ]);
        assert!(read_replies(&raw, &[vec![C1]], false, 100).is_err());
        // Removed, but the reads failed: those members cannot be announced.
        let raw = reply(&[TIME, QUEUED3, "*3\r\n-ERR oops\r\n:1\r\n-ERR oops\r\n"]);
        let e = read_replies(&raw, &[vec![C1]], false, 100).unwrap_err();
        assert!(e.to_string().contains("cannot be announced"), "{e}");
        // EXEC's array of the wrong length.
        let raw = reply(&[TIME, QUEUED3, "*2\r\n*0\r\n:0\r\n"]);
        assert!(read_replies(&raw, &[vec![C1]], false, 100).is_err());
        // A score that is not a number.
        let raw = reply(&[
            TIME,
            QUEUED3,
            "*3\r\n*2\r\n$1\r\na\r\n$1\r\nx\r\n:1\r\n*0\r\n",
        ]);
        assert!(read_replies(&raw, &[vec![C1]], false, 100).is_err());
    }
}
