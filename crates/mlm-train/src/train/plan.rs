//! What a training session does after each step: read the metrics back, validate,
//! checkpoint, go on or end. A pure function of the step's output and the settings, so that
//! the rules live in one place and are tested as a table.

use super::stop::StopSignal;
use super::trainer::StepOutput;
use crate::config::TrainConfig;

/// What comes after a step's validation and checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The next step.
    Continue,
    /// The run is over: `max_steps` reached, or (by the clock) its time budget spent.
    End,
    /// A stop request ends the run early, as if this were its last step, except that no
    /// extra validation runs: a resumed run then writes the same `metrics.csv` as an
    /// uninterrupted one.
    Stop(StopSignal),
}

/// The plan for the end of one step, carried out in field order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepPlan {
    /// Read the metrics of every step since the last read back from the device (one
    /// synchronisation), at logging intervals and before any validation, checkpoint or
    /// stop: a non-finite loss is then found before a checkpoint could save its weights.
    pub read_metrics: bool,
    /// Validate on the held-out split (every `eval_every` steps and at the end).
    pub evaluate: bool,
    /// Write a checkpoint (the writer only: every `checkpoint_every` steps, at the end, and
    /// on a stop request).
    pub checkpoint: bool,
    /// Go on, end, or stop.
    pub next: Next,
}

/// The last step a run by step count takes; a run by the clock ends when a step says its
/// budget is spent, so it has none (`usize::MAX`).
pub fn last_step(config: &TrainConfig) -> usize {
    match config.time_budget_seconds {
        Some(_) => usize::MAX,
        None => config.max_steps,
    }
}

/// The plan after the step `out` of a run of `config`; `writes_run` for the process that
/// writes the run (a single process, or rank 0), which alone checkpoints.
pub fn plan(config: &TrainConfig, out: &StepOutput, writes_run: bool) -> StepPlan {
    let step = out.step;
    let last = step == last_step(config) || out.budget_spent;
    let stopped = out.stop_requested.filter(|_| !last);
    let evaluate = step.is_multiple_of(config.eval_every) || last;
    let checkpoint =
        writes_run && (step.is_multiple_of(config.checkpoint_every) || last || stopped.is_some());
    let read_metrics =
        step.is_multiple_of(config.log_every) || evaluate || checkpoint || stopped.is_some();
    let next = match (stopped, last) {
        (Some(signal), _) => Next::Stop(signal),
        (None, true) => Next::End,
        (None, false) => Next::Continue,
    };
    StepPlan {
        read_metrics,
        evaluate,
        checkpoint,
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// log every 10, evaluate and checkpoint every 200, 2 000 steps.
    fn config() -> TrainConfig {
        TrainConfig::new("corpus".into()).with_max_steps(2000)
    }

    fn out(step: usize) -> StepOutput {
        StepOutput {
            step,
            learning_rate: 1e-3,
            n_masked: 10,
            budget_spent: false,
            tokens_per_second: 1.0,
            elapsed_seconds: 1.0,
            stop_requested: None,
        }
    }

    fn plan_of(read_metrics: bool, evaluate: bool, checkpoint: bool, next: Next) -> StepPlan {
        StepPlan {
            read_metrics,
            evaluate,
            checkpoint,
            next,
        }
    }

    #[test]
    fn the_default_run_reads_every_10_steps_and_evaluates_and_checkpoints_every_200() {
        let config = config();
        let go = Next::Continue;
        assert_eq!(
            plan(&config, &out(1), true),
            plan_of(false, false, false, go)
        );
        assert_eq!(
            plan(&config, &out(10), true),
            plan_of(true, false, false, go)
        );
        assert_eq!(
            plan(&config, &out(200), true),
            plan_of(true, true, true, go)
        );
        assert_eq!(
            plan(&config, &out(2000), true),
            plan_of(true, true, true, Next::End)
        );
        // A rank that does not write the run checkpoints nothing.
        assert_eq!(
            plan(&config, &out(200), false),
            plan_of(true, true, false, go)
        );
    }

    #[test]
    fn metrics_are_read_before_every_checkpoint_even_off_the_logging_interval() {
        let config = config().with_checkpoint_every(7).with_eval_every(1000);
        let go = Next::Continue;
        assert_eq!(plan(&config, &out(7), true), plan_of(true, false, true, go));
        // The rank that does not checkpoint has nothing to read for it.
        assert_eq!(
            plan(&config, &out(7), false),
            plan_of(false, false, false, go)
        );
    }

    #[test]
    fn a_stop_request_checkpoints_without_validating_except_at_the_last_step() {
        let config = config();
        let stopped = StepOutput {
            stop_requested: Some(StopSignal::Terminate),
            ..out(33)
        };
        let stop = Next::Stop(StopSignal::Terminate);
        assert_eq!(
            plan(&config, &stopped, true),
            plan_of(true, false, true, stop)
        );
        assert_eq!(
            plan(&config, &stopped, false),
            plan_of(true, false, false, stop)
        );
        // At the last step the request changes nothing: the run ends as planned.
        let last = StepOutput {
            step: 2000,
            ..stopped
        };
        assert_eq!(
            plan(&config, &last, true),
            plan_of(true, true, true, Next::End)
        );
    }

    #[test]
    fn a_run_by_the_clock_ends_at_the_step_that_finds_its_budget_spent() {
        let config = config().with_time_budget_seconds(Some(60.0));
        assert_eq!(last_step(&config), usize::MAX);
        // max_steps does not end it.
        let past = plan(&config, &out(2000), true);
        assert_eq!(past.next, Next::Continue);
        let spent = StepOutput {
            budget_spent: true,
            ..out(1234)
        };
        assert_eq!(
            plan(&config, &spent, true),
            plan_of(true, true, true, Next::End)
        );
    }
}
