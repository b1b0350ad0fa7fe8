//! How a run shows its progress: a bar on a terminal; plain lines on stderr when stderr
//! is not a terminal (the log of a batch job or CI), once per evaluation interval.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Progress of the optimizer steps of one training session (a run or a resumed segment).
pub struct Progress {
    bar: Option<ProgressBar>,
    max_steps: usize,
    first_step: usize,
    started: Instant,
}

impl Progress {
    /// Starts at `step` (steps already done) of `max_steps`.
    pub fn new(step: usize, max_steps: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(max_steps as u64).with_position(step as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} steps  {elapsed_precise} elapsed, ETA {eta_precise}  {msg}",
                )
                .expect("a valid template"),
            );
            bar
        });
        Self {
            bar,
            max_steps,
            first_step: step,
            started: Instant::now(),
        }
    }

    /// Records a finished step: the bar moves; in a log, nothing (see [`Self::log`]).
    pub fn step(&self, step: usize, loss: f64, tokens_per_second: f64) {
        if let Some(bar) = &self.bar {
            bar.set_position(step as u64);
            bar.set_message(format!("loss {loss:.3}  {tokens_per_second:.0} tok/s"));
        }
    }

    /// In a log, one line `step N/M  loss L  T tokens/s  ETA`; on a terminal the bar
    /// already shows it.
    pub fn log(&self, step: usize, loss: f64, tokens_per_second: f64) {
        if self.bar.is_none() {
            let done = (step - self.first_step).max(1) as f64;
            let per_step = self.started.elapsed().as_secs_f64() / done;
            let eta = per_step * self.max_steps.saturating_sub(step) as f64;
            eprintln!(
                "step {step}/{}  loss {loss:.4}  {tokens_per_second:.0} tokens/s  ETA {}",
                self.max_steps,
                clock(Duration::from_secs_f64(eta))
            );
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
