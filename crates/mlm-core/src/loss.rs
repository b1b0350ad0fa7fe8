//! Masked cross-entropy: the mean of `-log p(true token)` over the masked positions only.
//!
//! For graded rows `M` of the logits `z` and their true tokens `t`:
//!
//! ```text
//! loss = 1/|M| Σ_{i∈M} ( logsumexp(z_i) - z_{i,t_i} )
//! ```
//!
//! which is `-log softmax(z_i)[t_i]` computed without ever forming the softmax:
//! the row maximum is subtracted first (max-subtracted log-sum-exp), so logits of
//! ±1e4 neither overflow nor lose the answer. Rows outside `M` take no part in the
//! computation at all, so they get an exact zero gradient even when they hold `inf`.
//! With no graded row the loss is exactly `0` with a zero gradient, never `NaN`
//! (PyTorch's `cross_entropy(ignore_index=-100)` returns `NaN` there).
//!
//! Source: the MLM objective of BERT (Devlin et al. 2019, §3.1 "Task #1: Masked LM");
//! label smoothing as in Szegedy et al. 2016 §7 and PyTorch's `label_smoothing`.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, DType, FloatDType, Gradients, Int, Tensor, TensorData};

use crate::fused::{CrossEntropySum, chunked_cross_entropy_sum, cross_entropy_sum};
use crate::{MaskedTargets, MlmError};

/// The label that marks a position as "not graded" (Hugging Face / PyTorch `ignore_index`).
pub const IGNORE_INDEX: i64 = -100;

/// How [`MlmLossOutput::loss`] reduces the per-position losses.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// Sum over the graded positions divided by their number (BERT's objective).
    Mean,
    /// Sum over the graded positions; divide by a global count yourself (gradient accumulation).
    Sum,
}

/// What a masked cross-entropy returns, on the device: nothing here has been read back.
///
/// `loss_sum` and `n_graded` are what gradient accumulation and multi-device runs
/// add up: the global loss is `Σ loss_sum / Σ n_graded`, never a mean of means.
#[derive(Debug, Clone)]
pub struct MlmLossOutput {
    /// The reduced loss, shape `[1]`, in nats, differentiable; the mean unless the
    /// configuration asked for [`Reduction::Sum`]. Exactly `0` when `n_graded == 0`.
    pub loss: Tensor<1>,
    /// Sum of the per-position losses, shape `[1]`, in nats, differentiable.
    pub loss_sum: Tensor<1>,
    /// Number of graded (masked) positions `|M|`.
    pub n_graded: usize,
    /// Number of graded positions whose argmax logit is the true token (first index wins
    /// ties), shape `[1]`: a tensor, so that counting stalls no device queue.
    pub n_correct: Tensor<1, Int>,
}

impl MlmLossOutput {
    /// The gradients of [`loss`](Self::loss): Burn's `backward`, after checking that autodiff
    /// tracks the loss, so that a device built without `.autodiff()` gets advice that fits
    /// (Burn's own panic suggests `Tensor::autodiff().require_grad()` on a leaf).
    ///
    /// # Errors
    /// [`MlmError::NotDifferentiable`] if the loss lives on a device without autodiff, or no
    /// tracked parameter feeds it.
    pub fn backward(&self) -> Result<Gradients, MlmError> {
        if !self.loss.is_autodiff() {
            return Err(MlmError::NotDifferentiable(
                "the loss was computed on a device without autodiff: create it with \
                 `.autodiff()` (e.g. `Device::flex().autodiff()`) and build the model and \
                 inputs on that device",
            ));
        }
        if !self.loss.is_tracked() {
            return Err(MlmError::NotDifferentiable(
                "no parameter that requires a gradient feeds the loss: build the model on the \
                 autodiff device (`Device::flex().autodiff()`), not on its inner device",
            ));
        }
        Ok(self.loss.backward())
    }

    /// Fraction of graded positions predicted correctly, `n_correct / n_graded` (0 when
    /// none). Reads `n_correct` back from the device.
    pub fn accuracy(&self) -> f64 {
        if self.n_graded == 0 {
            0.0
        } else {
            self.n_correct.clone().into_scalar::<i64>() as f64 / self.n_graded as f64
        }
    }
}

/// The logits one chunk holds, `rows × vocab ≤` this: 2^26 `f32` (256 MiB), 268 rows at
/// XLM-R's 250 002 columns. [`LogitsMode::Auto`] chunks the logits `[n_masked, vocab]` when
/// they would hold more than one chunk: XLM-R's from 269 graded rows (batch 8 × 512 at 15 %
/// masks 614), BERT's 30 522 from 2 199, the main job's 8 192 from 8 193 (never, at its
/// batch of 614). Measured at XLM-R-base's head on a 2-core Zen 4 (`docs/PERFORMANCE.md`,
/// "Large vocabularies"): at 614 rows chunks take 0.97× the whole logits' time and 0.76× their
/// memory; at 4 096 rows, 0.94× the time and 0.17× the memory (1.3 GiB against 7.6 GiB).
pub const CHUNK_LOGITS: usize = 1 << 26;

/// How the head's decoder meets the loss ([`MlmHead::forward_loss`](crate::MlmHead::forward_loss)):
/// the logits `[n_masked, vocab]` made whole, or a chunk of rows at a time.
///
/// Chunked, each chunk's logits `z = h Wᵀ + b` `[rows, vocab]` give their rows'
/// `-log p(true token)` and, when a gradient is wanted, their gradients `∂/∂h = g W`,
/// `∂/∂W += gᵀ h`, `∂/∂b += Σ g` (`g = softmax − onehot`), and are dropped: memory holds one
/// chunk and those gradients, never the logits (Liger-Kernel's fused linear cross-entropy,
/// Hsu et al. 2024, §3.2; Cut Cross-Entropy, Wijmans et al. 2024). At XLM-R-base's head
/// (vocabulary 250 002) and 4 096 graded rows the whole logits are 4 GiB, twice that with
/// their gradient; chunked, the head + loss peaks at 1.3 GiB, most of it `∂/∂W`. The numbers
/// are the whole path's, to the summation order (1e-5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LogitsMode {
    /// [`Chunked`](Self::Chunked) in chunks of [`CHUNK_LOGITS`] `/ vocab` rows when the
    /// whole logits would hold more than [`CHUNK_LOGITS`] values; [`Whole`](Self::Whole)
    /// otherwise, except on burn-flex, whose fused sweep is faster at every size: one chunk
    /// of every row there ([`MlmHead::forward_loss`](crate::MlmHead::forward_loss)).
    Auto,
    /// The logits `[n_masked, vocab]` at once (the fused loss reads them in one sweep).
    Whole,
    /// `rows` masked rows at a time (`rows ≥ 1`).
    Chunked {
        /// Rows per chunk.
        rows: usize,
    },
}

impl LogitsMode {
    /// The rows per chunk for `n_rows` graded rows over a vocabulary of `vocab_size`, or
    /// `None` for whole logits.
    pub fn chunk_rows(&self, n_rows: usize, vocab_size: usize) -> Option<usize> {
        match *self {
            Self::Auto => (n_rows.saturating_mul(vocab_size) > CHUNK_LOGITS)
                .then(|| (CHUNK_LOGITS / vocab_size).max(1)),
            Self::Whole => None,
            Self::Chunked { rows } => Some(rows),
        }
    }
}

/// Configuration of [`MaskedCrossEntropy`].
#[derive(Config, Debug)]
pub struct MaskedCrossEntropyConfig {
    /// Label smoothing `ε ∈ [0, 1]`: the target puts `1 - ε` on the true token and
    /// `ε / vocab` on every token, over graded rows only (as PyTorch's `label_smoothing`).
    #[config(default = 0.0)]
    pub label_smoothing: f64,
    /// Reduction of [`MlmLossOutput::loss`].
    #[config(default = "Reduction::Mean")]
    pub reduction: Reduction,
    /// Whole or chunked logits, when the head and the loss run together
    /// ([`MlmHead::forward_loss`](crate::MlmHead::forward_loss)).
    #[config(default = "LogitsMode::Auto")]
    pub logits: LogitsMode,
}

impl MaskedCrossEntropyConfig {
    /// Builds the loss module.
    ///
    /// # Errors
    /// [`MlmError::InvalidProbability`] if `label_smoothing` is not in `[0, 1]`;
    /// [`MlmError::ZeroChunkRows`] for `LogitsMode::Chunked { rows: 0 }`.
    pub fn init(&self) -> Result<MaskedCrossEntropy, MlmError> {
        if self.logits == (LogitsMode::Chunked { rows: 0 }) {
            return Err(MlmError::ZeroChunkRows);
        }
        if !(0.0..=1.0).contains(&self.label_smoothing) {
            return Err(MlmError::InvalidProbability {
                name: "label_smoothing",
                value: self.label_smoothing,
            });
        }
        Ok(MaskedCrossEntropy {
            label_smoothing: self.label_smoothing,
            sum_reduction: self.reduction == Reduction::Sum,
            logits: self.logits,
        })
    }
}

/// Masked cross-entropy as a module (no parameters), for models that hold their loss.
///
/// A thin wrapper over the same computation as [`masked_cross_entropy`] that adds
/// label smoothing and the reduction choice. Build it with [`MaskedCrossEntropyConfig`].
#[derive(Module, Debug)]
pub struct MaskedCrossEntropy {
    label_smoothing: f64,
    sum_reduction: bool,
    #[module(skip)]
    logits: LogitsMode,
}

impl MaskedCrossEntropy {
    /// Loss of `logits` against Hugging Face-style `labels` (`-100` = not graded).
    ///
    /// # Shapes
    /// - logits: `[..., vocab]`, e.g. `[n, vocab]` or `[batch, seq, vocab]`; f16/bf16 is promoted to f32.
    /// - labels: `[...]`, the logits' shape without its last dimension; any Int dtype.
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if the shapes disagree; [`MlmError::LabelOutOfRange`]
    /// if a label is neither `-100` nor in `[0, vocab)`.
    pub fn forward_labels<const D: usize, const L: usize>(
        &self,
        logits: Tensor<D>,
        labels: Tensor<L, Int>,
    ) -> Result<MlmLossOutput, MlmError> {
        let rows = check_label_shape(&logits, &labels.dims(), "labels")?;
        let labels = host_ints(labels.into_data());
        self.graded(flatten_rows(logits, rows), labels)
    }

    /// Loss of `logits` against `targets`, graded only where `mask` is `true`.
    ///
    /// Targets at ungraded positions are not read, so they may hold anything.
    ///
    /// # Shapes
    /// - logits: `[..., vocab]`; f16/bf16 is promoted to f32.
    /// - targets, mask: `[...]`, the logits' shape without its last dimension.
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if the shapes disagree; [`MlmError::LabelOutOfRange`]
    /// if a graded target is outside `[0, vocab)`.
    pub fn forward<const D: usize, const L: usize>(
        &self,
        logits: Tensor<D>,
        targets: Tensor<L, Int>,
        mask: Tensor<L, Bool>,
    ) -> Result<MlmLossOutput, MlmError> {
        let rows = check_label_shape(&logits, &targets.dims(), "targets")?;
        check_label_shape(&logits, &mask.dims(), "mask")?;
        let targets = host_ints(targets.into_data());
        let graded = mask
            .into_data()
            .convert::<bool>()
            .try_into_vec::<bool>()
            .expect("a Bool tensor converts to bool");
        let labels = targets
            .into_iter()
            .zip(graded)
            .map(|(target, graded)| if graded { target } else { IGNORE_INDEX })
            .collect();
        self.graded(flatten_rows(logits, rows), labels)
    }

    /// Loss of `logits` at masked positions against their true tokens, checked on the host
    /// when `targets` was built ([`MaskedTargets::new`]): nothing is read back from the
    /// device, so a GPU's queue never stalls on it. Every row is graded.
    ///
    /// # Shapes
    /// - logits: `[n_masked, vocab]`, row `i` for `targets.positions()[i]`, e.g. from
    ///   [`MlmHead::forward_targets`](crate::MlmHead::forward_targets); f16/bf16 is
    ///   promoted to f32.
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if the logits are not `[targets.len(),
    /// targets.vocab_size()]`.
    pub fn forward_targets(
        &self,
        logits: Tensor<2>,
        targets: &MaskedTargets,
    ) -> Result<MlmLossOutput, MlmError> {
        let [rows, vocab_size] = logits.dims();
        if rows != targets.len() {
            return Err(MlmError::ShapeMismatch {
                what: "logits (one row per masked target)",
                expected: format!("[n_masked = {}, vocab]", targets.len()),
                actual: vec![rows, vocab_size],
            });
        }
        if vocab_size != targets.vocab_size() {
            return Err(MlmError::ShapeMismatch {
                what: "logits and targets (vocabularies differ)",
                expected: format!(
                    "[n_masked, vocab = {}], the vocabulary the targets were checked against",
                    targets.vocab_size()
                ),
                actual: vec![rows, vocab_size],
            });
        }
        if targets.is_empty() {
            return Ok(no_graded_row(logits));
        }
        Ok(self.reduced(to_f32(logits), targets.targets().clone(), targets.len()))
    }

    /// The computation shared by the label entry points: validate on the host, gather the
    /// graded rows, then [`reduced`](Self::reduced).
    fn graded(&self, logits: Tensor<2>, labels: Vec<i64>) -> Result<MlmLossOutput, MlmError> {
        let [n_rows, vocab_size] = logits.dims();
        let device = logits.device();
        let mut rows = Vec::new();
        let mut targets = Vec::new();
        for (position, &label) in labels.iter().enumerate() {
            if label == IGNORE_INDEX {
                continue;
            }
            if label < 0 || label as u64 >= vocab_size as u64 {
                return Err(MlmError::LabelOutOfRange {
                    position,
                    label,
                    vocab_size,
                });
            }
            rows.push(position as i64);
            targets.push(label);
        }
        let n_graded = rows.len();
        if n_graded == 0 {
            return Ok(no_graded_row(logits));
        }
        // Gather the graded rows; rows outside M never enter the computation.
        let logits = to_f32(logits);
        let graded_logits = if n_graded == n_rows {
            logits
        } else {
            logits.select(
                0,
                Tensor::from_data(TensorData::from(rows.as_slice()), &device),
            )
        };
        let targets = Tensor::from_data(TensorData::from(targets.as_slice()), &device);
        Ok(self.reduced(graded_logits, targets, n_graded))
    }

    /// log-softmax → pick the true token → negate → reduce, over `n_graded ≥ 1` rows that
    /// are all graded.
    fn reduced(
        &self,
        graded_logits: Tensor<2>,
        targets: Tensor<1, Int>,
        n_graded: usize,
    ) -> MlmLossOutput {
        // Σ over M of -log p(true token), with its gradient from the same sweep (fused.rs).
        let sum = cross_entropy_sum(graded_logits, targets, self.label_smoothing);
        self.mean_over(sum, n_graded)
    }

    /// The rows per chunk of this loss's [`LogitsMode`] for `n_rows` graded rows over a
    /// vocabulary of `vocab_size`, or `None` for whole logits.
    pub fn chunk_rows(&self, n_rows: usize, vocab_size: usize) -> Option<usize> {
        self.logits.chunk_rows(n_rows, vocab_size)
    }

    /// The rows per chunk for `n_rows` graded rows of `hidden`'s backend: as
    /// [`chunk_rows`](Self::chunk_rows), except that under [`LogitsMode::Auto`] burn-flex
    /// takes its fused sweep at every size, all rows in one chunk where they fit: one buffer
    /// for the logits and their gradient, the bias under the product, no zeroed outputs
    /// (the main job's training step, 8 192 columns and 614 rows: 0.95× the whole logits'
    /// time on a 2-core Zen 4, `docs/PERFORMANCE.md`).
    #[cfg_attr(not(feature = "flex"), allow(unused_variables))]
    pub(crate) fn chunk_rows_on<const D: usize>(
        &self,
        hidden: &Tensor<D>,
        n_rows: usize,
        vocab_size: usize,
    ) -> Option<usize> {
        let rows = self.chunk_rows(n_rows, vocab_size);
        #[cfg(feature = "flex")]
        if rows.is_none()
            && self.logits == LogitsMode::Auto
            && crate::fused::on_flex(hidden, &[hidden.dtype()])
        {
            return Some(n_rows.max(1));
        }
        rows
    }

    /// The loss of the logits `z = hidden · weightᵀ + bias` at `targets`' masked rows, made
    /// `chunk_rows` rows at a time and never whole ([`LogitsMode::Chunked`]).
    ///
    /// # Shapes
    /// - hidden: `[n_masked, d_model]`, row `i` for `targets.positions()[i]` (after the
    ///   head's transform)
    /// - weight: `[vocab, d_model]`; bias: `[vocab]`
    pub(crate) fn forward_chunked(
        &self,
        (hidden, weight, bias): (Tensor<2>, Tensor<2>, Tensor<1>),
        targets: &MaskedTargets,
        chunk_rows: usize,
    ) -> MlmLossOutput {
        let sum = chunked_cross_entropy_sum(
            (to_f32(hidden), to_f32(weight), to_f32(bias)),
            targets.targets().clone(),
            self.label_smoothing,
            chunk_rows,
        );
        self.mean_over(sum, targets.len())
    }

    /// Mean over M (or the sum, as configured) of `n_graded ≥ 1` rows' summed loss.
    fn mean_over(&self, sum: CrossEntropySum, n_graded: usize) -> MlmLossOutput {
        let CrossEntropySum {
            loss_sum,
            n_correct,
        } = sum;
        let loss = if self.sum_reduction {
            loss_sum.clone()
        } else {
            loss_sum.clone() / n_graded as f64
        };
        MlmLossOutput {
            loss,
            loss_sum,
            n_graded,
            n_correct,
        }
    }
}

/// The loss of logits with no graded row: exactly 0, with a zero gradient.
pub(crate) fn no_graded_row(logits: Tensor<2>) -> MlmLossOutput {
    // Keep the logits in the graph so that `backward` yields a zero gradient (not a
    // missing one); `mask_fill` passes no gradient to filled entries and replaces inf/NaN,
    // so the result is an exact 0.
    let device = logits.device();
    let all = Tensor::<2, Bool>::full(logits.dims(), true, &device);
    let zero = to_f32(logits).mask_fill(all, 0.0).sum();
    MlmLossOutput {
        loss: zero.clone(),
        loss_sum: zero,
        n_graded: 0,
        n_correct: Tensor::zeros([1], &device),
    }
}

/// f16/bf16 logits lose too much in exp/log: the loss is always computed in f32.
fn to_f32<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    match x.dtype() {
        DType::F16 | DType::BF16 => x.cast(FloatDType::F32),
        _ => x,
    }
}

impl Default for MaskedCrossEntropy {
    /// Plain cross-entropy, mean over the graded positions, no label smoothing.
    fn default() -> Self {
        Self {
            label_smoothing: 0.0,
            sum_reduction: false,
            logits: LogitsMode::Auto,
        }
    }
}

/// Masked cross-entropy, mean over the positions where `mask` is `true`.
///
/// `loss = 1/|M| Σ_{i∈M} -log softmax(logits_i)[targets_i]`; see the [module docs](self).
///
/// # Shapes
/// - logits: `[..., vocab]`, e.g. `[n_masked, vocab]` or `[batch, seq, vocab]`.
/// - targets, mask: `[...]`, the logits' shape without its last dimension.
///
/// # Errors
/// [`MlmError::ShapeMismatch`], [`MlmError::LabelOutOfRange`]; see [`MaskedCrossEntropy::forward`].
pub fn masked_cross_entropy<const D: usize, const L: usize>(
    logits: Tensor<D>,
    targets: Tensor<L, Int>,
    mask: Tensor<L, Bool>,
) -> Result<MlmLossOutput, MlmError> {
    MaskedCrossEntropy::default().forward(logits, targets, mask)
}

/// Masked cross-entropy against Hugging Face-style labels, where `-100` marks "not graded".
///
/// # Shapes
/// - logits: `[..., vocab]`; labels: `[...]`.
///
/// # Example
/// The seed's worked example: logits (2, 1, 0) for (mat, car, sky), true word mat, and a
/// second position that is not graded.
/// ```
/// use burn::tensor::{Device, Int, Tensor};
/// use mlm_core::{IGNORE_INDEX, masked_cross_entropy_with_labels};
///
/// let device = Device::flex();
/// let logits = Tensor::<2>::from_floats([[2.0, 1.0, 0.0], [9.0, 0.0, 0.0]], &device);
/// let labels = Tensor::<1, Int>::from_ints([0, IGNORE_INDEX], &device);
/// let out = masked_cross_entropy_with_labels(logits, labels)?;
/// // p(mat) = e² / (e² + e + 1) = 0.6652, loss = -ln 0.6652 = 0.4076, over 1 graded position.
/// assert_eq!(out.n_graded, 1);
/// assert!((out.loss.into_scalar::<f64>() - 0.4076).abs() < 1e-4);
/// # Ok::<(), mlm_core::MlmError>(())
/// ```
///
/// # Errors
/// [`MlmError::ShapeMismatch`], [`MlmError::LabelOutOfRange`]; see [`MaskedCrossEntropy::forward_labels`].
pub fn masked_cross_entropy_with_labels<const D: usize, const L: usize>(
    logits: Tensor<D>,
    labels: Tensor<L, Int>,
) -> Result<MlmLossOutput, MlmError> {
    MaskedCrossEntropy::default().forward_labels(logits, labels)
}

/// Checks that `label_dims` is `logits`' shape without its last dimension; returns the row count.
fn check_label_shape<const D: usize>(
    logits: &Tensor<D>,
    label_dims: &[usize],
    what: &'static str,
) -> Result<usize, MlmError> {
    let dims = logits.dims();
    let (row_dims, _vocab) = dims.split_at(D - 1);
    if D < 2 || label_dims != row_dims {
        return Err(MlmError::ShapeMismatch {
            what,
            expected: format!("{row_dims:?} (the logits' shape {dims:?} without vocab)"),
            actual: label_dims.to_vec(),
        });
    }
    Ok(row_dims.iter().product())
}

/// `[..., vocab]` → `[rows, vocab]`.
fn flatten_rows<const D: usize>(logits: Tensor<D>, rows: usize) -> Tensor<2> {
    let vocab = logits.dims()[D - 1];
    logits.reshape([rows, vocab])
}

/// Reads an Int tensor's data as `i64` whatever the backend's Int dtype.
fn host_ints(data: TensorData) -> Vec<i64> {
    data.convert::<i64>()
        .try_into_vec::<i64>()
        .expect("an Int tensor converts to i64")
}
