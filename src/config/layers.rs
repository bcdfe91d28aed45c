//! The layers the `config` crate merges that presence-sweeper supplies itself: the file, read
//! once and named as the operator gave it, and the command-line flags, each named by its flag.

use std::path::Path;

use config::{FileFormat, Format, Map, Source, Value, ValueKind};

use super::error::ConfigError;

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
        FileFormat::Toml
            .parse(Some(&self.shown), &self.text)
            .map_err(|cause| config::ConfigError::FileParse {
                uri: Some(self.shown.clone()),
                cause,
            })
    }
}

/// Command-line flags that set configuration keys: (dotted key, flag, value).
#[derive(Debug, Clone, Default)]
pub(super) struct FlagLayer(pub(super) Vec<(&'static str, &'static str, String)>);

impl Source for FlagLayer {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, config::ConfigError> {
        Ok(self
            .0
            .iter()
            .map(|(key, flag, value)| {
                let origin = (*flag).to_owned();
                let value = Value::new(Some(&origin), ValueKind::String(value.clone()));
                ((*key).to_owned(), value)
            })
            .collect())
    }
}
