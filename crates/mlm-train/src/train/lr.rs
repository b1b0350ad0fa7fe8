//! The learning-rate schedules ([`LrSchedule`]), against the step or against the share of a
//! time budget spent: linear warm-up, then linear decay to 0 (`linear`), or the peak held
//! and a decay over the run's last share (`warmup_stable_decay`).

use crate::config::{LrSchedule, ScheduleShape, TrainConfig};

/// The learning rate at `step` (1-based) of a run by step count, by `config.lr_schedule`:
/// [`linear_learning_rate`] or [`warmup_stable_decay`].
pub fn learning_rate(config: &TrainConfig, step: usize) -> f64 {
    match config.lr_schedule {
        LrSchedule::Linear => linear_learning_rate(config, step),
        LrSchedule::WarmupStableDecay => warmup_stable_decay(config, step),
    }
}

/// The learning rate at `progress` (elapsed time ÷ time budget) of a run by the clock, by
/// `config.lr_schedule`: [`learning_rate_at`] or [`warmup_stable_decay_at`], warming up over
/// the share [`TrainConfig::warmup_fraction`] of the budget.
pub fn learning_rate_by_clock(config: &TrainConfig, progress: f64) -> f64 {
    let (peak, warmup) = (config.learning_rate, config.warmup_fraction());
    match config.lr_schedule {
        LrSchedule::Linear => learning_rate_at(peak, warmup, progress),
        LrSchedule::WarmupStableDecay => {
            let decay = (config.lr_decay_fraction, config.lr_decay_shape);
            warmup_stable_decay_at(peak, warmup, decay, progress)
        }
    }
}

/// The linear schedule at `step` (1-based) of a run by step count: linear warm-up to the
/// peak over `warmup_steps`, then linear decay to 0 at `max_steps`.
pub fn linear_learning_rate(config: &TrainConfig, step: usize) -> f64 {
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

/// Warmup-stable-decay at `step` (1-based) of a run by step count: linear warm-up to the
/// peak over `warmup_steps`, the peak held, then a decay of shape `lr_decay_shape` over the
/// last [`lr_decay_steps`](TrainConfig::lr_decay_steps) to 0 at `max_steps` (Hägele et al.
/// 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"; Hu et
/// al. 2024, MiniCPM; ModernBERT with `1 − √t`). [`TrainConfig::validate`] keeps the
/// warm-up and the decay apart; were they to overlap, the lower of the two would hold.
pub fn warmup_stable_decay(config: &TrainConfig, step: usize) -> f64 {
    let warm = match config.warmup_steps {
        0 => 1.0,
        steps => (step as f64 / steps as f64).min(1.0),
    };
    let cool = match config.lr_decay_steps() {
        0 => 1.0,
        steps => {
            let left = config.max_steps.saturating_sub(step).min(steps);
            config
                .lr_decay_shape
                .remaining(1.0 - left as f64 / steps as f64)
        }
    };
    config.learning_rate * warm.min(cool)
}

/// Warmup-stable-decay at `progress` (the share of the run done, clamped to [0, 1]) of a
/// run by the clock: linear warm-up from 0 to `peak` over the first `warmup` share, the
/// peak held, then a decay of `shape` to 0 over the last `fraction` of the run, `decay` =
/// `(fraction, shape)`. The clock's form of [`warmup_stable_decay`]: the same at
/// `progress` = `step / max_steps` up to the rounding of the decay's steps.
pub fn warmup_stable_decay_at(
    peak: f64,
    warmup: f64,
    (fraction, shape): (f64, ScheduleShape),
    progress: f64,
) -> f64 {
    let progress = progress.clamp(0.0, 1.0);
    let warm = match warmup > 0.0 {
        true => (progress / warmup).min(1.0),
        false => 1.0,
    };
    let cool = match fraction > 0.0 {
        true => shape.remaining(1.0 - (1.0 - progress) / fraction),
        false => 1.0,
    };
    peak * warm.min(cool)
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

    /// 100 steps: 10 to warm up, 20 to decay (steps 81–100), of `shape`.
    fn wsd(shape: ScheduleShape) -> TrainConfig {
        TrainConfig::new("corpus".into())
            .with_learning_rate(PEAK)
            .with_max_steps(100)
            .with_warmup_steps(10)
            .with_lr_schedule(LrSchedule::WarmupStableDecay)
            .with_lr_decay_fraction(0.2)
            .with_lr_decay_shape(shape)
    }

    #[test]
    fn warmup_stable_decay_warms_up_holds_the_peak_then_decays_to_zero() {
        let config = wsd(ScheduleShape::OneMinusSqrt);
        let lr = |step| learning_rate(&config, step);
        assert!(close(lr(1), PEAK / 10.0), "first step");
        assert!(close(lr(5), PEAK / 2.0), "half-way through the warm-up");
        assert_eq!(lr(10), PEAK, "end of the warm-up");
        assert_eq!(lr(11), PEAK, "held");
        assert_eq!(lr(50), PEAK, "held, half-way");
        assert_eq!(lr(80), PEAK, "decay start: the last step at the peak");
        // 1 − √t of the way at t = 1/20, 1/4 and 1 of the decay's 20 steps.
        assert!(
            close(lr(81), PEAK * (1.0 - 0.05f64.sqrt())),
            "first decay step"
        );
        assert!(close(lr(85), PEAK * 0.5), "a quarter into the decay");
        assert_eq!(lr(100), 0.0, "end");
        assert_eq!(lr(130), 0.0, "past the end");
        let linear = wsd(ScheduleShape::Linear);
        assert!(
            close(learning_rate(&linear, 90), PEAK / 2.0),
            "linear, half-way"
        );
        let cosine = wsd(ScheduleShape::Cosine);
        assert!(
            close(learning_rate(&cosine, 90), PEAK / 2.0),
            "cosine, half-way"
        );
        assert!(
            close(
                learning_rate(&cosine, 85),
                PEAK * (0.5 + 0.5 * 0.5f64.sqrt())
            ),
            "cosine, a quarter"
        );
        // Rising, held, then falling.
        let values: Vec<f64> = (1..=100).map(lr).collect();
        assert!(values[..10].windows(2).all(|w| w[0] < w[1]));
        assert!(values[9..80].iter().all(|&v| v == PEAK));
        assert!(values[79..].windows(2).all(|w| w[0] > w[1]));
    }

    #[test]
    fn warmup_stable_decay_without_a_warm_up_or_a_decay_stays_finite() {
        let config = wsd(ScheduleShape::Linear).with_warmup_steps(0);
        assert_eq!(learning_rate(&config, 1), PEAK, "no warm-up");
        let held = config.with_lr_decay_fraction(0.0);
        assert_eq!(
            learning_rate(&held, 100),
            PEAK,
            "no decay: the peak to the end"
        );
        let decay = (0.0, ScheduleShape::Linear);
        assert_eq!(warmup_stable_decay_at(PEAK, 0.0, decay, 0.0), PEAK);
        assert_eq!(warmup_stable_decay_at(PEAK, 0.0, decay, 1.0), PEAK);
        let all = (1.0, ScheduleShape::Linear);
        assert!(close(
            warmup_stable_decay_at(PEAK, 0.0, all, 0.25),
            0.75 * PEAK
        ));
    }

    /// The clock's progress is a float (0.8 leaves 0.19999999999999996 to go), and `1 − √t`
    /// turns an error of 1e-16 in `t` at the decay's start into 1e-8: within 1e-7.
    #[test]
    fn warmup_stable_decay_by_the_clock_follows_the_step_schedule() {
        for shape in [
            ScheduleShape::Linear,
            ScheduleShape::Cosine,
            ScheduleShape::OneMinusSqrt,
        ] {
            let config = wsd(shape);
            for step in [0, 1, 5, 10, 50, 80, 81, 85, 90, 99, 100] {
                let by_clock = learning_rate_by_clock(&config, step as f64 / 100.0);
                let by_step = learning_rate(&config, step);
                let off = (by_step - by_clock).abs() / PEAK;
                assert!(off <= 1e-7, "{shape} step {step}: {by_step} {by_clock}");
            }
            // Clamped before the start and past the budget.
            assert_eq!(learning_rate_by_clock(&config, -0.1), 0.0);
            assert_eq!(learning_rate_by_clock(&config, 1.3), 0.0);
        }
    }

    /// Warmup-stable-decay whose linear decay starts where the warm-up ends is the linear
    /// schedule; the linear schedule is the one every run made before had, by step and by
    /// the clock.
    #[test]
    fn a_linear_decay_over_all_but_the_warm_up_is_the_linear_schedule() {
        let linear = TrainConfig::new("corpus".into()).with_max_steps(2000);
        let wsd = linear
            .clone()
            .with_lr_schedule(LrSchedule::WarmupStableDecay)
            .with_lr_decay_shape(ScheduleShape::Linear)
            .with_lr_decay_fraction(1.0 - linear.warmup_fraction());
        for step in [1, 50, 100, 101, 1000, 1999, 2000] {
            let (a, b) = (learning_rate(&linear, step), learning_rate(&wsd, step));
            assert!(close(a, b), "step {step}: {a} {b}");
            let progress = step as f64 / 2000.0;
            let by_clock = learning_rate_by_clock(&linear, progress);
            let (peak, warmup) = (linear.learning_rate, linear.warmup_fraction());
            assert_eq!(by_clock, learning_rate_at(peak, warmup, progress));
            assert!(close(by_clock, learning_rate_by_clock(&wsd, progress)));
        }
    }

    #[test]
    fn the_warm_up_share_of_a_run_by_the_clock_is_that_of_a_run_by_step_count() {
        let config = TrainConfig::new("corpus".into()).with_max_steps(2000);
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
}
