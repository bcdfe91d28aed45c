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
    /// `PRESENCE_SWEEPER_*` variables that set nothing (`check-config` refuses them; the
    /// other commands warn).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    UnknownVariables(Vec<super::env::UnknownVariable>),
}

/// The layer a value came from, shown after it in error messages.
#[derive(Debug, Clone, Default)]
pub struct Origin(pub(super) Option<String>);

/// The origin the `config` crate gives values from the environment.
const ENVIRONMENT: &str = "the environment";

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_deref() {
            // A flag's origin is the flag itself (`--log-level`).
            Some(o) if o == ENVIRONMENT || o.starts_with("--") => write!(f, " (from {o})"),
            Some(file) => write!(f, " (in {file})"),
            None => Ok(()),
        }
    }
}
