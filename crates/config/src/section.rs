//! A section of the configuration as a table of its keys. Each key's name is written once, next
//! to how it is read from the merged tree and how the effective configuration (`check-config`)
//! prints it, so that reading and printing cannot drift apart.

use std::fmt::{Display, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use super::error::ConfigError;
use super::tree::{Table, q};

/// How one key is read into its section's struct `S`: from the table, under the key's name.
pub(super) type ReadFn<S> = fn(&mut Table, &'static str, &mut S) -> Result<(), ConfigError>;

/// One key of a section.
pub(super) struct Key<S> {
    /// The key's name in its table.
    pub(super) name: &'static str,
    /// Reads and validates the value into the section's struct.
    pub(super) read: ReadFn<S>,
    /// The value in effect, as `check-config` prints it.
    pub(super) show: fn(&S) -> Shown,
}

/// A value as the effective configuration prints it.
pub(super) enum Shown {
    /// A TOML value.
    Value(String),
    /// A TOML value, with a note after it (what a default follows, what is redacted).
    Noted(String, &'static str),
    /// Not set: printed as a comment, so that every key shows.
    Unset,
}

impl Shown {
    /// A string, quoted.
    pub(super) fn text(s: &str) -> Self {
        Self::Value(q(s))
    }

    /// A number or a boolean.
    pub(super) fn plain(v: impl Display) -> Self {
        Self::Value(v.to_string())
    }

    /// A duration, as the file would write it.
    pub(super) fn duration(d: Duration) -> Self {
        Self::text(&humantime::format_duration(d).to_string())
    }

    /// An optional string.
    pub(super) fn optional(s: Option<&str>) -> Self {
        s.map_or(Self::Unset, Self::text)
    }

    /// An optional path, as given.
    pub(super) fn path(p: Option<&PathBuf>) -> Self {
        p.map_or(Self::Unset, |p| Self::text(&p.to_string_lossy()))
    }

    /// The same value with a note after it; nothing to note on an unset value.
    pub(super) fn noted(self, note: &'static str) -> Self {
        match self {
            Self::Value(v) | Self::Noted(v, _) => Self::Noted(v, note),
            Self::Unset => Self::Unset,
        }
    }

    /// A list of strings.
    pub(super) fn list(items: impl IntoIterator<Item = String>) -> Self {
        let items: Vec<String> = items.into_iter().map(|i| q(&i)).collect();
        Self::Value(format!("[{}]", items.join(", ")))
    }
}

/// Reads every key of `keys` from `t` into `into`, in order.
pub(super) fn read<S>(t: &mut Table, keys: &[Key<S>], into: &mut S) -> Result<(), ConfigError> {
    keys.iter().try_for_each(|k| (k.read)(t, k.name, into))
}

/// Appends `[header]` and every key of `keys` as `from` has it, then a blank line.
pub(super) fn write<S>(out: &mut String, header: &str, keys: &[Key<S>], from: &S) {
    let _ = writeln!(out, "[{header}]");
    for k in keys {
        let _ = match (k.show)(from) {
            Shown::Value(v) => writeln!(out, "{} = {v}", k.name),
            Shown::Noted(v, note) => writeln!(out, "{} = {v}  # {note}", k.name),
            Shown::Unset => writeln!(out, "# {}: unset", k.name),
        };
    }
    out.push('\n');
}
