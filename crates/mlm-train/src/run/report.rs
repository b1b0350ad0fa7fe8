//! What a run leaves for people: `metrics.csv`, `loss_curve.png` and `summary.json`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::data::Masking;
use crate::error::TrainError;
use crate::eval::grammar::MinimalPairsScore;
use crate::files::{io, read_json, write_atomic, write_json};
use crate::run::dir::RunDir;

/// One row of `metrics.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    /// Optimizer step.
    pub step: usize,
    /// `train` or `valid`.
    pub split: String,
    /// Masked-LM loss, nats per masked token (global mean over the step's masked tokens).
    pub loss: f64,
    /// Share of masked tokens whose argmax is the original token.
    pub accuracy: f64,
    /// `exp(loss)`.
    pub perplexity: f64,
    /// Learning rate used at this step.
    pub learning_rate: f64,
    /// Real (non-padding) tokens per second of training wall time.
    pub tokens_per_second: f64,
    /// Training wall time so far, seconds.
    pub elapsed_seconds: f64,
}

const HEADER: &str =
    "step,split,loss,accuracy,perplexity,learning_rate,tokens_per_second,elapsed_seconds";

impl MetricsRow {
    fn to_csv(&self) -> String {
        format!(
            "{},{},{:.6},{:.6},{:.4},{:.6e},{:.1},{:.2}",
            self.step,
            self.split,
            self.loss,
            self.accuracy,
            self.perplexity,
            self.learning_rate,
            self.tokens_per_second,
            self.elapsed_seconds
        )
    }

    fn from_csv(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 8 {
            return None;
        }
        Some(Self {
            step: f[0].parse().ok()?,
            split: f[1].to_string(),
            loss: f[2].parse().ok()?,
            accuracy: f[3].parse().ok()?,
            perplexity: f[4].parse().ok()?,
            learning_rate: f[5].parse().ok()?,
            tokens_per_second: f[6].parse().ok()?,
            elapsed_seconds: f[7].parse().ok()?,
        })
    }
}

/// `metrics.csv`, appended row by row and flushed, so a crash loses at most one row.
pub struct MetricsLog {
    path: PathBuf,
    file: File,
    rows: Vec<MetricsRow>,
}

impl MetricsLog {
    /// Opens the log of `run_dir`, keeping only the rows up to `keep_until_step` (0 for a
    /// new run): a resumed run continues the metrics from its checkpoint.
    ///
    /// # Errors
    /// [`TrainError::Io`] naming the file.
    pub fn open(run_dir: &Path, keep_until_step: usize) -> Result<Self, TrainError> {
        let path = run_dir.join("metrics.csv");
        let rows: Vec<MetricsRow> = if keep_until_step > 0 {
            read_metrics(&path)?
                .into_iter()
                .filter(|row| row.step <= keep_until_step)
                .collect()
        } else {
            Vec::new()
        };
        let mut text = format!("{HEADER}\n");
        for row in &rows {
            text.push_str(&row.to_csv());
            text.push('\n');
        }
        // Replaced atomically: a crash here leaves the old rows, never an empty file.
        write_atomic(&path, text.as_bytes())?;
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        Ok(Self { path, file, rows })
    }

    /// Appends one row.
    ///
    /// # Errors
    /// [`TrainError::Io`] naming the file.
    pub fn push(&mut self, row: MetricsRow) -> Result<(), TrainError> {
        writeln!(self.file, "{}", row.to_csv()).map_err(io(&self.path))?;
        self.file.flush().map_err(io(&self.path))?;
        self.rows.push(row);
        Ok(())
    }

    /// All rows so far.
    pub fn rows(&self) -> &[MetricsRow] {
        &self.rows
    }
}

/// Reads a `metrics.csv`. A last line without its newline is a row that a crash cut
/// short, and is skipped.
///
/// # Errors
/// [`TrainError::Io`] if it cannot be read; [`TrainError::Checkpoint`] for a malformed row.
pub fn read_metrics(path: &Path) -> Result<Vec<MetricsRow>, TrainError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let complete = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    let mut rows = Vec::new();
    for (n, line) in complete.lines().enumerate() {
        if n == 0 || line.is_empty() {
            continue;
        }
        rows.push(
            MetricsRow::from_csv(line).ok_or_else(|| TrainError::Checkpoint {
                path: path.to_path_buf(),
                reason: format!("line {} is not a metrics row: {line:?}", n + 1),
            })?,
        );
    }
    Ok(rows)
}

/// The finite losses of one split (`train` or `valid`) as (step, loss) points.
fn loss_series(rows: &[MetricsRow], split: &str) -> Vec<(f64, f64)> {
    rows.iter()
        .filter(|r| r.split == split && r.loss.is_finite())
        .map(|r| (r.step as f64, r.loss))
        .collect()
}

/// Draws training and validation loss against step, with the unigram baseline, as a PNG.
///
/// # Errors
/// [`TrainError::Plot`] naming the file.
pub fn plot_loss_curve(
    rows: &[MetricsRow],
    unigram_entropy: f64,
    path: &Path,
) -> Result<(), TrainError> {
    let fail = |e: &dyn std::fmt::Display| TrainError::Plot {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    // A bundled font: no system font library is needed to label the axes.
    static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
    let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);

    let (train, valid) = (loss_series(rows, "train"), loss_series(rows, "valid"));
    let max_step = rows.iter().map(|r| r.step).max().unwrap_or(1).max(1) as f64;
    // The y axis reaches 5 % above the highest loss or the baseline.
    let max_loss = train
        .iter()
        .chain(&valid)
        .map(|p| p.1)
        .fold(unigram_entropy, f64::max)
        * 1.05;

    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Masked-LM loss", ("sans-serif", 28))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_step, 0.0..max_loss)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("optimizer step")
        .x_label_formatter(&|step| format!("{step:.0}"))
        .y_desc("loss (nats per masked token)")
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(|e| fail(&e))?;
    let baseline = [(0.0, unigram_entropy), (max_step, unigram_entropy)];
    for (points, colour, label) in [
        (train, BLUE.mix(0.6), "train"),
        (valid, RED.mix(1.0), "validation"),
        (baseline.to_vec(), BLACK.mix(0.5), "unigram baseline"),
    ] {
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        // Top right: the curves start high on the left and end low on the right.
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// `summary.json`: the run's result next to its baselines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Held-out masked-LM loss at the end, nats per masked token.
    pub final_valid_loss: f64,
    /// Held-out masked-LM accuracy at the end.
    pub valid_accuracy: f64,
    /// Held-out perplexity, `exp(final_valid_loss)`.
    pub valid_perplexity: f64,
    /// Held-out loss at the graded positions whose input was `[MASK]`: the context's share
    /// (`null` if none was graded, as for the two below).
    pub valid_mask_loss: Option<f64>,
    /// Held-out loss at the graded positions whose input was a random token.
    pub valid_random_loss: Option<f64>,
    /// Held-out loss at the graded positions whose input was the original token (copyable).
    pub valid_unchanged_loss: Option<f64>,
    /// Entropy of the training tokens' unigram distribution (nats): a context-free model's loss.
    pub unigram_entropy: f64,
    /// `unigram_entropy - final_valid_loss`, nats gained from context.
    pub gain_over_unigram: f64,
    /// Accuracy of always predicting the most frequent token.
    pub most_frequent_token_accuracy: f64,
    /// Mean training throughput over the whole run (every resumed session), real tokens
    /// per second of `wall_time_seconds`; `last_segment` has this session's alone.
    pub tokens_per_second: f64,
    /// Training wall time, seconds (summed over resumed sessions; validation and
    /// checkpoints included).
    pub wall_time_seconds: f64,
    /// Optimizer steps done.
    pub steps: usize,
    /// The run's last step; `steps` is smaller if a signal stopped it early. 0 for a run by
    /// the clock, which ends at `time_budget_seconds` instead.
    #[serde(default)]
    pub max_steps: usize,
    /// The time budget of a run by the clock, seconds (`null`: a run by step count). It
    /// ended after the first step that found `wall_time_seconds` past it, unless
    /// `stopped_by` says otherwise.
    #[serde(default)]
    pub time_budget_seconds: Option<f64>,
    /// `SIGINT` or `SIGTERM` if the run stopped early on that signal (after a checkpoint at
    /// `steps`, from which `train --resume` continues), `null` if it reached `max_steps`.
    #[serde(default)]
    pub stopped_by: Option<String>,
    /// The session that wrote this summary: the whole run, or its last resume.
    #[serde(default)]
    pub last_segment: SegmentSummary,
    /// Processes that trained it together (1: a single process).
    #[serde(default = "one")]
    pub world_size: usize,
    /// What summing the gradients over the processes cost in the last session; `null` for
    /// a single process.
    #[serde(default)]
    pub all_reduce: Option<Traffic>,
    /// What the training batches selected: single tokens or spans of whole words
    /// (`--masking`; held-out batches are always token-masked).
    #[serde(default)]
    pub masking: Masking,
    /// Trainable parameters.
    pub parameters: usize,
    /// The finished model's grammar by minimal pairs (`train --minimal-pairs`, scored after
    /// training and outside its wall time); absent if none was scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimal_pairs: Option<MinimalPairsScore>,
    /// Backend name (`flex`, `ndarray`, `wgpu`, `cuda`).
    pub backend: String,
    /// The device the backend ran on, in words.
    pub adapter: String,
}

impl Summary {
    /// Adds `score` to the `summary.json` of the finished run in `run_dir`, atomically and
    /// under the run's lock, and returns the summary.
    ///
    /// # Errors
    /// [`TrainError::RunInUse`] if another process holds the run; [`TrainError::Io`] /
    /// [`TrainError::Json`] naming `summary.json`.
    pub fn add_minimal_pairs(
        run_dir: &Path,
        score: MinimalPairsScore,
    ) -> Result<Summary, TrainError> {
        let dir = RunDir(run_dir.to_path_buf());
        let _lock = dir.lock()?;
        let mut summary: Summary = read_json(&dir.summary())?;
        summary.minimal_pairs = Some(score);
        write_json(&dir.summary(), &summary)?;
        Ok(summary)
    }
}

fn one() -> usize {
    1
}

/// The cost of summing over the ranks of a data-parallel run, per optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Traffic {
    /// Bytes each rank contributes to the step's all-reduce (its gradients and totals, f32).
    pub bytes_per_step: usize,
    /// Mean wall time of the step's all-reduce, seconds, the wait for the slowest rank
    /// included.
    pub seconds_per_step: f64,
}

/// One training session of a run: the first run, or one `--resume` of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SegmentSummary {
    /// The first step this session trained (1-based).
    pub first_step: usize,
    /// Steps this session trained.
    pub steps: usize,
    /// This session's training wall time, seconds (its share of `wall_time_seconds`).
    pub seconds: f64,
    /// This session's throughput, real tokens per second.
    pub tokens_per_second: f64,
}
