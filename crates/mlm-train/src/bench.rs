//! The backend comparison: the same model, batch and seed on every compiled backend, timed
//! step by step, with host and device memory and the loss difference from flex.
//!
//! A benchmark, not a test: nothing here asserts a speed. `mlm-train bench backends` and
//! `examples/backend_comparison.rs` print [`markdown_table`] and write the rows as JSON.

use std::path::Path;
use std::time::Instant;

use burn::config::Config;
use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use mlm_core::{MaskRates, MaskedCrossEntropy, MaskingConfig};
use rand::RngExt;
use serde::{Deserialize, Serialize};

use crate::backend::{Adapter, BackendKind};
use crate::config::TrainConfig;
use crate::data::{DeviceBatch, SPECIAL_TOKENS, make_shards};
use crate::error::{ConfigError, TrainError};
use crate::files::{io, write_json};
use crate::model::{BertConfig, ModelConfig, ModelForMaskedLm};
use crate::seed::{Stream, stream_rng};
use crate::train::memory::check_fits;
use crate::train::optimizer::adamw;
use crate::train::step::{ShardGradients, clip_global_norm, shard_gradients, sum_shards};

/// What one backend comparison runs: a model, a batch of random tokens and a step count.
#[derive(Config, Debug)]
pub struct BackendBenchConfig {
    /// Model sizes (the main job's tiny BERT by default).
    #[config(default = "BertConfig::new(8192)")]
    pub model: BertConfig,
    /// Sequences per batch.
    #[config(default = 32)]
    pub batch_size: usize,
    /// Tokens per sequence (every sequence full: no padding).
    #[config(default = 128)]
    pub seq_len: usize,
    /// Share of tokens masked, BERT's 15 % ([`MaskRates::BERT`]).
    #[config(default = "MaskRates::BERT.mlm_probability")]
    pub mlm_probability: f64,
    /// Untimed steps first (kernel compilation, autotuning, allocator pools).
    #[config(default = 3)]
    pub warmup_steps: usize,
    /// Timed steps; the median is reported.
    #[config(default = 10)]
    pub timed_steps: usize,
    /// Seed of the weights, the tokens and the masks.
    #[config(default = 42)]
    pub seed: u64,
    /// The batch is split into this many shards whose forward and backward passes run on
    /// their own threads, as the trainer does (`TrainConfig::parallel_shards`; the main
    /// job's 2).
    #[config(default = 2)]
    pub parallel_shards: usize,
    /// Time a ModernBERT of `model`'s sizes instead ([`ModelConfig::to_modernbert`]: a
    /// global layer every third, the others over a window of 128 tokens or half the
    /// sequence).
    #[config(default = false)]
    pub modernbert: bool,
}

/// One backend's row of the comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackendBench {
    /// `ndarray`, `flex`, `wgpu` or `cuda`.
    pub backend: String,
    /// The device it ran on: on a machine without a GPU, wgpu's is lavapipe, a CPU.
    pub adapter: Adapter,
    /// Median forward + backward time of one batch, milliseconds.
    pub median_step_ms: f64,
    /// Tokens per second at the median step time.
    pub tokens_per_second: f64,
    /// Mean time of one step when `timed_steps` steps run back to back with no read of the
    /// loss and one device sync at the end, milliseconds. Against `median_step_ms` (a sync
    /// and a loss read every step) it shows what the stalls cost: on a GPU, the share of a
    /// step the device sits idle waiting for the host ([`idle_share`](Self::idle_share)).
    #[serde(default)]
    pub unsynced_step_ms: f64,
    /// Median time of one full training step (forward, backward, gradient sum over shards,
    /// clip by the global norm, AdamW), milliseconds.
    #[serde(default)]
    pub train_step_ms: f64,
    /// Tokens per second at the median full training step.
    #[serde(default)]
    pub train_tokens_per_second: f64,
    /// Peak resident host memory during the steps, MiB (Linux's `VmHWM`; `None` elsewhere).
    pub peak_host_mib: Option<f64>,
    /// Device memory reserved by the backend's allocator after the steps, MiB (GPU backends only).
    pub device_reserved_mib: Option<f64>,
    /// The batch's loss, nats.
    pub loss: f64,
    /// `loss − flex's loss`, flex being the default CPU backend and the reference (`None`
    /// when flex did not run).
    pub loss_diff_vs_flex: Option<f64>,
}

impl BackendBench {
    /// `1 − unsynced / synced` step time: the share of a synchronised step lost to waiting
    /// for the device (0 on the CPU backends, up to noise; the host reads inside the step
    /// itself are in both timings).
    pub fn idle_share(&self) -> f64 {
        (1.0 - self.unsynced_step_ms / self.median_step_ms).max(0.0)
    }
}

/// Times forward + backward of `config`'s batch on backend `kind`, then the full training
/// step.
///
/// The weights are initialised on the host from the seed and the batch is the same list of
/// ids on every backend, so the losses differ only by the backends' arithmetic.
///
/// # Errors
/// [`ConfigError`] for an invalid model or masking setting;
/// [`TrainError::StepTooLarge`] if a step would need more memory than the machine has (the
/// trainer's estimate); model errors.
pub fn bench_backend(
    config: &BackendBenchConfig,
    kind: BackendKind,
    device: &Device,
) -> Result<BackendBench, TrainError> {
    let mut setup = BenchSetup::new(config, kind, device)?;
    reset_peak_host_memory();
    let (median, loss) = setup.time(Timing::Median, |s| Ok(s.gradients()?.0))?;
    let (unsynced, _) = setup.time(Timing::BackToBack, |s| Ok(s.gradients()?.0))?;
    let train = &setup.train;
    let mut optimizer = adamw(&setup.model, train.weight_decay, train.weight_decay_on);
    let (train_step, _) = setup.time(Timing::Median, |s| s.train_step(&mut optimizer))?;
    let tokens = (config.batch_size * config.seq_len) as f64;
    Ok(BackendBench {
        backend: kind.name().into(),
        adapter: crate::backend::adapter(kind),
        median_step_ms: 1e3 * median,
        unsynced_step_ms: 1e3 * unsynced,
        tokens_per_second: tokens / median,
        train_step_ms: 1e3 * train_step,
        train_tokens_per_second: tokens / train_step,
        peak_host_mib: peak_host_memory_mib(),
        device_reserved_mib: crate::backend::device_reserved_bytes(kind)
            .map(|bytes| bytes as f64 / MIB),
        loss,
        loss_diff_vs_flex: None,
    })
}

/// How [`BenchSetup::time`] times a step.
#[derive(Clone, Copy)]
enum Timing {
    /// `warmup_steps` untimed, then the median of `timed_steps`, each ended by a device sync.
    Median,
    /// The mean of `timed_steps` back to back, with one sync at the end.
    BackToBack,
}

/// What one backend's timings run on: its model, one batch in shards, and the trainer's
/// settings for the optimizer and clipping.
struct BenchSetup<'a> {
    config: &'a BackendBenchConfig,
    kind: BackendKind,
    device: &'a Device,
    train: TrainConfig,
    model: ModelForMaskedLm,
    shards: Vec<DeviceBatch>,
    n_masked: usize,
    loss_fn: MaskedCrossEntropy,
}

impl<'a> BenchSetup<'a> {
    /// The model and batch of `config` on `device`, after checking that they make sense
    /// and fit in memory (the trainer's estimate).
    fn new(
        config: &'a BackendBenchConfig,
        kind: BackendKind,
        device: &'a Device,
    ) -> Result<Self, TrainError> {
        let m = &config.model;
        m.validate()?;
        let specials = SPECIAL_TOKENS.len();
        [
            ConfigError::check(
                "seq_len",
                config.seq_len,
                config.seq_len <= m.max_position_embeddings,
                format!(
                    "must be at most max_position_embeddings = {}",
                    m.max_position_embeddings
                ),
            ),
            ConfigError::check(
                "timed_steps",
                config.timed_steps,
                config.timed_steps >= 1,
                "must be at least 1",
            ),
            ConfigError::check(
                "vocab_size",
                m.vocab_size,
                m.vocab_size > specials,
                format!("leaves no room beside the {specials} special tokens"),
            ),
            ConfigError::check(
                "parallel_shards",
                config.parallel_shards,
                config.parallel_shards >= 1,
                "must be at least 1",
            ),
        ]
        .into_iter()
        .collect::<Result<(), _>>()?;
        // The same step as the trainer's, with its defaults for the optimizer and clipping.
        let model = match config.modernbert {
            true => ModelConfig::from(m.clone()).to_modernbert(),
            false => m.clone().into(),
        };
        let train = TrainConfig::new("".into())
            .with_model(model.clone())
            .with_vocab_size(m.vocab_size)
            .with_max_seq_len(config.seq_len)
            .with_batch_size(config.batch_size)
            .with_parallel_shards(config.parallel_shards)
            .with_mlm_probability(config.mlm_probability);
        check_fits(&train)?;
        let shards = random_shards(config, device)?;
        Ok(Self {
            n_masked: shards.iter().map(|s| s.targets.len()).sum(),
            shards,
            model: model.init_seeded(config.seed, device),
            loss_fn: MaskedCrossEntropy::default(),
            train,
            config,
            kind,
            device,
        })
    }

    /// Seconds per call of `step` as `timing` says, and the loss of the last call.
    fn time(
        &mut self,
        timing: Timing,
        mut step: impl FnMut(&mut Self) -> Result<f64, TrainError>,
    ) -> Result<(f64, f64), TrainError> {
        let (timed_steps, mut loss) = (self.config.timed_steps, f64::NAN);
        if let Timing::BackToBack = timing {
            let started = Instant::now();
            for _ in 0..timed_steps {
                loss = step(self)?;
            }
            self.sync()?;
            return Ok((started.elapsed().as_secs_f64() / timed_steps as f64, loss));
        }
        for _ in 0..self.config.warmup_steps {
            loss = step(self)?;
        }
        let mut times = Vec::with_capacity(timed_steps);
        for _ in 0..timed_steps {
            let started = Instant::now();
            loss = step(self)?;
            self.sync()?;
            times.push(started.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        Ok((times[times.len() / 2], loss))
    }

    /// Waits for the device's queued work.
    fn sync(&self) -> Result<(), TrainError> {
        self.device.sync().map_err(|e| TrainError::Backend {
            backend: self.kind.name().into(),
            reason: format!("{e:?}"),
        })
    }

    /// Forward + backward of every shard, the trainer's `shard_gradients`: the mean loss
    /// (the timer waits for the device anyway: reading it adds no stall) and the shards.
    fn gradients(&self) -> Result<(f64, Vec<ShardGradients>), TrainError> {
        let shards = self.shards.clone();
        let shards = shard_gradients(&self.model, shards, &self.loss_fn, self.n_masked, true)?;
        let loss_sum = shards
            .iter()
            .map(|s| s.totals.clone().slice(0..1))
            .reduce(|a, b| a + b);
        let loss_sum = loss_sum.map_or(0.0, |sum| sum.into_scalar::<f64>());
        Ok((loss_sum / self.n_masked.max(1) as f64, shards))
    }

    /// One full training step: gradients, their sum over shards, clipping, AdamW.
    fn train_step(&mut self, optimizer: &mut ModuleOptimizer) -> Result<f64, TrainError> {
        let (loss, shards) = self.gradients()?;
        let mut grads = sum_shards(&self.model, shards).grads;
        clip_global_norm(&self.model, &mut grads, self.train.max_grad_norm);
        self.model = optimizer.step(1e-4, self.model.clone(), grads);
        Ok(loss)
    }
}

/// `config`'s batch: random non-special tokens, masked, in `parallel_shards` shards on
/// `device`. Ids below [`SPECIAL_TOKENS`]`.len()` are the specials, never drawn.
fn random_shards(
    config: &BackendBenchConfig,
    device: &Device,
) -> Result<Vec<DeviceBatch>, TrainError> {
    let specials: Vec<u32> = (0..SPECIAL_TOKENS.len() as u32).collect();
    let position = |token| {
        SPECIAL_TOKENS
            .iter()
            .position(|t| *t == token)
            .expect(token) as u32
    };
    let (mask_id, pad_id) = (position("[MASK]"), position("[PAD]"));
    let vocab = config.model.vocab_size as u32;
    let mut rng = stream_rng(config.seed, Stream::BenchData, 0);
    let sequences: Vec<Vec<u32>> = (0..config.batch_size)
        .map(|_| {
            (0..config.seq_len)
                .map(|_| rng.random_range(specials.len() as u32..vocab))
                .collect()
        })
        .collect();
    let chunk: Vec<&[u32]> = sequences.iter().map(Vec::as_slice).collect();
    let mut masker = MaskingConfig::new(config.model.vocab_size, mask_id, pad_id, specials)
        .with_mlm_probability(config.mlm_probability)
        .with_seed(config.seed)
        .init()?;
    make_shards(&chunk, &mut masker, 0, config.parallel_shards, device)
}

/// Runs [`bench_backend`] on each of `kinds` in turn (one process: the peak host memory is
/// reset between backends), then fills in each row's loss difference from flex's.
///
/// # Errors
/// [`ConfigError::NotBuilt`] for a backend not compiled in, and [`bench_backend`]'s errors.
pub fn compare_backends(
    config: &BackendBenchConfig,
    kinds: &[BackendKind],
) -> Result<Vec<BackendBench>, TrainError> {
    let mut rows = kinds
        .iter()
        .map(|&kind| bench_backend(config, kind, &kind.device()?))
        .collect::<Result<Vec<_>, _>>()?;
    let reference = rows.iter().find(|r| r.backend == "flex").map(|r| r.loss);
    for row in &mut rows {
        row.loss_diff_vs_flex = reference.map(|loss| row.loss - loss);
    }
    Ok(rows)
}

/// The rows as a Markdown table, with the settings in a caption line.
pub fn markdown_table(config: &BackendBenchConfig, rows: &[BackendBench]) -> String {
    let m = &config.model;
    let mut out = format!(
        "BERT d_model {} × {} layers, vocab {}, batch {} × {} tokens, {:.0} % masked; \
         {} shards on threads; median of {} forward+backward steps after {} warm-up steps \
         (unsynced: as many steps back to back, no loss read, one sync at the end); a training \
         step adds the gradient sum, clipping and AdamW\n\n\
         | backend | adapter (type) | median step (ms) | tokens/s | unsynced step (ms) | idle \
         share | training step (ms) | training tokens/s | peak host RSS (MiB) | device \
         reserved (MiB) | loss | Δ loss vs flex |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        m.hidden_size,
        m.num_hidden_layers,
        m.vocab_size,
        config.batch_size,
        config.seq_len,
        100.0 * config.mlm_probability,
        config.parallel_shards,
        config.timed_steps,
        config.warmup_steps,
    );
    let optional = |value: Option<f64>, precision: usize| {
        value.map_or("–".to_string(), |v| format!("{v:.precision$}"))
    };
    for r in rows {
        out += &format!(
            "| {} | {} ({}) | {:.1} | {:.0} | {:.1} | {:.0} % | {:.1} | {:.0} | {} | {} | {:.6} | {} |\n",
            r.backend,
            r.adapter.name,
            r.adapter.device_type,
            r.median_step_ms,
            r.tokens_per_second,
            r.unsynced_step_ms,
            100.0 * r.idle_share(),
            r.train_step_ms,
            r.train_tokens_per_second,
            optional(r.peak_host_mib, 0),
            optional(r.device_reserved_mib, 0),
            r.loss,
            r.loss_diff_vs_flex
                .map_or("–".to_string(), |d| format!("{d:+.2e}")),
        );
    }
    out
}

/// Writes the rows as pretty JSON to `path`, creating its folder.
///
/// # Errors
/// [`TrainError::Io`] naming the file or folder.
pub fn save_rows(path: &Path, rows: &[BackendBench]) -> Result<(), TrainError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    write_json(path, &rows)
}

const MIB: f64 = 1024.0 * 1024.0;

/// Resets Linux's peak-RSS counter (`VmHWM`) so that each backend's peak is its own;
/// elsewhere, or if the kernel refuses, the peak covers the whole process.
fn reset_peak_host_memory() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident memory of this process since the last reset, MiB (Linux only).
fn peak_host_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
