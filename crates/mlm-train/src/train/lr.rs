//! The learning-rate schedules: linear warm-up, then linear decay to 0, against the step or
//! against the share of a time budget spent.

use crate::config::TrainConfig;

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
}
