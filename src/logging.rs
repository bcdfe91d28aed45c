//! Logging to stderr, as text or JSON lines.

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Quietens dependencies that log routine chatter at INFO.
const QUIET: &str = "tokio_cron_scheduler=warn";

/// Installs the global subscriber. `log.level` was validated when the configuration loaded.
pub fn init(cfg: &LogConfig) {
    let filter = EnvFilter::builder()
        .parse(format!("{},{QUIET}", cfg.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests running commands in one process) is harmless: keep the first.
    let _ = match cfg.format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// How much of an id a log line shows: enough to find it, never a 16 KiB line.
const ID_SHOWN: usize = 64;

/// An id from Redis as a log shows it: valid UTF-8 as it is, other bytes as `\xNN`, control
/// characters (newlines, ANSI escapes) escaped so that no id can forge or garble a log line, and
/// anything past [`ID_SHOWN`] bytes cut, with how much was cut.
pub(crate) struct Id<'a>(pub(crate) &'a [u8]);

impl std::fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        let shown = &self.0[..self.0.len().min(ID_SHOWN)];
        for chunk in shown.utf8_chunks() {
            for c in chunk.valid().chars() {
                if c.is_control() || c == '\\' {
                    write!(f, "{}", c.escape_default())?;
                } else {
                    f.write_char(c)?;
                }
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        if self.0.len() > shown.len() {
            write!(f, "…(+{} bytes)", self.0.len() - shown.len())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Id;

    #[test]
    fn ids_cannot_forge_or_flood_a_line() {
        assert_eq!(Id(b"u42").to_string(), "u42");
        assert_eq!(Id("zoë".as_bytes()).to_string(), "zoë");
        assert_eq!(Id(b"a\nb\x1b[31m\\").to_string(), "a\\nb\\u{1b}[31m\\\\");
        assert_eq!(Id(b"\xff\xfeok").to_string(), "\\xff\\xfeok");
        let long = vec![b'x'; 16 * 1024];
        let shown = Id(&long).to_string();
        assert!(shown.starts_with(&"x".repeat(64)));
        assert!(shown.ends_with("…(+16320 bytes)"), "{shown}");
    }
}
