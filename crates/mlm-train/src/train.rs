//! The training run: a new run or a resume, driven step by step through a [`Trainer`] over
//! the [`BatchSchedule`], with validation, atomic checkpoints, metrics, plot and summary.
//!
//! A loop of our own rather than burn-train's `Learner`: the `Learner` of burn 0.21 averages
//! accumulated gradients per micro-batch (a mean of means, not Σ sums ÷ Σ counts), clips
//! per parameter rather than by global norm, and cannot resume a run mid-epoch at the
//! same data order and masks. Each of those is a line here.

use std::path::{Path, PathBuf};

use burn::tensor::backend::AutodiffBackend;

use crate::data::{self, BatchSchedule, WordPieceTokenizer};
use crate::error::{TrainError, write_json};
use crate::eval::EvalMetrics;
use crate::progress::Progress;
use crate::report::{MetricsLog, Summary, plot_loss_curve};
use crate::run_dir::{NewRun, ResumedRun, RunDir};
use crate::trainer::{Rank, Trainer};

use crate::config::TrainConfig;

/// Starts a new run in `run_dir` (which must not hold one) and trains it to the end.
///
/// A SIGINT or SIGTERM (once [`crate::stop::install_handlers`] ran) ends the run early after
/// the current step, with a checkpoint, the plot and the summary: `Summary::stopped_by`.
///
/// # Errors
/// [`TrainError::RunInUse`], before anything is written, if another process writes
/// `run_dir`. Any data, configuration, checkpoint or numeric error, naming its file or
/// step. A run that fails before its first checkpoint leaves no run behind (`run_dir` is
/// removed if this call made it; otherwise its `config.json` is), so the same command can
/// be run again.
pub fn train<B: AutodiffBackend>(
    mut config: TrainConfig,
    run_dir: &Path,
    device: &B::Device,
    backend: &str,
) -> Result<Summary, TrainError> {
    config.resolve(None);
    config.validate()?;
    // An absolute corpus path, so the run resumes and evaluates from any directory.
    config.corpus = std::fs::canonicalize(&config.corpus)
        .map_err(|_| TrainError::CorpusNotFound(config.corpus.clone()))?;
    let run = NewRun::create(run_dir)?;
    let result = start::<B>(&mut config, &run.dir, device, backend);
    if result.is_err() {
        run.abandon();
    }
    result
}

/// Writes the tokenizer and `config.json` of a new run in the locked `dir`, then trains.
fn start<B: AutodiffBackend>(
    config: &mut TrainConfig,
    dir: &RunDir,
    device: &B::Device,
    backend: &str,
) -> Result<Summary, TrainError> {
    let tokenizer = config
        .tokenizer
        .as_deref()
        .map(WordPieceTokenizer::from_file)
        .transpose()?;
    let prepared = prepare_data(config, tokenizer)?;
    prepared.tokenizer.save(&dir.tokenizer())?;
    config.resolve(Some(&prepared.tokenizer));
    write_json(&dir.config(), config)?;
    run::<B>(config, dir, prepared, None, device, backend)
}

/// Continues the run in `run_dir` from its newest complete checkpoint, optionally to a
/// new `max_steps`.
///
/// # Errors
/// As [`train`] ([`TrainError::RunInUse`] while another process writes `run_dir`), and
/// those of [`ResumedRun::open`] ([`TrainError::Checkpoint`] if no complete checkpoint
/// exists).
pub fn resume<B: AutodiffBackend>(
    run_dir: &Path,
    max_steps: Option<usize>,
    device: &B::Device,
    backend: &str,
) -> Result<Summary, TrainError> {
    let resumed = ResumedRun::open(run_dir, max_steps, false)?;
    let prepared = prepare_data(&resumed.config, Some(resumed.tokenizer.clone()))?;
    resumed.commit()?;
    let from = resumed.checkpoint.clone();
    run::<B>(
        &resumed.config,
        &resumed.dir,
        prepared,
        Some(from),
        device,
        backend,
    )
}

fn prepare_data(
    config: &TrainConfig,
    tokenizer: Option<WordPieceTokenizer>,
) -> Result<data::PreparedData, TrainError> {
    eprintln!(
        "reading {}{}",
        config.corpus.display(),
        match tokenizer {
            Some(_) => String::new(),
            None => format!(
                " and training a WordPiece vocabulary of {}",
                config.vocab_size
            ),
        }
    );
    let prepared = data::prepare(
        &config.corpus,
        tokenizer,
        config.vocab_size,
        config.max_seq_len,
        config.held_out_every,
    )?;
    eprintln!(
        "{} training and {} held-out sequences of up to {} tokens, a vocabulary of {} tokens",
        prepared.train.len(),
        prepared.held_out.len(),
        config.max_seq_len,
        prepared.tokenizer.vocab_size()
    );
    if prepared.train.len() < config.batch_size {
        return Err(TrainError::Config(format!(
            "the training split has {} sequences, fewer than one batch of {}",
            prepared.train.len(),
            config.batch_size
        )));
    }
    if prepared.held_out.is_empty() {
        return Err(TrainError::Config(
            "the held-out split is empty: the corpus is too small".into(),
        ));
    }
    Ok(prepared)
}

/// Trains from `resume_from` (or from scratch) to `config.max_steps`, or until a stop
/// request, then writes the plot and the summary.
fn run<B: AutodiffBackend>(
    config: &TrainConfig,
    dir: &RunDir,
    prepared: data::PreparedData,
    resume_from: Option<PathBuf>,
    device: &B::Device,
    backend: &str,
) -> Result<Summary, TrainError> {
    let data::PreparedData {
        tokenizer,
        train: sequences,
        held_out,
    } = prepared;
    let baseline =
        data::unigram_baseline(&sequences, &tokenizer.special_ids, tokenizer.vocab_size());
    let mut trainer = Trainer::<B>::new(config, &tokenizer, device)?;
    if let Some(from) = &resume_from {
        trainer = trainer.load_checkpoint(from)?;
    }
    let first = trainer.state().step + 1;
    let mut metrics = MetricsLog::open(&dir.0, first - 1)?;
    let rank = Rank::SINGLE;
    let global_batch = config.batch_size * rank.world_size;
    let mut schedule = BatchSchedule::new(
        &sequences,
        global_batch,
        config.grad_accumulation,
        config.seed,
    );
    let progress = Progress::new(first - 1, config.max_steps);
    // A signal during data preparation: stop before training anything.
    if let Some(signal) = crate::stop::requested() {
        return Err(TrainError::Stopped {
            signal: signal.name(),
            next_step: first,
            exit_status: signal.exit_status(),
        });
    }
    let mut final_eval = None;
    let mut stopped = false;
    for step in first..=config.max_steps {
        let out = trainer
            .step(schedule.step(step))
            .inspect_err(|_| progress.abandon())?;
        metrics.push(out.row("train", out.loss, out.accuracy))?;
        progress.step(step, out.loss, out.tokens_per_second);
        // A stop request ends the run here, as if this were its last step, except that no
        // metrics row is added: a resumed run then writes the same metrics.csv as an
        // uninterrupted one.
        let last = step == config.max_steps;
        stopped = out.stop_requested && !last;
        // The summary's evaluation is of the last step's weights.
        final_eval = None;
        if step.is_multiple_of(config.eval_every) || last {
            progress.log(step, out.loss, out.tokens_per_second);
            let eval = trainer.validate(&held_out, &tokenizer)?;
            metrics.push(out.row("valid", eval.loss, eval.accuracy))?;
            progress.println(&validation_line(step, &eval, baseline.0));
            final_eval = Some(eval);
        }
        if step.is_multiple_of(config.checkpoint_every) || last || stopped {
            trainer.checkpoint(&dir.0)?;
        }
        if stopped {
            break;
        }
    }
    if stopped {
        progress.abandon();
    } else {
        progress.finish();
    }
    let final_eval = match final_eval {
        Some(eval) => eval,
        None => trainer.validate(&held_out, &tokenizer)?,
    };
    plot_loss_curve(metrics.rows(), baseline.0, &dir.loss_curve())?;
    let stopped_by = crate::stop::requested().filter(|_| stopped);
    let summary = trainer.summary(&final_eval, baseline, backend, stopped_by.map(|s| s.name()));
    write_json(&dir.summary(), &summary)?;
    Ok(summary)
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
