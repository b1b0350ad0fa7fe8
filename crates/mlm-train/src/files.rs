//! The run's files: JSON read and written whole, every write atomic, every error naming its
//! path.

use std::path::{Path, PathBuf};

use crate::error::TrainError;

/// Attaches a path to an I/O error.
pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TrainError {
    let path = path.into();
    move |source| TrainError::Io { path, source }
}

/// Reads and parses a JSON file, naming it in every error.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, TrainError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    serde_json::from_str(&text).map_err(|source| TrainError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `value` as pretty JSON atomically (temporary file, then rename).
pub(crate) fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), TrainError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| TrainError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    write_atomic(path, text.as_bytes())
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename,
/// so a reader sees the old file or the new one, never half of one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}
