//! The precheck: what each key of a batch holds, with one pipeline of native reads. It changes
//! nothing.
//!
//! A full pass asks only `ZCOUNT -inf (cutoff` of every key, then `ZCARD` of the clean ones (the
//! metrics need their size; a key with zombies learns its size from its eviction), so that each
//! key costs Redis one cheap command besides its eviction. A deadline check needs the lowest
//! score of a key (its next deadline, and whether it holds zombies at all), its size and when
//! the key itself expires (a key TTL ends with no notification unless the server publishes
//! `expired` events): `ZRANGE key 0 0 WITHSCORES`, `ZCARD` and `PTTL`, with a `TIME` in front
//! when the caller's view of Redis's clock wants refreshing. Each command costs Redis about as
//! much as the key's other work, so a key asks only what its index does not know
//! ([`Probing`]): a key of one member is read with one command, `ZRANGE key 0 1 WITHSCORES`
//! (a `ZCARD` follows only for a key that grew), plus `PTTL` at the checks that read its TTL.

use std::num::NonZeroU64;

use presence_sweeper_rules::read::{KeyRead, KeyStatus, Probing, Reads};
use presence_sweeper_rules::score::Cutoff;

use crate::reply::{ReplyError, is_moved, number};
use crate::resp::{ErrorLine, Item, Reader};
use crate::{Error, Packed, SendPacked, refusal_reason};

/// What [`read`] asks of each key.
#[derive(Debug, Clone, Copy)]
pub enum Read<'c> {
    /// `ZCOUNT -inf (cutoff`: the zombies.
    Stale(&'c Cutoff),
    /// `ZCOUNT -inf (cutoff` and `ZRANGE key -1 -1 WITHSCORES`: the zombies and the newest
    /// heartbeat, for the storm guard of a walk that checks keys it does not track.
    StaleNewest(&'c Cutoff),
    /// `ZRANGE key -1 -1 WITHSCORES`: the newest heartbeat alone (a storm guard's witness).
    Newest,
    /// `ZCARD`, `ZCOUNT -inf (cutoff` and `ZRANGE key 0 0 WITHSCORES`: what `stats` reports.
    Summary(&'c Cutoff),
    /// `ZCARD`: the members.
    Members,
    /// `ZRANGE key 0 0 WITHSCORES`, `ZCARD` and `PTTL`: all a deadline needs, less what
    /// each key's [`Probing`] leaves out (a key without one is read in full).
    Probe {
        /// `TIME` first.
        time: bool,
        /// `ZRANGE key -1 -1 WITHSCORES` too: the newest heartbeat, for the storm guard.
        newest: bool,
        /// Per key, in the order of the keys.
        keys: &'c [Probing],
    },
    /// `ZRANGE key 0 0 WITHSCORES` and `ZCARD`: the lowest score and the members
    /// (reconciliation of a tracked key: its roster may have changed since its check).
    Oldest,
}

/// What one of a key's replies carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Stale,
    Card,
    Pttl,
    Oldest,
    Newest,
    /// `ZRANGE key 0 1 WITHSCORES`: the lowest score, and the size if under 2.
    Pair,
}

/// The size a [`Field::Pair`] read leaves to a `ZCARD` after it: 2 or more.
const UNSIZED: u64 = u64::MAX;

impl Field {
    /// The command that asks for it.
    fn command(self) -> &'static str {
        match self {
            Self::Stale => "ZCOUNT",
            Self::Card => "ZCARD",
            Self::Pttl => "PTTL",
            Self::Oldest | Self::Newest | Self::Pair => "ZRANGE",
        }
    }
}

impl Read<'_> {
    /// The fields of key `i`'s replies, in the order its commands are sent.
    fn fields(self, i: usize) -> &'static [Field] {
        use Field::*;
        match self {
            Self::Stale(_) => &[Stale],
            Self::StaleNewest(_) => &[Stale, Newest],
            Self::Newest => &[Newest],
            Self::Summary(_) => &[Card, Stale, Oldest],
            Self::Members => &[Card],
            Self::Probe { newest, keys, .. } => {
                let p = Probing::of(keys, i);
                match (p.single, p.ttl, newest) {
                    (false, true, false) => &[Oldest, Card, Pttl],
                    (false, true, true) => &[Oldest, Card, Pttl, Newest],
                    (false, false, false) => &[Oldest, Card],
                    (false, false, true) => &[Oldest, Card, Newest],
                    (true, true, false) => &[Pair, Pttl],
                    (true, true, true) => &[Pair, Pttl, Newest],
                    (true, false, false) => &[Pair],
                    (true, false, true) => &[Pair, Newest],
                }
            }
            Self::Oldest => &[Oldest, Card],
        }
    }
}

/// Reads `what` of every key in one pipeline. In a cluster each key answers for itself: one
/// whose slot moved reads as [`KeyStatus::Moved`]; a slot that cannot serve now (`TRYAGAIN`,
/// `CLUSTERDOWN`) fails the read.
pub async fn read<C>(con: &mut C, keys: &[&[u8]], what: Read<'_>) -> Result<Reads, Error>
where
    C: SendPacked + Send,
{
    if keys.is_empty() {
        return Ok(Reads {
            keys: Vec::new(),
            time: None,
            pttl_refused: 0,
        });
    }
    let timed = matches!(what, Read::Probe { time: true, .. });
    let size: usize = keys
        .iter()
        .enumerate()
        .map(|(i, k)| what.fields(i).len() * (k.len() + 64))
        .sum();
    let mut batch = Packed::with_capacity(size + 16);
    if timed {
        batch.command(&[b"TIME"]);
    }
    // Only the reads with a cutoff count the stale: the others never use it.
    let below = match what {
        Read::Stale(cutoff) | Read::StaleNewest(cutoff) | Read::Summary(cutoff) => {
            cutoff.below.as_bytes()
        }
        _ => b"-inf",
    };
    for (i, key) in keys.iter().enumerate() {
        for field in what.fields(i) {
            match field {
                Field::Stale => batch.command(&[b"ZCOUNT", key, b"-inf", below]),
                Field::Card => batch.command(&[b"ZCARD", key]),
                Field::Pttl => batch.command(&[b"PTTL", key]),
                Field::Oldest => batch.command(&[b"ZRANGE", key, b"0", b"0", b"WITHSCORES"]),
                Field::Newest => batch.command(&[b"ZRANGE", key, b"-1", b"-1", b"WITHSCORES"]),
                Field::Pair => batch.command(&[b"ZRANGE", key, b"0", b"1", b"WITHSCORES"]),
            };
        }
    }
    // The replies are read in place: building a value of each (an array and two strings per
    // `ZRANGE`) took a sixth of the daemon's CPU in scenario `live` (perf, deadline checks).
    let raw = con.send_packed_raw(batch).await?;
    let mut r = Reader::new(&raw);
    let time = match timed {
        true => Some(crate::reply::read_time(&mut r)?),
        false => None,
    };
    let mut out = Vec::with_capacity(keys.len());
    let mut pttl_refused = 0;
    for (i, key) in keys.iter().enumerate() {
        out.push(key_read(&mut r, key, what.fields(i), &mut pttl_refused)?);
    }
    size_grown(con, keys, &mut out).await?;
    Ok(Reads {
        keys: out,
        time,
        pttl_refused,
    })
}

/// Counts the keys a [`Field::Pair`] read found with 2 members or more (`ZCARD`, one pipeline):
/// keys of one member at their last check that grew since, which are few.
async fn size_grown<C>(con: &mut C, keys: &[&[u8]], out: &mut [KeyStatus]) -> Result<(), Error>
where
    C: SendPacked + Send,
{
    let grown = |s: &KeyStatus| matches!(s, KeyStatus::Set(read) if read.card == UNSIZED);
    if !out.iter().any(grown) {
        return Ok(());
    }
    let mut batch = Packed::with_capacity(64);
    for (key, _) in keys.iter().zip(out.iter()).filter(|(_, s)| grown(s)) {
        batch.command(&[b"ZCARD", key]);
    }
    let raw = con.send_packed_raw(batch).await?;
    let mut r = Reader::new(&raw);
    for (key, status) in keys.iter().zip(out.iter_mut()) {
        let KeyStatus::Set(read) = status else {
            continue;
        };
        if read.card != UNSIZED {
            continue;
        }
        // Between the two reads the key may have changed; what the second says, holds.
        match key_read(&mut r, key, &[Field::Card], &mut 0)? {
            KeyStatus::Set(counted) => read.card = counted.card,
            moved_or_not_a_set => *status = moved_or_not_a_set,
        }
    }
    Ok(())
}

/// What a refused read names as its target; a sweep names its keys' pattern instead.
pub const KEY_TARGET: &str = "a key it checks";

/// One key's replies, one per field of `fields`; a refused `PTTL` counts in `pttl_refused`.
/// The first refusal of the others decides what the key reads as; the rest of its replies are
/// skipped.
fn key_read(
    r: &mut Reader<'_>,
    key: &[u8],
    fields: &[Field],
    pttl_refused: &mut u32,
) -> Result<KeyStatus, Error> {
    let mut read = KeyRead::default();
    let mut refused: Option<Result<KeyStatus, Error>> = None;
    for &field in fields {
        let item = r.item()?;
        if refused.is_some() {
            r.skip_rest(&item)?;
            continue;
        }
        match item {
            // `PTTL` came with the gauges that follow key expiry, after the README's ACL had
            // been deployed: without it a key is only forgotten later (its next check, or a
            // reconciliation), so a user who may not run it still sweeps; the check says so.
            Item::Error(e) if e.code() == "NOPERM" && field == Field::Pttl => {
                *pttl_refused += 1;
            }
            Item::Error(e) => refused = Some(refusal_of(e, key, field)),
            item => read_field(r, item, field, &mut read)?,
        }
    }
    refused.unwrap_or(Ok(KeyStatus::Set(read)))
}

/// What an error reply to the command of `field` makes of its key.
fn refusal_of(e: ErrorLine<'_>, key: &[u8], field: Field) -> Result<KeyStatus, Error> {
    match e.code() {
        "WRONGTYPE" => Ok(KeyStatus::NotZset),
        code if is_moved(code) => Ok(KeyStatus::Moved),
        "NOPERM" => {
            let e = e.owned();
            tracing::debug!(key = %presence_sweeper_rules::redact::Id(key), "the ACL refused a read of this key");
            Err(Error::Permission {
                command: field.command().into(),
                // Not the key: error logs and /readyz show this, and it holds an id.
                target: KEY_TARGET.into(),
                detail: refusal_reason(e.details().unwrap_or_default()),
            })
        }
        _ => Err(redis::RedisError::from(e).into()),
    }
}

/// One reply whose head is `item` into `read`.
fn read_field(
    r: &mut Reader<'_>,
    item: Item<'_>,
    field: Field,
    read: &mut KeyRead,
) -> Result<(), Error> {
    let count = |item: Item<'_>| match item {
        Item::Int(n) => u64::try_from(n).ok(),
        Item::Bulk(b) | Item::Status(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    };
    let count = |item| count(item).ok_or_else(|| ReplyError::new("a count is not an integer"));
    match field {
        Field::Stale => read.stale = count(item)?,
        Field::Card => read.card = count(item)?,
        // -1 (no TTL) and -2 (no key) read as no expiry; 0 (expiring now) as 1 ms.
        Field::Pttl => {
            read.expires_in = match item {
                Item::Int(ms) => u64::try_from(ms)
                    .ok()
                    .and_then(|ms| NonZeroU64::new(ms.max(1))),
                _ => None,
            }
        }
        Field::Pair => {
            let (id_bytes, score, card) = lowest_pair(r, item)?;
            read.oldest = score;
            read.card = card;
            read.id_bytes = read.id_bytes.max(id_bytes);
        }
        Field::Oldest | Field::Newest => {
            let (id_bytes, score) = one_scored(r, item)?;
            match field {
                Field::Oldest => read.oldest = score,
                _ => read.newest = score,
            }
            read.id_bytes = read.id_bytes.max(id_bytes);
        }
    }
    Ok(())
}

/// A `ZRANGE key 0 1 WITHSCORES` reply whose head is `item`: the longest member's length, the
/// lowest score, and the size (0, 1, or [`UNSIZED`] for 2 or more).
fn lowest_pair(r: &mut Reader<'_>, item: Item<'_>) -> Result<(usize, Option<f64>, u64), Error> {
    match item {
        Item::Array(4) => {
            let (first, score) = one_scored(r, Item::Array(2))?;
            let (second, _) = one_scored(r, Item::Array(2))?;
            Ok((first.max(second), score, UNSIZED))
        }
        item => {
            let (id_bytes, score) = one_scored(r, item)?;
            Ok((id_bytes, score, u64::from(score.is_some())))
        }
    }
}

/// A `ZRANGE … WITHSCORES` reply of at most one member whose head is `item`: the member's
/// length and its score, or `(0, None)` for an empty (or missing) set.
fn one_scored(r: &mut Reader<'_>, item: Item<'_>) -> Result<(usize, Option<f64>), Error> {
    match item {
        Item::Array(0) => Ok((0, None)),
        Item::Array(2) => match (r.item()?, r.item()?) {
            (Item::Bulk(member), Item::Bulk(score)) => {
                let score =
                    number(score).ok_or_else(|| ReplyError::new("a score is not a number"))?;
                Ok((member.len(), Some(score)))
            }
            _ => Err(ReplyError::new("a member with its score is not a pair").into()),
        },
        item => {
            r.skip_rest(&item)?;
            Err(ReplyError::new("a member with its score is not a pair").into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROBE: Read<'static> = Read::Probe {
        time: false,
        newest: false,
        keys: &[],
    };

    /// The key reads of `raw`, the replies to `what` of `keys` keys, read as [`read`] does.
    fn reads(raw: &[u8], keys: usize, what: Read<'_>) -> (Vec<Result<KeyStatus, Error>>, u32) {
        let mut r = Reader::new(raw);
        let mut refused = 0;
        let out = (0..keys)
            .map(|i| key_read(&mut r, b"k", what.fields(i), &mut refused))
            .collect();
        assert_eq!(r.position(), raw.len(), "every reply read");
        (out, refused)
    }

    fn probe(pttl: i64) -> KeyRead {
        let raw = format!("*2\r\n$2\r\nu1\r\n$12\r\n1764460000.5\r\n:3\r\n:{pttl}\r\n");
        let (mut out, _) = reads(raw.as_bytes(), 1, PROBE);
        out.remove(0).unwrap().set().unwrap()
    }

    #[test]
    fn a_probe_reads_the_lowest_score_the_size_and_when_the_key_expires() {
        let read = probe(1500);
        assert_eq!(read.oldest, Some(1_764_460_000.5));
        assert_eq!((read.card, read.id_bytes), (3, 2));
        assert_eq!(read.expires_in.map(NonZeroU64::get), Some(1500));
        assert_eq!(probe(-1).expires_in, None, "no TTL");
        assert_eq!(probe(-2).expires_in, None, "no key");
        assert_eq!(
            probe(0).expires_in.map(NonZeroU64::get),
            Some(1),
            "expiring now is looked at again at once"
        );
    }

    #[test]
    fn each_key_answers_for_itself_and_the_replies_after_a_refusal_are_skipped() {
        let raw = concat!(
            // An empty set: no lowest score, no members.
            "*0\r\n:0\r\n:-2\r\n",
            // Of another type: every command refused.
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            // Moved in a cluster.
            "-MOVED 3999 127.0.0.1:6381\r\n-MOVED 3999 127.0.0.1:6381\r\n",
            "-MOVED 3999 127.0.0.1:6381\r\n",
            // PTTL refused by the ACL: the rest is read, the refusal counted.
            "*2\r\n$3\r\nabc\r\n$2\r\n17\r\n:1\r\n",
            "-NOPERM User sweeper has no permissions to run the 'pttl' command\r\n",
        );
        let (out, refused) = reads(raw.as_bytes(), 4, PROBE);
        let set = out[0].as_ref().unwrap().set().unwrap();
        assert_eq!((set.oldest, set.card, set.expires_in), (None, 0, None));
        assert!(matches!(out[1], Ok(KeyStatus::NotZset)));
        assert!(matches!(out[2], Ok(KeyStatus::Moved)));
        let set = out[3].as_ref().unwrap().set().unwrap();
        assert_eq!((set.oldest, set.card, set.id_bytes), (Some(17.0), 1, 3));
        assert_eq!(refused, 1);
    }

    #[test]
    fn a_refused_read_names_the_command_not_the_key() {
        let raw = concat!(
            "-NOPERM User sweeper has no permissions to access the 'presence:c42:online' key\r\n",
            ":3\r\n:-1\r\n",
        );
        let (out, _) = reads(raw.as_bytes(), 1, PROBE);
        match &out[0] {
            Err(Error::Permission {
                command,
                target,
                detail,
            }) => {
                assert_eq!((command.as_str(), target.as_str()), ("ZRANGE", KEY_TARGET));
                assert!(!detail.contains("c42"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn replies_of_another_shape_are_errors_not_panics() {
        for raw in [
            // A lowest member without its score.
            "*1\r\n$2\r\nu1\r\n:3\r\n:-1\r\n",
            // A score that is not a number.
            "*2\r\n$2\r\nu1\r\n$3\r\nabc\r\n:3\r\n:-1\r\n",
            // A size that is not an integer.
            "*0\r\n$1\r\nx\r\n:-1\r\n",
            // Replies that end early.
            "*0\r\n:3\r\n",
        ] {
            let mut r = Reader::new(raw.as_bytes());
            assert!(
                key_read(&mut r, b"k", PROBE.fields(0), &mut 0).is_err(),
                "{raw:?}"
            );
        }
    }

    /// A connection that answers each batch with the next of `replies`, and keeps what was
    /// sent.
    struct Scripted {
        replies: Vec<&'static str>,
        /// Each batch's commands, as `COMMAND arg …` lines.
        sent: Vec<Vec<String>>,
    }

    impl SendPacked for Scripted {
        fn send_packed(&mut self, _: Packed) -> redis::RedisFuture<'_, Vec<crate::Value>> {
            unreachable!("reads are read in place")
        }

        fn send_packed_raw(&mut self, batch: Packed) -> redis::RedisFuture<'_, Vec<u8>> {
            let lines = batch
                .commands()
                .into_iter()
                .map(|(_, args)| {
                    let args: Vec<_> = args.iter().map(|a| String::from_utf8_lossy(a)).collect();
                    args.join(" ")
                })
                .collect();
            self.sent.push(lines);
            let reply = self.replies.remove(0).as_bytes().to_vec();
            Box::pin(async move { Ok(reply) })
        }
    }

    #[tokio::test]
    async fn a_probe_asks_each_key_only_what_its_index_does_not_know() {
        let single = |ttl| Probing { single: true, ttl };
        let keys: [&[u8]; 5] = [b"new", b"one", b"expiring", b"grew", b"emptied"];
        let probing = [
            Probing::FULL,
            single(false),
            single(true),
            single(false),
            single(false),
        ];
        let mut con = Scripted {
            replies: vec![
                concat!(
                    // new: a first check reads it all.
                    "*2\r\n$2\r\nu1\r\n$2\r\n10\r\n:3\r\n:-1\r\n",
                    // one: one member still.
                    "*2\r\n$2\r\nu1\r\n$2\r\n11\r\n",
                    // expiring: one member, and its TTL.
                    "*2\r\n$2\r\nu1\r\n$2\r\n12\r\n:2500\r\n",
                    // grew: two members or more, counted after.
                    "*4\r\n$2\r\nu1\r\n$2\r\n13\r\n$4\r\nu222\r\n$2\r\n14\r\n",
                    // emptied: gone.
                    "*0\r\n",
                ),
                ":5\r\n",
            ],
            sent: Vec::new(),
        };
        let what = Read::Probe {
            time: false,
            newest: false,
            keys: &probing,
        };
        let reads = read(&mut con, &keys, what).await.unwrap();
        assert_eq!(
            con.sent[0],
            [
                "ZRANGE new 0 0 WITHSCORES",
                "ZCARD new",
                "PTTL new",
                "ZRANGE one 0 1 WITHSCORES",
                "ZRANGE expiring 0 1 WITHSCORES",
                "PTTL expiring",
                "ZRANGE grew 0 1 WITHSCORES",
                "ZRANGE emptied 0 1 WITHSCORES",
            ]
        );
        assert_eq!(con.sent[1], ["ZCARD grew"], "only the key that grew");
        let got: Vec<_> = reads
            .keys
            .iter()
            .map(|k| {
                let k = k.set().unwrap();
                (k.oldest, k.card, k.expires_in.map(NonZeroU64::get))
            })
            .collect();
        assert_eq!(
            got,
            [
                (Some(10.0), 3, None),
                (Some(11.0), 1, None),
                (Some(12.0), 1, Some(2500)),
                (Some(13.0), 5, None),
                (None, 0, None),
            ]
        );
        assert_eq!(reads.keys[3].set().unwrap().id_bytes, 4, "the longer id");
    }

    #[tokio::test]
    async fn a_key_that_grew_and_then_moved_reads_as_moved() {
        let mut con = Scripted {
            replies: vec![
                "*4\r\n$2\r\nu1\r\n$2\r\n13\r\n$2\r\nu2\r\n$2\r\n14\r\n",
                "-MOVED 3999 127.0.0.1:6381\r\n",
            ],
            sent: Vec::new(),
        };
        let what = Read::Probe {
            time: false,
            newest: false,
            keys: &[Probing {
                single: true,
                ttl: false,
            }],
        };
        let reads = read(&mut con, &[b"k"], what).await.unwrap();
        assert_eq!(reads.keys, [KeyStatus::Moved]);
    }

    /// At 72 bytes, building one called `memset` (see [`KeyRead::expires_in`]).
    #[test]
    fn a_read_stays_within_64_bytes() {
        assert!(size_of::<KeyRead>() <= 64, "{}", size_of::<KeyRead>());
    }
}
