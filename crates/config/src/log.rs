//! `[log]`: the format and level of the daemon's log lines.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

use super::section::{Key, Shown};

/// `[log]`. Every setting is explained in the shipped `config/presence-sweeper.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log {
    /// `log.format`: text or JSON lines.
    pub format: LogFormat,
    /// `log.level`: a level or a `tracing` filter directive, checked when read (a misspelt level is an error).
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

impl Log {
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

/// Checks a `log.level`: a level, or a `tracing` filter whose every directive has a level.
///
/// A filter takes a bare word as a target name, so a misspelt level (`wraning`) would be a
/// valid filter that shows only the lines of a target called `wraning`: none at all.
pub(crate) fn check_level(text: &str) -> Result<(), String> {
    const LEVELS: &str = "off, error, warn, info, debug, trace";
    for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if !directive.contains('=') && directive.parse::<LevelFilter>().is_err() {
            return Err(format!(
                "{directive:?} is not a level ({LEVELS}); a filter directive names a target and \
                 a level, as in \"presence_sweeper=debug\""
            ));
        }
    }
    if text.trim().is_empty() {
        return Err(format!("empty; a level is one of {LEVELS}"));
    }
    EnvFilter::builder()
        .parse(text)
        .map(drop)
        .map_err(|e| format!("not a level or tracing filter: {e}"))
}

#[cfg(test)]
mod tests {
    use super::check_level;

    #[test]
    fn levels_and_filters_pass_and_misspellings_do_not() {
        for ok in [
            "info",
            "WARN",
            "off",
            "info,presence_sweeper=debug",
            "h2=warn",
        ] {
            assert_eq!(check_level(ok), Ok(()), "{ok}");
        }
        for bad in ["wraning", "info,debgu", "", "presence_sweeper=loud"] {
            assert!(check_level(bad).is_err(), "{bad}");
        }
    }
}
