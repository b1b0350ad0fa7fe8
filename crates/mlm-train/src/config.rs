//! The run's configuration: every setting of a run, checked before anything is written, read
//! from a partial JSON file over the defaults, and completed by [`TrainConfig::resolve`].

use std::path::{Path, PathBuf};

use burn::config::Config;

use crate::data::{self, WordPieceTokenizer};
use crate::error::{TrainError, read_json};
use crate::model::BertConfig;

/// Everything that defines a run; saved as `config.json` in the run directory.
#[derive(Config, Debug)]
pub struct TrainConfig {
    /// A `.txt` file or a folder of them.
    pub corpus: PathBuf,
    /// Model sizes; `vocab_size` and `max_position_embeddings` follow from the tokenizer and
    /// `max_seq_len` ([`TrainConfig::resolve`]).
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
    /// short run. The position table has this many rows ([`TrainConfig::resolve`]): a row
    /// no training sequence reaches would stay at its random start.
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
    /// Processes of a data-parallel run (torchrun's world size), each training `batch_size`
    /// sequences of every global batch of `world_size × batch_size`
    /// ([`crate::distributed`]). Part of the run's definition, like `parallel_shards`.
    #[config(default = 1)]
    pub world_size: usize,
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
    /// Derives the fields that follow from others: `model.max_position_embeddings` =
    /// `max_seq_len`, and `model.vocab_size` = the tokenizer's size once one is known. The
    /// trainer, the CLI, the examples and library users all get the same model from the
    /// same settings this way. Idempotent; a run's saved `config.json` is already resolved.
    pub fn resolve(&mut self, tokenizer: Option<&WordPieceTokenizer>) {
        self.model.max_position_embeddings = self.max_seq_len;
        if let Some(tokenizer) = tokenizer {
            self.model.vocab_size = tokenizer.vocab_size();
        }
    }

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
            ("world_size", self.world_size),
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
