//! The memory a training step needs, estimated before anything runs, against what the
//! machine has: a run that cannot fit is refused naming the estimate, instead of aborting
//! in an allocation deep inside a backend after the run directory was made.

use mlm_core::MaskedCrossEntropy;

use crate::config::TrainConfig;
use crate::error::TrainError;

const GIB: f64 = (1u64 << 30) as f64;

/// Estimated peak memory of one optimizer step of `config`, in bytes (f32 activations),
/// and the part of it taken by the attention scores.
///
/// Counts what autodiff keeps for the backward pass: per layer about `10 · d_model +
/// 2 · intermediate_size` values per token and three `[batch, heads, seq, seq]` attention
/// tensors (scores, probabilities, their gradient); the head's `[n_masked, vocab]` logits
/// and probabilities, or one chunk of them where mlm-core chunks the logits; parameters, gradients and AdamW's two moments, plus one gradient set
/// per shard. Micro-batches of one step are alive together when shards run in parallel.
/// On this project's machine it came within 15 % of the measured peak RSS less the
/// ~70 MiB of data and code (64 × 64, 16 × 512 and 4 × 2048 tokens; docs/RELIABILITY.md).
pub fn step_bytes(config: &TrainConfig) -> (f64, f64) {
    let m = &config.model;
    let parallel = m.without_dropout();
    let alive = if parallel {
        config.grad_accumulation
    } else {
        1
    } as f64;
    let (seq, sequences) = (config.max_seq_len as f64, alive * config.batch_size as f64);
    let tokens = sequences * seq;
    let (d, ff, layers) = (
        m.hidden_size() as f64,
        m.intermediate_size() as f64,
        m.num_hidden_layers() as f64,
    );
    let vocab = m.vocab_size().max(config.vocab_size) as f64;
    let attention = layers * 3.0 * sequences * m.num_attention_heads() as f64 * seq * seq;
    let activations = layers * tokens * (10.0 * d + 2.0 * ff) + 3.0 * tokens * d;
    // The graded rows' transform (at the run's highest masking rate), and their logits with
    // the gradient: whole, or one chunk (written over by its gradient) where mlm-core's
    // `LogitsMode::Auto` chunks them.
    let graded = config.peak_mlm_probability() * tokens;
    let logits = match MaskedCrossEntropy::default().chunk_rows(graded as usize, vocab as usize) {
        Some(rows) => rows as f64 * vocab,
        None => 2.0 * graded * vocab,
    };
    let head = 3.0 * graded * d + logits;
    let mut sized = m.clone();
    *sized.vocab_size_mut() = vocab as usize;
    let parameters = sized.num_parameters() as f64 * (4 + config.parallel_shards) as f64;
    let bytes = |values: f64| 4.0 * values;
    (
        bytes(attention + activations + head + parameters),
        bytes(attention),
    )
}

/// The memory this process may use, in bytes: the machine's (`MemTotal`), or its cgroup's
/// limit if lower. `None` where neither can be read (not Linux).
pub fn available_bytes() -> Option<f64> {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<f64>()
        .ok()?
        * 1024.0;
    let limit = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<f64>().ok());
    Some(limit.map_or(total, |limit| limit.min(total)))
}

/// Refuses `config` if one step needs more memory than [`available_bytes`].
///
/// # Errors
/// [`TrainError::StepTooLarge`] with the estimate and what dominates it.
pub fn check_fits(config: &TrainConfig) -> Result<(), TrainError> {
    let Some(available) = available_bytes() else {
        return Ok(());
    };
    let (needed, attention) = step_bytes(config);
    if needed <= available {
        return Ok(());
    }
    Err(TrainError::StepTooLarge {
        needed_gib: needed / GIB,
        available_gib: available / GIB,
        what: format!(
            "{:.1} GiB of it attention scores, which grow with max_seq_len² = {}²",
            attention / GIB,
            config.max_seq_len
        ),
        hint: if attention > needed / 2.0 {
            "lower --max-seq-len or --batch-size"
        } else {
            "lower --batch-size or the model's size (--hidden-size, --intermediate-size, \
             --layers, --vocab-size)"
        },
    })
}
