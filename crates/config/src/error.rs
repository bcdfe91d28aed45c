//! Why a configuration is refused, and where the offending value came from.

use std::fmt;
use std::path::PathBuf;

/// Why the configuration was rejected. Each message names the key and, where there is one, the
/// value and the layer it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named by `--config` could not be read.
    #[error("cannot read config file {path}: {cause}")]
    ReadFile {
        /// The file, as given.
        path: PathBuf,
        /// Why (part of the message, so not also a `source()`).
        cause: std::io::Error,
    },
    /// A layer could not be parsed (TOML syntax, for instance).
    #[error("{0}")]
    Syntax(String),
    /// A key that no part of presence-sweeper reads, probably a typo.
    #[error("unknown configuration key `{key}`{origin}")]
    UnknownKey {
        /// Full dotted key.
        key: String,
        /// The layer that set it.
        origin: Origin,
    },
    /// A required key is missing.
    #[error("missing configuration key `{key}`{origin}")]
    Missing {
        /// Full dotted key.
        key: String,
        /// The layer that defined the table it is missing from.
        origin: Origin,
    },
    /// A value that does not parse or is out of range.
    #[error("{key} = {value}{origin}: {reason}")]
    Invalid {
        /// Full dotted key.
        key: String,
        /// The value as given (redacted where secret).
        value: String,
        /// The layer that set it.
        origin: Origin,
        /// What is wrong with it.
        reason: String,
    },
    /// A `PRESENCE_SWEEPER__*` variable whose name is not a key: an empty part, or a part
    /// that starts or ends with `_` (three underscores in a row).
    #[error(
        "environment variable {name} is malformed: the prefix, the section and the key are \
         joined by exactly two underscores (PRESENCE_SWEEPER__SECTION__KEY){}",
        .meant.as_ref().map(|m| format!("; did you mean {m}?")).unwrap_or_default()
    )]
    MalformedVariable {
        /// The variable.
        name: String,
        /// The variable probably meant, if one can be made of its parts.
        meant: Option<String>,
    },
    /// `PRESENCE_SWEEPER_*` variables that set nothing (`check-config` refuses them; the
    /// other commands warn).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    UnknownVariables(Vec<super::env::UnknownVariable>),
}

/// The layer a value came from, shown after it in error messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Origin {
    /// The built-in defaults, or no value at all: nothing to show.
    #[default]
    BuiltIn,
    /// The configuration file, as given.
    File(String),
    /// An environment variable, by name (`PRESENCE_SWEEPER__REDIS__URL`).
    Variable(String),
    /// A command-line flag (`--log-level`).
    Flag(String),
}

/// How each layer marks its values: the `config` crate keeps one origin string per value.
const FILE: &str = "file:";
const VARIABLE: &str = "env:";
const FLAG: &str = "flag:";

impl Origin {
    /// The mark a layer puts on its values, which [`Origin::of`] reads back.
    pub(super) fn tag(&self) -> Option<String> {
        match self {
            Self::BuiltIn => None,
            Self::File(path) => Some(format!("{FILE}{path}")),
            Self::Variable(name) => Some(format!("{VARIABLE}{name}")),
            Self::Flag(flag) => Some(format!("{FLAG}{flag}")),
        }
    }

    /// Where `value` came from. A table the `config` crate assembled from several values has
    /// no origin of its own: it is that of the first value in it that has one.
    pub(super) fn of(value: &config::Value) -> Self {
        if let Some(tag) = value.origin() {
            return Self::from_tag(tag);
        }
        match &value.kind {
            config::ValueKind::Table(map) => {
                let mut names: Vec<&String> = map.keys().collect();
                names.sort();
                names
                    .into_iter()
                    .map(|n| Self::of(&map[n]))
                    .find(|o| *o != Self::BuiltIn)
                    .unwrap_or_default()
            }
            config::ValueKind::Array(items) => items
                .iter()
                .map(Self::of)
                .find(|o| *o != Self::BuiltIn)
                .unwrap_or_default(),
            _ => Self::BuiltIn,
        }
    }

    fn from_tag(tag: &str) -> Self {
        if let Some(name) = tag.strip_prefix(VARIABLE) {
            Self::Variable(name.to_owned())
        } else if let Some(flag) = tag.strip_prefix(FLAG) {
            Self::Flag(flag.to_owned())
        } else {
            Self::File(tag.strip_prefix(FILE).unwrap_or(tag).to_owned())
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BuiltIn => Ok(()),
            Self::File(path) => write!(f, " (in {path})"),
            Self::Variable(name) | Self::Flag(name) => write!(f, " (from {name})"),
        }
    }
}
