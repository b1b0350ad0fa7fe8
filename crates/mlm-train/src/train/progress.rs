//! How a run shows its progress: what data preparation reads and makes; then a bar on a
//! terminal, or plain lines on stderr when stderr is not a terminal (the log of a batch job
//! or CI), once per evaluation interval.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::data::DataFolder;

/// Says on stderr what the run's data folder holds.
pub fn prepared(data: &DataFolder) {
    let manifest = &data.manifest;
    eprintln!(
        "{}: {} training and {} held-out sequences of up to {} tokens ({}), a vocabulary of {} \
         tokens",
        data.path.display(),
        data.train.len(),
        data.held_out.len(),
        manifest.max_seq_len,
        match manifest.line_by_line {
            true => "one sentence each",
            false => "packed",
        },
        manifest.vocab_size
    );
}

/// Where a run ends: at a step, or when its time budget is spent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunEnd {
    /// At this step (`max_steps`).
    Step(usize),
    /// After this many seconds of training (`time_budget_seconds`).
    Budget(f64),
}

/// Progress of the optimizer steps of one training session (a run or a resumed segment).
pub struct Progress {
    bar: Option<ProgressBar>,
    end: RunEnd,
    first_step: usize,
    started: Instant,
}

impl Progress {
    /// Starts at `step` (steps already done) and `elapsed_seconds` (of training so far) of
    /// a run that ends at `end`: a bar in steps, or in seconds of the time budget.
    pub fn new(step: usize, elapsed_seconds: f64, end: RunEnd) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let (length, position, unit) = match end {
                RunEnd::Step(max_steps) => (max_steps as u64, step as u64, "steps"),
                RunEnd::Budget(budget) => (
                    budget.ceil() as u64,
                    elapsed_seconds as u64,
                    "s of the time budget",
                ),
            };
            let bar = ProgressBar::new(length).with_position(position);
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{{bar:30}} {{pos}}/{{len}} {unit}  {{elapsed_precise}} elapsed, ETA \
                     {{eta_precise}}  {{msg}}"
                ))
                .expect("a valid template"),
            );
            bar
        });
        Self {
            bar,
            end,
            first_step: step,
            started: Instant::now(),
        }
    }

    /// Records a finished step, `elapsed_seconds` into the run: the bar moves; in a log,
    /// nothing (see [`Self::log`]).
    pub fn step(&self, step: usize, elapsed_seconds: f64, loss: f64, tokens_per_second: f64) {
        if let Some(bar) = &self.bar {
            match self.end {
                RunEnd::Step(_) => {
                    bar.set_position(step as u64);
                    bar.set_message(format!("loss {loss:.3}  {tokens_per_second:.0} tok/s"));
                }
                RunEnd::Budget(budget) => {
                    bar.set_position(elapsed_seconds.min(budget) as u64);
                    bar.set_message(format!(
                        "step {step}  loss {loss:.3}  {tokens_per_second:.0} tok/s"
                    ));
                }
            }
        }
    }

    /// In a log, one line `step N/M  loss L  T tokens/s  ETA` (by the clock: `step N  loss
    /// L  T tokens/s  E of B`); on a terminal the bar already shows it.
    pub fn log(&self, step: usize, elapsed_seconds: f64, loss: f64, tokens_per_second: f64) {
        if self.bar.is_some() {
            return;
        }
        let line = format!("loss {loss:.4}  {tokens_per_second:.0} tokens/s");
        match self.end {
            RunEnd::Step(max_steps) => {
                let done = (step - self.first_step).max(1) as f64;
                let per_step = self.started.elapsed().as_secs_f64() / done;
                let eta = per_step * max_steps.saturating_sub(step) as f64;
                eprintln!(
                    "step {step}/{max_steps}  {line}  ETA {}",
                    clock(Duration::from_secs_f64(eta))
                );
            }
            RunEnd::Budget(budget) => eprintln!(
                "step {step}  {line}  {} of {}",
                clock(Duration::from_secs_f64(elapsed_seconds.max(0.0))),
                clock(Duration::from_secs_f64(budget))
            ),
        }
    }

    /// Prints `line` on stdout without tearing the bar.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
    }

    /// Leaves the bar where it stands (after an error or a stop).
    pub fn abandon(&self) {
        if let Some(bar) = &self.bar {
            bar.abandon();
        }
    }

    /// Completes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

/// `1h02m03s`, `4m10s` or `7s`.
fn clock(duration: Duration) -> String {
    let s = duration.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}
