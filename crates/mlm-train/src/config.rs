//! The run's configuration: every setting of a run, checked before anything is written, read
//! from a partial JSON file over the defaults, and completed by [`TrainConfig::resolve`].

use std::path::{Path, PathBuf};

use burn::config::Config;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use crate::data::{self, Manifest, MaskRates, Masking, PrepareOptions, SubwordTokenizer};
use crate::error::{ConfigError, TrainError};
use crate::files::read_json;
use crate::model::BertConfig;
use crate::model::hf::Pretrained;

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

/// Everything that defines a run; saved as `config.json` in the run directory.
#[derive(Config, Debug)]
pub struct TrainConfig {
    /// A corpus file (`.txt`, `.jsonl`, either gzip-compressed) or a folder of them, which
    /// the run prepares into its own data folder (`RUN/data`) unless `data` is given (then
    /// it is not read, and `train --data` leaves it empty).
    pub corpus: PathBuf,
    /// A data folder made by `mlm-train prepare`, memory-mapped instead of preparing
    /// `corpus`; it fixes the tokenizer, `max_seq_len`, `line_by_line` and the held-out split.
    #[config(default = "None")]
    pub data: Option<PathBuf>,
    /// One sentence per sequence, padded (`run_mlm.py`'s `--line_by_line`), instead of a
    /// document's sentences packed into sequences of up to `max_seq_len` tokens.
    #[config(default = false)]
    pub line_by_line: bool,
    /// The field of a `.jsonl` record that holds its text (`datasets`' `to_json` writes
    /// `text`).
    #[config(default = "String::from(\"text\")")]
    pub text_field: String,
    /// A Hugging Face `BertForMaskedLM` folder whose weights the run starts from
    /// (continued pretraining) instead of a seeded initialisation, with fresh optimizer state
    /// and the run's own schedule. It fixes `model` and `tokenizer`
    /// ([`TrainConfig::continue_from`]); a resume reads its checkpoint instead.
    #[config(default = "None")]
    pub init_from: Option<PathBuf>,
    /// Model sizes; `vocab_size` and `max_position_embeddings` follow from the tokenizer and
    /// `max_seq_len` ([`TrainConfig::resolve`]), or from `init_from`'s checkpoint.
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
    /// ([`crate::train::distributed`]). Part of the run's definition, like `parallel_shards`; the
    /// binary takes it from the MPI launcher (`mpirun -np N`), and a resume must be started
    /// as as many processes.
    #[config(default = 1)]
    pub world_size: usize,
    /// Peak learning rate.
    #[config(default = 2e-3)]
    pub learning_rate: f64,
    /// Steps of linear warm-up from 0 to the peak.
    #[config(default = 100)]
    pub warmup_steps: usize,
    /// Optimizer steps in the run; the learning rate decays linearly to 0 at this step.
    /// The default trains for 2 to 7 minutes on a 2-core CPU with flex, by CPU (README, "The
    /// two commands").
    #[config(default = 2000)]
    pub max_steps: usize,
    /// Train by the clock: seconds of training after which the run ends (`None`: it ends at
    /// `max_steps`). The learning rate then follows elapsed time instead of the step: warm-up
    /// over the first `warmup_steps / max_steps` of the budget, linear decay to 0 at its end
    /// ([`learning_rate_at`](crate::train::lr::learning_rate_at)); `max_steps` ends nothing and sets only that share. Elapsed time
    /// counts from the model's creation, periodic evaluations and checkpoints included, data
    /// preparation not; it is summed over resumed sessions. Not reproducible step for step:
    /// the schedule depends on the machine's speed.
    #[config(default = "None")]
    pub time_budget_seconds: Option<f64>,
    /// AdamW decoupled weight decay λ: each step shrinks the decayed parameters by
    /// `1 − learning_rate · λ` (Loshchilov & Hutter 2019).
    #[config(default = 0.01)]
    pub weight_decay: f64,
    /// Which parameters `weight_decay` shrinks. A run made before this setting existed
    /// decayed every parameter ([`crate::RunDir::load_config`]).
    #[config(default = "WeightDecayOn::Matrices")]
    pub weight_decay_on: WeightDecayOn,
    /// Global gradient-norm clip.
    #[config(default = 1.0)]
    pub max_grad_norm: f64,
    /// Share of tokens selected for prediction in training batches (held-out batches: 15 %).
    #[config(default = 0.15)]
    pub mlm_probability: f64,
    /// Share of the selected training tokens replaced by `[MASK]` (BERT §3.1: 0.8;
    /// `DataCollatorForLanguageModeling`'s `mask_replace_prob`). BabyBERTa (Huebner et al.
    /// 2021, §4.2) found 1.0, every selected token masked, better for grammar. Held-out
    /// batches stay 80/10/10, so held-out losses compare; their `[MASK]` loss is the like
    /// for like.
    #[config(default = 0.8)]
    pub mask_replace_prob: f64,
    /// Share of the selected training tokens replaced by a random token (BERT: 0.1;
    /// `random_replace_prob`); the rest, `1 − mask_replace_prob − random_replace_prob`, stay
    /// unchanged. Every selected token is graded against the original.
    #[config(default = 0.1)]
    pub random_replace_prob: f64,
    /// How training batches select what to predict: single tokens (BERT) or spans of whole
    /// words (SpanBERT). Held-out batches always use token masking ([`crate::eval`]). A run
    /// made before this setting existed used token masking ([`crate::RunDir::load_config`]).
    #[config(default = "Masking::Token")]
    pub masking: Masking,
    /// Seed of initialisation, data order, masks and dropout.
    #[config(default = 42)]
    pub seed: u64,
    /// Validate every this many steps (and at the end).
    #[config(default = 200)]
    pub eval_every: usize,
    /// Read the training loss, accuracy and gradient norm back from the device every this
    /// many steps (and before each validation and checkpoint): a step itself waits on no
    /// read-back. `metrics.csv` still gets a row per step; a non-finite step is found at the
    /// next read ([`TrainError::NonFinite`]).
    #[config(default = "DEFAULT_LOG_EVERY")]
    pub log_every: usize,
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
    /// A run `init_from` a checkpoint keeps the checkpoint's sizes.
    pub fn resolve(&mut self, tokenizer: Option<&SubwordTokenizer>) {
        if self.init_from.is_some() {
            return;
        }
        self.model.max_position_embeddings = self.max_seq_len;
        if let Some(tokenizer) = tokenizer {
            self.model.vocab_size = tokenizer.vocab_size();
        }
    }

    /// Continues pretraining `pretrained`: the run starts from its weights (`init_from`),
    /// with its model (`model`, dropout included, as `run_mlm.py` keeps it) and its tokenizer
    /// (`tokenizer`, `vocab_size`). Call it before setting dropout of your own.
    ///
    /// # Errors
    /// [`ConfigError::Value`] for a `max_seq_len` above the checkpoint's
    /// `max_position_embeddings`, naming both.
    pub fn continue_from(&mut self, pretrained: &Pretrained) -> Result<(), ConfigError> {
        let model = &pretrained.config;
        let longest = model.max_sequence_len();
        let offset = match model.position_offset {
            0 => String::new(),
            n => format!(" less the {n} rows before RoBERTa's first position"),
        };
        ConfigError::check(
            "max_seq_len",
            self.max_seq_len,
            self.max_seq_len <= longest,
            format!(
                "is above the {longest} positions of {} (max_position_embeddings = {}{offset})",
                pretrained.dir.display(),
                model.max_position_embeddings
            ),
        )?;
        self.init_from = Some(pretrained.dir.clone());
        self.model = pretrained.config.clone();
        self.vocab_size = pretrained.config.vocab_size;
        self.tokenizer = Some(pretrained.tokenizer_file.clone());
        Ok(())
    }

    /// Checks every setting before anything is written, so a bad flag never leaves a
    /// half-made run directory behind: a table of predicates, one per field, the first that
    /// fails reported. Pure: whether a step fits in memory is the trainer's check
    /// ([`crate::train::memory::check_fits`]).
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the setting and its value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // The first setting that fails, in the table's order.
        self.counts()
            .into_iter()
            .chain(self.rules())
            .collect::<Result<(), _>>()?;
        // The vocabulary size comes from the tokenizer; check the other sizes now.
        let mut model = self.model.clone();
        model.vocab_size = model.vocab_size.max(1);
        model.validate()
    }

    /// The counts of [`Self::validate`]'s table: each at least 1.
    fn counts(&self) -> [Result<(), ConfigError>; 10] {
        [
            ("batch_size", self.batch_size),
            ("grad_accumulation", self.grad_accumulation),
            ("parallel_shards", self.parallel_shards),
            ("world_size", self.world_size),
            ("max_steps", self.max_steps),
            ("eval_every", self.eval_every),
            ("log_every", self.log_every),
            ("checkpoint_every", self.checkpoint_every),
            ("held_out_every", self.held_out_every),
            ("max_eval_sequences", self.max_eval_sequences),
        ]
        .map(|(field, value)| ConfigError::check(field, value, value >= 1, "must be at least 1"))
    }

    /// [`Self::validate`]'s table after the counts: every other setting, in order.
    fn rules(&self) -> [Result<(), ConfigError>; 11] {
        let (budget, specials) = (self.time_budget_seconds, data::SPECIAL_TOKENS.len());
        let max_positions = self.model.max_sequence_len();
        let weight_decay = self.weight_decay;
        [
            positive_rule("learning_rate", self.learning_rate),
            ConfigError::check(
                "weight_decay",
                weight_decay,
                weight_decay.is_finite() && weight_decay >= 0.0,
                "must be a number >= 0",
            ),
            positive_rule("max_grad_norm", self.max_grad_norm),
            ConfigError::check(
                "mlm_probability",
                self.mlm_probability,
                self.mlm_probability > 0.0 && self.mlm_probability <= 1.0,
                "must be in (0, 1]",
            ),
            ConfigError::check(
                "mask_replace_prob",
                self.mask_replace_prob,
                (0.0..=1.0).contains(&self.mask_replace_prob),
                "must be in [0, 1]",
            ),
            ConfigError::check(
                "random_replace_prob",
                self.random_replace_prob,
                // The sum, as mlm-core checks it: `1 - 0.9` is below 0.1 in f64, `0.9 + 0.1` is 1.
                (0.0..=1.0).contains(&self.random_replace_prob)
                    && self.mask_replace_prob + self.random_replace_prob <= 1.0,
                format!(
                    "must be in [0, 1 - mask_replace_prob] (mask_replace_prob is {})",
                    self.mask_replace_prob
                ),
            ),
            ConfigError::check(
                "vocab_size",
                self.vocab_size,
                self.tokenizer.is_some() || self.vocab_size > specials,
                format!("leaves no room beside the {specials} special tokens"),
            ),
            data::check_max_seq_len(self.max_seq_len),
            ConfigError::check(
                "max_seq_len",
                self.max_seq_len,
                self.max_seq_len <= max_positions,
                format!("must be in [3, the model's {max_positions} positions]"),
            ),
            ConfigError::check(
                "time_budget_seconds",
                budget.map_or("none".into(), |b| b.to_string()),
                budget.is_none_or(positive),
                "must be a positive number of seconds",
            ),
            ConfigError::check(
                "warmup_steps",
                self.warmup_steps,
                self.warmup_steps <= self.max_steps,
                format!(
                    "exceeds max_steps = {}: {}",
                    self.max_steps,
                    self.warmup_why()
                ),
            ),
        ]
    }

    /// Why `warmup_steps` may not exceed `max_steps`, for each kind of run.
    fn warmup_why(&self) -> &'static str {
        match self.time_budget_seconds {
            // By the clock, max_steps does not end the run: the two only set a share.
            Some(_) => {
                "by the clock, warmup_steps/max_steps is the share of the time budget spent \
                 warming up, at most 1 (--max-steps does not cap a run by the clock; pass a \
                 smaller --warmup-steps or a larger --max-steps)"
            }
            None => "the learning rate would never reach its peak (pass a smaller --warmup-steps)",
        }
    }
}

/// `defaults` with the fields that the JSON file at `path` gives replaced, at any depth
/// (`{"max_steps": 300, "model": {"hidden_size": 256}}` changes those two settings only).
///
/// # Errors
/// [`ConfigError::UnknownField`] / [`ConfigError::File`] naming `path` for a field that
/// `TrainConfig` does not have or a value of the wrong type; [`TrainError::Json`] naming `path` for a file that is not JSON;
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
                    let Some(slot) = base.get_mut(&key) else {
                        return Err(name);
                    };
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
    merge(&mut value, overrides, "").map_err(|field| ConfigError::UnknownField {
        path: path.to_path_buf(),
        field,
    })?;
    config_from_json(value, path)
}

/// The `TrainConfig` that `value`, read from the file at `path`, describes.
///
/// # Errors
/// [`ConfigError::File`] naming `path` and the field for a value of the wrong type or a
/// missing field (`max_steps: invalid type: string "20", expected usize`).
pub(crate) fn config_from_json(
    value: serde_json::Value,
    path: &Path,
) -> Result<TrainConfig, TrainError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        TrainError::Config(ConfigError::File {
            path: path.to_path_buf(),
            field,
            reason: e.into_inner().to_string(),
        })
    })
}

impl TrainConfig {
    /// What the training masker selects and puts in its place.
    pub fn mask_rates(&self) -> MaskRates {
        MaskRates {
            mlm_probability: self.mlm_probability,
            mask_replace_prob: self.mask_replace_prob,
            random_replace_prob: self.random_replace_prob,
        }
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

    /// Takes the settings that `manifest`'s data folder fixes (`line_by_line`,
    /// `held_out_every`, `text_field`), and checks `max_seq_len` against it.
    ///
    /// # Errors
    /// [`TrainError::DataFolder`] for a `max_seq_len` other than the folder's: its sequences
    /// were cut at its own, and the position table has `max_seq_len` rows.
    pub fn adopt_data(&mut self, data: &Path, manifest: &Manifest) -> Result<(), TrainError> {
        if self.max_seq_len != manifest.max_seq_len {
            // A checkpoint's positions may not hold the folder's sequences.
            let positions = self.model.max_sequence_len();
            let advice = match self.init_from.is_some() && manifest.max_seq_len > positions {
                true => format!("the checkpoint holds sequences of up to {positions}: "),
                false => "leave --max-seq-len out, or ".to_string(),
            };
            return Err(TrainError::DataFolder {
                path: data.to_path_buf(),
                reason: format!(
                    "built for max_seq_len {}, the run asks for {}: {}prepare the corpus again \
                     with --max-seq-len {}",
                    manifest.max_seq_len, self.max_seq_len, advice, self.max_seq_len
                ),
            });
        }
        self.line_by_line = manifest.line_by_line;
        self.held_out_every = manifest.held_out_every;
        self.text_field.clone_from(&manifest.text_field);
        Ok(())
    }

    /// The share of a run by the clock spent warming up: `warmup_steps / max_steps`, the
    /// share a run by step count spends (1/12 by default).
    pub fn warmup_fraction(&self) -> f64 {
        self.warmup_steps as f64 / self.max_steps.max(1) as f64
    }
}

/// A row for a setting that must be a finite number above 0.
fn positive_rule(field: &str, value: f64) -> Result<(), ConfigError> {
    ConfigError::check(field, value, positive(value), "must be a positive number")
}

/// A finite number above 0.
fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_refuses_a_time_budget_that_is_not_a_positive_number() {
        for budget in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let config = TrainConfig::new("corpus".into()).with_time_budget_seconds(Some(budget));
            match config.validate() {
                Err(e @ ConfigError::Value { .. }) => {
                    let message = e.to_string();
                    assert!(message.contains("time_budget_seconds"), "{message}")
                }
                other => panic!("{budget}: {other:?}"),
            }
        }
        let config = TrainConfig::new("corpus".into()).with_time_budget_seconds(Some(0.5));
        config.validate().unwrap();
    }

    #[test]
    fn replacement_shares_are_refused_outside_0_1_or_above_1_together() {
        let rates = |mask: f64, random: f64| {
            TrainConfig::new("corpus".into())
                .with_mask_replace_prob(mask)
                .with_random_replace_prob(random)
                .validate()
                .map_err(|e| e.to_string())
        };
        rates(1.0, 0.0).unwrap();
        rates(0.0, 1.0).unwrap();
        rates(0.8, 0.1).unwrap();
        rates(0.9, 0.1).unwrap();
        rates(0.8, 0.2).unwrap();
        let error = rates(1.1, 0.0).unwrap_err();
        assert!(
            error.contains("mask_replace_prob") && error.contains("[0, 1]"),
            "{error}"
        );
        let error = rates(0.95, 0.1).unwrap_err();
        assert!(
            error.contains("random_replace_prob") && error.contains("1 - mask_replace_prob"),
            "{error}"
        );
        assert!(rates(0.5, f64::NAN).is_err() && rates(f64::NAN, 0.0).is_err());
    }

    #[test]
    fn a_warm_up_longer_than_max_steps_is_explained_for_each_kind_of_run() {
        let config = TrainConfig::new("corpus".into())
            .with_max_steps(10)
            .with_warmup_steps(100);
        let message = |config: TrainConfig| match config.validate() {
            Err(e @ ConfigError::Value { .. }) => e.to_string(),
            other => panic!("{other:?}"),
        };
        let by_steps = message(config.clone());
        assert!(by_steps.contains("never reach its peak"), "{by_steps}");
        let by_clock = message(config.with_time_budget_seconds(Some(60.0)));
        assert!(
            by_clock.contains("share of the time budget") && by_clock.contains("does not cap"),
            "{by_clock}"
        );
    }

    #[test]
    fn a_config_from_before_time_budgets_reads_as_a_run_by_step_count() {
        let mut value = serde_json::to_value(TrainConfig::new("corpus".into())).unwrap();
        value
            .as_object_mut()
            .unwrap()
            .remove("time_budget_seconds")
            .unwrap();
        let config = config_from_json(value, Path::new("config.json")).unwrap();
        assert_eq!(config.time_budget_seconds, None);
    }
}
