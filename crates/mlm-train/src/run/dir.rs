//! The run directory: the paths of its files and the three ways a run directory comes to be: created for a new run, reopened
//! for a resume, written by an import.

use std::path::{Path, PathBuf};

use super::checkpoint::{self, RunState};
use super::lock::RunLock;
use crate::config::{DEFAULT_LOG_EVERY, TrainConfig, WeightDecayOn};
use crate::data::{self, Masking, SubwordTokenizer};
use crate::duration::human_duration;
use crate::error::{ConfigError, TrainError};
use crate::files::{io, read_json, write_json};
use crate::model::BertForMaskedLm;

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

    /// Loads the run's configuration. A run made before a model flag existed
    /// (`sinusoidal_positions`, `local_attention_init`) was made without it: the flag reads
    /// as `false`; one made before `world_size` existed ran as one process, one made
    /// before `masking` existed used token masking, one made before `weight_decay_on`
    /// existed decayed every parameter, and one made before `log_every` existed takes its
    /// default (it changes when metrics are read, never what they are).
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
        let mut value: serde_json::Value = read_json(&path)?;
        if let Some(model) = value.get_mut("model").and_then(|m| m.as_object_mut()) {
            for flag in ["sinusoidal_positions", "local_attention_init"] {
                model.entry(flag).or_insert(false.into());
            }
            model.entry("family").or_insert("bert".into());
            model.entry("position_offset").or_insert(0.into());
        }
        if let Some(config) = value.as_object_mut() {
            config.entry("world_size").or_insert(1.into());
            config.entry("data").or_insert(serde_json::Value::Null);
            config.entry("init_from").or_insert(serde_json::Value::Null);
            config.entry("line_by_line").or_insert(false.into());
            config.entry("text_field").or_insert("text".into());
            config.entry("mask_replace_prob").or_insert(0.8.into());
            config.entry("random_replace_prob").or_insert(0.1.into());
            config
                .entry("log_every")
                .or_insert(DEFAULT_LOG_EVERY.into());
            config
                .entry("masking")
                .or_insert(Masking::Token.to_string().into());
            config
                .entry("weight_decay_on")
                .or_insert(WeightDecayOn::All.to_string().into());
        }
        crate::config::config_from_json(value, &path)
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
    /// Its configuration, with the new `max_steps` or `time_budget_seconds` if one was given.
    pub config: TrainConfig,
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
        let mut config = dir.load_config()?;
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
        continue_to(&mut config, &done, path, max_steps, time_budget_seconds)?;
        let tokenizer = SubwordTokenizer::from_file(&dir.tokenizer())?;
        if tokenizer.vocab_size() != config.model.vocab_size {
            let reason = format!(
                "has {} tokens, but config.json says vocab_size = {}",
                tokenizer.vocab_size(),
                config.model.vocab_size
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

/// Sets where the run in `path` (`config`, at `done`) ends when resumed, and checks that it
/// has something left to train: a new `max_steps` for a run by step count, a new total
/// `time_budget` for a run by the clock; a run keeps its kind.
///
/// # Errors
/// [`TrainError::BudgetSpent`] for a run by the clock with no time left;
/// [`ConfigError`] for a run by step count at its `max_steps`, for a setting of the
/// other kind of run, or one that [`TrainConfig::validate`] refuses.
fn continue_to(
    config: &mut TrainConfig,
    done: &RunState,
    path: &Path,
    max_steps: Option<usize>,
    time_budget: Option<f64>,
) -> Result<(), TrainError> {
    let refuse = |reason: String| Err(TrainError::Config(ConfigError::path(path, reason)));
    match (config.time_budget_seconds, max_steps, time_budget) {
        (None, _, Some(_)) => {
            return refuse(format!(
                "trains by step count (to max_steps {}); --time-budget is for a run \
                 started with one (pass --max-steps to extend this one)",
                config.max_steps
            ));
        }
        (Some(budget), Some(_), _) => {
            return refuse(format!(
                "trains by the clock (a time budget of {}); --max-steps does not end it \
                 (pass a larger --time-budget to extend it)",
                human_duration(budget)
            ));
        }
        (Some(_), None, Some(budget)) => config.time_budget_seconds = Some(budget),
        (_, max_steps, _) => config.max_steps = max_steps.unwrap_or(config.max_steps),
    }
    config.validate()?;
    match config.time_budget_seconds {
        Some(budget) if done.elapsed_seconds >= budget => Err(TrainError::BudgetSpent {
            dir: path.to_path_buf(),
            budget_seconds: budget,
            elapsed_seconds: done.elapsed_seconds,
        }),
        None if done.step >= config.max_steps => {
            let reason = format!(
                "is already at step {} of max_steps {}: pass a larger --max-steps to continue",
                done.step, config.max_steps
            );
            Err(ConfigError::path(path, reason).into())
        }
        _ => Ok(()),
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
    config: &TrainConfig,
    tokenizer: &SubwordTokenizer,
    model: &BertForMaskedLm,
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
    write_json(&dir.config(), config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(step: usize, elapsed_seconds: f64) -> RunState {
        RunState {
            step,
            elapsed_seconds,
            tokens_seen: 0,
        }
    }

    fn by_clock(budget: f64) -> TrainConfig {
        TrainConfig::new("corpus".into()).with_time_budget_seconds(Some(budget))
    }

    fn message(result: Result<(), TrainError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn a_run_by_the_clock_resumes_with_its_budget_or_a_new_total() {
        let path = Path::new("run");
        let mut config = by_clock(300.0);
        continue_to(&mut config, &at(40, 120.0), path, None, None).unwrap();
        assert_eq!(config.time_budget_seconds, Some(300.0));
        continue_to(&mut config, &at(40, 120.0), path, None, Some(600.0)).unwrap();
        assert_eq!(config.time_budget_seconds, Some(600.0));
        assert_eq!(
            config.max_steps, 2000,
            "max_steps, the warm-up share, is kept"
        );
    }

    #[test]
    fn a_run_by_the_clock_with_its_budget_spent_has_nothing_left_to_train() {
        let path = Path::new("run");
        for (budget, new) in [(300.0, None), (300.0, Some(200.0)), (100.0, Some(300.5))] {
            let mut config = by_clock(budget);
            match continue_to(&mut config, &at(900, 300.5), path, None, new) {
                Err(e @ TrainError::BudgetSpent { .. }) => {
                    let text = e.to_string();
                    assert!(text.contains("nothing left to train"), "{text}");
                    assert!(text.contains("larger --time-budget"), "{text}");
                }
                other => panic!("{budget} {new:?}: {other:?}"),
            }
        }
        let mut config = by_clock(300.0);
        continue_to(&mut config, &at(900, 300.5), path, None, Some(301.0)).unwrap();
    }

    #[test]
    fn a_run_keeps_its_kind_when_resumed() {
        let path = Path::new("run");
        let text = message(continue_to(
            &mut by_clock(300.0),
            &at(40, 100.0),
            path,
            Some(2000),
            None,
        ));
        assert!(
            text.contains("trains by the clock (a time budget of 5m)"),
            "{text}"
        );
        let mut by_steps = TrainConfig::new("corpus".into());
        let text = message(continue_to(
            &mut by_steps,
            &at(40, 100.0),
            path,
            None,
            Some(600.0),
        ));
        assert!(
            text.contains("trains by step count (to max_steps 2000)"),
            "{text}"
        );
        assert_eq!(by_steps.time_budget_seconds, None);
        continue_to(&mut by_steps, &at(40, 100.0), path, Some(2000), None).unwrap();
        assert_eq!(by_steps.max_steps, 2000);
        let text = message(continue_to(&mut by_steps, &at(2000, 1.0), path, None, None));
        assert!(
            text.contains("is already at step 2000 of max_steps 2000"),
            "{text}"
        );
    }

    #[test]
    fn a_checkpoint_state_without_elapsed_time_reads_as_none_spent() {
        let state: RunState = serde_json::from_str(r#"{"step": 5, "tokens_seen": 10}"#).unwrap();
        assert_eq!(
            (state.step, state.elapsed_seconds, state.tokens_seen),
            (5, 0.0, 10)
        );
    }
}
