//! Head + loss, forward and backward, on flex with autodiff (Burn's reference CPU backend):
//! BERT's transform, the decoder tied to a token embedding and the masked cross-entropy.
//!
//! Variants, on the same hidden states, weights and masked positions:
//! - `dense`: every row through the head, labels `-100` off the masked positions
//!   (Hugging Face's `BertForMaskedLM` path);
//! - `sparse`: `forward_masked`, only the masked rows through the head;
//! - `sparse_burn_nn_ce`: the same sparse logits into burn-nn's `CrossEntropyLoss`, the
//!   in-framework baseline for the loss itself;
//! - `chunked`: `forward_loss` with `LogitsMode::Chunked` at `CHUNK_LOGITS / vocab` rows (the
//!   chunks `LogitsMode::Auto` takes once the logits pass `CHUNK_LOGITS`): never whole.
//!
//! Shapes: BERT-base (batch 32 × seq 128, d_model 768, vocab 30 522) and the trainer's tiny
//! model (d_model 128, vocab 8192), 15 % of the 4096 rows masked; XLM-R-base's head
//! (d_model 768, vocab 250 002) at 15 % of 8 × 512 rows (614, `xlmr`) and at 4096 graded rows
//! (`xlmr4096`), `sparse` and `chunked` only, without criterion (a step takes seconds).
//!
//! `cargo bench -p mlm-core --bench head_loss` runs criterion, then prints a table of peak
//! memory (Linux's `VmHWM`, reset before each variant) and achieved GFLOP/s, counting
//! 6 · rows · d_model · (vocab + d_model) FLOPs for forward + backward. Add a shape's name
//! (`-- tiny`, `-- base`, `-- xlmr`) to run it only, or name several in
//! `HEAD_LOSS_SHAPES=xlmr,xlmr4096`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use criterion::{BenchmarkId, Criterion, SamplingMode};
use mlm_core::{
    CHUNK_LOGITS, LogitsMode, MaskedCrossEntropyConfig, MaskedTargets, MlmHead, MlmHeadConfig,
    masked_cross_entropy_with_labels,
};

/// One benchmark shape.
struct Shape {
    name: &'static str,
    batch: usize,
    seq: usize,
    d_model: usize,
    vocab: usize,
    /// Share of the `batch × seq` rows that are graded.
    masked_share: f64,
}

const SHAPES: [Shape; 4] = [
    Shape {
        name: "base",
        batch: 32,
        seq: 128,
        d_model: 768,
        vocab: 30_522,
        masked_share: 0.15,
    },
    Shape {
        name: "tiny",
        batch: 32,
        seq: 128,
        d_model: 128,
        vocab: 8192,
        masked_share: 0.15,
    },
    Shape {
        name: "xlmr",
        batch: 8,
        seq: 512,
        d_model: 768,
        vocab: 250_002,
        masked_share: 0.15,
    },
    Shape {
        name: "xlmr4096",
        batch: 8,
        seq: 512,
        d_model: 768,
        vocab: 250_002,
        masked_share: 1.0,
    },
];

impl Shape {
    /// Whether the head is large enough that only the sparse variants run, once each.
    fn large(&self) -> bool {
        self.vocab >= 100_000
    }

    /// The variants to run: those named in `$HEAD_LOSS_VARIANTS` (comma-separated), else
    /// `sparse` and `chunked` for a large head, all for the others.
    fn variants(&self) -> Vec<Variant> {
        let all = match self.large() {
            true => vec![Variant::Sparse, Variant::Chunked],
            false => VARIANTS.to_vec(),
        };
        match std::env::var("HEAD_LOSS_VARIANTS") {
            Ok(names) => all
                .into_iter()
                .filter(|v| names.split(',').any(|name| name == v.name()))
                .collect(),
            Err(_) => all,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Variant {
    Dense,
    Sparse,
    SparseBurnNnCe,
    Chunked,
}

const VARIANTS: [Variant; 4] = [
    Variant::Dense,
    Variant::Sparse,
    Variant::SparseBurnNnCe,
    Variant::Chunked,
];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::Dense => "dense",
            Self::Sparse => "sparse",
            Self::SparseBurnNnCe => "sparse_burn_nn_ce",
            Self::Chunked => "chunked",
        }
    }
}

/// Inputs of one shape: hidden states, an embedding to tie to, the head, masked positions.
struct Setup {
    backend: &'static str,
    shape: &'static Shape,
    head: MlmHead,
    embedding: Tensor<2>,
    hidden: Tensor<3>,
    positions: Vec<i64>,
    targets: Vec<i64>,
}

impl Setup {
    fn new(backend: &'static str, shape: &'static Shape) -> Self {
        let device = Device::flex().autodiff();
        device.seed(7);
        let rows = shape.batch * shape.seq;
        let n_masked = (shape.masked_share * rows as f64).round() as usize;
        // Every `rows / n_masked`-th row is masked: spread over the batch like real masks.
        let positions: Vec<i64> = (0..n_masked)
            .map(|i| (i * rows / n_masked) as i64)
            .collect();
        let targets = positions
            .iter()
            .map(|&p| (p * 7919) % shape.vocab as i64)
            .collect();
        Self {
            backend,
            shape,
            head: MlmHeadConfig::new(shape.d_model, shape.vocab).init(&device),
            embedding: Tensor::random(
                [shape.vocab, shape.d_model],
                Distribution::Normal(0.0, 0.02),
                &device,
            )
            .require_grad(),
            hidden: Tensor::random(
                [shape.batch, shape.seq, shape.d_model],
                Distribution::Normal(0.0, 1.0),
                &device,
            )
            .require_grad(),
            positions,
            targets,
        }
    }

    fn rows(&self, variant: Variant) -> usize {
        match variant {
            Variant::Dense => self.shape.batch * self.shape.seq,
            _ => self.positions.len(),
        }
    }

    /// FLOPs of forward + backward through the transform and the decoder.
    fn flops(&self, variant: Variant) -> f64 {
        let (d, v) = (self.shape.d_model as f64, self.shape.vocab as f64);
        6.0 * self.rows(variant) as f64 * d * (v + d)
    }

    /// One forward + backward; returns the loss.
    fn step(&self, variant: Variant) -> f32 {
        let device = self.hidden.device();
        let n = self.positions.len();
        let int = |values: Vec<i64>, len| {
            Tensor::<1, Int>::from_data(TensorData::new(values, [len]), &device)
        };
        let tied = Some(self.embedding.clone());
        let loss = match variant {
            Variant::Dense => {
                let rows = self.shape.batch * self.shape.seq;
                let mut labels = vec![-100i64; rows];
                for (&p, &t) in self.positions.iter().zip(&self.targets) {
                    labels[p as usize] = t;
                }
                let labels = int(labels, rows).reshape([self.shape.batch, self.shape.seq]);
                let logits = self.head.forward(self.hidden.clone(), tied).unwrap();
                masked_cross_entropy_with_labels(logits, labels)
                    .unwrap()
                    .loss
            }
            Variant::Chunked => {
                let shape = [self.shape.batch, self.shape.seq];
                let targets = MaskedTargets::new(
                    &self.positions,
                    &self.targets,
                    shape,
                    self.shape.vocab,
                    &device,
                )
                .unwrap();
                let rows = chunk_rows(self.shape.vocab);
                let loss_fn = MaskedCrossEntropyConfig::new()
                    .with_logits(LogitsMode::Chunked { rows })
                    .init()
                    .unwrap();
                self.head
                    .forward_loss(self.hidden.clone(), &targets, tied, &loss_fn)
                    .unwrap()
                    .loss
            }
            Variant::Sparse | Variant::SparseBurnNnCe => {
                let logits = self
                    .head
                    .forward_masked(self.hidden.clone(), int(self.positions.clone(), n), tied)
                    .unwrap();
                let targets = int(self.targets.clone(), n);
                match variant {
                    Variant::Sparse => {
                        masked_cross_entropy_with_labels(logits, targets)
                            .unwrap()
                            .loss
                    }
                    _ => CrossEntropyLossConfig::new()
                        .init(&device)
                        .forward(logits, targets),
                }
            }
        };
        let value = loss.clone().into_scalar::<f32>();
        black_box(loss.backward());
        value
    }
}

/// Rows per chunk of the `chunked` variant: `$HEAD_LOSS_CHUNK_ROWS`, else what
/// `LogitsMode::Auto` picks at `vocab`.
fn chunk_rows(vocab: usize) -> usize {
    std::env::var("HEAD_LOSS_CHUNK_ROWS")
        .ok()
        .and_then(|rows| rows.parse().ok())
        .unwrap_or((CHUNK_LOGITS / vocab).max(1))
}

/// The items of `all` named in `$HEAD_LOSS_SHAPES` (comma-separated) or on the command line,
/// or all of them if none is.
fn selected<T>(all: &'static [T], name: impl Fn(&T) -> &str) -> Vec<&'static T> {
    let args: Vec<String> = match std::env::var("HEAD_LOSS_SHAPES") {
        Ok(shapes) => shapes.split(',').map(String::from).collect(),
        Err(_) => std::env::args().collect(),
    };
    let chosen: Vec<&'static T> = all
        .iter()
        .filter(|item| args.iter().any(|a| a == name(item)))
        .collect();
    if chosen.is_empty() {
        all.iter().collect()
    } else {
        chosen
    }
}

fn criterion_benches(c: &mut Criterion, setups: &[Setup]) {
    for setup in setups.iter().filter(|setup| !setup.shape.large()) {
        let mut group =
            c.benchmark_group(format!("head_loss/{}/{}", setup.shape.name, setup.backend));
        // Ten single-step samples: a dense BERT-base step takes seconds on a CPU.
        group
            .sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(1));
        for variant in setup.shape.variants() {
            group.bench_function(BenchmarkId::from_parameter(variant.name()), |b| {
                b.iter(|| setup.step(variant))
            });
        }
        group.finish();
    }
}

/// Median step time (of three, after one warm-up; of one for a large head), peak memory and
/// GFLOP/s per variant, appended to `rows`.
fn measure_memory_and_throughput(setups: &[Setup], rows: &mut Vec<serde_json::Value>) {
    for setup in setups {
        for variant in setup.shape.variants() {
            let baseline = rss_mib("VmRSS:");
            // Writing 5 to clear_refs resets VmHWM (peak RSS) to the current RSS.
            let _ = std::fs::write("/proc/self/clear_refs", "5");
            let loss = setup.step(variant);
            let peak = rss_mib("VmHWM:");
            let timed = if setup.shape.large() { 1 } else { 3 };
            let mut times: Vec<f64> = (0..timed)
                .map(|_| {
                    let started = Instant::now();
                    setup.step(variant);
                    started.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let median = times[times.len() / 2];
            let peak_mib = peak.zip(baseline).map(|(peak, baseline)| peak - baseline);
            rows.push(serde_json::json!({
                "shape": setup.shape.name,
                "backend": setup.backend,
                "variant": variant.name(),
                "rows": setup.rows(variant),
                "median_ms": 1e3 * median,
                "gflops": setup.flops(variant) / median / 1e9,
                "peak_mib": peak_mib,
                "loss": loss,
            }));
        }
    }
}

/// The rows as Markdown; written as JSON to `$HEAD_LOSS_JSON` too (what
/// `scripts/bench-vs-pytorch.sh` compares with PyTorch).
fn print_table(rows: &[serde_json::Value]) {
    println!(
        "\n| shape | backend | variant | rows through the head | median step (ms) | GFLOP/s | peak RSS above baseline (MiB) | loss |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    for r in rows {
        let memory = r["peak_mib"]
            .as_f64()
            .map_or("–".into(), |m| format!("{m:.0}"));
        println!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {memory} | {:.4} |",
            r["shape"].as_str().unwrap_or_default(),
            r["backend"].as_str().unwrap_or_default(),
            r["variant"].as_str().unwrap_or_default(),
            r["rows"],
            r["median_ms"].as_f64().unwrap_or(f64::NAN),
            r["gflops"].as_f64().unwrap_or(f64::NAN),
            r["loss"].as_f64().unwrap_or(f64::NAN),
        );
    }
}

fn rss_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}

/// Criterion, then the memory and throughput rows, for every selected shape on the backend
/// called `name`.
fn bench_backend(name: &'static str, criterion: &mut Criterion, rows: &mut Vec<serde_json::Value>) {
    let setups: Vec<Setup> = selected(&SHAPES, |s| s.name)
        .into_iter()
        .map(|shape| Setup::new(name, shape))
        .collect();
    criterion_benches(criterion, &setups);
    measure_memory_and_throughput(&setups, rows);
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let mut rows = Vec::new();
    bench_backend("flex", &mut criterion, &mut rows);
    criterion.final_summary();
    print_table(&rows);
    if let Ok(path) = std::env::var("HEAD_LOSS_JSON") {
        let json = serde_json::to_string_pretty(&rows).expect("rows serialise");
        std::fs::write(&path, json).unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }
}
