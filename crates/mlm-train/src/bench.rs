//! The backend comparison: the same model, batch and seed on every compiled backend, timed
//! step by step, with host and device memory and the loss difference from ndarray.
//!
//! A benchmark, not a test: nothing here asserts a speed. `mlm-train bench backends` and
//! `examples/backend_comparison.rs` print [`markdown_table`] and write the rows as JSON.

use std::path::Path;
use std::time::Instant;

use burn::config::Config;
use burn::tensor::Device;
use mlm_core::{MaskedCrossEntropy, MaskingConfig};
use rand::RngExt;
use serde::{Deserialize, Serialize};

use crate::backend::{Adapter, BackendKind};
use crate::config::TrainConfig;
use crate::data::make_shards;
use crate::error::{TrainError, io, write_json};
use crate::gradients::{adamw, clip_global_norm, shard_gradients, sum_shards};
use crate::model::{BertConfig, BertForMaskedLm};
use crate::seed::{Stream, stream_rng};

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
    /// Share of tokens masked, BERT's 15 %.
    #[config(default = 0.15)]
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
    /// `loss − ndarray's loss` (`None` when ndarray did not run).
    pub loss_diff_vs_ndarray: Option<f64>,
}

impl BackendBench {
    /// `1 − unsynced / synced` step time: the share of a synchronised step lost to waiting
    /// for the device (0 on the CPU backends, up to noise; the host reads inside the step
    /// itself are in both timings).
    pub fn idle_share(&self) -> f64 {
        (1.0 - self.unsynced_step_ms / self.median_step_ms).max(0.0)
    }
}

/// Times forward + backward of `config`'s batch on backend `B`.
///
/// The weights are initialised on the host from the seed and the batch is the same list of
/// ids on every backend, so the losses differ only by the backends' arithmetic.
///
/// # Errors
/// [`TrainError::Config`] for an invalid model or masking setting;
/// [`TrainError::StepTooLarge`] if a step would need more memory than the machine has (the
/// trainer's estimate); model errors.
pub fn bench_backend(
    config: &BackendBenchConfig,
    kind: BackendKind,
    device: &Device,
) -> Result<BackendBench, TrainError> {
    config.model.validate().map_err(TrainError::Config)?;
    let m = &config.model;
    if config.seq_len > m.max_position_embeddings
        || config.timed_steps == 0
        || m.vocab_size < 6
        || config.parallel_shards == 0
    {
        return Err(TrainError::Config(format!(
            "need seq_len ({}) <= max_position_embeddings ({}), timed_steps ({}) >= 1, \
             vocab_size ({}) >= 6 and parallel_shards ({}) >= 1",
            config.seq_len,
            m.max_position_embeddings,
            config.timed_steps,
            m.vocab_size,
            config.parallel_shards
        )));
    }
    // The same step as the trainer's, with its defaults for the optimizer and clipping; a
    // size that cannot fit in memory (the trainer's estimate) is refused before anything is
    // allocated.
    let train = TrainConfig::new("".into())
        .with_model(config.model.clone())
        .with_vocab_size(m.vocab_size)
        .with_max_seq_len(config.seq_len)
        .with_batch_size(config.batch_size)
        .with_parallel_shards(config.parallel_shards)
        .with_mlm_probability(config.mlm_probability);
    crate::memory::check_fits(&train)?;
    // Ids 0..5 stand for the specials [PAD] [UNK] [CLS] [SEP] [MASK].
    let (mask_id, specials) = (4, vec![0, 1, 2, 3, 4]);
    let vocab = config.model.vocab_size as u32;
    let mut rng = stream_rng(config.seed, Stream::BenchData, 0);
    let sequences: Vec<Vec<u32>> = (0..config.batch_size)
        .map(|_| {
            (0..config.seq_len)
                .map(|_| rng.random_range(5..vocab))
                .collect()
        })
        .collect();
    let chunk: Vec<&[u32]> = sequences.iter().map(Vec::as_slice).collect();
    let mut masker = MaskingConfig::new(config.model.vocab_size, mask_id, specials)
        .with_mlm_probability(config.mlm_probability)
        .with_seed(config.seed)
        .init()?;
    let shards = make_shards(&chunk, &mut masker, 0, config.parallel_shards, device)?;
    let n_masked: usize = shards.iter().map(|s| s.targets.len()).sum();
    let mut model = config.model.init_seeded(config.seed, device);
    let loss_fn = MaskedCrossEntropy::default();

    let sync = || {
        device.sync().map_err(|e| TrainError::Backend {
            backend: kind.name().into(),
            reason: format!("{e:?}"),
        })
    };
    // Forward + backward of every shard, the trainer's `shard_gradients`: the mean loss.
    let gradients = |model: &BertForMaskedLm| {
        let shards = shard_gradients(model, shards.clone(), &loss_fn, n_masked, true)?;
        // The timer waits for the device anyway: reading the loss adds no stall.
        let loss_sum = shards
            .iter()
            .map(|s| s.totals.clone().slice(0..1))
            .reduce(|a, b| a + b);
        let loss_sum = loss_sum.map_or(0.0, |sum| sum.into_scalar::<f64>());
        Ok::<_, TrainError>((loss_sum / n_masked.max(1) as f64, shards))
    };
    reset_peak_host_memory();
    let timed = |step: &mut dyn FnMut() -> Result<f64, TrainError>| {
        let mut loss = f64::NAN;
        for _ in 0..config.warmup_steps {
            loss = step()?;
        }
        let mut times = Vec::with_capacity(config.timed_steps);
        for _ in 0..config.timed_steps {
            let started = Instant::now();
            loss = step()?;
            sync()?;
            times.push(started.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        Ok::<_, TrainError>((times[times.len() / 2], loss))
    };
    let (median, loss) = timed(&mut || Ok(gradients(&model)?.0))?;
    let started = Instant::now();
    for _ in 0..config.timed_steps {
        gradients(&model)?;
    }
    sync()?;
    let unsynced = started.elapsed().as_secs_f64() / config.timed_steps as f64;
    let mut optimizer = adamw(&model, train.weight_decay, train.weight_decay_on);
    let (train_step, _) = timed(&mut || {
        let (loss, shards) = gradients(&model)?;
        let mut grads = sum_shards(&model, shards).grads;
        clip_global_norm(&model, &mut grads, train.max_grad_norm);
        model = optimizer.step(1e-4, model.clone(), grads);
        Ok(loss)
    })?;
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
        loss_diff_vs_ndarray: None,
    })
}

/// Runs [`bench_backend`] on each of `kinds` in turn (one process: the peak host memory is
/// reset between backends), then fills in each row's loss difference from ndarray's.
///
/// # Errors
/// [`TrainError::Config`] for a backend not compiled in, and [`bench_backend`]'s errors.
pub fn compare_backends(
    config: &BackendBenchConfig,
    kinds: &[BackendKind],
) -> Result<Vec<BackendBench>, TrainError> {
    let mut rows = kinds
        .iter()
        .map(|&kind| bench_backend(config, kind, &kind.device()?))
        .collect::<Result<Vec<_>, _>>()?;
    let reference = rows.iter().find(|r| r.backend == "ndarray").map(|r| r.loss);
    for row in &mut rows {
        row.loss_diff_vs_ndarray = reference.map(|loss| row.loss - loss);
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
         reserved (MiB) | loss | Δ loss vs ndarray |\n\
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
            r.loss_diff_vs_ndarray
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
