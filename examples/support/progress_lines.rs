//! A progress display for burn-train's `Learner` where stdout is no terminal (a log, a pipe,
//! CI): one line at each tenth of each split, with the epoch's running value of each metric,
//! where burn-train's own `CliMetricsRenderer` prints its `ProgressSnapshot { … }` debug line
//! for every batch. Shared by `examples/learner.rs` and `tests/learner.rs`.

use std::collections::HashMap;
use std::io::Write;

use burn_train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn_train::metric::{MetricDefinition, MetricId};
use burn_train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};

/// Writes `train epoch 1/2  640/6400 items  Loss 6.531  Accuracy 10.120` to its writer at
/// each tenth of a split. Burn-train's summary table still ends the run.
pub struct ProgressLines<W> {
    out: W,
    /// Each metric's name and its latest running value, in the order they were registered.
    metrics: Vec<(String, Option<String>)>,
    /// Where each metric is in `metrics`.
    index: HashMap<MetricId, usize>,
    split: String,
    epoch: usize,
    epochs: usize,
    items: usize,
    tenths: usize,
}

impl<W: Write> ProgressLines<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            metrics: Vec::new(),
            index: HashMap::new(),
            split: "train".into(),
            epoch: 1,
            epochs: 1,
            items: 0,
            tenths: 0,
        }
    }

    /// Keeps the running value of a numeric metric: burn-train formats it as `epoch 6.531 -
    /// batch 6.402` (units after each number).
    fn record(&mut self, state: MetricState) {
        let MetricState::Numeric(entry, _) = state else {
            return;
        };
        let running = entry
            .serialized_entry
            .formatted
            .strip_prefix("epoch ")
            .and_then(|rest| rest.split(" - batch").next())
            .map(String::from);
        if let Some(&i) = self.index.get(&entry.metric_id) {
            self.metrics[i].1 = running;
        }
    }

    /// One line: the split, epoch, items done and each metric's running value.
    fn line(&mut self, done: usize) {
        let mut line = format!(
            "{}  epoch {}/{}  {done}/{} items",
            self.split, self.epoch, self.epochs, self.items
        );
        for (name, value) in &self.metrics {
            if let Some(value) = value {
                line.push_str(&format!("  {name} {value}"));
            }
        }
        // A progress line that cannot be written is not worth stopping the training for.
        let _ = writeln!(self.out, "{line}");
    }
}

impl<W: Write + Send + Sync> MetricsRendererTraining for ProgressLines<W> {
    fn update_train(&mut self, state: MetricState) {
        self.record(state);
    }

    fn update_valid(&mut self, state: MetricState) {
        self.record(state);
    }
}

impl<W: Write + Send + Sync> TrainingProgressLogger for ProgressLines<W> {
    fn start(&mut self, epochs: usize, starting_epoch: usize, _: Option<usize>, _: Option<&str>) {
        (self.epochs, self.epoch) = (epochs, starting_epoch);
    }

    fn update_epoch(&mut self, epoch: usize) {
        self.epoch = epoch + 1;
    }

    fn start_split(&mut self, split: &str, items: usize) {
        (self.split, self.items, self.tenths) = (split.to_lowercase(), items, 0);
        self.metrics.iter_mut().for_each(|(_, value)| *value = None);
    }

    fn update_split(&mut self, done: usize) {
        let tenths = done * 10 / self.items.max(1);
        if tenths > self.tenths {
            self.tenths = tenths;
            self.line(done);
        }
    }

    fn end_split(&mut self) {}

    fn end(&mut self) {}

    fn log_event_training(&mut self, _: String) {}
}

impl<W: Write + Send + Sync> EvaluationProgressLogger for ProgressLines<W> {
    fn start_global_progress(&mut self, _: usize) {}

    fn start_test(&mut self, name: &str, items: usize) {
        self.start_split(name, items);
    }

    fn update_test_progress(&mut self, done: usize) {
        self.update_split(done);
    }

    fn end_test(&mut self) {}

    fn end_global_progress(&mut self) {}

    fn log_event_evaluation(&mut self, _: String) {}
}

impl<W: Write + Send + Sync> MetricsRendererEvaluation for ProgressLines<W> {
    fn update_test(&mut self, _: EvaluationName, state: MetricState) {
        self.record(state);
    }
}

impl<W: Write + Send + Sync> MetricsRenderer for ProgressLines<W> {
    fn manual_close(&mut self) {}

    fn register_metric(&mut self, definition: MetricDefinition) {
        if !self.index.contains_key(&definition.metric_id) {
            self.index
                .insert(definition.metric_id.clone(), self.metrics.len());
            self.metrics.push((definition.name.to_string(), None));
        }
    }
}
