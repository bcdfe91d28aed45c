//! How values from Redis are shown in the log: ids (user and conversation ids, keys) never
//! reach a line as they are. With `secret`, everything that keeps what the log must not hold
//! out of it.

/// How much of an id a log line shows: enough to find it, never a 16 KiB line.
const ID_SHOWN: usize = 64;

/// An id from Redis as a log shows it: valid UTF-8 as it is, other bytes as `\xNN`, control
/// characters (newlines, ANSI escapes), spaces, `=` and `"` escaped so that no id can forge a
/// log line or a field of one, and anything past `ID_SHOWN` bytes cut, with how much was cut.
pub struct Id<'a>(pub &'a [u8]);

impl std::fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        let shown = &self.0[..self.0.len().min(ID_SHOWN)];
        for chunk in shown.utf8_chunks() {
            for c in chunk.valid().chars() {
                if c.is_control() || c == '\\' {
                    write!(f, "{}", c.escape_default())?;
                } else if c.is_whitespace() || c == '=' || c == '"' {
                    // What separates the fields of a text line: an id may not start a field.
                    write!(f, "{}", c.escape_unicode())?;
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
        assert_eq!(
            Id(b"u1 sweep=typing \"x\"").to_string(),
            "u1\\u{20}sweep\\u{3d}typing\\u{20}\\u{22}x\\u{22}"
        );
        let long = vec![b'x'; 16 * 1024];
        let shown = Id(&long).to_string();
        assert!(shown.starts_with(&"x".repeat(64)));
        assert!(shown.ends_with("…(+16320 bytes)"), "{shown}");
    }
}
