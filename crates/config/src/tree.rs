//! Walking the merged configuration tree: typed reads that remember each value's key and layer,
//! and that leave behind, for the unknown-key check, whatever nobody read.

use std::collections::BTreeMap;
use std::time::Duration;

use config::{Map, Value, ValueKind};

use super::duration;
use super::error::{ConfigError, Origin};

/// Folds a multi-line parser message (with its source snippet) into one line.
pub(super) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| {
            let snippet = l
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start();
            !l.is_empty() && !snippet.starts_with('|')
        })
        .collect::<Vec<_>>()
        .join(": ")
}

/// A string as a quoted, escaped TOML (and JSON) string.
pub(super) fn q(s: &str) -> String {
    serde_json::to_string(s).expect("strings always serialize")
}

/// A value read from the tree, with what is needed to complain about it.
pub(super) struct Field<T> {
    pub(super) key: String,
    pub(super) value: T,
    pub(super) shown: String,
    pub(super) origin: Origin,
}

impl<T> Field<T> {
    pub(super) fn invalid(&self, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            key: self.key.clone(),
            value: self.shown.clone(),
            origin: self.origin.clone(),
            reason: reason.to_owned(),
        }
    }
}

/// A table of the merged tree; keys are removed as they are read, so what is left is unknown.
pub(super) struct Table {
    pub(super) path: String,
    pub(super) map: Map<String, Value>,
    origin: Origin,
    /// What was read, by name: the value as shown and its layer, for checks that involve
    /// several keys and complain about one of them once all are read.
    read: BTreeMap<String, (String, Origin)>,
}

impl Table {
    pub(super) fn new(path: String, map: Map<String, Value>) -> Self {
        Self {
            path,
            map,
            origin: Origin::default(),
            read: BTreeMap::new(),
        }
    }

    pub(super) fn key(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    pub(super) fn take(&mut self, name: &str) -> Option<(String, Value)> {
        let value = self.map.remove(name)?;
        let origin = Origin::of(&value);
        self.read
            .insert(name.to_owned(), (show(&value.kind), origin));
        Some((self.key(name), value))
    }

    /// Whether key `name` was given (and read).
    pub(super) fn was_read(&self, name: &str) -> bool {
        self.read.contains_key(name)
    }

    /// An error about key `name`, already read, found only in the light of other keys.
    pub(super) fn invalid_key(&self, name: &str, reason: &str) -> ConfigError {
        let (value, origin) = self
            .read
            .get(name)
            .cloned()
            .unwrap_or_else(|| ("nothing".into(), self.defined_in()));
        ConfigError::Invalid {
            key: self.key(name),
            value,
            origin,
            reason: reason.to_owned(),
        }
    }

    /// Key `name` is required and absent: the error names the layer that defined this table.
    pub(super) fn missing(&self, name: &str) -> ConfigError {
        ConfigError::Missing {
            key: self.key(name),
            origin: self.defined_in(),
        }
    }

    /// The layer that defined this table. The `config` crate gives merged tables no origin, so
    /// this is that of the first of its values that has one.
    fn defined_in(&self) -> Origin {
        let values = self.read.values().map(|(_, o)| o.clone());
        let unread = self.map.values().map(Origin::of);
        std::iter::once(self.origin.clone())
            .chain(values)
            .chain(unread)
            .find(|o| *o != Origin::BuiltIn)
            .unwrap_or_default()
    }

    pub(super) fn table(&mut self, name: &str) -> Result<Table, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Ok(Table::new(self.key(name), Map::new()));
        };
        let origin = Origin::of(&value);
        match value.kind {
            ValueKind::Table(map) => Ok(Table {
                path: key,
                map,
                origin,
                read: BTreeMap::new(),
            }),
            other => Err(ConfigError::Invalid {
                key,
                value: show(&other),
                origin,
                reason: "must be a table".into(),
            }),
        }
    }

    /// An error about the table itself, such as its name, pointing at where it was defined.
    pub(super) fn invalid(&self, value: String, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            key: self.path.clone(),
            value,
            origin: self.defined_in(),
            reason: reason.to_owned(),
        }
    }

    pub(super) fn optional_string(
        &mut self,
        name: &str,
    ) -> Result<Option<Field<String>>, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Ok(None);
        };
        let origin = Origin::of(&value);
        let shown = show(&value.kind);
        match value.kind {
            ValueKind::String(s) => Ok(Some(Field {
                key,
                value: s,
                shown,
                origin,
            })),
            ValueKind::I64(_) | ValueKind::U64(_) | ValueKind::Float(_) | ValueKind::Boolean(_) => {
                let s = shown.clone();
                Ok(Some(Field {
                    key,
                    value: s,
                    shown,
                    origin,
                }))
            }
            _ => Err(ConfigError::Invalid {
                key,
                value: shown,
                origin,
                reason: "must be a string".into(),
            }),
        }
    }

    pub(super) fn string(&mut self, name: &str) -> Result<Field<String>, ConfigError> {
        self.optional_string(name)?
            .ok_or_else(|| self.missing(name))
    }

    /// A list of strings: a TOML array, or (from the environment) one comma-separated string.
    pub(super) fn list(&mut self, name: &str) -> Result<Vec<Field<String>>, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Ok(Vec::new());
        };
        let origin = Origin::of(&value);
        let items: Vec<(String, Origin)> = match value.kind {
            ValueKind::Array(items) => items
                .into_iter()
                .map(|v| {
                    let o = Origin::of(&v);
                    match v.kind {
                        ValueKind::String(s) => Ok((s, o)),
                        other => Err(ConfigError::Invalid {
                            key: key.clone(),
                            value: show(&other),
                            origin: o,
                            reason: "list items must be strings".into(),
                        }),
                    }
                })
                .collect::<Result<_, _>>()?,
            ValueKind::String(s) => s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| (s.to_owned(), origin.clone()))
                .collect(),
            other => {
                return Err(ConfigError::Invalid {
                    key,
                    value: show(&other),
                    origin,
                    reason: "must be a list of strings".into(),
                });
            }
        };
        Ok(items
            .into_iter()
            .enumerate()
            .map(|(i, (value, origin))| Field {
                key: format!("{key}[{i}]"),
                shown: q(&value),
                value,
                origin,
            })
            .collect())
    }

    /// A duration greater than zero and at most `max`.
    pub(super) fn duration(&mut self, name: &str, max: Duration) -> Result<Duration, ConfigError> {
        self.duration_field(name, max).map(|f| f.value)
    }

    /// A duration greater than zero and at most `max`, kept with its key and origin for checks
    /// of its own.
    pub(super) fn duration_field(
        &mut self,
        name: &str,
        max: Duration,
    ) -> Result<Field<Duration>, ConfigError> {
        let text = self.string(name)?;
        let d = duration::parse(&text.value, max).map_err(|reason| text.invalid(&reason))?;
        Ok(Field {
            key: text.key,
            value: d,
            shown: text.shown,
            origin: text.origin,
        })
    }

    pub(super) fn integer(&mut self, name: &str, min: i64, max: i64) -> Result<i64, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Err(self.missing(name));
        };
        let origin = Origin::of(&value);
        let shown = show(&value.kind);
        let n = value.into_int().map_err(|_| ConfigError::Invalid {
            key: key.clone(),
            value: shown.clone(),
            origin: origin.clone(),
            reason: "must be a whole number".into(),
        })?;
        if n < min || n > max {
            return Err(ConfigError::Invalid {
                key,
                value: shown,
                origin,
                reason: format!("must be between {min} and {max}"),
            });
        }
        Ok(n)
    }

    /// A number between `min` and `max`, if set.
    pub(super) fn optional_number(
        &mut self,
        name: &str,
        min: f64,
        max: f64,
    ) -> Result<Option<f64>, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Ok(None);
        };
        let origin = Origin::of(&value);
        let shown = show(&value.kind);
        let invalid = |reason: String| ConfigError::Invalid {
            key: key.clone(),
            value: shown.clone(),
            origin: origin.clone(),
            reason,
        };
        let n = match &value.kind {
            ValueKind::Float(f) => *f,
            ValueKind::I64(n) => *n as f64,
            ValueKind::U64(n) => *n as f64,
            ValueKind::String(s) => s
                .trim()
                .parse()
                .map_err(|_| invalid("must be a number".into()))?,
            _ => return Err(invalid("must be a number".into())),
        };
        if !(min..=max).contains(&n) {
            return Err(invalid(format!("must be between {min} and {max}")));
        }
        Ok(Some(n))
    }

    /// A whole number between `min` and `max`, if set.
    pub(super) fn optional_integer(
        &mut self,
        name: &str,
        min: i64,
        max: i64,
    ) -> Result<Option<i64>, ConfigError> {
        if !self.map.contains_key(name) {
            return Ok(None);
        }
        self.integer(name, min, max).map(Some)
    }

    /// A duration greater than zero and at most `max`, if set.
    pub(super) fn optional_duration(
        &mut self,
        name: &str,
        max: Duration,
    ) -> Result<Option<Duration>, ConfigError> {
        if !self.map.contains_key(name) {
            return Ok(None);
        }
        self.duration(name, max).map(Some)
    }

    pub(super) fn bool(&mut self, name: &str) -> Result<bool, ConfigError> {
        self.optional_bool(name)?.ok_or_else(|| self.missing(name))
    }

    pub(super) fn optional_bool(&mut self, name: &str) -> Result<Option<bool>, ConfigError> {
        let Some((key, value)) = self.take(name) else {
            return Ok(None);
        };
        let origin = Origin::of(&value);
        let shown = show(&value.kind);
        match value.kind {
            ValueKind::Boolean(b) => Ok(Some(b)),
            _ => Err(ConfigError::Invalid {
                key,
                value: shown,
                origin,
                reason: "must be true or false".into(),
            }),
        }
    }

    /// Fails on the first (alphabetically) key that nothing read.
    pub(super) fn finish(self) -> Result<(), ConfigError> {
        let unknown: BTreeMap<String, Value> = self.map.into_iter().collect();
        match unknown.into_iter().next() {
            None => Ok(()),
            Some((name, value)) => Err(ConfigError::UnknownKey {
                key: if self.path.is_empty() {
                    name
                } else {
                    format!("{}.{name}", self.path)
                },
                origin: match Origin::of(&value) {
                    Origin::BuiltIn => self.origin,
                    origin => origin,
                },
            }),
        }
    }
}

fn show(kind: &ValueKind) -> String {
    match kind {
        ValueKind::String(s) => q(s),
        ValueKind::Nil => "nothing".into(),
        ValueKind::Boolean(b) => b.to_string(),
        ValueKind::I64(n) => n.to_string(),
        ValueKind::I128(n) => n.to_string(),
        ValueKind::U64(n) => n.to_string(),
        ValueKind::U128(n) => n.to_string(),
        ValueKind::Float(n) => n.to_string(),
        ValueKind::Table(_) => "a table".into(),
        ValueKind::Array(_) => "a list".into(),
    }
}
