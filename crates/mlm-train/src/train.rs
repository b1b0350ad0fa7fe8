//! The training run: AdamW with linear warm-up and decay, global-norm clipping at 1.0,
//! gradient accumulation normalised by the global masked count, validation, atomic
//! checkpoints, exact resume, metrics, plot and summary.
//!
//! A loop of our own rather than burn-train's `Learner`: the `Learner` of burn 0.21 averages
//! accumulated gradients per micro-batch (a mean of means, not Σ sums ÷ Σ counts), clips
//! per parameter rather than by global norm, and cannot resume a run mid-epoch at the
//! same data order and masks. Each of those is a line here.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::config::Config;
use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::{AdamWConfig, GradientsAccumulator, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, ElementConversion, Tensor, TensorData};
use mlm_core::{IGNORE_INDEX, MaskedCrossEntropy, Masker, MaskingConfig};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::checkpoint::{self, RunState};
use crate::data::{self, MlmBatch, WordPieceTokenizer, epoch_order, make_batch, make_shards};
use crate::error::{TrainError, io, read_json, write_json};
use crate::model::{BertConfig, BertForMaskedLm};
use crate::progress::Progress;
use crate::report::{MetricsLog, MetricsRow, SegmentSummary, Summary, plot_loss_curve};
pub use crate::run_dir::RunDir;

/// Everything that defines a run; saved as `config.json` in the run directory.
#[derive(Config, Debug)]
pub struct TrainConfig {
    /// A `.txt` file or a folder of them.
    pub corpus: PathBuf,
    /// Model sizes; `vocab_size` is set from the tokenizer.
    #[config(default = "BertConfig::new(8192).with_local_attention_init(true)")]
    pub model: BertConfig,
    /// A `tokenizer.json` or `vocab.txt` to use instead of training one.
    #[config(default = "None")]
    pub tokenizer: Option<PathBuf>,
    /// Size of the trained WordPiece vocabulary, specials included.
    #[config(default = 8192)]
    pub vocab_size: usize,
    /// Longest packed sequence, `[CLS]` and `[SEP]` included. 64 (with 64 sequences a batch)
    /// reached a lower held-out loss than 128 × 32 for the same tokens in the tiny model's
    /// short run; the position table keeps 128 rows for `predict`.
    #[config(default = 64)]
    pub max_seq_len: usize,
    /// Sequences per micro-batch.
    #[config(default = 64)]
    pub batch_size: usize,
    /// Micro-batches per optimizer step.
    #[config(default = 1)]
    pub grad_accumulation: usize,
    /// Each micro-batch is split into this many shards, whose forward and backward passes
    /// run on their own threads (data parallelism on one device). Part of the run's
    /// definition: the numbers depend on it, not on the machine's core count.
    #[config(default = 2)]
    pub parallel_shards: usize,
    /// Peak learning rate.
    #[config(default = 2e-3)]
    pub learning_rate: f64,
    /// Steps of linear warm-up from 0 to the peak.
    #[config(default = 100)]
    pub warmup_steps: usize,
    /// Optimizer steps in the run; the learning rate decays linearly to 0 at this step.
    /// The default trains for about 5 minutes on a 2-core CPU with flex (README, "The two
    /// commands").
    #[config(default = 1200)]
    pub max_steps: usize,
    /// AdamW decoupled weight decay.
    #[config(default = 0.01)]
    pub weight_decay: f64,
    /// Global gradient-norm clip.
    #[config(default = 1.0)]
    pub max_grad_norm: f64,
    /// Share of tokens selected for prediction in training batches (held-out batches: 15 %).
    #[config(default = 0.15)]
    pub mlm_probability: f64,
    /// Seed of initialisation, data order, masks and dropout.
    #[config(default = 42)]
    pub seed: u64,
    /// Validate every this many steps (and at the end).
    #[config(default = 200)]
    pub eval_every: usize,
    /// Checkpoint every this many steps (and at the end).
    #[config(default = 200)]
    pub checkpoint_every: usize,
    /// Hold out one document in this many.
    #[config(default = 50)]
    pub held_out_every: usize,
    /// Cap on held-out sequences per validation (they are masked the same way every time).
    #[config(default = 512)]
    pub max_eval_sequences: usize,
}

impl TrainConfig {
    /// Checks every setting before anything is written, so a bad flag never leaves a
    /// half-made run directory behind.
    ///
    /// # Errors
    /// [`TrainError::Config`] naming the setting; [`TrainError::StepTooLarge`] if a step
    /// would need more memory than the machine has ([`crate::memory::check_fits`]).
    pub fn validate(&self) -> Result<(), TrainError> {
        let bad = |message: String| Err(TrainError::Config(message));
        for (name, value) in [
            ("batch_size", self.batch_size),
            ("grad_accumulation", self.grad_accumulation),
            ("parallel_shards", self.parallel_shards),
            ("max_steps", self.max_steps),
            ("eval_every", self.eval_every),
            ("checkpoint_every", self.checkpoint_every),
            ("held_out_every", self.held_out_every),
            ("max_eval_sequences", self.max_eval_sequences),
        ] {
            if value == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return bad(format!(
                "learning_rate = {} must be a positive number",
                self.learning_rate
            ));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad(format!(
                "weight_decay = {} must be a number >= 0",
                self.weight_decay
            ));
        }
        if !(self.max_grad_norm.is_finite() && self.max_grad_norm > 0.0) {
            return bad(format!(
                "max_grad_norm = {} must be a positive number",
                self.max_grad_norm
            ));
        }
        if !(self.mlm_probability > 0.0 && self.mlm_probability <= 1.0) {
            return bad(format!(
                "mlm_probability = {} must be in (0, 1]",
                self.mlm_probability
            ));
        }
        if self.tokenizer.is_none() && self.vocab_size <= data::SPECIAL_TOKENS.len() {
            return bad(format!(
                "vocab_size = {} leaves no room beside the {} special tokens",
                self.vocab_size,
                data::SPECIAL_TOKENS.len()
            ));
        }
        if self.max_seq_len < 3 {
            return bad(format!(
                "max_seq_len = {} must be at least 3: [CLS], one token and [SEP]",
                self.max_seq_len
            ));
        }
        if self.max_seq_len > self.model.max_position_embeddings {
            return bad(format!(
                "max_seq_len = {} must be in [3, max_position_embeddings = {}]",
                self.max_seq_len, self.model.max_position_embeddings
            ));
        }
        if self.warmup_steps > self.max_steps {
            return bad(format!(
                "warmup_steps = {} exceeds max_steps = {}: the learning rate would never \
                 reach its peak (pass a smaller --warmup-steps)",
                self.warmup_steps, self.max_steps
            ));
        }
        // The vocabulary size comes from the tokenizer; check the other sizes now.
        let mut model = self.model.clone();
        model.vocab_size = model.vocab_size.max(1);
        model.validate().map_err(TrainError::Config)?;
        crate::memory::check_fits(self)
    }
}

/// Held-out metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalMetrics {
    /// Mean loss over all masked tokens, nats.
    pub loss: f64,
    /// Share of masked tokens predicted exactly.
    pub accuracy: f64,
    /// Number of masked tokens graded.
    pub n_masked: usize,
    /// Mean loss at the graded positions whose input was `[MASK]` (80 % of them, BERT §3.1),
    /// nats: what the model predicts from the context alone. `None` if there was none.
    pub mask_loss: Option<f64>,
    /// Mean loss at the graded positions whose input was a random token (10 %), nats.
    pub random_loss: Option<f64>,
    /// Mean loss at the graded positions whose input was the original token (10 %), nats:
    /// there the model can copy what it sees.
    pub unchanged_loss: Option<f64>,
}

impl EvalMetrics {
    /// `exp(loss)`.
    pub fn perplexity(&self) -> f64 {
        self.loss.exp()
    }
}

/// `defaults` with the fields that the JSON file at `path` gives replaced, at any depth
/// (`{"max_steps": 300, "model": {"hidden_size": 256}}` changes those two settings only).
///
/// # Errors
/// [`TrainError::Config`] naming `path` for a field that `TrainConfig` does not have or a
/// value of the wrong type; [`TrainError::Json`] naming `path` for a file that is not JSON;
/// [`TrainError::Io`] if it cannot be read.
pub fn config_with_overrides(
    path: &Path,
    defaults: &TrainConfig,
) -> Result<TrainConfig, TrainError> {
    /// Copies `overrides` into `base`; `at` is `base`'s dotted name, for errors.
    fn merge(
        base: &mut serde_json::Value,
        overrides: serde_json::Value,
        at: &str,
    ) -> Result<(), String> {
        match (base, overrides) {
            (serde_json::Value::Object(base), serde_json::Value::Object(overrides)) => {
                for (key, value) in overrides {
                    let name = if at.is_empty() {
                        key.clone()
                    } else {
                        format!("{at}.{key}")
                    };
                    let slot = base
                        .get_mut(&key)
                        .ok_or_else(|| format!("unknown field `{name}`"))?;
                    merge(slot, value, &name)?;
                }
                Ok(())
            }
            (base, value) => {
                *base = value;
                Ok(())
            }
        }
    }
    let overrides: serde_json::Value = read_json(path)?;
    let mut value = serde_json::to_value(defaults).expect("a TrainConfig is JSON");
    merge(&mut value, overrides, "")
        .map_err(|e| TrainError::Config(format!("{}: {e}", path.display())))?;
    config_from_json(value, path)
}

/// The `TrainConfig` that `value`, read from the file at `path`, describes.
///
/// # Errors
/// [`TrainError::Config`] naming `path` and the field for a value of the wrong type or a
/// missing field (`max_steps: invalid type: string "20", expected usize`).
pub(crate) fn config_from_json(
    value: serde_json::Value,
    path: &Path,
) -> Result<TrainConfig, TrainError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        TrainError::Config(format!("{}: {at}: {}", path.display(), e.into_inner()))
    })
}

/// The learning rate at `step` (1-based): linear warm-up to `peak`, then linear decay to 0.
pub fn learning_rate(config: &TrainConfig, step: usize) -> f64 {
    let peak = config.learning_rate;
    if step <= config.warmup_steps {
        peak * step as f64 / config.warmup_steps.max(1) as f64
    } else {
        let remaining = config.max_steps.saturating_sub(step) as f64;
        peak * remaining / config.max_steps.saturating_sub(config.warmup_steps).max(1) as f64
    }
}

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
    config.validate()?;
    // An absolute corpus path, so the run resumes and evaluates from any directory.
    config.corpus = std::fs::canonicalize(&config.corpus)
        .map_err(|_| TrainError::CorpusNotFound(config.corpus.clone()))?;
    let dir = RunDir(run_dir.to_path_buf());
    let created = !run_dir.exists();
    std::fs::create_dir_all(run_dir).map_err(io(run_dir))?;
    // Another process may have made the folder: if it holds the lock, nothing is removed.
    let _lock = dir.lock()?;
    // A run with a checkpoint is resumed, never overwritten. One without (killed before
    // its first checkpoint) has nothing to keep: the same command starts it anew.
    if dir.config().exists() && checkpoint::latest(run_dir).is_ok() {
        return Err(TrainError::Config(format!(
            "{} already holds a run: pass --resume {0} to continue it, or choose another --run",
            run_dir.display()
        )));
    }
    checkpoint::remove_partial(run_dir)?;
    let result = start::<B>(&mut config, &dir, device, backend);
    if result.is_err() && checkpoint::latest(run_dir).is_err() {
        // Nothing to resume from: undo the run's files, so that the same command can be
        // run again rather than be refused because the folder "already holds a run".
        let _ = if created {
            std::fs::remove_dir_all(run_dir)
        } else {
            std::fs::remove_file(dir.config())
        };
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
    config.model.vocab_size = prepared.tokenizer.vocab_size();
    write_json(&dir.config(), config)?;
    run::<B>(config, &dir.0, prepared, None, device, backend)
}

/// Continues the run in `run_dir` from its newest complete checkpoint, optionally to a
/// new `max_steps`.
///
/// # Errors
/// As [`train`] ([`TrainError::RunInUse`] while another process writes `run_dir`), and
/// [`TrainError::Checkpoint`] if no complete checkpoint exists.
pub fn resume<B: AutodiffBackend>(
    run_dir: &Path,
    max_steps: Option<usize>,
    device: &B::Device,
    backend: &str,
) -> Result<Summary, TrainError> {
    let dir = RunDir(run_dir.to_path_buf());
    // Locked first, so that a run still preparing its data is reported as busy; a folder
    // that is no run at all gets no lock file.
    let _lock = if dir.config().is_file() || dir.lock_file().is_file() {
        Some(dir.lock()?)
    } else {
        None
    };
    let mut config = dir.load_config()?;
    let from = checkpoint::latest(run_dir).map_err(|e| match e {
        TrainError::Checkpoint { path, reason } => TrainError::Checkpoint {
            path,
            reason: format!(
                "{reason}: the run stopped before its first checkpoint, so there is nothing \
                 to resume; run the same `train --run {}` command again to start it anew",
                run_dir.display()
            ),
        },
        other => other,
    })?;
    let done: RunState = read_json(&from.join("state.json"))?;
    if !checkpoint::has_optimizer_state(&from) {
        return Err(TrainError::InvalidInput(format!(
            "{} has no optimizer state (an imported run has none): predict, eval and export-hf \
             read it, but it cannot be resumed",
            from.display()
        )));
    }
    config.max_steps = max_steps.unwrap_or(config.max_steps);
    config.validate()?;
    if done.step >= config.max_steps {
        return Err(TrainError::Config(format!(
            "{} is already at step {} of max_steps {}: pass a larger --max-steps to continue",
            run_dir.display(),
            done.step,
            config.max_steps
        )));
    }
    let tokenizer = WordPieceTokenizer::from_file(&dir.tokenizer())?;
    if tokenizer.vocab_size() != config.model.vocab_size {
        return Err(TrainError::Config(format!(
            "{} has {} tokens, but config.json says vocab_size = {}",
            dir.tokenizer().display(),
            tokenizer.vocab_size(),
            config.model.vocab_size
        )));
    }
    let prepared = prepare_data(&config, Some(tokenizer))?;
    // Written only once the resume can go ahead; a checkpoint a crash left half-written goes.
    write_json(&dir.config(), &config)?;
    checkpoint::remove_partial(run_dir)?;
    run::<B>(&config, run_dir, prepared, Some(from), device, backend)
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

/// Held-out batches are masked at BERT's 15 % whatever the training rate, so that held-out
/// losses of runs with different `mlm_probability` compare.
pub const EVAL_MLM_PROBABILITY: f64 = 0.15;

/// A masker over the tokenizer's vocabulary; batch `k` of a run is drawn with generator `k`.
fn masker(
    tokenizer: &WordPieceTokenizer,
    mlm_probability: f64,
    seed: u64,
) -> Result<Masker, TrainError> {
    Ok(MaskingConfig::new(
        tokenizer.vocab_size(),
        tokenizer.mask_id,
        tokenizer.special_ids.clone(),
    )
    .with_mlm_probability(mlm_probability)
    .with_seed(seed)
    .init()?)
}

/// A model initialised from `seed` on the host, identically on every backend:
/// every matrix and embedding ~ N(0, initializer_range), biases 0, LayerNorm gains 1; then
/// the structured initial values of `config.sinusoidal_positions` and
/// `config.local_attention_init` ([`BertConfig::with_initial_values`]).
pub fn init_model<B: Backend>(
    config: &BertConfig,
    seed: u64,
    device: &B::Device,
) -> BertForMaskedLm<B> {
    struct HostNormal {
        rng: StdRng,
        std: f64,
    }
    impl<B: Backend> ModuleMapper<B> for HostNormal {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            if D != 2 {
                return param;
            }
            param.map(|tensor| {
                let data = TensorData::random::<f32, _, _>(
                    tensor.shape(),
                    Distribution::Normal(0.0, self.std),
                    &mut self.rng,
                );
                let fresh = Tensor::from_data(data, &tensor.device());
                if tensor.is_require_grad() {
                    fresh.require_grad()
                } else {
                    fresh
                }
            })
        }
    }
    let model = config.init::<B>(device).map(&mut HostNormal {
        rng: StdRng::seed_from_u64(seed),
        std: config.initializer_range,
    });
    config.with_initial_values(model)
}

/// Masked-LM loss and accuracy over `sequences`, masked with a fixed seed (the same masks
/// at every call), without autodiff.
///
/// # Errors
/// Masker and loss errors.
pub fn evaluate<B: Backend>(
    model: &BertForMaskedLm<B>,
    sequences: &[Vec<u32>],
    tokenizer: &WordPieceTokenizer,
    config: &TrainConfig,
    device: &B::Device,
) -> Result<EvalMetrics, TrainError> {
    let mut masker = masker(
        tokenizer,
        EVAL_MLM_PROBABILITY,
        config.seed.wrapping_add(0x5eed),
    )?;
    let loss_fn = MaskedCrossEntropy::default();
    // Summed loss, count and correct predictions at [MASK], random and unchanged inputs:
    // three kinds that partition the graded positions (a target is never [MASK]).
    let mut by_input = [(0.0, 0, 0); 3];
    let sequences = &sequences[..sequences.len().min(config.max_eval_sequences)];
    for chunk in sequences.chunks(config.batch_size) {
        let chunk: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
        let batch = make_batch::<B>(&chunk, &mut masker, tokenizer.pad_id, device)?;
        let inputs = batch
            .input_ids
            .clone()
            .flatten::<1>(0, 1)
            .select(0, batch.masked_positions.clone());
        let targets = batch.masked_targets.clone();
        let at_mask = inputs.clone().equal_elem(tokenizer.mask_id);
        let unchanged = inputs.equal(targets.clone());
        let random = at_mask
            .clone()
            .bool_not()
            .bool_and(unchanged.clone().bool_not());
        let logits = masked_logits(model, batch)?;
        // The loss with every other kind's labels set to the ignore index.
        for (sum, selected) in by_input.iter_mut().zip([at_mask, random, unchanged]) {
            let labels = targets.clone().mask_fill(selected.bool_not(), IGNORE_INDEX);
            let out = loss_fn.forward_labels(logits.clone(), labels)?;
            sum.0 += f64::from(out.loss_sum.into_scalar().elem::<f32>());
            sum.1 += out.n_graded;
            sum.2 += out.n_correct;
        }
    }
    let loss_sum: f64 = by_input.iter().map(|kind| kind.0).sum();
    let n_masked: usize = by_input.iter().map(|kind| kind.1).sum();
    let n_correct: usize = by_input.iter().map(|kind| kind.2).sum();
    let mean = |(sum, n, _): (f64, usize, usize)| (n > 0).then(|| sum / n as f64);
    Ok(EvalMetrics {
        loss: loss_sum / n_masked.max(1) as f64,
        accuracy: n_correct as f64 / n_masked.max(1) as f64,
        n_masked,
        mask_loss: mean(by_input[0]),
        random_loss: mean(by_input[1]),
        unchanged_loss: mean(by_input[2]),
    })
}

/// Masked-LM loss of `model` on `batch`: logits at the masked positions only, then
/// `loss_fn` against the original ids.
///
/// # Errors
/// [`MlmError`](mlm_core::MlmError) for a masked position outside the batch.
pub fn forward_loss<B: Backend>(
    model: &BertForMaskedLm<B>,
    batch: MlmBatch<B>,
    loss_fn: &MaskedCrossEntropy,
) -> Result<mlm_core::MlmLossOutput<B>, TrainError> {
    let targets = batch.masked_targets.clone();
    Ok(loss_fn.forward_labels(masked_logits(model, batch)?, targets)?)
}

/// Logits of `model` at the masked positions of `batch`, `[n_masked, vocab]`.
fn masked_logits<B: Backend>(
    model: &BertForMaskedLm<B>,
    batch: MlmBatch<B>,
) -> Result<Tensor<B, 2>, TrainError> {
    Ok(model.forward_masked(
        batch.input_ids,
        batch.token_type_ids,
        batch.padding_mask,
        batch.masked_positions,
    )?)
}

/// One shard's share of an optimizer step.
struct ShardGradients {
    grads: GradientsParams,
    loss_sum: f64,
    n_correct: usize,
}

/// Gradients of the shards of one optimizer step, each shard's summed loss divided by the
/// step's global masked count `n_masked`, so that they add up to the gradient of the mean.
///
/// With `parallel`, each shard runs on its own thread against a replica of `model` whose
/// parameters are fresh autodiff leaves with the same values and parameter ids: burn's
/// autodiff locks per graph, so independent graphs run backward at the same time, and the
/// gradients add up by parameter id. Without it (dropout draws from the backend's one
/// generator, whose order threads would scramble) the shards run one after another; the
/// numbers are the same either way.
fn shard_gradients<B: AutodiffBackend>(
    model: &BertForMaskedLm<B>,
    batches: Vec<MlmBatch<B>>,
    loss_fn: &MaskedCrossEntropy,
    n_masked: usize,
    parallel: bool,
) -> Result<Vec<ShardGradients>, TrainError> {
    struct FreshLeaves;
    impl<B: AutodiffBackend> ModuleMapper<B> for FreshLeaves {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            param.map(|tensor| tensor.detach().require_grad())
        }
    }
    let run = |replica: &BertForMaskedLm<B>, batch| -> Result<ShardGradients, TrainError> {
        let out = forward_loss(replica, batch, loss_fn)?;
        let loss_sum = f64::from(out.loss_sum.clone().into_scalar().elem::<f32>());
        let grads = (out.loss_sum / n_masked.max(1) as f64).backward();
        Ok(ShardGradients {
            grads: GradientsParams::from_grads(grads, replica),
            loss_sum,
            n_correct: out.n_correct,
        })
    };
    if !parallel || batches.len() == 1 {
        return batches.into_iter().map(|batch| run(model, batch)).collect();
    }
    std::thread::scope(|scope| {
        let threads: Vec<_> = batches
            .into_iter()
            .map(|batch| {
                let replica = model.clone().map(&mut FreshLeaves);
                scope.spawn(move || run(&replica, batch))
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a shard's thread panicked"))
            .collect()
    })
}

/// Scales `grads` so that their global L2 norm is at most `max_norm`; returns the norm before.
fn clip_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    max_norm: f64,
) -> f64 {
    struct SquaredNorm<'a, B: AutodiffBackend> {
        grads: &'a GradientsParams,
        sum: Option<Tensor<B::InnerBackend, 1>>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(grad) = self.grads.get::<B::InnerBackend, D>(param.id) {
                let squares = grad.powi_scalar(2).sum();
                self.sum = Some(match self.sum.take() {
                    Some(sum) => sum + squares,
                    None => squares,
                });
            }
        }
    }
    struct Scale<'a, B: AutodiffBackend> {
        grads: &'a mut GradientsParams,
        factor: f64,
        _backend: std::marker::PhantomData<B>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) {
                self.grads.register(param.id, grad * self.factor);
            }
        }
    }
    let mut norm = SquaredNorm::<B> { grads, sum: None };
    model.visit(&mut norm);
    let total = norm
        .sum
        .map(|s| f64::from(s.into_scalar().elem::<f32>()).sqrt())
        .unwrap_or(0.0);
    if total > max_norm {
        model.visit(&mut Scale::<B> {
            grads,
            factor: max_norm / total,
            _backend: std::marker::PhantomData,
        });
    }
    total
}

fn run<B: AutodiffBackend>(
    config: &TrainConfig,
    run_dir: &Path,
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
    let (unigram_entropy, most_frequent) =
        data::unigram_baseline(&sequences, &tokenizer.special_ids, tokenizer.vocab_size());

    let mut model = init_model::<B>(&config.model, config.seed, device);
    let mut optimizer = AdamWConfig::new()
        .with_weight_decay(config.weight_decay as f32)
        .with_epsilon(1e-6)
        .init::<B, BertForMaskedLm<B>>();
    let mut state = RunState {
        step: 0,
        elapsed_seconds: 0.0,
        tokens_seen: 0,
    };
    if let Some(dir) = &resume_from {
        model = checkpoint::load_model::<B>(dir, &config.model, device)?;
        (optimizer, state) = checkpoint::load_training::<B, _>(dir, optimizer, device)?;
    }
    let mut metrics = MetricsLog::open(run_dir, state.step)?;
    let mut masker = masker(&tokenizer, config.mlm_probability, config.seed)?;
    let loss_fn = MaskedCrossEntropy::default();
    let batches_per_epoch = sequences.len() / config.batch_size;

    let progress = Progress::new(state.step, config.max_steps);
    let started = Instant::now();
    let segment = Segment {
        first_step: state.step,
        elapsed_before: state.elapsed_seconds,
        tokens_before: state.tokens_seen,
    };
    // A signal during data preparation: stop before training anything.
    if let Some(signal) = crate::stop::requested() {
        return Err(TrainError::Stopped {
            signal: signal.name(),
            next_step: state.step + 1,
            exit_status: signal.exit_status(),
        });
    }
    let mut final_eval = None;
    let mut stopped_by = None;
    // The current epoch's sequence order, recomputed when the epoch changes.
    let mut order: (Option<u64>, Vec<usize>) = (None, Vec::new());

    for step in state.step + 1..=config.max_steps {
        // Dropout draws from the backend's generator: seed it per step so a resumed run
        // replays the same masks of dropout as an uninterrupted one.
        B::seed(
            device,
            config.seed ^ (step as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        // Micro-batch k of the run: epoch k / batches_per_epoch, position k % batches_per_epoch.
        let batches: Vec<MlmBatch<B>> = (0..config.grad_accumulation)
            .map(|micro| {
                let k = ((step - 1) * config.grad_accumulation + micro) as u64;
                let epoch = k / batches_per_epoch as u64;
                // Shuffle once per epoch, not once per micro-batch.
                if order.0 != Some(epoch) {
                    order = (
                        Some(epoch),
                        epoch_order(sequences.len(), config.seed, epoch),
                    );
                }
                let start = (k % batches_per_epoch as u64) as usize * config.batch_size;
                let chunk: Vec<&[u32]> = order.1[start..start + config.batch_size]
                    .iter()
                    .map(|&i| sequences[i].as_slice())
                    .collect();
                masker.resume_at(k);
                make_shards::<B>(
                    &chunk,
                    &mut masker,
                    tokenizer.pad_id,
                    config.parallel_shards,
                    device,
                )
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .collect();
        // Normalise by the global masked count: Σ sums ÷ Σ counts, not a mean of means.
        let n_masked: usize = batches.iter().map(|b| b.n_masked).sum();
        let n_tokens: usize = batches.iter().map(|b| b.n_tokens).sum();
        let mut accumulator = GradientsAccumulator::<BertForMaskedLm<B>>::new();
        let (mut loss_sum, mut n_correct) = (0.0, 0);
        let parallel = config.model.hidden_dropout_prob == 0.0
            && config.model.attention_probs_dropout_prob == 0.0;
        for shard in shard_gradients(&model, batches, &loss_fn, n_masked, parallel)? {
            loss_sum += shard.loss_sum;
            n_correct += shard.n_correct;
            accumulator.accumulate(&model, shard.grads);
        }
        let loss = loss_sum / n_masked.max(1) as f64;
        let mut grads = accumulator.grads();
        let grad_norm = clip_global_norm(&model, &mut grads, config.max_grad_norm);
        // Stop before the update, so no non-finite weight reaches a checkpoint.
        for (quantity, value) in [("loss", loss), ("gradient norm", grad_norm)] {
            if !value.is_finite() {
                progress.abandon();
                return Err(TrainError::NonFinite {
                    step,
                    quantity,
                    value,
                });
            }
        }
        let lr = learning_rate(config, step);
        model = optimizer.step(lr, model, grads);

        state.step = step;
        state.tokens_seen += n_tokens as u64;
        state.elapsed_seconds = segment.elapsed_before + started.elapsed().as_secs_f64();
        let tokens_per_second =
            (state.tokens_seen - segment.tokens_before) as f64 / started.elapsed().as_secs_f64();
        let row = |split: &str, loss: f64, accuracy: f64| MetricsRow {
            step,
            split: split.into(),
            loss,
            accuracy,
            perplexity: loss.exp(),
            learning_rate: lr,
            tokens_per_second,
            elapsed_seconds: state.elapsed_seconds,
        };
        metrics.push(row(
            "train",
            loss,
            n_correct as f64 / n_masked.max(1) as f64,
        ))?;
        progress.step(step, loss, tokens_per_second);

        // A stop request ends the run here, as if this were its last step, except that no
        // metrics row is added: a resumed run then writes the same metrics.csv as an
        // uninterrupted one.
        let last = step == config.max_steps;
        stopped_by = crate::stop::requested().filter(|_| !last);
        let evaluate_now = step.is_multiple_of(config.eval_every) || last;
        if evaluate_now {
            progress.log(step, loss, tokens_per_second);
            let eval = evaluate(&model.valid(), &held_out, &tokenizer, config, device)?;
            metrics.push(row("valid", eval.loss, eval.accuracy))?;
            progress.println(&format!(
                "step {step}: validation loss {:.4} (unigram {unigram_entropy:.4}), accuracy {:.1} %, perplexity {:.1}",
                eval.loss,
                100.0 * eval.accuracy,
                eval.perplexity()
            ));
            final_eval = Some(eval);
        }
        if step.is_multiple_of(config.checkpoint_every) || last || stopped_by.is_some() {
            checkpoint::save(run_dir, &model, &optimizer, &state)?;
        }
        if stopped_by.is_some() {
            // The summary's evaluation is of this step's weights.
            if !evaluate_now {
                final_eval = None;
            }
            break;
        }
    }
    match stopped_by {
        Some(_) => progress.abandon(),
        None => progress.finish(),
    }

    let final_eval = match final_eval {
        Some(eval) => eval,
        None => evaluate(&model.valid(), &held_out, &tokenizer, config, device)?,
    };
    plot_loss_curve(
        metrics.rows(),
        unigram_entropy,
        &run_dir.join("loss_curve.png"),
    )?;
    let summary = Summary {
        final_valid_loss: final_eval.loss,
        valid_accuracy: final_eval.accuracy,
        valid_perplexity: final_eval.perplexity(),
        valid_mask_loss: final_eval.mask_loss,
        valid_random_loss: final_eval.random_loss,
        valid_unchanged_loss: final_eval.unchanged_loss,
        unigram_entropy,
        gain_over_unigram: unigram_entropy - final_eval.loss,
        most_frequent_token_accuracy: most_frequent,
        tokens_per_second: state.tokens_seen as f64 / state.elapsed_seconds.max(1e-9),
        wall_time_seconds: state.elapsed_seconds,
        steps: state.step,
        max_steps: config.max_steps,
        stopped_by: stopped_by.map(|signal| signal.name().into()),
        last_segment: segment.report(&state),
        parameters: config.model.num_parameters(),
        backend: backend.into(),
        adapter: crate::backend::adapter_name(backend),
    };
    write_json(&run_dir.join("summary.json"), &summary)?;
    Ok(summary)
}

/// Where this session (a new run, or one resume of it) started.
struct Segment {
    first_step: usize,
    elapsed_before: f64,
    tokens_before: u64,
}

impl Segment {
    /// This session's share of the run, once it reached `state`.
    fn report(&self, state: &RunState) -> SegmentSummary {
        let seconds = state.elapsed_seconds - self.elapsed_before;
        SegmentSummary {
            first_step: self.first_step + 1,
            steps: state.step - self.first_step,
            seconds,
            tokens_per_second: (state.tokens_seen - self.tokens_before) as f64 / seconds.max(1e-9),
        }
    }
}
