//! The layers the `config` crate merges that presence-sweeper supplies itself: the file, read
//! once and named as the operator gave it; the environment, each value named by its variable;
//! and the command-line flags, each named by its flag.

use std::collections::HashMap;
use std::path::Path;

use config::{FileFormat, Format, Map, Source, Value, ValueKind};

use super::env::{ENV_PREFIX, ENV_SEPARATOR, key_of};
use super::error::{ConfigError, Origin};

/// The configuration file, read once. The `config` crate's own file source would name it by a
/// rewritten path (relative to the working directory) and also try `path.toml`, `path.json`...
#[derive(Debug, Clone)]
pub(super) struct FileLayer {
    /// The path as given, which every message about the file shows.
    shown: String,
    text: String,
}

impl FileLayer {
    pub(super) fn read(path: &Path) -> Result<Self, ConfigError> {
        let read_error = |cause| ConfigError::ReadFile {
            path: path.to_owned(),
            cause,
        };
        // A directory or a FIFO given by mistake deserves a clear message, not a hang.
        if !std::fs::metadata(path).map_err(read_error)?.is_file() {
            return Err(read_error(std::io::Error::other("not a regular file")));
        }
        Ok(Self {
            shown: path.display().to_string(),
            text: std::fs::read_to_string(path).map_err(read_error)?,
        })
    }
}

impl Source for FileLayer {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, config::ConfigError> {
        let origin = Origin::File(self.shown.clone()).tag();
        FileFormat::Toml
            .parse(origin.as_ref(), &self.text)
            .map_err(|cause| config::ConfigError::FileParse {
                uri: Some(self.shown.clone()),
                cause,
            })
    }
}

/// Command-line flags that set configuration keys: (dotted key, flag, value).
#[derive(Debug, Clone, Default)]
pub(super) struct FlagLayer(pub(super) Vec<(&'static str, &'static str, String)>);

impl FlagLayer {
    /// The flags given.
    pub(super) fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|(_, flag, _)| *flag).collect()
    }
}

impl Source for FlagLayer {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, config::ConfigError> {
        Ok(self
            .0
            .iter()
            .map(|(key, flag, value)| {
                let origin = Origin::Flag((*flag).to_owned()).tag();
                let value = Value::new(origin.as_ref(), ValueKind::String(value.clone()));
                ((*key).to_owned(), value)
            })
            .collect())
    }
}

/// The `PRESENCE_SWEEPER__SECTION__KEY` variables: (dotted key, variable, value), ordered by
/// variable. The `config` crate's own environment source names every value "the environment",
/// and makes a key nobody asked for (`_redis`) of a malformed name
/// (`PRESENCE_SWEEPER___REDIS__URL`); this one names each variable, and refuses such names.
#[derive(Debug, Clone, Default)]
pub(super) struct EnvLayer(Vec<(String, String, String)>);

impl EnvLayer {
    pub(super) fn read(env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        // The prefix is matched whatever its case, as the `config` crate does.
        let settings = format!("{ENV_PREFIX}{ENV_SEPARATOR}");
        let mut found: Vec<(&str, &str)> = env
            .iter()
            .filter_map(|(name, value)| {
                let head = name.get(..settings.len())?;
                head.eq_ignore_ascii_case(&settings)
                    .then_some((name.as_str(), value.as_str()))
            })
            .collect();
        found.sort_unstable();
        found
            .into_iter()
            .map(|(name, value)| {
                let key = key_of(name, &name[settings.len()..])?;
                Ok((key, name.to_owned(), value.to_owned()))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

impl EnvLayer {
    /// The variables read, by name.
    pub(super) fn names(&self) -> Vec<String> {
        self.0.iter().map(|(_, name, _)| name.clone()).collect()
    }
}

impl Source for EnvLayer {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, config::ConfigError> {
        Ok(self
            .0
            .iter()
            .map(|(key, name, value)| {
                let origin = Origin::Variable(name.clone()).tag();
                (key.clone(), Value::new(origin.as_ref(), typed(value)))
            })
            .collect())
    }
}

/// A variable's value as the `config` crate's `try_parsing` reads it: a boolean, a whole
/// number, a number, or else a string (the sections read strings where they want them).
fn typed(value: &str) -> ValueKind {
    if let Ok(b) = value.to_lowercase().parse::<bool>() {
        ValueKind::Boolean(b)
    } else if let Ok(n) = value.parse::<i64>() {
        ValueKind::I64(n)
    } else if let Ok(x) = value.parse::<f64>() {
        ValueKind::Float(x)
    } else {
        ValueKind::String(value.to_owned())
    }
}
