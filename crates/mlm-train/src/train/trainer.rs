//! The `Trainer`: the model, its AdamW optimizer, the masker and the run's state, with what a
//! training loop does to them: [`step`](Trainer::step), [`validate`](Trainer::validate),
//! [`checkpoint`](Trainer::checkpoint) and [`summary`](Trainer::summary).
//!
//! One optimizer step (BERT §3.1 and Appendix A.2, as Hugging Face trains it):
//! mask each micro-batch of the global batch → split it into shards (this rank's share) →
//! forward and backward of Σ loss ÷ the **global** masked count → sum over shards and ranks
//! → clip by the global norm → AdamW at the scheduled learning rate.
//!
//! The schedule runs against the step, or, for a run by the clock
//! ([`TrainConfig::time_budget_seconds`]), against rank 0's clock, read once the step's
//! gradients are computed and carried to every rank in the step's sum as the share of the
//! budget spent: every rank uses the same learning rate and ends after the same step. The
//! masking rate of a step's batches ([`TrainConfig::mlm_probability_at`]) follows the share
//! of the run done when the step begins: `(step − 1) / max_steps`, or the share of the
//! budget that the step before carried, so every rank masks alike.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use burn::tensor::Tensor;
use mlm_core::{MaskedBatch, MaskedCrossEntropy, Masker};

use super::lr::{learning_rate, learning_rate_by_clock};
use super::optimizer::adamw;
use super::step::{ShardGradients, clip_global_norm, shard_gradients, sum_shards};
use super::stop::{self, StopSignal};
use super::sync::{GradientSync, Rank, SharedScalars, StepSums, StepTotals};
use crate::config::TrainConfig;
use crate::data::{SubwordTokenizer, mask_shards, to_device};
use crate::error::TrainError;
use crate::eval::{EvalMetrics, evaluate};
use crate::model::ModelForMaskedLm;
use crate::run::checkpoint::{self, RunState};
use crate::run::report::{MetricsRow, SegmentSummary, Summary, Traffic};
use crate::seed::{Stream, derive_seed};

/// What one optimizer step did, over every rank, as the host knows it at once; the step's
/// loss, accuracy and gradient norm stay on the device until [`Trainer::take_metrics`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepOutput {
    /// The step just taken (1-based).
    pub step: usize,
    /// The learning rate this step used.
    pub learning_rate: f64,
    /// The tokens this step graded, over every rank and micro-batch.
    pub n_masked: usize,
    /// Whether the run's time budget was spent when this step's gradients were computed
    /// (by rank 0's clock): the run ends after this step. Always `false` for a run by step
    /// count.
    pub budget_spent: bool,
    /// Training tokens per second of wall time in this session.
    pub tokens_per_second: f64,
    /// Training wall time of the run so far, seconds.
    pub elapsed_seconds: f64,
    /// The stop request of some rank (SIGINT / SIGTERM; SIGTERM if both): every rank stops
    /// after this step together.
    pub stop_requested: Option<StopSignal>,
}

impl StepOutput {
    /// A metrics row of this step: `split`'s loss and accuracy with the step's schedule and
    /// speed.
    pub fn row(&self, split: &str, loss: f64, accuracy: f64) -> MetricsRow {
        MetricsRow {
            step: self.step,
            split: split.into(),
            loss,
            accuracy,
            perplexity: loss.exp(),
            learning_rate: self.learning_rate,
            tokens_per_second: self.tokens_per_second,
            elapsed_seconds: self.elapsed_seconds,
        }
    }
}

/// A step's training metrics, read back from the device by [`Trainer::take_metrics`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMetrics {
    /// The step.
    pub out: StepOutput,
    /// Mean loss over the step's masked tokens, nats.
    pub loss: f64,
    /// Share of the step's masked tokens predicted exactly.
    pub accuracy: f64,
    /// Global L2 norm of the gradient before clipping.
    pub grad_norm: f64,
}

/// A step whose metrics are still on the device ([`StepTotals::device`]).
struct PendingStep {
    out: StepOutput,
    values: Tensor<1>,
}

/// Where this session (a new run, or one resume of it) started.
struct Segment {
    started: Instant,
    first_step: usize,
    elapsed_before: f64,
    tokens_before: u64,
}

/// A model in training, with everything its next step needs.
pub struct Trainer {
    config: TrainConfig,
    model: ModelForMaskedLm,
    optimizer: ModuleOptimizer,
    masker: Masker,
    loss_fn: MaskedCrossEntropy,
    state: RunState,
    segment: Segment,
    pad_id: u32,
    rank: Rank,
    sync: Option<Box<dyn GradientSync>>,
    /// The share of the time budget spent as the last step of this session carried it to
    /// every rank (`None` before this session's first step, and for a run by step count).
    budget_progress: Option<f64>,
    /// Steps taken since the last [`take_metrics`](Self::take_metrics).
    pending: Vec<PendingStep>,
    device: Device,
}

impl Trainer {
    /// A fresh model from `config.seed` ([`BertConfig::init_seeded`]) at step 0, masking
    /// with `tokenizer`'s vocabulary.
    ///
    /// # Errors
    /// [`TrainError::Mlm`] for an `mlm_probability` the masker refuses.
    ///
    /// [`BertConfig::init_seeded`]: crate::model::BertConfig::init_seeded
    pub fn new(
        config: &TrainConfig,
        tokenizer: &SubwordTokenizer,
        device: &Device,
    ) -> Result<Self, TrainError> {
        let model = config.model.init_seeded(config.seed, device);
        Self::from_model(config, model, tokenizer, device)
    }

    /// [`new`](Self::new) from the weights of `model` (of `config.model`'s sizes, on
    /// `device`), e.g. a pretrained checkpoint's ([`Pretrained::load_model`]): fresh optimizer
    /// state, step 0.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    ///
    /// [`Pretrained::load_model`]: crate::model::hf::Pretrained::load_model
    pub fn from_model(
        config: &TrainConfig,
        model: ModelForMaskedLm,
        tokenizer: &SubwordTokenizer,
        device: &Device,
    ) -> Result<Self, TrainError> {
        let state = RunState {
            step: 0,
            elapsed_seconds: 0.0,
            tokens_seen: 0,
        };
        // The run's dropout, whatever the checkpoint was saved with (as a resume's model is
        // built from the run's settings).
        let model = config.model.with_dropout(model);
        Ok(Self {
            optimizer: adamw(&model, config.weight_decay, config.weight_decay_on),
            model,
            masker: tokenizer.masker(config.mask_rates, config.masking, config.seed)?,
            loss_fn: MaskedCrossEntropy::default(),
            segment: Segment::at(&state),
            state,
            pad_id: tokenizer.pad_id,
            rank: Rank::SINGLE,
            sync: None,
            budget_progress: None,
            pending: Vec::new(),
            config: config.clone(),
            device: device.clone(),
        })
    }

    /// Continues from the checkpoint folder `dir`: its weights, optimizer moments and step.
    ///
    /// # Errors
    /// [`TrainError::Checkpoint`] / [`TrainError::Json`] naming the broken file.
    pub fn load_checkpoint(mut self, dir: &Path) -> Result<Self, TrainError> {
        self.model = checkpoint::load_model(dir, &self.config.model, &self.device)?;
        // The optimizer's parameter groups name parameters by id: the loaded model's.
        let c = &self.config;
        let optimizer = adamw(&self.model, c.weight_decay, c.weight_decay_on);
        (self.optimizer, self.state) = checkpoint::load_training(dir, optimizer)?;
        self.segment = Segment::at(&self.state);
        Ok(self)
    }

    /// Trains as `rank` of a data-parallel run whose gradients `sync` sums.
    pub fn with_ranks(mut self, rank: Rank, sync: Box<dyn GradientSync>) -> Self {
        self.rank = rank;
        self.sync = Some(sync);
        self
    }

    /// The run's state after the last step.
    pub fn state(&self) -> &RunState {
        &self.state
    }

    /// What summing over the ranks cost per step; `None` for a single process.
    pub fn traffic(&self) -> Option<Traffic> {
        self.sync.as_ref().map(|sync| sync.traffic())
    }

    /// The model being trained.
    pub fn model(&self) -> &ModelForMaskedLm {
        &self.model
    }

    /// One optimizer step over `micro_batches` (each the global batch's sequences with its
    /// index `k` in the run, from [`BatchSchedule::step`](crate::data::BatchSchedule::step)).
    ///
    /// Reads nothing back from the device in a single process (across processes, the
    /// collective's sum of the stop requests and the clock): the step's loss, accuracy and
    /// gradient norm wait for [`take_metrics`](Self::take_metrics).
    ///
    /// # Errors
    /// Masker, loss and collective errors.
    pub fn step(
        &mut self,
        micro_batches: Vec<(u64, Vec<&[u32]>)>,
    ) -> Result<StepOutput, TrainError> {
        let (shards, n_masked, n_tokens) = self.my_shards(micro_batches)?;
        self.step_shards(shards, n_masked, n_tokens)
    }

    /// One optimizer step of a single process on batches masked by the caller: each of
    /// `shards` (corrupted ids, labels at the masked positions) runs as one shard, and the
    /// loss is the mean over all their masked positions. What [`step`](Self::step) does after
    /// its masker; for tests against another implementation's steps on the same batches.
    ///
    /// # Errors
    /// [`TrainError::InvalidInput`] for a trainer of several ranks (the mean needs every
    /// rank's count); loss errors.
    pub fn step_masked(&mut self, shards: Vec<MaskedBatch>) -> Result<StepOutput, TrainError> {
        if self.sync.is_some() {
            return Err(TrainError::InvalidInput(
                "step_masked runs in a single process; ranks step through `step`".into(),
            ));
        }
        let n_masked = shards.iter().map(|s| s.masked_positions.len()).sum();
        let n_tokens = shards.iter().flat_map(|s| &s.input_ids).map(Vec::len).sum();
        self.step_shards(shards, n_masked, n_tokens)
    }

    /// The optimizer step on this rank's `shards`, of `n_masked` masked positions and
    /// `n_tokens` tokens over every rank.
    fn step_shards(
        &mut self,
        shards: Vec<MaskedBatch>,
        n_masked: usize,
        n_tokens: usize,
    ) -> Result<StepOutput, TrainError> {
        let step = self.state.step + 1;
        // Dropout draws from the backend's generator: seed it per step, so that a resumed run
        // replays the same dropout masks as an uninterrupted one.
        self.device
            .seed(derive_seed(self.config.seed, Stream::Dropout, step as u64));
        let sums = self.local_sums(shards, n_masked)?;
        let StepSums {
            mut grads,
            totals,
            shared,
        } = match self.sync.as_mut() {
            Some(sync) => sync.all_reduce(&self.model, sums)?,
            None => sums,
        };
        let grad_norm = clip_global_norm(&self.model, &mut grads, self.config.max_grad_norm);
        let (lr, budget_spent) = self.schedule(step, shared.budget_progress);
        self.model = self.optimizer.step(lr, self.model.clone(), grads);
        // Across ranks only the summed request is common ground; alone, a signal that came
        // during the step stops after it.
        let stop_requested = shared
            .stop_request()
            .or_else(|| stop::requested().filter(|_| self.sync.is_none()));
        let counts = (n_tokens, n_masked);
        let out = self.advance(step, counts, lr, budget_spent, stop_requested);
        self.budget_progress = Some(shared.budget_progress);
        self.pending.push(PendingStep {
            out,
            values: StepTotals::device(totals, grad_norm),
        });
        Ok(out)
    }

    /// This rank's share of a step: its shards' gradients and totals on the device, with the
    /// stop request as it stood when the step began and (on rank 0 of a run by the clock)
    /// the share of the time budget spent once the gradients are computed.
    fn local_sums(
        &self,
        shards: Vec<MaskedBatch>,
        n_masked: usize,
    ) -> Result<StepSums, TrainError> {
        let request = stop::requested();
        let vocab_size = self.config.model.vocab_size();
        let shards = shards
            .iter()
            .map(|shard| to_device(shard, self.pad_id, vocab_size, &self.device))
            .collect::<Result<_, _>>()?;
        let parallel = self.config.model.without_dropout();
        let shards = shard_gradients(&self.model, shards, &self.loss_fn, n_masked, parallel)?;
        let ShardGradients { grads, totals } = sum_shards(&self.model, shards);
        let budget_progress = match (self.rank.rank, self.config.time_budget_seconds) {
            (0, Some(budget)) => self.segment.clock() / budget,
            _ => 0.0,
        };
        Ok(StepSums {
            grads,
            totals,
            shared: SharedScalars::of_rank(request, budget_progress),
        })
    }

    /// The run's state after `step`, which saw `n_tokens` tokens and graded `n_masked` of
    /// them at learning rate `lr`.
    fn advance(
        &mut self,
        step: usize,
        (n_tokens, n_masked): (usize, usize),
        lr: f64,
        budget_spent: bool,
        stop_requested: Option<StopSignal>,
    ) -> StepOutput {
        self.state.step = step;
        self.state.tokens_seen += n_tokens as u64;
        let session = self.segment.started.elapsed().as_secs_f64();
        self.state.elapsed_seconds = self.segment.elapsed_before + session;
        StepOutput {
            step,
            learning_rate: lr,
            n_masked,
            budget_spent,
            tokens_per_second: (self.state.tokens_seen - self.segment.tokens_before) as f64
                / session,
            elapsed_seconds: self.state.elapsed_seconds,
            stop_requested,
        }
    }

    /// The loss, accuracy and gradient norm of every step since the last call, read back
    /// from the device at once (one synchronisation): call it at logging intervals, not per
    /// step.
    ///
    /// # Errors
    /// [`TrainError::NonFinite`] naming the first step whose loss or gradient norm is not
    /// finite. That step's update is in the weights, so the run must end:
    /// [`checkpoint`](Self::checkpoint) refuses to save them.
    pub fn take_metrics(&mut self) -> Result<Vec<StepMetrics>, TrainError> {
        let metrics = self.pending_metrics()?;
        self.pending.clear();
        Ok(metrics)
    }

    /// [`take_metrics`](Self::take_metrics) without taking them.
    fn pending_metrics(&self) -> Result<Vec<StepMetrics>, TrainError> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let values = Tensor::cat(self.pending.iter().map(|p| p.values.clone()).collect(), 0)
            .into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .expect("float metrics convert to f64");
        let mut metrics = Vec::with_capacity(self.pending.len());
        for (pending, values) in self.pending.iter().zip(values.chunks(StepTotals::LEN)) {
            let totals = StepTotals::from_values(values);
            let n_masked = pending.out.n_masked.max(1) as f64;
            let (loss, grad_norm) = (totals.loss_sum / n_masked, totals.grad_norm);
            for (quantity, value) in [("loss", loss), ("gradient norm", grad_norm)] {
                if !value.is_finite() {
                    return Err(TrainError::NonFinite {
                        step: pending.out.step,
                        quantity,
                        value,
                    });
                }
            }
            metrics.push(StepMetrics {
                out: pending.out,
                loss,
                accuracy: totals.correct / n_masked,
                grad_norm,
            });
        }
        Ok(metrics)
    }

    /// The learning rate of `step`, and whether the time budget is spent, at `progress`
    /// (elapsed time ÷ time budget): by step count ([`learning_rate`]), or by the clock
    /// ([`learning_rate_by_clock`]).
    fn schedule(&self, step: usize, progress: f64) -> (f64, bool) {
        let config = &self.config;
        match config.time_budget_seconds {
            Some(_) => (learning_rate_by_clock(config, progress), progress >= 1.0),
            None => (learning_rate(config, step), false),
        }
    }

    /// The share of tokens `step`'s training batches select ([`TrainConfig::mlm_probability_at`])
    /// at the share of the run done when it begins: `(step − 1) / max_steps` by step count;
    /// by the clock, the share of the budget the last step carried to every rank (at a
    /// session's first step, the checkpoint's training time over the budget).
    fn mask_rate(&self, step: usize) -> f64 {
        let config = &self.config;
        let progress = match config.time_budget_seconds {
            Some(budget) => self
                .budget_progress
                .unwrap_or(self.state.elapsed_seconds / budget),
            None => (step - 1) as f64 / config.max_steps as f64,
        };
        config.mlm_probability_at(progress)
    }

    /// Masks every micro-batch whole and splits it into `world_size × parallel_shards`
    /// shards; returns this rank's shards with the global masked and token counts, which
    /// every rank knows without communicating (the masks are a function of `k`).
    fn my_shards(
        &mut self,
        micro_batches: Vec<(u64, Vec<&[u32]>)>,
    ) -> Result<(Vec<MaskedBatch>, usize, usize), TrainError> {
        let per_rank = self.config.parallel_shards;
        let rate = self.mask_rate(self.state.step + 1);
        self.masker.set_mlm_probability(rate)?;
        let (mut mine, mut n_masked, mut n_tokens) = (Vec::new(), 0, 0);
        for (k, sequences) in micro_batches {
            self.masker.resume_at(k);
            let shards = mask_shards(
                &sequences,
                &mut self.masker,
                per_rank * self.rank.world_size,
            )?;
            n_masked += shards
                .iter()
                .map(|s| s.masked_positions.len())
                .sum::<usize>();
            n_tokens += sequences.iter().map(|s| s.len()).sum::<usize>();
            mine.extend(
                shards
                    .into_iter()
                    .skip(self.rank.rank * per_rank)
                    .take(per_rank),
            );
        }
        Ok((mine, n_masked, n_tokens))
    }

    /// Held-out metrics of the current weights ([`evaluate`]).
    ///
    /// # Errors
    /// Masker and loss errors.
    pub fn validate(
        &self,
        held_out: &[Vec<u32>],
        tokenizer: &SubwordTokenizer,
    ) -> Result<EvalMetrics, TrainError> {
        evaluate(
            &self.model.valid(),
            held_out,
            tokenizer,
            &self.config,
            &self.device.clone().without_autodiff(),
        )
    }

    /// Saves weights, optimizer state and run state atomically as
    /// `run_dir/checkpoints/step-NNNNNNNN/`; returns that folder.
    ///
    /// # Errors
    /// [`TrainError::NonFinite`] (nothing is written) if a step since the last
    /// [`take_metrics`](Self::take_metrics) had a non-finite loss or gradient norm, or a
    /// weight is not finite (an update can overflow from a finite gradient);
    /// [`TrainError::Io`] / [`TrainError::Checkpoint`] naming the file.
    pub fn checkpoint(&self, run_dir: &Path) -> Result<PathBuf, TrainError> {
        // No non-finite weight reaches a checkpoint.
        self.pending_metrics()?;
        let check = non_finite_weights(&self.model);
        if check != 0.0 {
            return Err(TrainError::NonFinite {
                step: self.state.step,
                quantity: "weights",
                value: check,
            });
        }
        checkpoint::save(run_dir, &self.model, &self.optimizer, &self.state)
    }

    /// The run's summary after the last step: `eval` of the final weights against the
    /// unigram `baseline` (entropy in nats, most-frequent-token accuracy).
    pub fn summary(
        &self,
        eval: &EvalMetrics,
        baseline: (f64, f64),
        backend: &str,
        stopped_by: Option<&str>,
    ) -> Summary {
        let state = &self.state;
        Summary {
            final_valid_loss: eval.loss,
            valid_accuracy: eval.accuracy,
            valid_perplexity: eval.perplexity(),
            valid_mask_loss: eval.mask_loss,
            valid_random_loss: eval.random_loss,
            valid_unchanged_loss: eval.unchanged_loss,
            unigram_entropy: baseline.0,
            gain_over_unigram: baseline.0 - eval.loss,
            most_frequent_token_accuracy: baseline.1,
            tokens_per_second: state.tokens_seen as f64 / state.elapsed_seconds.max(1e-9),
            wall_time_seconds: state.elapsed_seconds,
            steps: state.step,
            // A run by the clock has no last step: its end is the budget.
            max_steps: match self.config.time_budget_seconds {
                Some(_) => 0,
                None => self.config.max_steps,
            },
            time_budget_seconds: self.config.time_budget_seconds,
            stopped_by: stopped_by.map(Into::into),
            last_segment: self.segment.report(state),
            world_size: self.rank.world_size,
            all_reduce: self.traffic(),
            masking: self.config.masking,
            parameters: self.config.model.num_parameters(),
            minimal_pairs: None,
            backend: backend.into(),
            adapter: crate::backend::adapter_name(backend),
        }
    }
}

impl Segment {
    /// The run's training time by this session's clock, seconds.
    fn clock(&self) -> f64 {
        self.elapsed_before + self.started.elapsed().as_secs_f64()
    }

    /// A session that starts from `state`, now.
    fn at(state: &RunState) -> Self {
        Self {
            started: Instant::now(),
            first_step: state.step,
            elapsed_before: state.elapsed_seconds,
            tokens_before: state.tokens_seen,
        }
    }

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

/// `Σ (w − w)` over every weight of `model`, read back once: exactly 0 when every weight is
/// finite, NaN otherwise (`inf − inf` and anything with NaN are NaN).
fn non_finite_weights(model: &ModelForMaskedLm) -> f64 {
    struct Check(Option<Tensor<1>>);
    impl ModuleVisitor for Check {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let weights = param.val().inner();
            let zero = (weights.clone() - weights).sum();
            self.0 = Some(match self.0.take() {
                Some(sum) => sum + zero,
                None => zero,
            });
        }
    }
    let mut check = Check(None);
    model.visit(&mut check);
    check.0.map_or(0.0, |sum| sum.into_scalar::<f64>())
}
