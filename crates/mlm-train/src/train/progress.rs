//! How a run shows its progress: what data preparation reads and makes; then a bar on a
//! terminal, or plain lines on stderr when stderr is not a terminal (the log of a batch job
//! or CI), once per evaluation interval.

use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::config::TrainConfig;
use crate::data::DataFolder;
use crate::data::folder::SplitEntry;
use crate::duration::human_duration;

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

/// Graded tokens per validation below which its accuracy says little: the standard error
/// of an accuracy `p` over `n` graded tokens is `sqrt(p (1 - p) / n)`, at most 1.6 points at
/// `n` = 1 000 (`p` = 50 %), 5.8 points at 75. Runs that differ by a point or two are then
/// told apart only above it.
pub const MIN_GRADED_TOKENS: usize = 1000;

/// One standard error, in points, of an accuracy over `graded` tokens, at its largest
/// (accuracy 50 %): `100 sqrt(0.25 / graded)`.
pub fn accuracy_error_points(graded: usize) -> f64 {
    50.0 / (graded.max(1) as f64).sqrt()
}

/// About how many tokens a validation grades on `held_out`: `rate` (the held-out masking
/// rate, [`crate::eval::held_out`]'s 15 %) of the tokens of its first `max_eval_sequences`
/// sequences less their start and end tokens, and at least one a sequence (the masker's
/// minimum).
pub fn graded_tokens(held_out: &SplitEntry, max_eval_sequences: usize, rate: f64) -> usize {
    let sequences = held_out.sequences as usize;
    let read = sequences.min(max_eval_sequences);
    if read == 0 {
        return 0;
    }
    let tokens = held_out.tokens as f64 * read as f64 / sequences as f64;
    let body = (tokens - 2.0 * read as f64).max(0.0);
    ((rate * body).round() as usize).max(read)
}

/// What `graded` tokens make of an accuracy, if fewer than [`MIN_GRADED_TOKENS`]: `75
/// graded tokens, fewer than 1 000: its accuracy is known to ±5.8 points (one standard
/// error)`.
pub fn few_graded(graded: usize) -> Option<String> {
    (graded < MIN_GRADED_TOKENS).then(|| {
        format!(
            "{graded} graded tokens, fewer than {MIN_GRADED_TOKENS}: its accuracy is known to \
             ±{:.1} points (one standard error)",
            accuracy_error_points(graded)
        )
    })
}

/// The warning for a run whose held-out split grades fewer than [`MIN_GRADED_TOKENS`] per
/// validation at the held-out masking `rate` ([`graded_tokens`]), with the way out: a
/// smaller `--held-out-every` (the one that would grade about as many), a larger
/// `max_eval_sequences`, or more text.
pub fn held_out_warning(data: &DataFolder, config: &TrainConfig, rate: f64) -> Option<String> {
    let manifest = &data.manifest;
    let split = &manifest.held_out;
    let graded = graded_tokens(split, config.max_eval_sequences, rate);
    let (every, max_eval_sequences) = (manifest.held_out_every, config.max_eval_sequences);
    split_warning(&data.path, split, graded, every, max_eval_sequences)
}

/// [`held_out_warning`] of the held-out `split` of the data folder `path`, made with one
/// document held out in `every`, whose first `max_eval_sequences` grade `graded` tokens.
pub fn split_warning(
    path: &Path,
    split: &SplitEntry,
    graded: usize,
    every: usize,
    max_eval_sequences: usize,
) -> Option<String> {
    let note = few_graded(graded)?;
    let enough = every * graded / MIN_GRADED_TOKENS;
    let way_out = if split.sequences as usize > max_eval_sequences {
        format!("raise max_eval_sequences ({max_eval_sequences}) with --config")
    } else if enough >= 2 && enough < every {
        format!(
            "hold out more with --held-out-every {enough} (now {every}) to `train --corpus` \
             or `prepare`"
        )
    } else if every > 2 {
        format!(
            "give more text (--held-out-every 2 would grade about {})",
            every * graded / 2
        )
    } else {
        "give more text".to_string()
    };
    Some(format!(
        "the held-out split of {} ({} sequences) gives about {note}; {way_out}",
        path.display(),
        split.sequences
    ))
}

/// Says [`held_out_warning`] on stderr, if there is one.
pub fn held_out_size(data: &DataFolder, config: &TrainConfig, rate: f64) {
    if let Some(warning) = held_out_warning(data, config, rate) {
        eprintln!("warning: {warning}");
    }
}

/// [`resuming`]'s line.
pub fn resuming_line(dir: &Path, step: usize, elapsed_seconds: f64, end: RunEnd) -> String {
    let to = match end {
        RunEnd::Step(max_steps) => {
            format!("of {max_steps}, {} to go", max_steps.saturating_sub(step))
        }
        RunEnd::Budget(budget) => format!(
            "after {} of its {} time budget",
            human_duration(elapsed_seconds),
            human_duration(budget)
        ),
    };
    format!(
        "{}: resuming from its newest checkpoint, at step {step} {to}",
        dir.display()
    )
}

/// Says on stderr where a resumed run in `dir` goes on: from `step`, `elapsed_seconds` of
/// training into it, to `end`.
pub fn resuming(dir: &Path, step: usize, elapsed_seconds: f64, end: RunEnd) {
    eprintln!("{}", resuming_line(dir, step, elapsed_seconds, end));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A held-out split of `sequences` sequences and `tokens` tokens, `[CLS]` and `[SEP]`
    /// included.
    fn split(sequences: u64, tokens: u64) -> SplitEntry {
        SplitEntry {
            documents: sequences,
            sequences,
            tokens,
            shards: Vec::new(),
        }
    }

    #[test]
    fn a_held_out_split_of_few_graded_tokens_is_said_with_its_error_and_way_out() {
        // BERT's 15 %, the held-out masking rate.
        let warn = |split: &SplitEntry, every: usize, max: usize| {
            let graded = graded_tokens(split, max, 0.15);
            split_warning(Path::new("data/mine"), split, graded, every, max)
        };
        // The issue's: 300 documents, 6 held out, 11 sequences, about 75 graded tokens.
        let small = split(11, 522);
        assert_eq!(graded_tokens(&small, 512, 0.15), 75);
        assert_eq!(
            warn(&small, 50, 512).unwrap(),
            "the held-out split of data/mine (11 sequences) gives about 75 graded tokens, \
             fewer than 1000: its accuracy is known to ±5.8 points (one standard error); hold \
             out more with --held-out-every 3 (now 50) to `train --corpus` or `prepare`"
        );
        // 1.6 points at 1 000 tokens, the threshold.
        assert!((accuracy_error_points(1000) - 1.581).abs() < 1e-3);
        assert_eq!(few_graded(1000), None);
        assert_eq!(warn(&split(200, 200 * 64), 50, 512), None);
        // Capped by max_eval_sequences (16 of 600 sequences of 8 tokens): raise it.
        assert_eq!(graded_tokens(&split(600, 4800), 16, 0.15), 16);
        let capped = warn(&split(600, 4800), 50, 16).unwrap();
        assert!(
            capped.ends_with("raise max_eval_sequences (16) with --config"),
            "{capped}"
        );
        // Even one document in two would not do.
        let tiny = warn(&split(1, 12), 50, 512).unwrap();
        assert!(
            tiny.ends_with("give more text (--held-out-every 2 would grade about 50)"),
            "{tiny}"
        );
        // At one document in two already, more text is the only way.
        let tiny = warn(&split(1, 12), 2, 512).unwrap();
        assert!(tiny.ends_with("; give more text"), "{tiny}");
    }

    #[test]
    fn a_resume_says_its_step_and_what_is_left() {
        let dir = Path::new("runs/mine");
        assert_eq!(
            resuming_line(dir, 400, 60.0, RunEnd::Step(3000)),
            "runs/mine: resuming from its newest checkpoint, at step 400 of 3000, 2600 to go"
        );
        assert_eq!(
            resuming_line(dir, 400, 90.0, RunEnd::Budget(300.0)),
            "runs/mine: resuming from its newest checkpoint, at step 400 after 1m 30s of its \
             5m time budget"
        );
    }
}
