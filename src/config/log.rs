//! `[log]`: the format and level of the daemon's log lines.

use tracing_subscriber::EnvFilter;

use super::section::{Key, Shown};

/// `[log]`. Every setting is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogConfig {
    /// `log.format`: text or JSON lines.
    pub format: LogFormat,
    /// `log.level`: a level or a `tracing` filter directive, checked by [`check_level`].
    pub level: String,
}

/// `log.format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
        }
    }
}

impl LogConfig {
    pub(super) const KEYS: &[Key<Self>] = &[
        Key {
            name: "format",
            read: |t, k, l| {
                let format = t.string(k)?;
                l.format = match format.value.as_str() {
                    "text" => LogFormat::Text,
                    "json" => LogFormat::Json,
                    _ => return Err(format.invalid("must be \"text\" or \"json\"")),
                };
                Ok(())
            },
            show: |l| Shown::text(l.format.as_str()),
        },
        Key {
            name: "level",
            read: |t, k, l| {
                let level = t.string(k)?;
                check_level(&level.value).map_err(|why| level.invalid(&why))?;
                l.level = level.value;
                Ok(())
            },
            show: |l| Shown::text(&l.level),
        },
    ];
}

/// Checks a `log.level`: a level or a `tracing` filter.
pub(crate) fn check_level(text: &str) -> Result<(), String> {
    EnvFilter::builder()
        .parse(text)
        .map(drop)
        .map_err(|e| format!("not a level or tracing filter: {e}"))
}
