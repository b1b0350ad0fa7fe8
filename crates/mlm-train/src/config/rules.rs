//! [`TrainConfig::validate`]: every setting checked by a table of predicates, one per field,
//! before anything is written.

use mlm_core::{MaskRates, MlmError};

use super::{LrSchedule, TrainConfig};
use crate::data;
use crate::error::ConfigError;

impl TrainConfig {
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
        *model.vocab_size_mut() = model.vocab_size().max(1);
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
    fn rules(&self) -> [Result<(), ConfigError>; 12] {
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
            mask_rates_rule(&self.mask_rates),
            final_rate_rule(&self.mask_rates, self.mlm_probability_final),
            ConfigError::check(
                "vocab_size",
                self.vocab_size,
                self.tokenizer.is_some() || self.vocab_size > specials,
                format!("leaves no room beside the {specials} special tokens"),
            ),
            data::check_max_seq_len(self.max_seq_len),
            // A new model's positions follow max_seq_len (Settings::resolve); a continued
            // one has its checkpoint's.
            ConfigError::check(
                "max_seq_len",
                self.max_seq_len,
                self.init_from.is_none() || self.max_seq_len <= max_positions,
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
            ConfigError::check(
                "lr_decay_fraction",
                self.lr_decay_fraction,
                (0.0..=1.0).contains(&self.lr_decay_fraction),
                "must be in [0, 1]",
            ),
            self.decay_rule(),
        ]
    }

    /// Under warmup-stable-decay, the warm-up and the decay must not overlap: the peak is
    /// reached before the decay begins.
    fn decay_rule(&self) -> Result<(), ConfigError> {
        let decay = self.lr_decay_steps();
        ConfigError::check(
            "lr_decay_fraction",
            self.lr_decay_fraction,
            self.lr_schedule != LrSchedule::WarmupStableDecay
                || self.warmup_steps + decay <= self.max_steps,
            format!(
                "decays over {decay} of max_steps = {} steps, which overlap the {} warm-up \
                 steps (pass a smaller --lr-decay-fraction or --warmup-steps)",
                self.max_steps, self.warmup_steps
            ),
        )
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

/// The masking rates, by mlm-core's one rule ([`MaskRates::validate`]), as the row of the
/// setting at fault.
fn mask_rates_rule(rates: &MaskRates) -> Result<(), ConfigError> {
    match rates.validate() {
        Ok(()) => Ok(()),
        Err(MlmError::ReplaceProbabilitiesExceedOne {
            mask_replace_prob,
            random_replace_prob,
        }) => Err(ConfigError::value(
            "random_replace_prob",
            random_replace_prob,
            format!(
                "must be in [0, 1 - mask_replace_prob] (mask_replace_prob is {mask_replace_prob})"
            ),
        )),
        Err(MlmError::InvalidProbability { name, value }) => {
            Err(ConfigError::value(name, value, "must be in [0, 1]"))
        }
        Err(other) => Err(ConfigError::value(
            "mlm_probability",
            rates.mlm_probability,
            other.to_string(),
        )),
    }
}

/// The final masking rate, by the rule of the rate it ends ([`MaskRates::validate`]), as
/// the row of `mlm_probability_final`; the other rates are `mask_rates_rule`'s.
fn final_rate_rule(rates: &MaskRates, final_rate: Option<f64>) -> Result<(), ConfigError> {
    let Some(mlm_probability) = final_rate else {
        return Ok(());
    };
    let ending = MaskRates {
        mlm_probability,
        ..*rates
    };
    match ending.validate() {
        Err(MlmError::InvalidProbability {
            name: "mlm_probability",
            value,
        }) => Err(ConfigError::value(
            "mlm_probability_final",
            value,
            "must be in [0, 1]",
        )),
        _ => Ok(()),
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

    /// The error's message for `config`, which must be refused as a value.
    fn refused(config: TrainConfig) -> String {
        match config.validate() {
            Err(e @ ConfigError::Value { .. }) => e.to_string(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_final_masking_rate_outside_0_1_is_refused_by_name() {
        let config = || TrainConfig::new("corpus".into());
        for rate in [0.0, 0.15, 0.3, 1.0] {
            config()
                .with_mlm_probability_final(Some(rate))
                .validate()
                .unwrap();
        }
        for rate in [-0.01, 1.5, f64::NAN, f64::INFINITY] {
            let message = refused(config().with_mlm_probability_final(Some(rate)));
            assert!(
                message.contains(&format!("mlm_probability_final = {rate}"))
                    && message.contains("must be in [0, 1]"),
                "{message}"
            );
        }
        // A bad starting rate is named as itself.
        let message = refused(
            config()
                .with_mlm_probability(1.5)
                .with_mlm_probability_final(Some(0.15)),
        );
        assert!(message.contains("mlm_probability = 1.5"), "{message}");
    }

    #[test]
    fn a_decay_outside_0_1_or_over_the_warm_up_is_refused_by_name() {
        let wsd = || {
            TrainConfig::new("corpus".into())
                .with_lr_schedule(LrSchedule::WarmupStableDecay)
                .with_max_steps(100)
                .with_warmup_steps(10)
        };
        for fraction in [0.0, 0.1, 0.9] {
            wsd().with_lr_decay_fraction(fraction).validate().unwrap();
        }
        for fraction in [-0.1, 1.1, f64::NAN] {
            let message = refused(wsd().with_lr_decay_fraction(fraction));
            assert!(
                message.contains(&format!("lr_decay_fraction = {fraction}"))
                    && message.contains("must be in [0, 1]"),
                "{message}"
            );
        }
        let message = refused(wsd().with_lr_decay_fraction(0.95));
        assert!(
            message.contains("decays over 95 of max_steps = 100 steps")
                && message.contains("overlap the 10 warm-up steps"),
            "{message}"
        );
        // The linear schedule does not read the share: only its range is checked.
        let linear = wsd().with_lr_schedule(LrSchedule::Linear);
        linear.with_lr_decay_fraction(0.95).validate().unwrap();
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
}
