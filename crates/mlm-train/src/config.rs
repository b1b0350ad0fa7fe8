//! The run's configuration: every setting of a run, checked before anything is written, read
//! from a partial JSON file over the defaults, and completed by [`TrainConfig::resolve`].

use std::path::{Path, PathBuf};

use burn::config::Config;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use crate::data::{self, WordPieceTokenizer};
use crate::error::{TrainError, read_json};
use crate::model::BertConfig;

/// What a training batch selects for prediction (`--masking`, `"masking"` in `config.json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Masking {
    /// Each non-special token with probability `mlm_probability`, then 80/10/10 per token
    /// (BERT, Devlin et al. 2019, §3.1).
    #[default]
    Token,
    /// Spans of whole words, lengths ~ Geo(0.2) truncated at 10 words, until
    /// `mlm_probability` of the tokens are selected, then 80/10/10 per span (SpanBERT, Joshi
    /// et al. 2020, §3.1).
    Span,
}

impl std::fmt::Display for Masking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Token => "token",
            Self::Span => "span",
        })
    }
}

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
    /// ([`crate::distributed`]). Part of the run's definition, like `parallel_shards`; the
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
    /// The default trains for about 4 minutes on a 2-core CPU with flex (README, "What you
    /// get").
    #[config(default = 2000)]
    pub max_steps: usize,
    /// Train by the clock: seconds of training after which the run ends (`None`: it ends at
    /// `max_steps`). The learning rate then follows elapsed time instead of the step: warm-up
    /// over the first `warmup_steps / max_steps` of the budget, linear decay to 0 at its end
    /// ([`learning_rate_at`]); `max_steps` ends nothing and sets only that share. Elapsed time
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
            ("log_every", self.log_every),
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
        if let Some(budget) = self.time_budget_seconds
            && !(budget.is_finite() && budget > 0.0)
        {
            return bad(format!(
                "time_budget_seconds = {budget} must be a positive number of seconds"
            ));
        }
        if self.warmup_steps > self.max_steps {
            let why = match self.time_budget_seconds {
                // By the clock, max_steps does not end the run: the two only set a share.
                Some(_) => {
                    "by the clock, warmup_steps/max_steps is the share of the time \
                            budget spent warming up, at most 1 (--max-steps does not cap a \
                            run by the clock; pass a smaller --warmup-steps or a larger \
                            --max-steps)"
                }
                None => {
                    "the learning rate would never reach its peak (pass a smaller \
                         --warmup-steps)"
                }
            };
            return bad(format!(
                "warmup_steps = {} exceeds max_steps = {}: {why}",
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

/// The learning rate at `step` (1-based) of a run by step count: linear warm-up to the peak
/// over `warmup_steps`, then linear decay to 0 at `max_steps`.
pub fn learning_rate(config: &TrainConfig, step: usize) -> f64 {
    let peak = config.learning_rate;
    if step <= config.warmup_steps {
        peak * step as f64 / config.warmup_steps.max(1) as f64
    } else {
        let remaining = config.max_steps.saturating_sub(step) as f64;
        peak * remaining / config.max_steps.saturating_sub(config.warmup_steps).max(1) as f64
    }
}

/// The learning rate at `progress` (the share of the run done: elapsed time ÷ time budget for
/// a run by the clock): linear warm-up from 0 to `peak` over the first `warmup` share of the
/// run, then linear decay to 0 at `progress` = 1, the budget-aware schedule of Izsak et al.
/// (2021) and Geiping & Goldstein (2022, "Cramming"). `progress` is clamped to [0, 1], so a
/// step past the budget gets 0; `warmup` = 1 warms up over the whole run, as `warmup_steps`
/// = `max_steps` does.
pub fn learning_rate_at(peak: f64, warmup: f64, progress: f64) -> f64 {
    let progress = progress.clamp(0.0, 1.0);
    if progress < warmup || warmup >= 1.0 {
        peak * progress / warmup
    } else {
        peak * (1.0 - progress) / (1.0 - warmup)
    }
}

impl TrainConfig {
    /// The share of a run by the clock spent warming up: `warmup_steps / max_steps`, the
    /// share a run by step count spends (1/12 by default).
    pub fn warmup_fraction(&self) -> f64 {
        self.warmup_steps as f64 / self.max_steps.max(1) as f64
    }
}

/// Seconds in a duration written as people write it: `90s`, `5m`, `1h30m`, `1h 30min`
/// (humantime's units, from `ms` to `d`).
///
/// # Errors
/// [`TrainError::TimeBudget`] for text that is no duration (`5`, `five minutes`) or a zero
/// one, which would train nothing.
pub fn parse_time_budget(text: &str) -> Result<f64, TrainError> {
    let bad = |reason: String| TrainError::TimeBudget {
        text: text.into(),
        reason,
    };
    if text.trim_start().starts_with('-') {
        return Err(bad(
            "a negative duration; give a positive one, e.g. 90s, 5m or 1h30m".into(),
        ));
    }
    let duration = humantime::parse_duration(text.trim())
        .map_err(|e| bad(format!("not a duration ({e}); write e.g. 90s, 5m or 1h30m")))?;
    if duration.is_zero() {
        return Err(bad(
            "a run of no time trains nothing; give a positive duration, e.g. 90s, 5m or 1h30m"
                .into(),
        ));
    }
    Ok(duration.as_secs_f64())
}

/// `seconds` as people write a duration, to the second (to the millisecond below 10 s):
/// `2m 5s`, `1h 30m`, `3s 120ms`.
pub fn human_duration(seconds: f64) -> String {
    let millis = (seconds.max(0.0) * 1e3).round() as u64;
    let millis = if millis >= 10_000 {
        (millis + 500) / 1000 * 1000
    } else {
        millis
    };
    humantime::format_duration(std::time::Duration::from_millis(millis)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEAK: f64 = 2e-3;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * PEAK
    }

    #[test]
    fn the_budget_schedule_warms_up_to_the_peak_then_decays_to_zero_at_the_budget() {
        // A tenth of the budget to warm up.
        let lr = |progress| learning_rate_at(PEAK, 0.1, progress);
        assert_eq!(lr(0.0), 0.0, "start");
        assert!(close(lr(0.05), PEAK / 2.0), "half-way through the warm-up");
        assert!(close(lr(0.1), PEAK), "end of the warm-up");
        assert!(close(lr(0.5), PEAK * 0.5 / 0.9), "half the budget");
        assert!(close(lr(0.55), PEAK / 2.0), "half-way through the decay");
        assert_eq!(lr(1.0), 0.0, "end of the budget");
        // Past the budget (the step that finds it spent) and before the start: clamped.
        assert_eq!(lr(1.3), 0.0);
        assert_eq!(lr(-0.1), 0.0);
        // Rising, then falling.
        let values: Vec<f64> = (0..=100).map(|i| lr(f64::from(i) / 100.0)).collect();
        assert!(values[..=10].windows(2).all(|w| w[0] < w[1]));
        assert!(values[10..].windows(2).all(|w| w[0] > w[1]));
    }

    #[test]
    fn the_budget_schedule_without_a_warm_up_or_all_warm_up_stays_finite() {
        assert_eq!(learning_rate_at(PEAK, 0.0, 0.0), PEAK);
        assert!(close(learning_rate_at(PEAK, 0.0, 0.5), PEAK / 2.0));
        assert_eq!(learning_rate_at(PEAK, 0.0, 1.0), 0.0);
        assert!(close(learning_rate_at(PEAK, 1.0, 0.5), PEAK / 2.0));
        assert_eq!(learning_rate_at(PEAK, 1.0, 1.0), PEAK);
    }

    #[test]
    fn the_warm_up_share_of_a_run_by_the_clock_is_that_of_a_run_by_step_count() {
        let config = TrainConfig::new("corpus".into());
        assert_eq!(config.warmup_fraction(), 100.0 / 2000.0);
        // The same shape: the step schedule at step s is the clock schedule at s / max_steps.
        for step in [1, 50, 100, 101, 1000, 1999, 2000] {
            let by_step = learning_rate(&config, step);
            let by_clock = learning_rate_at(
                config.learning_rate,
                config.warmup_fraction(),
                step as f64 / 2000.0,
            );
            assert!((by_step - by_clock).abs() <= 1e-12, "step {step}");
        }
    }

    #[test]
    fn time_budgets_are_read_as_people_write_durations() {
        for (text, seconds) in [
            ("90s", 90.0),
            ("5m", 300.0),
            ("1h30m", 5400.0),
            ("1h 30min", 5400.0),
            (" 2m ", 120.0),
            ("1500ms", 1.5),
        ] {
            assert_eq!(parse_time_budget(text).unwrap(), seconds, "{text}");
        }
    }

    #[test]
    fn a_time_budget_that_is_no_positive_duration_is_refused_in_plain_words() {
        for (text, words) in [
            ("5", "not a duration"),
            ("five minutes", "not a duration"),
            ("-5m", "negative"),
            (" -90s", "negative"),
            ("", "not a duration"),
            ("5 parsecs", "not a duration"),
            ("0s", "trains nothing"),
            ("0h0m", "trains nothing"),
        ] {
            match parse_time_budget(text) {
                Err(e @ TrainError::TimeBudget { .. }) => {
                    let message = e.to_string();
                    assert!(message.contains(words), "{text:?}: {message}");
                    assert!(
                        message.contains("5m"),
                        "{text:?} gives no example: {message}"
                    );
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn validate_refuses_a_time_budget_that_is_not_a_positive_number() {
        for budget in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let config = TrainConfig::new("corpus".into()).with_time_budget_seconds(Some(budget));
            match config.validate() {
                Err(TrainError::Config(message)) => {
                    assert!(message.contains("time_budget_seconds"), "{message}")
                }
                other => panic!("{budget}: {other:?}"),
            }
        }
        let config = TrainConfig::new("corpus".into()).with_time_budget_seconds(Some(0.5));
        config.validate().unwrap();
    }

    #[test]
    fn a_warm_up_longer_than_max_steps_is_explained_for_each_kind_of_run() {
        let config = TrainConfig::new("corpus".into())
            .with_max_steps(10)
            .with_warmup_steps(100);
        let message = |config: TrainConfig| match config.validate() {
            Err(TrainError::Config(message)) => message,
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

    #[test]
    fn durations_are_shown_to_the_second() {
        assert_eq!(human_duration(300.0), "5m");
        assert_eq!(human_duration(121.4), "2m 1s");
        assert_eq!(human_duration(5400.0), "1h 30m");
        assert_eq!(human_duration(3.12), "3s 120ms");
    }
}
