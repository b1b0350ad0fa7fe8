//! What moves over a run besides the step: the learning-rate schedule ([`LrSchedule`]) and
//! the masking rate ([`TrainConfig::mlm_probability_at`]), with the shapes they move along
//! ([`ScheduleShape`]).

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use super::TrainConfig;

/// How a scheduled value goes from its start to its end over its stretch of the run
/// (`--lr-decay-shape`, `--mlm-probability-schedule`; `"lr_decay_shape"`,
/// `"mlm_probability_schedule"` in `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum ScheduleShape {
    /// A straight line.
    Linear,
    /// Half a cosine wave: slow at both ends, fastest half-way (Loshchilov & Hutter 2017,
    /// SGDR).
    Cosine,
    /// `1 − √t` of the way still to go at `t`: fast first, then slow; the cool-down that
    /// Hägele et al. (2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed
    /// Training Durations") found better than a linear one, and ModernBERT's.
    OneMinusSqrt,
}

impl ScheduleShape {
    /// The share of the way still to go at `t`, the share of the stretch done (clamped to
    /// [0, 1]): 1 at `t` = 0, 0 at `t` = 1. Linear `1 − t`, cosine `(1 + cos πt) / 2`,
    /// one_minus_sqrt `1 − √t`.
    pub fn remaining(self, t: f64) -> f64 {
        let t = t.clamp(0.0, 1.0);
        match self {
            Self::Linear => 1.0 - t,
            Self::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * t).cos()),
            Self::OneMinusSqrt => 1.0 - t.sqrt(),
        }
    }

    /// The value at `t` (clamped to [0, 1]) of the way from `start` to `end`: `start` at 0,
    /// `end` at 1.
    pub fn between(self, start: f64, end: f64, t: f64) -> f64 {
        end + (start - end) * self.remaining(t)
    }
}

impl std::fmt::Display for ScheduleShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_name(self, f)
    }
}

/// The learning-rate schedule (`--lr-schedule`, `"lr_schedule"` in `config.json`); both
/// warm up linearly from 0 to the peak over `warmup_steps` (a run by the clock: over the
/// share `warmup_steps / max_steps` of its budget).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum LrSchedule {
    /// Then linear decay to 0 at the run's end (BERT; Hugging Face's `linear`).
    #[default]
    Linear,
    /// Then the peak held, then a decay to 0 over the last `lr_decay_fraction` of the run,
    /// of shape `lr_decay_shape`: warmup-stable-decay (Hu et al. 2024, MiniCPM; Hägele et al.
    /// 2024; ModernBERT; Hugging Face's `warmup_stable_decay`). A run resumed with a larger
    /// `max_steps` before its decay began goes on at the peak: its learning rate does not
    /// jump, as the linear schedule's does.
    WarmupStableDecay,
}

impl std::fmt::Display for LrSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_name(self, f)
    }
}

/// Writes `value` as it is named on the command line and in `config.json` (the same name).
fn write_name<T: ValueEnum>(value: &T, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    let name = value.to_possible_value().expect("no value is skipped");
    f.write_str(name.get_name())
}

impl TrainConfig {
    /// The share of tokens that training batches select at `progress`, the share of the
    /// run done when the step begins: `(step − 1) / max_steps` by step count; by the clock,
    /// the share of the budget spent when the step before computed its gradients (every
    /// rank has it). Without `mlm_probability_final`, `mlm_probability` itself; with it,
    /// from `mlm_probability` at 0 to `mlm_probability_final` at 1 along
    /// `mlm_probability_schedule` (`progress` clamped to [0, 1]).
    pub fn mlm_probability_at(&self, progress: f64) -> f64 {
        let start = self.mask_rates.mlm_probability;
        match self.mlm_probability_final {
            None => start,
            Some(end) => self.mlm_probability_schedule.between(start, end, progress),
        }
    }

    /// The highest share of tokens a training batch selects over the run (for the memory a
    /// step needs): the larger of the start and final rates.
    pub fn peak_mlm_probability(&self) -> f64 {
        let start = self.mask_rates.mlm_probability;
        self.mlm_probability_final
            .map_or(start, |end| start.max(end))
    }

    /// Steps of the warmup-stable-decay schedule's decay: `lr_decay_fraction · max_steps`,
    /// rounded to the nearest step.
    pub fn lr_decay_steps(&self) -> usize {
        (self.lr_decay_fraction * self.max_steps as f64).round() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12
    }

    #[test]
    fn each_shape_goes_from_all_the_way_to_go_to_none_and_clamps() {
        for shape in [
            ScheduleShape::Linear,
            ScheduleShape::Cosine,
            ScheduleShape::OneMinusSqrt,
        ] {
            assert_eq!(shape.remaining(0.0), 1.0, "{shape} start");
            assert!(close(shape.remaining(1.0), 0.0), "{shape} end");
            assert_eq!(shape.remaining(-0.5), 1.0, "{shape} before the start");
            assert!(close(shape.remaining(1.5), 0.0), "{shape} past the end");
            let values: Vec<f64> = (0..=100)
                .map(|i| shape.remaining(f64::from(i) / 100.0))
                .collect();
            assert!(values.windows(2).all(|w| w[0] > w[1]), "{shape} falls");
        }
        // Named points: half-way, and a quarter of the way.
        assert!(close(ScheduleShape::Linear.remaining(0.5), 0.5));
        assert!(close(ScheduleShape::Cosine.remaining(0.5), 0.5));
        assert!(close(
            ScheduleShape::Cosine.remaining(0.25),
            0.5 + 0.5 * 0.5f64.sqrt()
        ));
        assert!(close(ScheduleShape::OneMinusSqrt.remaining(0.25), 0.5));
        assert!(close(
            ScheduleShape::OneMinusSqrt.remaining(0.5),
            1.0 - 0.5f64.sqrt()
        ));
    }

    #[test]
    fn the_masking_rate_moves_from_mlm_probability_to_its_final_rate() {
        let fixed = TrainConfig::new("corpus".into()).with_mlm_probability(0.3);
        for progress in [0.0, 0.5, 1.0, 2.0] {
            assert_eq!(fixed.mlm_probability_at(progress), 0.3, "no schedule");
        }
        assert_eq!(fixed.peak_mlm_probability(), 0.3);
        // Yang et al. (2023): 30 % → 15 %.
        let linear = fixed.with_mlm_probability_final(Some(0.15));
        assert_eq!(linear.mlm_probability_at(0.0), 0.3, "start");
        assert!(close(linear.mlm_probability_at(0.5), 0.225), "half-way");
        assert!(close(linear.mlm_probability_at(0.9), 0.165));
        assert!(close(linear.mlm_probability_at(1.0), 0.15), "end");
        assert!(
            close(linear.mlm_probability_at(1.3), 0.15),
            "past the budget"
        );
        assert_eq!(linear.mlm_probability_at(-0.1), 0.3, "clamped");
        assert_eq!(linear.peak_mlm_probability(), 0.3);
        let cosine = linear.with_mlm_probability_schedule(ScheduleShape::Cosine);
        assert!(close(cosine.mlm_probability_at(0.5), 0.225), "half-way");
        let quarter = 0.15 + 0.15 * (0.5 + 0.5 * 0.5f64.sqrt());
        assert!(close(cosine.mlm_probability_at(0.25), quarter), "a quarter");
        assert!(close(cosine.mlm_probability_at(1.0), 0.15), "end");
        // Rising: 15 % → 40 %.
        let rising = TrainConfig::new("corpus".into()).with_mlm_probability_final(Some(0.4));
        assert!(close(rising.mlm_probability_at(0.5), 0.275));
        assert_eq!(rising.peak_mlm_probability(), 0.4);
    }

    #[test]
    fn the_decay_is_its_share_of_max_steps_rounded() {
        let config = TrainConfig::new("corpus".into()).with_max_steps(2000);
        assert_eq!(config.lr_decay_steps(), 200, "the default tenth");
        assert_eq!(
            config.clone().with_lr_decay_fraction(0.0).lr_decay_steps(),
            0
        );
        assert_eq!(
            config.clone().with_lr_decay_fraction(1.0).lr_decay_steps(),
            2000
        );
        let odd = config.with_max_steps(25).with_lr_decay_fraction(0.1);
        assert_eq!(odd.lr_decay_steps(), 3, "2.5 rounds up");
    }

    #[test]
    fn the_schedules_have_the_names_of_config_json_on_the_command_line() {
        for (shape, name) in [
            (ScheduleShape::Linear, "linear"),
            (ScheduleShape::Cosine, "cosine"),
            (ScheduleShape::OneMinusSqrt, "one_minus_sqrt"),
        ] {
            assert_eq!(shape.to_string(), name);
            assert_eq!(serde_json::to_value(shape).unwrap(), name);
            assert_eq!(ScheduleShape::from_str(name, false), Ok(shape));
        }
        for (schedule, name) in [
            (LrSchedule::Linear, "linear"),
            (LrSchedule::WarmupStableDecay, "warmup_stable_decay"),
        ] {
            assert_eq!(schedule.to_string(), name);
            assert_eq!(serde_json::to_value(schedule).unwrap(), name);
            assert_eq!(LrSchedule::from_str(name, false), Ok(schedule));
        }
    }
}
