//! What a valid configuration may still get wrong, or should know: advice that `check-config`
//! prints and the daemon logs at start-up. Never a refusal: a broad pattern can be meant.

use std::fmt;

use presence_sweeper_rules::pattern::{KeyPattern, OWN_NAMESPACE};

use super::Config;

/// A conversation id that stands for any, to name a per-conversation stream in advice.
const SAMPLE_ID: &[u8] = b"c42";

/// One piece of advice about a valid configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Advice {
    /// A sweep's `match` has nothing literal after its `*`, so it fits every sorted set whose
    /// name starts with its prefix: an unrelated leaderboard would lose members.
    OpenEnded {
        /// The sweep's name.
        sweep: String,
        /// Its `match`.
        glob: String,
        /// A pattern that ends in a literal part, to show instead.
        safer: String,
    },
    /// The daemon's own keys fit a sweep's `match`; no sweep ever touches them.
    OwnKeysFit {
        /// The sweep's name.
        sweep: String,
        /// Its `match`.
        glob: String,
        /// Which of the daemon's keys fit, in words.
        which: Vec<String>,
    },
}

impl Advice {
    /// Whether this is a risk to fix rather than a fact to know.
    pub fn is_warning(&self) -> bool {
        matches!(self, Self::OpenEnded { .. })
    }
}

impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OpenEnded { sweep, glob, safer } => {
                let prefix = glob.trim_end_matches('*');
                let reach = if prefix.is_empty() {
                    "every sorted set in the database".to_owned()
                } else {
                    format!("every sorted set whose name starts with {prefix:?}")
                };
                write!(
                    f,
                    "sweeps.{sweep}.match = {glob:?} has nothing literal after its `*`: it fits \
                     {reach}, not only presence keys, and would remove old members from an \
                     unrelated one (a leaderboard, a queue) and announce them as leaves; a safer \
                     pattern ends in the presence keys' own suffix, such as {safer:?}"
                )
            }
            Self::OwnKeysFit { sweep, glob, which } => write!(
                f,
                "sweeps.{sweep}.match = {glob:?} fits the daemon's own keys ({}): no sweep ever \
                 evicts from them or announces them",
                which.join("; ")
            ),
        }
    }
}

impl Config {
    /// Advice about this configuration, warnings first; empty for the shipped one.
    pub fn advice(&self) -> Vec<Advice> {
        let mut advice = Vec::new();
        for sweep in &self.sweeps {
            let pattern = &sweep.pattern;
            if pattern.is_open_ended() {
                advice.push(Advice::OpenEnded {
                    sweep: sweep.name.clone(),
                    glob: pattern.glob().to_owned(),
                    safer: safer(pattern, &sweep.name),
                });
            }
        }
        for sweep in &self.sweeps {
            let which = self.own_keys_fitting(&sweep.pattern);
            if !which.is_empty() {
                advice.push(Advice::OwnKeysFit {
                    sweep: sweep.name.clone(),
                    glob: sweep.pattern.glob().to_owned(),
                    which,
                });
            }
        }
        advice
    }

    /// The daemon's keys that `pattern` fits, in words. Those in its namespace are left out by
    /// name; streams and leases elsewhere are no sorted sets, which no sweep reads.
    fn own_keys_fitting(&self, pattern: &KeyPattern) -> Vec<String> {
        let mut which = Vec::new();
        if pattern.reaches_own_keys() {
            which.push(format!(
                "{OWN_NAMESPACE}*: its canary, leases and webhook delivery state, left out by name"
            ));
        }
        let fits = |name: &[u8]| pattern.conversation_id(name).is_some();
        if self.coordination.lease {
            let leases: Vec<String> = self
                .sweeps
                .iter()
                .map(|s| format!("{}{}", self.coordination.key_prefix, s.name))
                .filter(|key| fits(key.as_bytes()))
                .collect();
            if !leases.is_empty() {
                which.push(format!(
                    "the leases {}, which are strings, not sorted sets",
                    leases.join(", ")
                ));
            }
        }
        for other in &self.sweeps {
            let Some(stream) = &other.stream else {
                continue;
            };
            let key = other.pattern.key(SAMPLE_ID);
            let name = stream.key.render(&key, SAMPLE_ID);
            if fits(&name) {
                which.push(format!(
                    "sweeps.{}.stream = {:?}, streams, not sorted sets",
                    other.name,
                    stream.key.to_string()
                ));
            }
        }
        which
    }
}

/// A pattern for `sweep` that ends in a literal part: the prefix, the `*` and the sweep's name
/// (the shipped sweeps' keys end so: `presence:<id>:online`).
fn safer(pattern: &KeyPattern, sweep: &str) -> String {
    let mut prefix = String::from_utf8_lossy(pattern.prefix()).into_owned();
    if prefix.is_empty() {
        prefix.push_str("presence");
    }
    if !prefix.ends_with(':') {
        prefix.push(':');
    }
    format!("{prefix}*:{sweep}")
}
