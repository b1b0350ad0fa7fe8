//! The training run: a new run or a resume, driven step by step through a [`Trainer`] over
//! the [`BatchSchedule`], with validation, atomic checkpoints, metrics, plot and summary, as
//! each step's [`plan`] says.

use burn::tensor::Device;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::distributed::ProcessGroup;
use super::memory::check_fits;
use super::plan::{Next, last_step, plan};
use super::progress::{self, Progress, RunEnd};
use super::stop::{self, StopSignal};
use super::trainer::{StepMetrics, StepOutput, Trainer};
use crate::config::{Settings, Sources, TrainConfig, check_same_vocab};
use crate::data::{self, BatchSchedule, SubwordTokenizer};
use crate::error::{ConfigError, TrainError};
use crate::eval::EvalMetrics;
use crate::eval::held_out::EVAL_MASK_RATES;
use crate::files::write_json;
use crate::model::ModelForMaskedLm;
use crate::model::hf::Pretrained;
use crate::run::dir::{NewRun, ResumedRun, RunDir};
use crate::run::report::{MetricsLog, MetricsRow, Summary, plot_loss_curve};

/// Where and how a run trains: its folder, the device and backend, and the ranks it shares
/// the work with.
#[derive(Clone, Copy)]
pub struct RunContext<'a> {
    /// The run folder. Only the process that writes the run ([`RunContext::writes`])
    /// writes it; the other ranks of a data-parallel run read its `data/`.
    pub run_dir: &'a Path,
    /// The device it trains on.
    pub device: &'a Device,
    /// The backend's name, for the summary.
    pub backend: &'a str,
    /// The ranks of a data-parallel run, this process's among them; `None` for a process
    /// of its own.
    pub group: Option<&'a ProcessGroup>,
}

impl<'a> RunContext<'a> {
    /// A run in `run_dir` on `device` (of the backend named `backend`), as a process of its
    /// own.
    pub fn new(run_dir: &'a Path, device: &'a Device, backend: &'a str) -> Self {
        Self {
            run_dir,
            device,
            backend,
            group: None,
        }
    }

    /// The same run as rank `group.rank` of a data-parallel run (none: a process of its own).
    pub fn with_group(self, group: Option<&'a ProcessGroup>) -> Self {
        Self { group, ..self }
    }

    /// Whether this process writes the run: a single process, or rank 0.
    pub fn writes(&self) -> bool {
        self.group.is_none_or(|group| group.rank == 0)
    }
}

/// Starts a new run in `run_dir` (which must not hold one) and trains it to the end.
///
/// A SIGINT or SIGTERM (once [`crate::train::stop::install_handlers`] ran) ends the run early after
/// the current step, with a checkpoint, the plot and the summary: `Summary::stopped_by`.
///
/// # Errors
/// [`TrainError::RunInUse`], before anything is written, if another process writes
/// `run_dir`. Any data, configuration, checkpoint or numeric error, naming its file or
/// step. A run that fails before its first checkpoint leaves no run behind (`run_dir` is
/// removed if this call made it; otherwise its `config.json` is), so the same command can
/// be run again.
pub fn train(
    config: TrainConfig,
    run_dir: &Path,
    device: &Device,
    backend: &str,
) -> Result<Summary, TrainError> {
    train_with(config, &RunContext::new(run_dir, device, backend))
}

/// [`train`] in `context`: as rank `group.rank` of a data-parallel run of
/// `config.world_size` processes when a group is given, rank 0 prepares the run's data
/// folder (from `config.corpus`, unless `config.data` names one) while the others wait,
/// every rank maps it, resolves the same [`Settings`] and builds the same model, trains its
/// share of every global batch, and adds its gradients to the others'; rank 0 alone writes
/// the run folder (the other ranks read its `data/` and write nothing), which must therefore
/// be on a disk every rank sees.
///
/// The settings are resolved once ([`Settings::resolve`]), when the data folder they
/// depend on is open; everything after reads them.
///
/// # Errors
/// As [`train`]; [`TrainError::Config`] for a `config.world_size` other than the group's
/// (1 without a group); [`TrainError::Collective`] if the ranks disagree.
pub fn train_with(config: TrainConfig, context: &RunContext) -> Result<Summary, TrainError> {
    config.validate()?;
    check_fits(&config)?;
    check_group(&config, context.group)?;
    // Read and checked whole before anything is written.
    let start = Start::read(&config, context.device)?;
    if !context.writes() {
        let dir = RunDir(context.run_dir.to_path_buf());
        return start_run(config, start, &dir, context);
    }
    let run = NewRun::create(context.run_dir)?;
    let result = start_run(config, start, &run.dir, context);
    if result.is_err() {
        run.abandon();
    }
    result
}

/// What a new run reads before it writes anything: the checkpoint it continues (with its
/// weights) and the tokenizer it is given.
struct Start {
    checkpoint: Option<(Pretrained, ModelForMaskedLm)>,
    tokenizer: Option<SubwordTokenizer>,
}

impl Start {
    /// Reads `config.init_from`'s checkpoint and `config.tokenizer`, checks them against the
    /// settings ([`TrainConfig::check_start`]), and that `config.data`'s manifest reads (or,
    /// for a run that prepares its data, that `config.corpus` exists).
    ///
    /// # Errors
    /// Those of [`Pretrained::read`], [`Pretrained::load_model`],
    /// [`SubwordTokenizer::from_file`], [`TrainConfig::check_start`] and
    /// [`data::Manifest::read`]; [`TrainError::CorpusNotFound`].
    fn read(config: &TrainConfig, device: &Device) -> Result<Self, TrainError> {
        let tokenizer = config.tokenizer.as_deref();
        let tokenizer = tokenizer.map(SubwordTokenizer::from_file).transpose()?;
        let checkpoint = config.init_from.as_deref().map(Pretrained::read);
        let checkpoint = checkpoint.transpose()?;
        config.check_start(checkpoint.as_ref(), tokenizer.as_ref())?;
        match &config.data {
            Some(data) => drop(data::Manifest::read(data)?),
            None if !config.corpus.exists() => {
                return Err(TrainError::CorpusNotFound(config.corpus.clone()));
            }
            None => {}
        }
        let weights = checkpoint.map(|c| c.load_model(device).map(|model| (c, model)));
        Ok(Self {
            checkpoint: weights.transpose()?,
            tokenizer,
        })
    }
}

/// Where a run's first weights come from.
enum Weights {
    /// [`BertConfig::init_seeded`](crate::model::BertConfig::init_seeded) from the run's seed.
    Seeded,
    /// A pretrained checkpoint's ([`TrainConfig::init_from`]), with fresh optimizer state.
    Pretrained(Box<ModelForMaskedLm>),
    /// The run's own checkpoint folder, optimizer state and step included (a resume).
    Checkpoint(PathBuf),
}

/// Opens (the writer: prepares) the run's data, resolves the settings against it and what
/// the run starts from, writes the tokenizer and `config.json` of a new run in the locked
/// `dir` (if this process writes the run), then trains.
fn start_run(
    config: TrainConfig,
    start: Start,
    dir: &RunDir,
    context: &RunContext,
) -> Result<Summary, TrainError> {
    let tokenizer = start.tokenizer.clone();
    let data = open_data(&config, dir, tokenizer, true, context)?;
    let sources = Sources {
        checkpoint: start.checkpoint.as_ref().map(|(checkpoint, _)| checkpoint),
        tokenizer: start.tokenizer.as_ref(),
        data: &data,
    };
    let settings = Settings::resolve(config, &sources)?;
    if context.writes() {
        data.tokenizer.save(&dir.tokenizer())?;
        write_json(&dir.config(), &*settings)?;
    }
    let weights = match start.checkpoint {
        Some((_, model)) => Weights::Pretrained(Box::new(model)),
        None => Weights::Seeded,
    };
    run(&settings, &data, weights, context)
}

/// Continues the run in `run_dir` from its newest complete checkpoint, optionally to a
/// new `max_steps` (a run by step count); a run by the clock continues with what is left
/// of its time budget.
///
/// # Errors
/// As [`train`] ([`TrainError::RunInUse`] while another process writes `run_dir`), and
/// those of [`ResumedRun::open`] ([`TrainError::Checkpoint`] if no complete checkpoint
/// exists; [`TrainError::BudgetSpent`] for a run by the clock with no time left).
pub fn resume(
    run_dir: &Path,
    max_steps: Option<usize>,
    device: &Device,
    backend: &str,
) -> Result<Summary, TrainError> {
    resume_with(max_steps, None, &RunContext::new(run_dir, device, backend))
}

/// [`resume`] of the run in `context.run_dir`, as one rank of a data-parallel run
/// ([`train_with`]) if `context.group` is given: every rank reads the run's folder (on one
/// machine, or a shared disk), rank 0 alone writes it. `time_budget_seconds` gives a run by
/// the clock a new total budget, elapsed time included; the settings are the run's, reopened
/// to the new end ([`Settings::reopen`]).
///
/// # Errors
/// As [`resume`] and [`train_with`].
pub fn resume_with(
    max_steps: Option<usize>,
    time_budget_seconds: Option<f64>,
    context: &RunContext,
) -> Result<Summary, TrainError> {
    let writer = context.writes();
    let resumed = ResumedRun::open(context.run_dir, max_steps, time_budget_seconds, !writer)?;
    let settings = &resumed.config;
    check_fits(settings)?;
    check_group(settings, context.group)?;
    let tokenizer = Some(resumed.tokenizer.clone());
    let data = open_data(settings, &resumed.dir, tokenizer, false, context)?;
    let file = resumed.dir.tokenizer();
    check_same_vocab(&data, &resumed.tokenizer, "the run's tokenizer.json", &file)?;
    if writer {
        resumed.commit()?;
    }
    let from = Weights::Checkpoint(resumed.checkpoint.clone());
    run(settings, &data, from, context)
}

/// The run's world size is the number of processes the launcher started: a new run takes
/// it from its group ([`ProcessGroup::world_size`]), a resumed one must be started as
/// many times as it was.
fn check_group(config: &TrainConfig, group: Option<&ProcessGroup>) -> Result<(), TrainError> {
    let started = group.map_or(1, |group| group.world_size);
    if config.world_size == started {
        return Ok(());
    }
    let how = match config.world_size {
        1 => "as one process, without a launcher".to_string(),
        n => format!("as {n} processes: `mpirun -np {n} mlm-train train …`"),
    };
    Err(ConfigError::WorldSize {
        world_size: config.world_size,
        started,
        how,
    }
    .into())
}

/// The run's data folder, mapped: the writer prepares it where needed
/// ([`RunDir::prepare_data`]; `fresh`: anew, for a new run) while the other ranks wait.
///
/// # Errors
/// Data-folder errors; [`ConfigError`] if the training split has fewer sequences than a
/// batch or the held-out split none.
fn open_data(
    config: &TrainConfig,
    dir: &RunDir,
    tokenizer: Option<SubwordTokenizer>,
    fresh: bool,
    context: &RunContext,
) -> Result<data::DataFolder, TrainError> {
    if context.writes() {
        // An error here leaves the job (`ProcessGroup::finish` aborts the waiting ranks).
        dir.prepare_data(config, tokenizer, fresh)?;
    }
    if let Some(group) = context.group {
        group.barrier();
    }
    let data = data::DataFolder::open(&dir.data_path(config))?;
    progress::prepared(&data);
    if data.train.len() < config.batch_size {
        return Err(ConfigError::TrainingSplitTooSmall {
            sequences: data.train.len(),
            batch_size: config.batch_size,
        }
        .into());
    }
    if data.held_out.is_empty() {
        return Err(ConfigError::EmptyHeldOut.into());
    }
    progress::held_out_size(&data, config, EVAL_MASK_RATES.mlm_probability);
    Ok(data)
}

/// Trains from `weights` to `settings.max_steps` or to the end of the time budget, or until
/// a stop request, then writes the plot and the summary (the writer).
fn run(
    settings: &Settings,
    data: &data::DataFolder,
    weights: Weights,
    context: &RunContext,
) -> Result<Summary, TrainError> {
    let (config, device, tokenizer) = (&**settings, context.device, &data.tokenizer);
    // Validation reads the same first held-out sequences every time.
    let held_out = data.held_out.first(config.max_eval_sequences);
    let end = match config.time_budget_seconds {
        Some(budget) => RunEnd::Budget(budget),
        None => RunEnd::Step(config.max_steps),
    };
    let resumed = matches!(weights, Weights::Checkpoint(_));
    let mut trainer = match weights {
        Weights::Seeded => Trainer::new(config, tokenizer, device)?,
        Weights::Pretrained(model) => Trainer::from_model(config, *model, tokenizer, device)?,
        Weights::Checkpoint(from) => {
            Trainer::new(config, tokenizer, device)?.load_checkpoint(&from)?
        }
    };
    let (done, elapsed) = (trainer.state().step, trainer.state().elapsed_seconds);
    let dir = context
        .writes()
        .then(|| RunDir(context.run_dir.to_path_buf()));
    if let (true, Some(dir)) = (resumed, &dir) {
        progress::resuming(&dir.0, done, elapsed, end);
    }
    if let Some(group) = context.group {
        let facts = start_facts(config, tokenizer, data.train.len(), done)?;
        let sync = group.join(&facts)?;
        trainer = trainer.with_ranks(group.rank(), sync);
    }
    let mut session = Session {
        metrics: dir
            .as_ref()
            .map(|dir| MetricsLog::open(&dir.0, done))
            .transpose()?,
        schedule: BatchSchedule::new(
            &data.train,
            config.batch_size * config.world_size,
            config.grad_accumulation,
            config.seed,
        ),
        progress: Progress::new(done, elapsed, end),
        baseline: data::unigram_baseline(&data.unigram_counts, &tokenizer.special_ids),
        held_out: &held_out,
        tokenizer,
        config,
        dir: dir.as_ref(),
        trainer,
    };
    let (final_eval, stopped) = session.train()?;
    session.finish(final_eval, stopped, context.backend)
}

/// What every rank of a data-parallel run must share before its first step: the step, the
/// number of training sequences, a hash of each setting (`config.json` less the paths, which
/// may differ between machines), so that a disagreement names its setting, and a hash of
/// the vocabulary. Each hash goes as four 16-bit pieces (`MpiSum::check_agreement`).
fn start_facts(
    config: &TrainConfig,
    tokenizer: &SubwordTokenizer,
    n_sequences: usize,
    step: usize,
) -> Result<Vec<(String, f64)>, TrainError> {
    let mut settings = config.clone();
    (settings.corpus, settings.tokenizer, settings.data) = (PathBuf::new(), None, None);
    settings.init_from = None;
    let serde_json::Value::Object(settings) =
        serde_json::to_value(&settings).expect("a TrainConfig is JSON")
    else {
        unreachable!("a TrainConfig is a JSON object")
    };
    let hashed = settings
        .iter()
        .map(|(key, value)| (format!("the setting `{key}` (a hash)"), value.to_string()))
        .chain([(
            "the vocabulary (a hash)".to_string(),
            tokenizer.vocab()?.join("\n"),
        )]);
    let mut facts = vec![
        ("the step to start from".to_string(), step as f64),
        (
            "the number of training sequences".to_string(),
            n_sequences as f64,
        ),
    ];
    for (name, text) in hashed {
        let digest = Sha256::digest(text.as_bytes());
        facts.extend(digest.chunks(2).take(4).map(|piece| {
            let piece = u16::from_le_bytes([piece[0], piece[1]]);
            (name.clone(), f64::from(piece))
        }));
    }
    Ok(facts)
}

/// A training session: the trainer, where its batches come from, and where its results go.
struct Session<'a> {
    trainer: Trainer,
    schedule: BatchSchedule<'a>,
    /// `None` on a rank that does not write the run.
    metrics: Option<MetricsLog>,
    progress: Progress,
    /// The unigram entropy (nats) and the most-frequent-token accuracy.
    baseline: (f64, f64),
    held_out: &'a [Vec<u32>],
    tokenizer: &'a SubwordTokenizer,
    config: &'a TrainConfig,
    dir: Option<&'a RunDir>,
}

impl Session<'_> {
    /// Steps until `max_steps` (by the clock: until a step finds the time budget spent) or a
    /// stop request; returns the last step's evaluation (if that step was evaluated) and the
    /// signal (of any rank) that ended the run early.
    fn train(&mut self) -> Result<(Option<EvalMetrics>, Option<StopSignal>), TrainError> {
        let first = self.trainer.state().step + 1;
        // A signal during data preparation: stop before training anything.
        if let Some(signal) = stop::requested() {
            return Err(TrainError::Stopped {
                signal: signal.name(),
                next_step: first,
                exit_status: signal.exit_status(),
            });
        }
        if first == 1 && self.config.init_from.is_some() {
            self.validate_start()?;
        }
        let mut final_eval = None;
        for step in first..=last_step(self.config) {
            let batches = self.schedule.step(step);
            let batches = batches
                .iter()
                .map(|(k, sequences)| (*k, sequences.iter().map(Vec::as_slice).collect()))
                .collect();
            let out = self
                .trainer
                .step(batches)
                .inspect_err(|_| self.progress.abandon())?;
            let plan = plan(self.config, &out, self.dir.is_some());
            // The step's metrics wait on the device until the plan reads them all at once.
            let latest = match plan.read_metrics {
                true => self.log_steps()?,
                false => None,
            };
            // The summary's evaluation is of the last step's weights.
            final_eval = plan
                .evaluate
                .then(|| self.validate(&out, latest))
                .transpose()?;
            if let (true, Some(dir)) = (plan.checkpoint, self.dir) {
                self.trainer.checkpoint(&dir.0)?;
            }
            match plan.next {
                Next::Continue => {}
                Next::End => break,
                Next::Stop(signal) => {
                    self.progress.abandon();
                    return Ok((final_eval, Some(signal)));
                }
            }
        }
        self.progress.finish();
        Ok((final_eval, None))
    }

    /// Validates the weights after the step `out` (whose training metrics, if just read,
    /// are `latest`), logs a row and a line.
    fn validate(
        &mut self,
        out: &StepOutput,
        latest: Option<StepMetrics>,
    ) -> Result<EvalMetrics, TrainError> {
        if let Some(StepMetrics { out, loss, .. }) = latest {
            let (elapsed, tokens_per_second) = (out.elapsed_seconds, out.tokens_per_second);
            self.progress
                .log(out.step, elapsed, loss, tokens_per_second);
        }
        let eval = self.trainer.validate(self.held_out, self.tokenizer)?;
        self.log(out.row("valid", eval.loss, eval.accuracy))?;
        self.progress
            .println(&validation_line(out.step, &eval, self.baseline.0));
        Ok(eval)
    }

    /// Validates a pretrained checkpoint's weights before the first step: where continued
    /// pretraining starts from, logged as step 0.
    fn validate_start(&mut self) -> Result<(), TrainError> {
        let eval = self.trainer.validate(self.held_out, self.tokenizer)?;
        self.log(MetricsRow {
            step: 0,
            split: "valid".into(),
            loss: eval.loss,
            accuracy: eval.accuracy,
            perplexity: eval.perplexity(),
            learning_rate: 0.0,
            tokens_per_second: 0.0,
            elapsed_seconds: 0.0,
        })?;
        self.progress
            .println(&validation_line(0, &eval, self.baseline.0));
        Ok(())
    }

    /// Reads the training metrics of the steps since the last read ([`Trainer::take_metrics`]),
    /// logs a row for each and shows the latest; returns it.
    fn log_steps(&mut self) -> Result<Option<StepMetrics>, TrainError> {
        let metrics = self
            .trainer
            .take_metrics()
            .inspect_err(|_| self.progress.abandon())?;
        for step in &metrics {
            self.log(step.out.row("train", step.loss, step.accuracy))?;
        }
        let latest = metrics.last().copied();
        if let Some(latest) = latest {
            let out = latest.out;
            self.progress.step(
                out.step,
                out.elapsed_seconds,
                latest.loss,
                out.tokens_per_second,
            );
        }
        Ok(latest)
    }

    fn log(&mut self, row: MetricsRow) -> Result<(), TrainError> {
        match self.metrics.as_mut() {
            Some(metrics) => metrics.push(row),
            None => Ok(()),
        }
    }

    /// The summary of the run (written with the plot by the writer), after a final
    /// evaluation unless the last step had one.
    fn finish(
        self,
        final_eval: Option<EvalMetrics>,
        stopped: Option<StopSignal>,
        backend: &str,
    ) -> Result<Summary, TrainError> {
        let final_eval = match final_eval {
            Some(eval) => eval,
            None => self.trainer.validate(self.held_out, self.tokenizer)?,
        };
        let stopped_by = stopped.map(StopSignal::name);
        let summary = self
            .trainer
            .summary(&final_eval, self.baseline, backend, stopped_by);
        if let (Some(dir), Some(metrics)) = (self.dir, &self.metrics) {
            plot_loss_curve(metrics.rows(), self.baseline.0, &dir.loss_curve())?;
            write_json(&dir.summary(), &summary)?;
        }
        Ok(summary)
    }
}

/// The line that reports a validation.
fn validation_line(step: usize, eval: &EvalMetrics, unigram_entropy: f64) -> String {
    format!(
        "step {step}: validation loss {:.4} (unigram {unigram_entropy:.4}), accuracy {:.1} %, \
         perplexity {:.1}",
        eval.loss,
        100.0 * eval.accuracy,
        eval.perplexity()
    )
}
