//! `presence-sweeper stats`: a read-only report of the presence keyspace of each sweep.
//!
//! Keys are streamed with the sweeper's own SCAN (`scan::pages`); per page one
//! pipeline asks `ZCARD`, `ZCOUNT -inf (cutoff` and `ZRANGE 0 0 WITHSCORES` of every key. Nothing
//! else is sent (plus one `TIME`), so the report never changes what it measures. Memory is
//! bounded whatever the keyspace: the members-per-key distribution is a fixed histogram
//! (buckets 1, 2, 3-5, 6-10, ..., 501-1000, over 1000: each bucket its own keys, not cumulative
//! as Prometheus's `le` buckets; exact counts, chosen over
//! percentiles because they need no sample), and the largest conversations are kept in a heap
//! of `--top` entries, the first `--sample` keys in SCAN order (hash order: a spread of the
//! keyspace) in a list of their own.
//!
//! The daemon's own keys are left out here as in every sweep, whatever the `match`.
//!
//! "Stale" is judged on Redis's clock: `TIME` is read once per sweep and advanced by our own
//! monotonic clock as the scan goes, so a long scan does not judge late keys by an old instant.
//! Counts are exact on a quiet keyspace; while keys come and go, SCAN may report a key twice
//! (during a rehash) or miss one created meanwhile, as any SCAN-based tool does.

use presence_sweeper_config as config;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::pin::pin;

use futures_util::StreamExt;
use presence_sweeper_config::Config;
use presence_sweeper_redis::evict::read::{self, Read};
use presence_sweeper_redis::reply::redis_time;
use presence_sweeper_redis::{Error, Opener, Store, scan};
use presence_sweeper_rules::score::Cutoff;
use serde::Serialize;

use crate::time::now;

/// Upper bounds of the members-per-key buckets; a last bucket takes the rest.
pub(crate) const BUCKETS: [u64; 10] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];

/// The report of every sweep asked for.
#[derive(Debug, Clone, Serialize)]
pub struct StatsReport {
    /// Redis's clock when the report started, Unix seconds.
    pub(crate) redis_time: f64,
    /// One entry per sweep, in the order asked.
    pub(crate) sweeps: Vec<SweepStats>,
}

/// The keyspace of one sweep.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SweepStats {
    /// The sweep's name.
    pub(crate) sweep: String,
    /// Its `match` glob.
    #[serde(rename = "match")]
    pub(crate) glob: String,
    /// Its `ttl`, in seconds.
    pub(crate) ttl_seconds: f64,
    /// Sorted sets matching the glob (that were not empty when read).
    pub(crate) keys: u64,
    /// Members in them.
    pub(crate) members: u64,
    /// Members whose score is older than `ttl` on Redis's clock: what a pass would evict now.
    pub(crate) stale_members: u64,
    /// Age of the oldest score of all, in seconds on Redis's clock; `null` without members. A
    /// score of `-inf` counts as the Unix epoch, as in events; `+inf` (every member pinned:
    /// none ever goes stale) as Redis's now, an age of 0.
    pub(crate) oldest_heartbeat_age_seconds: Option<f64>,
    /// Whether the oldest score is `-inf`: a member that never heartbeat (written by hand).
    pub(crate) oldest_heartbeat_never: bool,
    /// Whether the oldest score is `+inf`: every member is pinned (written by hand).
    pub(crate) oldest_heartbeat_pinned: bool,
    /// How many members the keys hold.
    pub(crate) members_per_key: Distribution,
    /// The largest conversations, largest first (ties: by id).
    pub(crate) largest: Vec<Largest>,
    /// Some of the keys the sweep would sweep, as they were found (written lossily if they are
    /// not UTF-8): what `match` reaches, to see before a `run`.
    pub(crate) sample_keys: Vec<String>,
    /// Wall time of the scan.
    pub(crate) seconds: f64,
}

/// Members per key.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Distribution {
    /// Keys per bucket, each bucket counting only its own keys (not cumulative).
    pub(crate) buckets: Vec<Bucket>,
    /// The most members of any key.
    pub(crate) max: u64,
    /// Members per key on average; 0 without keys.
    pub(crate) mean: f64,
}

/// One bucket of the distribution: the keys with `from` to `to` members (both inclusive).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Bucket {
    /// Fewest members of a key in the bucket.
    pub(crate) from: u64,
    /// Most members of a key in the bucket; `null` (no bound) for the last.
    pub(crate) to: Option<u64>,
    /// Keys in the bucket.
    pub(crate) keys: u64,
}

/// One conversation of the top list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Largest {
    /// What the sweep's `*` matched (written lossily if it is not UTF-8).
    pub(crate) conversation_id: String,
    /// Members of its key.
    pub(crate) members: u64,
}

/// Reads the keyspace of each sweep in `sweeps`, one after the other.
pub async fn run(
    config: &Config,
    sweeps: &[&config::Sweep],
    top: usize,
    sample: usize,
) -> Result<StatsReport, Error> {
    let store = Store::connect_as(&config.redis, Opener::Tool("stats")).await?;
    let redis_time = redis_time(&mut store.connection()).await?;
    let mut report = StatsReport {
        redis_time,
        sweeps: Vec::with_capacity(sweeps.len()),
    };
    for sweep in sweeps {
        report
            .sweeps
            .push(sweep_stats(&store, sweep, config.scan.count, top, sample).await?);
    }
    Ok(report)
}

async fn sweep_stats(
    store: &Store,
    sweep: &config::Sweep,
    scan_count: u32,
    top: usize,
    sample: usize,
) -> Result<SweepStats, Error> {
    let started = now();
    let redis_start = redis_time(&mut store.connection()).await?;
    let since = || now().saturating_duration_since(started).as_secs_f64();
    let redis_now = || redis_start + since();
    let mut tally = Census::new(top, sample);
    // Every primary in turn (one in standalone and Sentinel mode), each with its own cursor.
    for node in store.nodes().await? {
        tally_node(&mut tally, node, sweep, scan_count).await?;
    }
    Ok(tally.finish(sweep, redis_now(), since()))
}

async fn tally_node(
    tally: &mut Census,
    mut con: presence_sweeper_redis::Node,
    sweep: &config::Sweep,
    scan_count: u32,
) -> Result<(), Error> {
    let unit = sweep.score_unit;
    let mut pages = pin!(scan::pages(
        con.clone(),
        sweep.pattern.glob().to_owned(),
        scan_count
    ));
    while let Some(page) = pages.next().await {
        let page = page?;
        let mut keys = page.keys;
        keys.retain(|key| sweep.pattern.conversation_id(key).is_some());
        if keys.is_empty() {
            continue;
        }
        // Staleness on Redis's clock as of this page (read with the SCAN).
        let cutoff = Cutoff::new(page.time, sweep.ttl, unit);
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let reads = read::read(&mut con, &refs, Read::Summary(&cutoff)).await?;
        for (key, read) in keys.iter().zip(reads.keys) {
            // A key that changed type since SCAN saw it is skipped, not the page.
            let Some(read) = read.set() else { continue };
            let id = || {
                let id = sweep.pattern.conversation_id(key).unwrap_or(key);
                presence_sweeper_rules::redact::Id(id).to_string()
            };
            let oldest = read.oldest.map(|score| unit.to_seconds(score));
            if read.card > 0 {
                tally.sample(key);
            }
            tally.key(read.card, read.stale, oldest, id);
        }
    }
    Ok(())
}

/// Running totals of one sweep, bounded in size.
#[derive(Debug)]
struct Census {
    keys: u64,
    members: u64,
    stale: u64,
    oldest: Option<f64>,
    buckets: [u64; BUCKETS.len() + 1],
    max: u64,
    top: usize,
    /// Min-heap of the `top` largest: (members, id reversed so that ties keep the smaller id).
    largest: BinaryHeap<Reverse<(u64, Reverse<String>)>>,
    /// How many keys to keep as a sample, and those kept.
    sample: usize,
    samples: Vec<String>,
}

impl Census {
    fn new(top: usize, sample: usize) -> Self {
        Self {
            keys: 0,
            members: 0,
            stale: 0,
            oldest: None,
            buckets: [0; BUCKETS.len() + 1],
            max: 0,
            top,
            largest: BinaryHeap::with_capacity(top + 1),
            sample,
            samples: Vec::with_capacity(sample),
        }
    }

    /// Keeps `key` as a sample while there is room.
    fn sample(&mut self, key: &[u8]) {
        if self.samples.len() < self.sample {
            self.samples.push(String::from_utf8_lossy(key).into_owned());
        }
    }

    /// Counts one key; `id` is only called for keys that enter the top list.
    fn key(&mut self, card: u64, stale: u64, oldest: Option<f64>, id: impl FnOnce() -> String) {
        if card == 0 {
            // Deleted between SCAN and the pipeline: not a key any more.
            return;
        }
        self.keys += 1;
        self.members += card;
        self.stale += stale;
        self.max = self.max.max(card);
        if let Some(o) = oldest {
            self.oldest = Some(self.oldest.map_or(o, |cur| cur.min(o)));
        }
        let bucket = BUCKETS
            .iter()
            .position(|&le| card <= le)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket] += 1;
        if self.top == 0 {
            return;
        }
        let enters = self.largest.len() < self.top
            || self
                .largest
                .peek()
                .is_some_and(|Reverse((smallest, _))| card >= *smallest);
        if enters {
            self.largest.push(Reverse((card, Reverse(id()))));
            if self.largest.len() > self.top {
                self.largest.pop();
            }
        }
    }

    fn finish(self, sweep: &config::Sweep, now: f64, seconds: f64) -> SweepStats {
        let bounds = BUCKETS.iter().map(|&to| Some(to)).chain([None]);
        let mut from = 1;
        let buckets: Vec<Bucket> = bounds
            .zip(self.buckets)
            .map(|(to, keys)| {
                let bucket = Bucket { from, to, keys };
                from = to.map_or(from, |to| to + 1);
                bucket
            })
            .collect();
        let mut largest: Vec<Largest> = self
            .largest
            .into_iter()
            .map(|Reverse((members, Reverse(conversation_id)))| Largest {
                conversation_id,
                members,
            })
            .collect();
        largest.sort_by(|a, b| {
            b.members
                .cmp(&a.members)
                .then_with(|| a.conversation_id.cmp(&b.conversation_id))
        });
        SweepStats {
            sweep: sweep.name.clone(),
            glob: sweep.pattern.glob().to_owned(),
            ttl_seconds: sweep.ttl.as_secs_f64(),
            keys: self.keys,
            members: self.members,
            stale_members: self.stale,
            // `+inf` never goes stale: it counts as now (age 0), and `-inf` as the epoch.
            oldest_heartbeat_age_seconds: self.oldest.map(|o| match o {
                f64::INFINITY => 0.0,
                o => now - presence_sweeper_rules::event::seconds(o),
            }),
            oldest_heartbeat_never: self.oldest == Some(f64::NEG_INFINITY),
            oldest_heartbeat_pinned: self.oldest == Some(f64::INFINITY),
            members_per_key: Distribution {
                buckets,
                max: self.max,
                mean: if self.keys == 0 {
                    0.0
                } else {
                    self.members as f64 / self.keys as f64
                },
            },
            largest,
            sample_keys: self.samples,
            seconds,
        }
    }
}

impl fmt::Display for StatsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.sweeps.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

impl fmt::Display for SweepStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ttl = humantime::format_duration(std::time::Duration::from_secs_f64(self.ttl_seconds));
        writeln!(f, "{} ({}, ttl {ttl})", self.sweep, self.glob)?;
        writeln!(f, "  keys               {:>12}", self.keys)?;
        writeln!(f, "  members            {:>12}", self.members)?;
        let share = if self.members == 0 {
            0.0
        } else {
            100.0 * self.stale_members as f64 / self.members as f64
        };
        writeln!(
            f,
            "  stale members      {:>12}  ({share:.1}%, older than ttl on Redis's clock)",
            self.stale_members
        )?;
        match self.oldest_heartbeat_age_seconds {
            Some(_) if self.oldest_heartbeat_never => {
                writeln!(f, "  oldest heartbeat   {:>12}  (a score of -inf)", "never")?
            }
            Some(age) if self.oldest_heartbeat_pinned => writeln!(
                f,
                "  oldest heartbeat   {age:>12.1}  (a score of +inf: never stale)"
            )?,
            // Every score ahead of Redis's clock: most likely milliseconds in a sweep of
            // seconds.
            Some(age) if age < 0.0 => writeln!(
                f,
                "  oldest heartbeat   {:>12}  ({} seconds ahead of Redis's clock: is the sweep's score_unit right?)",
                "future",
                seconds(-age)
            )?,
            Some(age) => writeln!(f, "  oldest heartbeat   {:>12}  seconds ago", seconds(age))?,
            None => writeln!(f, "  oldest heartbeat   {:>12}", "-")?,
        }
        let d = &self.members_per_key;
        writeln!(
            f,
            "  members per key    {:>12.1}  mean (max {})",
            d.mean, d.max
        )?;
        for b in &d.buckets {
            let range = match b.to {
                Some(to) if to == b.from => to.to_string(),
                Some(to) => format!("{}-{to}", b.from),
                None => format!(">{}", b.from - 1),
            };
            writeln!(f, "    {range:<16} {:>12}  keys", b.keys)?;
        }
        if !self.largest.is_empty() {
            writeln!(f, "  largest conversations")?;
            for c in &self.largest {
                writeln!(
                    f,
                    "    {:<16} {:>12}  members",
                    c.conversation_id, c.members
                )?;
            }
        }
        if !self.sample_keys.is_empty() {
            writeln!(f, "  sample keys")?;
            for key in &self.sample_keys {
                writeln!(f, "    {key}")?;
            }
        }
        writeln!(f, "  scanned in {:.3} s", self.seconds)
    }
}

/// Seconds for a person: one decimal, or an exponent for a number too long to read (a score
/// of 1e300).
fn seconds(s: f64) -> String {
    if s.abs() < 1e9 {
        format!("{s:.1}")
    } else {
        format!("{s:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep() -> config::Sweep {
        config::Sweep {
            name: "online".into(),
            pattern: presence_sweeper_rules::pattern::KeyPattern::parse("presence:*:online")
                .unwrap(),
            ttl: std::time::Duration::from_secs(45),
            schedule: presence_sweeper_config::Schedule::Every(std::time::Duration::from_secs(30)),
            event: "presence.leave".into(),
            channel: presence_sweeper_rules::pattern::ChannelTemplate::new(
                "presence:{conversation_id}:events",
            ),
            score_unit: presence_sweeper_config::ScoreUnit::Seconds,
            event_shape: presence_sweeper_config::EventShape::Member,
            stream: None,
            enabled: true,
            storm_guard: Default::default(),
        }
    }

    #[test]
    fn buckets_top_and_oldest() {
        let mut t = Census::new(3, 2);
        for (id, card, oldest) in [
            ("a", 1, 100.0),
            ("b", 2, 90.0),
            ("c", 5, 95.0),
            ("d", 6, 99.0),
            ("e", 20, 98.0),
            ("f", 20, 97.0),
            ("g", 5000, 96.0),
            ("gone", 0, 1.0),
        ] {
            t.key(card, 1, Some(oldest), || id.to_owned());
        }
        let s = t.finish(&sweep(), 100.0, 0.5);
        assert_eq!(s.keys, 7);
        assert_eq!(s.members, 1 + 2 + 5 + 6 + 20 + 20 + 5000);
        assert_eq!(s.stale_members, 7);
        assert_eq!(s.oldest_heartbeat_age_seconds, Some(10.0));
        let counts: Vec<u64> = s.members_per_key.buckets.iter().map(|b| b.keys).collect();
        assert_eq!(counts, [1, 1, 1, 1, 2, 0, 0, 0, 0, 0, 1]);
        assert_eq!(s.members_per_key.max, 5000);
        let top: Vec<(&str, u64)> = s
            .largest
            .iter()
            .map(|c| (c.conversation_id.as_str(), c.members))
            .collect();
        assert_eq!(top, [("g", 5000), ("e", 20), ("f", 20)]);
    }

    #[test]
    fn ties_keep_the_smaller_id_and_top_zero_keeps_none() {
        let mut t = Census::new(2, 0);
        for id in ["c3", "c1", "c2"] {
            t.key(7, 0, None, || id.to_owned());
        }
        let s = t.finish(&sweep(), 0.0, 0.0);
        let ids: Vec<&str> = s
            .largest
            .iter()
            .map(|c| c.conversation_id.as_str())
            .collect();
        assert_eq!(ids, ["c1", "c2"]);
        assert_eq!(s.oldest_heartbeat_age_seconds, None);

        let mut t = Census::new(0, 0);
        t.key(7, 0, None, || unreachable!("no top list, no ids"));
        assert!(t.finish(&sweep(), 0.0, 0.0).largest.is_empty());
    }

    #[test]
    fn json_shape() {
        let s = Census::new(1, 0).finish(&sweep(), 0.0, 0.0);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["match"], "presence:*:online");
        let bucket = |i: usize| &v["members_per_key"]["buckets"][i];
        assert_eq!(
            (&bucket(0)["from"], &bucket(0)["to"]),
            (&1.into(), &1.into())
        );
        assert_eq!(
            (&bucket(2)["from"], &bucket(2)["to"]),
            (&3.into(), &5.into())
        );
        assert_eq!(bucket(10)["from"], 1001);
        assert!(bucket(10)["to"].is_null());
        assert!(bucket(0).get("le").is_none());
        assert!(v["oldest_heartbeat_age_seconds"].is_null());
    }

    #[test]
    fn infinite_scores_are_numbers() {
        for (score, age, never, pinned) in [
            (f64::INFINITY, 0.0, false, true),
            (f64::NEG_INFINITY, 1000.0, true, false),
        ] {
            let mut t = Census::new(0, 0);
            t.key(1, 0, Some(score), || unreachable!());
            let s = t.finish(&sweep(), 1000.0, 0.0);
            assert_eq!(s.oldest_heartbeat_age_seconds, Some(age), "{score}");
            assert_eq!(
                (s.oldest_heartbeat_never, s.oldest_heartbeat_pinned),
                (never, pinned)
            );
            assert!(!s.to_string().contains("inf seconds"), "{s}");
        }
    }

    #[test]
    fn scores_ahead_of_the_clock_say_so() {
        let mut t = Census::new(0, 0);
        // Milliseconds in a sweep of seconds.
        t.key(1, 0, Some(1_764_460_000_000.0), || unreachable!());
        let shown = t.finish(&sweep(), 1_764_460_000.0, 0.0).to_string();
        assert!(
            shown.contains(
                "future  (1.76e12 seconds ahead of Redis's clock: is the sweep's score_unit right?)"
            ),
            "{shown}"
        );
        let mut t = Census::new(0, 0);
        t.key(1, 0, Some(-1e300), || unreachable!());
        let shown = t.finish(&sweep(), 1000.0, 0.0).to_string();
        assert!(shown.contains("1.00e300  seconds ago"), "{shown}");
    }

    #[test]
    fn the_sample_keeps_the_first_keys_only() {
        let mut t = Census::new(0, 2);
        for key in [&b"a"[..], b"b\xff", b"c"] {
            t.sample(key);
        }
        assert_eq!(t.samples, ["a", "b\u{fffd}"]);
    }
}
