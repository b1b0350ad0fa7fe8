//! The run directory: the paths of its files and the three ways a run directory comes to be: created for a new run, reopened
//! for a resume, written by an import.

use std::path::{Path, PathBuf};

use super::checkpoint::{self, RunState};
use super::lock::RunLock;
use crate::config::{Settings, TrainConfig, saved_config};
use crate::data::{self, SubwordTokenizer};
use crate::error::{ConfigError, TrainError};
use crate::files::{io, read_json, write_json};
use crate::model::ModelForMaskedLm;

/// A run directory's files.
pub struct RunDir(pub PathBuf);

impl RunDir {
    /// `config.json`.
    pub fn config(&self) -> PathBuf {
        self.0.join("config.json")
    }
    /// `tokenizer.json`.
    pub fn tokenizer(&self) -> PathBuf {
        self.0.join("tokenizer.json")
    }
    /// `summary.json`.
    pub fn summary(&self) -> PathBuf {
        self.0.join("summary.json")
    }
    /// `loss_curve.png`.
    pub fn loss_curve(&self) -> PathBuf {
        self.0.join("loss_curve.png")
    }
    /// `data/`: the data folder a run prepares from its corpus (unless it trains from a
    /// folder of its own, `config.data`).
    pub fn data(&self) -> PathBuf {
        self.0.join("data")
    }
    /// `.lock`: locked by the process that writes the run, holding its PID.
    pub fn lock_file(&self) -> PathBuf {
        self.0.join(".lock")
    }
    /// Makes this process the run's only writer until the returned lock is dropped
    /// ([`RunLock::acquire`] on [`lock_file`](Self::lock_file)).
    ///
    /// # Errors
    /// As [`RunLock::acquire`].
    pub fn lock(&self) -> Result<RunLock, TrainError> {
        RunLock::acquire(&self.0, &self.lock_file())
    }

    /// Where the run's data folder is: `config.data`, else the run's own [`data`](Self::data).
    pub fn data_path(&self, config: &TrainConfig) -> PathBuf {
        config.data.clone().unwrap_or_else(|| self.data())
    }

    /// Prepares the run's own data folder from `config.corpus` with `tokenizer` (else one
    /// trained on the training split) if it is missing: a run made before data folders
    /// existed, or an imported one. With `fresh` (a new run) it is made anew, since a folder
    /// left by an earlier attempt may have other settings. Nothing to do for a run that
    /// trains from a folder of its own (`config.data`). Only the process that writes the
    /// run may call it.
    ///
    /// # Errors
    /// Those of [`data::prepare_folder`].
    pub fn prepare_data(
        &self,
        config: &TrainConfig,
        tokenizer: Option<SubwordTokenizer>,
        fresh: bool,
    ) -> Result<(), TrainError> {
        let path = self.data();
        if config.data.is_some() || (!fresh && path.join("manifest.json").is_file()) {
            return Ok(());
        }
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(io(&path))?;
        }
        let training = match tokenizer {
            Some(_) => String::new(),
            None => format!(
                " (training a WordPiece vocabulary of {})",
                config.vocab_size
            ),
        };
        eprintln!(
            "preparing {} into {}{training}",
            config.corpus.display(),
            path.display()
        );
        data::prepare_folder(&config.corpus, &path, &config.prepare_options(tokenizer))?;
        Ok(())
    }

    /// Loads the run's configuration, as a run made before a setting existed was made
    /// ([`saved_config`]).
    ///
    /// # Errors
    /// [`TrainError::InvalidInput`] if the folder has no `config.json` (it is not a run);
    /// [`ConfigError`] naming the file and the field for a value of the wrong type;
    /// [`TrainError::Json`] / [`TrainError::Io`] naming `config.json`.
    pub fn load_config(&self) -> Result<TrainConfig, TrainError> {
        let path = self.config();
        if !path.is_file() {
            return Err(TrainError::InvalidInput(format!(
                "{} is not a run directory: it has no config.json (`mlm-train train --run DIR` \
                 makes one)",
                self.0.display()
            )));
        }
        let json: serde_json::Value = read_json(&path)?;
        if json.get("model_type").is_some() {
            return Err(TrainError::InvalidInput(format!(
                "{} is a Hugging Face model folder, not a run: import it with `mlm-train \
                 import-hf {0} --out RUN` (then --run RUN), or train from it with `mlm-train \
                 train --init-from {0}`",
                self.0.display()
            )));
        }
        saved_config(json, &path)
    }
}

/// A new run's directory, locked; [`NewRun::abandon`] undoes it if the run fails before its
/// first checkpoint.
pub struct NewRun {
    /// The directory.
    pub dir: RunDir,
    created: bool,
    _lock: RunLock,
}

impl NewRun {
    /// Creates (or reuses) `path` for a new run and locks it.
    ///
    /// # Errors
    /// [`TrainError::RunInUse`], before anything is written, if another process holds the
    /// lock; [`ConfigError`] if `path` already holds a run with a checkpoint (a run is
    /// resumed, never overwritten; one killed before its first checkpoint has nothing to
    /// keep and starts anew); [`TrainError::Io`].
    pub fn create(path: &Path) -> Result<Self, TrainError> {
        let dir = RunDir(path.to_path_buf());
        let created = !path.exists();
        std::fs::create_dir_all(path).map_err(io(path))?;
        // Another process may have made the folder: if it holds the lock, nothing is removed.
        let lock = dir.lock()?;
        if dir.config().exists() && checkpoint::latest(path).is_ok() {
            let reason = format!(
                "already holds a run: pass --resume {} to continue it, or choose another --run",
                path.display()
            );
            return Err(ConfigError::path(path, reason).into());
        }
        checkpoint::remove_partial(path)?;
        Ok(Self {
            dir,
            created,
            _lock: lock,
        })
    }

    /// Undoes a run that failed before its first checkpoint, so that the same command can be
    /// run again rather than be refused because the folder "already holds a run": the folder
    /// goes if [`create`](Self::create) made it, otherwise its `config.json`.
    pub fn abandon(self) {
        if checkpoint::latest(&self.dir.0).is_ok() {
            return;
        }
        let _ = if self.created {
            std::fs::remove_dir_all(&self.dir.0)
        } else {
            std::fs::remove_file(self.dir.config())
        };
    }
}

/// A run reopened to continue: its configuration, tokenizer and newest complete checkpoint.
pub struct ResumedRun {
    /// The directory.
    pub dir: RunDir,
    /// Its settings, with the new `max_steps` or `time_budget_seconds` if one was given
    /// ([`Settings::reopen`]).
    pub config: Settings,
    /// Its tokenizer.
    pub tokenizer: SubwordTokenizer,
    /// The checkpoint folder to continue from.
    pub checkpoint: PathBuf,
    _lock: Option<RunLock>,
}

impl ResumedRun {
    /// Opens the run in `path` to continue it: a run by step count to `max_steps` (its own
    /// if `None`), a run by the clock to `time_budget_seconds` of training in all (its own
    /// budget if `None`; the learning rate then follows the new budget from the time already
    /// spent, as it follows a new `max_steps` from the step reached). The writer locks it; a
    /// `reader` (a rank > 0 of a data-parallel run, which writes nothing) does not.
    ///
    /// # Errors
    /// [`TrainError::RunInUse`] while another process writes it; [`TrainError::Checkpoint`]
    /// if no complete checkpoint exists; [`TrainError::InvalidInput`] for an imported run (no
    /// optimizer state); [`TrainError::BudgetSpent`] if it trains by the clock and has spent
    /// the budget; [`ConfigError`] if it is already at `max_steps`, for a `max_steps`
    /// on a run by the clock or a `time_budget_seconds` on a run by step count, or if its
    /// tokenizer is not its vocabulary.
    pub fn open(
        path: &Path,
        max_steps: Option<usize>,
        time_budget_seconds: Option<f64>,
        reader: bool,
    ) -> Result<Self, TrainError> {
        let dir = RunDir(path.to_path_buf());
        // Locked first, so that a run still preparing its data is reported as busy; a folder
        // that is no run at all gets no lock file.
        let lock = if !reader && (dir.config().is_file() || dir.lock_file().is_file()) {
            Some(dir.lock()?)
        } else {
            None
        };
        let config = dir.load_config()?;
        let from = checkpoint::latest(path).map_err(|e| no_checkpoint(e, path))?;
        checkpoint::check_format(&from)?;
        let done: RunState = read_json(&from.join("state.json"))?;
        if !checkpoint::has_optimizer_state(&from) {
            return Err(TrainError::InvalidInput(format!(
                "{} has no optimizer state (an imported run has none): predict, eval and \
                 export-hf read it, but it cannot be resumed; train from its Hugging Face \
                 folder with `mlm-train train --init-from HF_DIR`",
                from.display()
            )));
        }
        let at = (done.step, done.elapsed_seconds);
        let config = Settings::reopen(config, path, at, max_steps, time_budget_seconds)?;
        let tokenizer = SubwordTokenizer::from_file(&dir.tokenizer())?;
        if tokenizer.vocab_size() != config.model.vocab_size() {
            let reason = format!(
                "has {} tokens, but config.json says vocab_size = {}",
                tokenizer.vocab_size(),
                config.model.vocab_size()
            );
            return Err(ConfigError::path(&dir.tokenizer(), reason).into());
        }
        Ok(Self {
            dir,
            config,
            tokenizer,
            checkpoint: from,
            _lock: lock,
        })
    }

    /// Records the resume: the new `max_steps` in `config.json`, and no checkpoint that a
    /// crash left half-written. Called once the resume can go ahead.
    ///
    /// # Errors
    /// [`TrainError::Io`] naming the file.
    pub fn commit(&self) -> Result<(), TrainError> {
        write_json(&self.dir.config(), &self.config)?;
        checkpoint::remove_partial(&self.dir.0).map(drop)
    }
}

/// A missing checkpoint, with what to do instead of resuming.
fn no_checkpoint(e: TrainError, path: &Path) -> TrainError {
    match e {
        TrainError::Checkpoint { path: at, reason } => TrainError::Checkpoint {
            path: at,
            reason: format!(
                "{reason}: the run stopped before its first checkpoint, so there is nothing \
                 to resume; run the same `train --run {}` command again to start it anew",
                path.display()
            ),
        },
        other => other,
    }
}

/// Writes an imported model as the run directory `path` that `predict`, `eval` and
/// `export-hf` read: the tokenizer, the checkpoint `step-00000000` (no optimizer state),
/// then `config.json`, last, because it marks a complete run directory.
///
/// # Errors
/// [`ConfigError`] if `path` already holds a run; [`TrainError::Io`] /
/// [`TrainError::Checkpoint`] naming the file.
pub fn write_imported(
    path: &Path,
    config: &Settings,
    tokenizer: &SubwordTokenizer,
    model: &ModelForMaskedLm,
) -> Result<(), TrainError> {
    let dir = RunDir(path.to_path_buf());
    if dir.config().exists() {
        return Err(ConfigError::path(path, "already holds a run; choose another --out").into());
    }
    std::fs::create_dir_all(path).map_err(io(path))?;
    tokenizer.save(&dir.tokenizer())?;
    let state = RunState {
        step: 0,
        elapsed_seconds: 0.0,
        tokens_seen: 0,
    };
    checkpoint::save_model(path, model, &state)?;
    write_json(&dir.config(), &**config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_state_without_elapsed_time_reads_as_none_spent() {
        let state: RunState = serde_json::from_str(r#"{"step": 5, "tokens_seen": 10}"#).unwrap();
        assert_eq!(
            (state.step, state.elapsed_seconds, state.tokens_seen),
            (5, 0.0, 10)
        );
    }
}
