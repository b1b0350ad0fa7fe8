//! A run's settings. Every setting as asked ([`TrainConfig`]: the defaults, a partial JSON
//! file over them ([`config_with_overrides`]), the flags), checked by a pure table
//! ([`TrainConfig::validate`], in `rules`), then made final once, with what they depend on,
//! by [`Settings::resolve`] (a new run) or [`Settings::reopen`] (a resume): nothing changes
//! a setting after that step.
//!
//! ```text
//! defaults ──checkpoint (continue_from)──▶ ──JSON──▶ ──flags──▶ TrainConfig ──validate──▶
//!   ──Settings::resolve(checkpoint, tokenizer, data folder)──▶ Settings ──▶ config.json
//! config.json ──saved_config──▶ TrainConfig ──Settings::reopen(step, new end)──▶ Settings
//! ```

mod json;
mod rules;
mod schedules;
mod settings;

use std::path::PathBuf;

use clap::ValueEnum;
use mlm_core::MaskRates;
use serde::{Deserialize, Serialize};

use crate::data::{Masking, PrepareOptions, SubwordTokenizer};
use crate::error::ConfigError;
use crate::model::hf::Pretrained;
use crate::model::{BertConfig, ModelConfig};

pub use json::{config_from_json, config_with_overrides, saved_config};
pub use schedules::{LrSchedule, ScheduleShape};
pub use settings::{Settings, Sources, check_same_vocab};

/// Which parameters AdamW's decoupled weight decay shrinks (`--weight-decay-on`,
/// `"weight_decay_on"` in `config.json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum WeightDecayOn {
    /// The matrices only (linear and embedding weights): not the biases nor LayerNorm's gain
    /// and bias. BERT's rule, as Hugging Face's `Trainer` keeps it
    /// (`get_decay_parameter_names`), and nanoGPT's (every parameter of two or more
    /// dimensions).
    #[default]
    Matrices,
    /// Every parameter: what runs made before this setting existed did.
    All,
}

impl std::fmt::Display for WeightDecayOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Matrices => "matrices",
            Self::All => "all",
        })
    }
}

/// [`TrainConfig::log_every`] unless set; also what a run made before the setting existed
/// resumes with.
pub const DEFAULT_LOG_EVERY: usize = 10;

/// [`TrainConfig::lr_decay_fraction`] unless set: about MiniCPM's share of the run spent
/// decaying (Hu et al. 2024); Hägele et al. (2024) matched a cosine schedule with 10–20 %.
pub const DEFAULT_LR_DECAY_FRACTION: f64 = 0.1;

/// [`TrainConfig::lr_decay_shape`] unless set: ModernBERT's `1 − √t` cool-down.
pub const DEFAULT_LR_DECAY_SHAPE: ScheduleShape = ScheduleShape::OneMinusSqrt;

/// [`TrainConfig::mlm_probability_schedule`] unless set.
pub const DEFAULT_MLM_PROBABILITY_SCHEDULE: ScheduleShape = ScheduleShape::Linear;

/// Everything that defines a run; saved as `config.json` in the run directory. Its defaults
/// are [`TrainConfig::new`]'s. The masking rates are mlm-core's [`MaskRates`], flattened: a
/// `config.json` holds `mlm_probability`, `mask_replace_prob` and `random_replace_prob` at
/// its top level, as it always has.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainConfig {
    /// A corpus file (`.txt`, `.jsonl`, either gzip-compressed) or a folder of them, which
    /// the run prepares into its own data folder (`RUN/data`) unless `data` is given (then
    /// it is not read, and `train --data` leaves it empty).
    pub corpus: PathBuf,
    /// A data folder made by `mlm-train prepare`, memory-mapped instead of preparing
    /// `corpus`; it fixes the tokenizer, `max_seq_len`, `line_by_line` and the held-out split.
    pub data: Option<PathBuf>,
    /// One sentence per sequence, padded (`run_mlm.py`'s `--line_by_line`), instead of a
    /// document's sentences packed into sequences of up to `max_seq_len` tokens.
    pub line_by_line: bool,
    /// The field of a `.jsonl` record that holds its text (`datasets`' `to_json` writes
    /// `text`).
    pub text_field: String,
    /// A Hugging Face `BertForMaskedLM` folder whose weights the run starts from
    /// (continued pretraining) instead of a seeded initialisation, with fresh optimizer state
    /// and the run's own schedule. It fixes `model` and `tokenizer`
    /// ([`TrainConfig::continue_from`]); a resume reads its checkpoint instead.
    pub init_from: Option<PathBuf>,
    /// Model sizes; `vocab_size` and `max_position_embeddings` follow from the tokenizer and
    /// `max_seq_len` ([`Settings::resolve`]), or from `init_from`'s checkpoint.
    pub model: ModelConfig,
    /// A `tokenizer.json` or `vocab.txt` to use instead of training one.
    pub tokenizer: Option<PathBuf>,
    /// Size of the trained WordPiece vocabulary, specials included.
    pub vocab_size: usize,
    /// Longest packed sequence, `[CLS]` and `[SEP]` included. 64 (with 64 sequences a batch)
    /// reached a lower held-out loss than 128 × 32 for the same tokens in the tiny model's
    /// short run. The position table has this many rows ([`Settings::resolve`]): a row
    /// no training sequence reaches would stay at its random start.
    pub max_seq_len: usize,
    /// Sequences per micro-batch.
    pub batch_size: usize,
    /// Micro-batches per optimizer step.
    pub grad_accumulation: usize,
    /// Each micro-batch is split into this many shards, whose forward and backward passes
    /// run on their own threads (data parallelism on one device). Part of the run's
    /// definition: the numbers depend on it, not on the machine's core count.
    pub parallel_shards: usize,
    /// Processes of a data-parallel run (torchrun's world size), each training `batch_size`
    /// sequences of every global batch of `world_size × batch_size`
    /// ([`crate::train::distributed`]). Part of the run's definition, like `parallel_shards`; the
    /// binary takes it from the MPI launcher (`mpirun -np N`), and a resume must be started
    /// as as many processes.
    pub world_size: usize,
    /// Peak learning rate.
    pub learning_rate: f64,
    /// Steps of linear warm-up from 0 to the peak.
    pub warmup_steps: usize,
    /// Optimizer steps in the run; the learning rate decays to 0 at this step
    /// (`lr_schedule`).
    /// The default trains for 2 to 7 minutes on a 2-core CPU with flex, by CPU (README, "The
    /// two commands"); 2 400 since issue 52 made the step 1.15× and then 1.06–1.08× faster (it
    /// was 2 000, then 2 300), so the main job trains no longer than before.
    pub max_steps: usize,
    /// Train by the clock: seconds of training after which the run ends (`None`: it ends at
    /// `max_steps`). The learning rate then follows elapsed time instead of the step: warm-up
    /// over the first `warmup_steps / max_steps` of the budget, linear decay to 0 at its end
    /// ([`learning_rate_at`](crate::train::lr::learning_rate_at)); `max_steps` ends nothing and sets only that share. Elapsed time
    /// counts from the model's creation, periodic evaluations and checkpoints included, data
    /// preparation not; it is summed over resumed sessions. Not reproducible step for step:
    /// the schedule depends on the machine's speed.
    pub time_budget_seconds: Option<f64>,
    /// The learning rate after the warm-up: linear decay to 0 at the run's end, or held at
    /// the peak and then decayed over the last `lr_decay_fraction` of the run
    /// (warmup-stable-decay, ModernBERT's; [`crate::train::lr`]). A run made before this
    /// setting existed reads as `linear`, as it was made.
    #[serde(default)]
    pub lr_schedule: LrSchedule,
    /// Under `warmup_stable_decay`: the share of the run, in [0, 1], spent decaying to 0
    /// (`lr_decay_fraction · max_steps` steps, rounded; by the clock, that share of the
    /// budget). Warm-up and decay may not overlap. 0 holds the peak to the end.
    #[serde(default = "default_lr_decay_fraction")]
    pub lr_decay_fraction: f64,
    /// Under `warmup_stable_decay`: the shape of the decay, `linear`, `cosine` or
    /// `one_minus_sqrt` (`1 − √t`, ModernBERT's; Hägele et al. 2024).
    #[serde(default = "default_lr_decay_shape")]
    pub lr_decay_shape: ScheduleShape,
    /// AdamW decoupled weight decay λ: each step shrinks the decayed parameters by
    /// `1 − learning_rate · λ` (Loshchilov & Hutter 2019).
    pub weight_decay: f64,
    /// Which parameters `weight_decay` shrinks. A run made before this setting existed
    /// decayed every parameter ([`crate::RunDir::load_config`]).
    pub weight_decay_on: WeightDecayOn,
    /// Global gradient-norm clip.
    pub max_grad_norm: f64,
    /// What training batches select and put in the selected places: `mlm_probability`
    /// (share of tokens selected), `mask_replace_prob` (share of those replaced by `[MASK]`;
    /// BERT §3.1: 0.8, BabyBERTa, Huebner et al. 2021, §4.2, found 1.0 better for grammar)
    /// and `random_replace_prob` (by a random token; BERT: 0.1); the rest stay unchanged, and
    /// every selected token is graded against the original. Held-out batches stay at BERT's
    /// rates ([`crate::eval::held_out::EVAL_MASK_RATES`]), so held-out losses compare; their
    /// `[MASK]` loss is the like for like.
    #[serde(flatten)]
    pub mask_rates: MaskRates,
    /// The share of tokens training batches select at the run's end, in [0, 1]: the rate
    /// goes from `mlm_probability` at the first step to this at the last along
    /// `mlm_probability_schedule` ([`TrainConfig::mlm_probability_at`]; by the clock, with
    /// the share of the budget spent). `None`: `mlm_probability` throughout. Yang et al.
    /// (2023, "Learning Better Masking for Better Language Model Pre-training") reached a
    /// GLUE score sooner going from 30 % to 15 % than at either. Held-out batches stay at
    /// 15 %.
    #[serde(default)]
    pub mlm_probability_final: Option<f64>,
    /// How the training masking rate goes to `mlm_probability_final`: `linear`, `cosine`
    /// (Yang et al. 2023 tried both) or `one_minus_sqrt`.
    #[serde(default = "default_mlm_probability_schedule")]
    pub mlm_probability_schedule: ScheduleShape,
    /// How training batches select what to predict: single tokens (BERT) or spans of whole
    /// words (SpanBERT). Held-out batches always use token masking ([`crate::eval`]). A run
    /// made before this setting existed used token masking ([`crate::RunDir::load_config`]).
    pub masking: Masking,
    /// Seed of initialisation, data order, masks and dropout.
    pub seed: u64,
    /// Validate every this many steps (and at the end).
    pub eval_every: usize,
    /// Read the training loss, accuracy and gradient norm back from the device every this
    /// many steps (and before each validation and checkpoint): a step itself waits on no
    /// read-back. `metrics.csv` still gets a row per step; a non-finite step is found at the
    /// next read ([`TrainError::NonFinite`](crate::error::TrainError::NonFinite)).
    pub log_every: usize,
    /// Checkpoint every this many steps (and at the end).
    pub checkpoint_every: usize,
    /// Hold out one document in this many.
    pub held_out_every: usize,
    /// Cap on held-out sequences per validation (they are masked the same way every time).
    pub max_eval_sequences: usize,
}

impl TrainConfig {
    /// The default run on `corpus`: the main job's settings (README, "The two commands").
    pub fn new(corpus: PathBuf) -> Self {
        Self {
            corpus,
            data: None,
            line_by_line: false,
            text_field: "text".into(),
            init_from: None,
            model: BertConfig::new(8192).with_local_attention_init(true).into(),
            tokenizer: None,
            vocab_size: 8192,
            max_seq_len: 64,
            batch_size: 64,
            grad_accumulation: 1,
            parallel_shards: 2,
            world_size: 1,
            learning_rate: 2e-3,
            warmup_steps: 100,
            max_steps: 2400,
            time_budget_seconds: None,
            lr_schedule: LrSchedule::Linear,
            lr_decay_fraction: DEFAULT_LR_DECAY_FRACTION,
            lr_decay_shape: DEFAULT_LR_DECAY_SHAPE,
            weight_decay: 0.01,
            weight_decay_on: WeightDecayOn::Matrices,
            max_grad_norm: 1.0,
            mask_rates: MaskRates::BERT,
            mlm_probability_final: None,
            mlm_probability_schedule: DEFAULT_MLM_PROBABILITY_SCHEDULE,
            masking: Masking::Token,
            seed: 42,
            eval_every: 200,
            log_every: DEFAULT_LOG_EVERY,
            checkpoint_every: 200,
            held_out_every: 50,
            max_eval_sequences: 512,
        }
    }
}

/// The `with_*` builders, as burn's `Config` derive writes them: each returns the
/// configuration with one setting changed.
macro_rules! builders {
    ($($with:ident => $($field:ident).+ : $ty:ty),* $(,)?) => {
        impl TrainConfig {
            $(
                #[doc = concat!("This configuration with `", stringify!($($field).+), "` set.")]
                pub fn $with(mut self, value: $ty) -> Self {
                    self.$($field).+ = value;
                    self
                }
            )*
        }
    };
}

builders!(
    with_data => data: Option<PathBuf>,
    with_line_by_line => line_by_line: bool,
    with_text_field => text_field: String,
    with_init_from => init_from: Option<PathBuf>,
    with_model => model: ModelConfig,
    with_tokenizer => tokenizer: Option<PathBuf>,
    with_vocab_size => vocab_size: usize,
    with_max_seq_len => max_seq_len: usize,
    with_batch_size => batch_size: usize,
    with_grad_accumulation => grad_accumulation: usize,
    with_parallel_shards => parallel_shards: usize,
    with_world_size => world_size: usize,
    with_learning_rate => learning_rate: f64,
    with_warmup_steps => warmup_steps: usize,
    with_max_steps => max_steps: usize,
    with_time_budget_seconds => time_budget_seconds: Option<f64>,
    with_lr_schedule => lr_schedule: LrSchedule,
    with_lr_decay_fraction => lr_decay_fraction: f64,
    with_lr_decay_shape => lr_decay_shape: ScheduleShape,
    with_weight_decay => weight_decay: f64,
    with_weight_decay_on => weight_decay_on: WeightDecayOn,
    with_max_grad_norm => max_grad_norm: f64,
    with_mask_rates => mask_rates: MaskRates,
    with_mlm_probability => mask_rates.mlm_probability: f64,
    with_mask_replace_prob => mask_rates.mask_replace_prob: f64,
    with_random_replace_prob => mask_rates.random_replace_prob: f64,
    with_mlm_probability_final => mlm_probability_final: Option<f64>,
    with_mlm_probability_schedule => mlm_probability_schedule: ScheduleShape,
    with_masking => masking: Masking,
    with_seed => seed: u64,
    with_eval_every => eval_every: usize,
    with_log_every => log_every: usize,
    with_checkpoint_every => checkpoint_every: usize,
    with_held_out_every => held_out_every: usize,
    with_max_eval_sequences => max_eval_sequences: usize,
);

/// serde's default of [`TrainConfig::lr_decay_fraction`].
fn default_lr_decay_fraction() -> f64 {
    DEFAULT_LR_DECAY_FRACTION
}

/// serde's default of [`TrainConfig::lr_decay_shape`].
fn default_lr_decay_shape() -> ScheduleShape {
    DEFAULT_LR_DECAY_SHAPE
}

/// serde's default of [`TrainConfig::mlm_probability_schedule`].
fn default_mlm_probability_schedule() -> ScheduleShape {
    DEFAULT_MLM_PROBABILITY_SCHEDULE
}

/// burn's `save` and `load` of a configuration file.
impl burn::config::Config for TrainConfig {}

impl std::fmt::Display for TrainConfig {
    /// The configuration as pretty JSON, as burn's `Config` derive prints one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let json = serde_json::to_string_pretty(self).map_err(|_| std::fmt::Error)?;
        f.write_str(&json)
    }
}

impl TrainConfig {
    /// Continues pretraining `pretrained`: the run starts from its weights (`init_from`),
    /// with its model (`model`, dropout included, as `run_mlm.py` keeps it) and its tokenizer
    /// (`tokenizer`, `vocab_size`). The checkpoint's values are the defaults of a continued
    /// run, which `--config` and the flags then change (dropout only, for the model): call
    /// it before setting dropout of your own. [`Settings::resolve`] checks the result
    /// against the checkpoint.
    ///
    /// # Errors
    /// [`ConfigError::Value`] for a `max_seq_len` above the checkpoint's
    /// `max_position_embeddings`, naming both.
    pub fn continue_from(&mut self, pretrained: &Pretrained) -> Result<(), ConfigError> {
        settings::check_positions(self.max_seq_len, pretrained)?;
        self.init_from = Some(pretrained.dir.clone());
        self.model = pretrained.config.clone();
        self.vocab_size = pretrained.config.vocab_size();
        self.tokenizer = Some(pretrained.tokenizer_file.clone());
        Ok(())
    }

    /// How the run's own data folder is prepared from `corpus`, with `tokenizer` (else one
    /// trained on the training split).
    pub fn prepare_options(&self, tokenizer: Option<SubwordTokenizer>) -> PrepareOptions {
        PrepareOptions {
            tokenizer,
            line_by_line: self.line_by_line,
            text_field: self.text_field.clone(),
            ..PrepareOptions::new(self.vocab_size, self.max_seq_len, self.held_out_every)
        }
    }

    /// The share of a run by the clock spent warming up: `warmup_steps / max_steps`, the
    /// share a run by step count spends (1/12 by default).
    pub fn warmup_fraction(&self) -> f64 {
        self.warmup_steps as f64 / self.max_steps.max(1) as f64
    }
}
