//! Environment variables that look meant for presence-sweeper but set nothing.
//!
//! The `config` crate reads `PRESENCE_SWEEPER__SECTION__KEY` and silently skips the rest, so
//! `PRESENCE_SWEEPER_REDIS_URL` (one underscore) would leave `redis.url` at its default: a
//! command meant for a test Redis would go to 127.0.0.1:6379. Such variables are named, with the
//! one probably meant.

use std::collections::HashMap;
use std::fmt;

use super::error::ConfigError;

/// Environment variable prefix: `PRESENCE_SWEEPER__REDIS__URL` sets `redis.url`.
pub const ENV_PREFIX: &str = "PRESENCE_SWEEPER";
/// Separator between the prefix and each key segment in environment variable names.
pub const ENV_SEPARATOR: &str = "__";

/// The configuration file, when `--config` is not given.
pub const CONFIG_VAR: &str = "PRESENCE_SWEEPER_CONFIG";

/// Variables the binary reads itself, besides the settings.
const OWN_VARIABLES: &[&str] = &[CONFIG_VAR];

/// A `PRESENCE_SWEEPER*` variable that neither sets a key nor is read by the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    /// The variable.
    pub name: String,
    /// The variable that sets the key it probably meant, if one does.
    pub meant: Option<String>,
}

impl fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "environment variable {} sets nothing", self.name)?;
        match &self.meant {
            Some(meant) => write!(f, "; did you mean {meant}?"),
            None => write!(
                f,
                " (settings are {ENV_PREFIX}{ENV_SEPARATOR}SECTION{ENV_SEPARATOR}KEY)"
            ),
        }
    }
}

/// The variable that sets a dotted key: `redis.url` is `PRESENCE_SWEEPER__REDIS__URL`.
pub(super) fn variable_for(key: &str) -> String {
    let mut name = ENV_PREFIX.to_owned();
    for part in key.split('.') {
        name.push_str(ENV_SEPARATOR);
        name.push_str(&part.to_uppercase());
    }
    name
}

/// The dotted key that variable `name` sets, from `rest`, its name after the prefix and the
/// separator: `REDIS__URL` sets `redis.url`. Names are not case-sensitive.
pub(super) fn key_of(name: &str, rest: &str) -> Result<String, ConfigError> {
    let parts: Vec<&str> = rest.split(ENV_SEPARATOR).collect();
    // A sweep's own name may start or end with `_`; no section or key name does.
    let sweep_name = |i: usize| i == 1 && parts[0].eq_ignore_ascii_case("sweeps");
    let malformed = |(i, part): (usize, &&str)| {
        part.is_empty() || (!sweep_name(i) && (part.starts_with('_') || part.ends_with('_')))
    };
    if parts.iter().enumerate().any(malformed) {
        let meant: Vec<String> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if sweep_name(i) {
                    *p
                } else {
                    p.trim_matches('_')
                }
            })
            .filter(|p| !p.is_empty())
            .map(str::to_uppercase)
            .collect();
        return Err(ConfigError::MalformedVariable {
            name: name.to_owned(),
            meant: (!meant.is_empty())
                .then(|| format!("{ENV_PREFIX}{ENV_SEPARATOR}{}", meant.join(ENV_SEPARATOR))),
        });
    }
    Ok(parts.join(".").to_lowercase())
}

/// The variables of `env` that look meant for presence-sweeper but set nothing, ordered by
/// name; `keys` gives the dotted keys in effect, for the suggestions. It is only called when
/// such a variable is set: printing every key costs more than the rest of a start-up's checks.
pub(super) fn unknown_variables(
    env: &HashMap<String, String>,
    keys: impl FnOnce() -> Vec<String>,
) -> Vec<UnknownVariable> {
    // The `config` crate matches the prefix whatever its case; so does this.
    let settings = format!("{ENV_PREFIX}{ENV_SEPARATOR}").to_lowercase();
    let ours = ENV_PREFIX.to_lowercase();
    let mut names: Vec<&String> = env
        .keys()
        .filter(|name| {
            let lower = name.to_lowercase();
            lower.starts_with(&ours)
                && !lower.starts_with(&settings)
                && !OWN_VARIABLES.iter().any(|v| v.eq_ignore_ascii_case(name))
        })
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    names.sort();
    let variables: Vec<String> = keys().iter().map(|k| variable_for(k)).collect();
    names
        .into_iter()
        .map(|name| UnknownVariable {
            name: name.clone(),
            meant: variables.iter().find(|v| words(v) == words(name)).cloned(),
        })
        .collect()
}

/// A variable's name without its separators: `PRESENCE_SWEEPER__REDIS__URL` and
/// `presence_sweeper_redis_url` are both `PRESENCE SWEEPER REDIS URL`.
fn words(name: &str) -> Vec<String> {
    name.split('_')
        .filter(|w| !w.is_empty())
        .map(str::to_uppercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_are_named_with_the_variable_meant() {
        let keys = ["redis.url".to_owned(), "sweeps.online.ttl".to_owned()];
        let env: HashMap<String, String> = [
            "PRESENCE_SWEEPER_REDIS_URL",
            "PRESENCE_SWEEPER_SWEEPS__ONLINE_TTL",
            "PRESENCE_SWEEPER_CONFIG",
            "PRESENCE_SWEEPER__REDIS__URL",
            "PRESENCE_SWEEPER_COLOUR",
            "PATH",
        ]
        .into_iter()
        .map(|k| (k.to_owned(), String::new()))
        .collect();
        let unknown = unknown_variables(&env, || keys.to_vec());
        let shown: Vec<String> = unknown.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "environment variable PRESENCE_SWEEPER_COLOUR sets nothing (settings are \
                 PRESENCE_SWEEPER__SECTION__KEY)",
                "environment variable PRESENCE_SWEEPER_REDIS_URL sets nothing; did you mean \
                 PRESENCE_SWEEPER__REDIS__URL?",
                "environment variable PRESENCE_SWEEPER_SWEEPS__ONLINE_TTL sets nothing; did you \
                 mean PRESENCE_SWEEPER__SWEEPS__ONLINE__TTL?",
            ]
        );
    }
}
