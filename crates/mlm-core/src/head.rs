//! The MLM head: hidden states → (transform) → logits `z = W h + b` over the vocabulary.
//!
//! Mirrors Hugging Face's `BertOnlyMLMHead` block by block, with the same names:
//! `transform.dense → GELU(erf) → transform.LayerNorm(eps 1e-12)`, then the decoder
//! `W [vocab, d_model]` (its own, or the token-embedding weight: tied) and one output
//! bias `b [vocab]`. Source: BERT (Devlin et al. 2019, §3.1 and the released code's
//! `get_masked_lm_output`); weight tying: Press & Wolf 2017.

use std::sync::atomic::{AtomicBool, Ordering};

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::Device;
use burn::tensor::{Int, Tensor};

use crate::targets::check_positions;
use crate::{MaskedCrossEntropy, MaskedTargets, MlmError, MlmLossOutput};

/// GELU in its exact (erf) form, `x · Φ(x) = x/2 · (1 + erf(x/√2))`, as BERT and
/// Hugging Face's `"gelu"` (Hendrycks & Gimpel 2016).
///
/// On burn-flex (`flex` feature) this is one vectorised CPU kernel, and under autodiff one
/// operation whose backward is the exact derivative `Φ(x) + x φ(x)` (`erf` to within 4e-7).
/// Elsewhere it is built from `erf` ops rather than `burn::tensor::activation::gelu`: Burn's
/// default `gelu` (0.21, and still 0.22.1's `ActivationOps::gelu_backward`) computes the
/// forward with erf but the backward with the derivative of the tanh approximation, which
/// puts gradients ~3e-4 (relative) off PyTorch's.
///
/// # Shapes
/// - input, output: `[...]`, elementwise.
pub fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    #[cfg(feature = "flex")]
    if crate::fused::on_flex(&x, &[x.dtype()]) {
        return crate::fused::flex_gelu(x, None);
    }
    x.clone() * ((x * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5
}

/// LayerNorm over the last dimension (Ba et al. 2016): `(x − μ)/√(σ² + ε) · γ + β`, with
/// the mean `μ` and the biased variance `σ²` of each row. `epsilon` is passed in because
/// burn's `LayerNorm` keeps its own private: give the one the module was configured with.
///
/// On burn-flex (`flex` feature, `f32`) this is one CPU kernel per row, and under autodiff
/// one operation whose backward uses the saved `x̂` and `1/√(σ² + ε)`; elsewhere the same
/// tensor ops, in the same order, as burn's own `LayerNorm::forward`.
///
/// # Shapes
/// - x, output: `[..., d]`; gamma, beta: `[d]`.
///
/// # Panics
/// If `gamma` or `beta` is not as long as `x`'s last dimension.
pub fn layer_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f64,
) -> Tensor<D> {
    let d = x.dims()[D - 1];
    let [gamma_len, beta_len] = [gamma.dims()[0], beta.dims()[0]];
    assert!(
        gamma_len == d && beta_len == d,
        "layer_norm: gamma [{gamma_len}] and beta [{beta_len}] must both be [{d}], x's last dimension"
    );
    #[cfg(feature = "flex")]
    if crate::fused::on_flex(&x, &[x.dtype(), gamma.dtype(), beta.dtype()]) {
        return crate::fused::flex_layer_norm((x, gamma, beta), None, epsilon);
    }
    let last = D - 1;
    let mut row = [1; D];
    row[last] = gamma.dims()[0];
    let centered = x.clone() - x.mean_dim(last);
    let variance = (centered.clone() * centered.clone()).mean_dim(last);
    centered / (variance + epsilon).sqrt() * gamma.reshape(row) + beta.reshape(row)
}

/// The spread of starting logits above which a tied weight is taken for an unscaled
/// initialisation ([`MlmHead::tied_scale_warning`]).
const TIED_LOGIT_SPREAD_LIMIT: f64 = 4.0;

/// Configuration of an [`MlmHead`], built with [`MlmHeadConfig::init`].
#[derive(Config, Debug)]
pub struct MlmHeadConfig {
    /// Width of the hidden states, `d_model` (BERT-base: 768).
    pub d_model: usize,
    /// Number of tokens in the vocabulary, the width of the logits (bert-base-uncased: 30 522).
    pub vocab_size: usize,
    /// Apply BERT's transform (dense → GELU → LayerNorm) before the decoder.
    #[config(default = true)]
    pub transform: bool,
    /// Decode with the token-embedding weight passed to `forward` (tied) instead of an own weight.
    #[config(default = true)]
    pub tie_word_embeddings: bool,
    /// Epsilon of the transform's LayerNorm, added to the variance (BERT: 1e-12).
    #[config(default = 1e-12)]
    pub layer_norm_eps: f64,
    /// Initialiser of the dense and own-decoder weights (BERT: normal, std 0.02). Biases start at 0.
    #[config(default = "Initializer::Normal { mean: 0.0, std: 0.02 }")]
    pub initializer: Initializer,
}

/// BERT's `BertPredictionHeadTransform`: dense `[d_model → d_model]` → GELU (erf form) → LayerNorm.
#[derive(Module, Debug)]
pub struct MlmHeadTransform {
    /// Dense layer; weight `[d_model, d_model]` stored `[in, out]` (PyTorch's is `[out, in]`).
    pub dense: Linear,
    /// LayerNorm over `d_model`: `gamma`/`beta` are Hugging Face's `weight`/`bias`.
    pub layer_norm: LayerNorm,
}

impl MlmHeadTransform {
    /// `[..., d_model]` → `[..., d_model]`.
    pub fn forward<const D: usize>(&self, hidden: Tensor<D>) -> Tensor<D> {
        let bias = self.dense.bias.as_ref().map(|b| b.val());
        let dense = crate::linear(hidden, self.dense.weight.val(), bias);
        self.layer_norm.forward(gelu(dense))
    }
}

/// The masked-language-model head: hidden states `[..., d_model]` → logits `[..., vocab]`.
///
/// # Example
/// ```
/// use burn::tensor::{Device, Tensor};
/// use mlm_core::MlmHeadConfig;
///
/// let device = Device::flex();
/// let config = MlmHeadConfig::new(16, 50); // d_model 16, vocab 50, tied by default
/// let (head, embedding) = (config.init(&device), config.init_tied_embedding(&device));
/// let hidden = Tensor::<3>::zeros([2, 5, 16], &device); // [batch, seq, d_model]
/// let logits = head.forward(hidden, Some(embedding.weight.val()))?;
/// assert_eq!(logits.dims(), [2, 5, 50]);
/// # Ok::<(), mlm_core::MlmError>(())
/// ```
///
/// Build it with [`MlmHeadConfig::init`]. With `tie_word_embeddings` the decoder is the
/// token-embedding weight you pass to [`forward`](Self::forward): pass the embedding's own
/// parameter (`embedding.weight.val()`) so that the gradients of both uses add up in one
/// parameter. Nothing is copied.
#[derive(Module, Debug)]
pub struct MlmHead {
    /// The optional transform (dense → GELU → LayerNorm).
    pub transform: Option<MlmHeadTransform>,
    /// Own decoder weight `[vocab, d_model]` (PyTorch layout, as the embedding); `None` when tied.
    pub decoder: Option<Param<Tensor<2>>>,
    /// Output bias `[vocab]`, initialised to 0.
    pub bias: Param<Tensor<1>>,
    d_model: usize,
    vocab_size: usize,
}

impl MlmHeadConfig {
    /// A token embedding `[vocab_size, d_model]` to tie this head to, initialised with the
    /// head's `initializer` (BERT: N(0, 0.02), as Hugging Face's `_init_weights`).
    ///
    /// Use it, or give your own `EmbeddingConfig` the same initializer: burn-nn's
    /// `EmbeddingConfig` draws N(0, 1), and a tied decoder of that scale starts the loss far
    /// above `ln(vocab_size)`, since the transform's LayerNorm gives rows of unit variance and
    /// the logits then spread by `√d_model`. [`MlmHead::forward`] warns once when it meets such a weight.
    pub fn init_tied_embedding(&self, device: &Device) -> Embedding {
        EmbeddingConfig::new(self.vocab_size, self.d_model)
            .with_initializer(self.initializer.clone())
            .init(device)
    }

    /// Builds the head on `device`.
    ///
    /// # Panics
    /// If `d_model` or `vocab_size` is 0.
    pub fn init(&self, device: &Device) -> MlmHead {
        assert!(
            self.d_model > 0 && self.vocab_size > 0,
            "MlmHeadConfig: d_model ({}) and vocab_size ({}) must be positive",
            self.d_model,
            self.vocab_size
        );
        let transform = self.transform.then(|| MlmHeadTransform {
            dense: Linear {
                // BERT's biases start at 0; burn's `Linear` would draw them from `initializer`.
                bias: Some(Initializer::Zeros.init([self.d_model], device)),
                ..LinearConfig::new(self.d_model, self.d_model)
                    .with_initializer(self.initializer.clone())
                    .init(device)
            },
            layer_norm: LayerNormConfig::new(self.d_model)
                .with_epsilon(self.layer_norm_eps)
                .init(device),
        });
        let decoder = (!self.tie_word_embeddings).then(|| {
            self.initializer.init_with(
                [self.vocab_size, self.d_model],
                Some(self.d_model),
                Some(self.vocab_size),
                device,
            )
        });
        MlmHead {
            transform,
            decoder,
            bias: Initializer::Zeros.init([self.vocab_size], device),
            d_model: self.d_model,
            vocab_size: self.vocab_size,
        }
    }
}

impl MlmHead {
    /// Width of the hidden states this head reads.
    pub fn d_model(&self) -> usize {
        self.d_model
    }

    /// Width of the logits this head writes.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Logits for every position: `z = W · transform(h) + b`.
    ///
    /// # Shapes
    /// - hidden: `[..., d_model]` (rank ≥ 2, e.g. `[batch, seq, d_model]`)
    /// - tied: `Some([vocab, d_model])`, the token-embedding weight, when the head is tied; else `None`
    /// - output: `[..., vocab]`
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if the last dimension of `hidden` is not `d_model` or
    /// `tied` is not `[vocab, d_model]`; [`MlmError::DecoderWeight`] if a tied head gets no
    /// weight or an untied head gets one.
    pub fn forward<const D: usize>(
        &self,
        hidden: Tensor<D>,
        tied: Option<Tensor<2>>,
    ) -> Result<Tensor<D>, MlmError> {
        let hidden_dims = hidden.dims();
        if D < 2 || hidden_dims[D - 1] != self.d_model {
            return Err(MlmError::ShapeMismatch {
                what: "hidden",
                expected: format!("[.., d_model = {}] of rank >= 2", self.d_model),
                actual: hidden_dims.to_vec(),
            });
        }
        let decoder = self.decoder_weight(tied)?;
        let hidden = match &self.transform {
            Some(transform) => transform.forward(hidden),
            None => hidden,
        };
        // z = h Wᵀ + b; `linear` takes the weight as [in, out].
        Ok(burn::tensor::module::linear(
            hidden,
            decoder.transpose(),
            Some(self.bias.val()),
        ))
    }

    /// Logits for the masked positions only (sparse prediction).
    ///
    /// Gathers the rows `positions` (flat indices `b * seq + s`, as [`crate::MaskedBatch`]
    /// returns them) out of the hidden states *before* the transform, so the head's cost
    /// falls from `batch * seq` rows to `n_masked` rows (~15 %).
    ///
    /// # Shapes
    /// - hidden: `[batch, seq, d_model]`
    /// - positions: `[n_masked]`, each in `[0, batch * seq)`; `n_masked` may be 0
    /// - tied: as in [`forward`](Self::forward)
    /// - output: `[n_masked, vocab]`, row `i` for `positions[i]`
    ///
    /// # Errors
    /// As [`forward`](Self::forward), and [`MlmError::PositionOutOfRange`] for a position
    /// outside `[0, batch * seq)`.
    pub fn forward_masked(
        &self,
        hidden: Tensor<3>,
        positions: Tensor<1, Int>,
        tied: Option<Tensor<2>>,
    ) -> Result<Tensor<2>, MlmError> {
        let [batch, seq, _] = hidden.dims();
        let host_positions = positions
            .to_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .expect("an Int tensor converts to i64");
        check_positions(&host_positions, batch * seq)?;
        self.gathered(hidden, positions, tied)
    }

    /// Logits for the masked positions of `targets`, checked on the host when they were
    /// built: [`forward_masked`](Self::forward_masked) without reading anything back from
    /// the device.
    ///
    /// # Shapes
    /// - hidden: `[batch, seq, d_model]` with `[batch, seq] = targets.batch_and_seq()`
    /// - tied: as in [`forward`](Self::forward)
    /// - output: `[n_masked, vocab]`, row `i` for `targets.positions()[i]`
    ///
    /// # Errors
    /// As [`forward`](Self::forward); [`MlmError::ShapeMismatch`] naming `hidden` if its
    /// `[batch, seq]` is not the one `targets` was checked against or its `d_model` is not
    /// the head's, naming `targets` if they were checked against another vocabulary.
    pub fn forward_targets(
        &self,
        hidden: Tensor<3>,
        targets: &MaskedTargets,
        tied: Option<Tensor<2>>,
    ) -> Result<Tensor<2>, MlmError> {
        self.check_targets(hidden.dims(), targets)?;
        self.gathered(hidden, targets.positions().clone(), tied)
    }

    /// The masked-LM loss at the masked positions of `targets`: the head on the gathered
    /// rows, then `loss`, with the logits whole or a chunk of rows at a time as `loss`'s
    /// [`LogitsMode`](crate::LogitsMode) says. Chunked, the logits `[n_masked, vocab]` never
    /// exist at once (the decoder and the loss run together); the numbers are the whole
    /// path's, to the summation order. Reads nothing back from the device.
    ///
    /// # Shapes
    /// - hidden: `[batch, seq, d_model]` with `[batch, seq] = targets.batch_and_seq()`
    /// - tied: as in [`forward`](Self::forward)
    ///
    /// # Errors
    /// As [`forward_targets`](Self::forward_targets).
    pub fn forward_loss(
        &self,
        hidden: Tensor<3>,
        targets: &MaskedTargets,
        tied: Option<Tensor<2>>,
        loss: &MaskedCrossEntropy,
    ) -> Result<MlmLossOutput, MlmError> {
        let rows = loss.chunk_rows_on(&hidden, targets.len(), self.vocab_size);
        let (Some(rows), false) = (rows, targets.is_empty()) else {
            return loss.forward_targets(self.forward_targets(hidden, targets, tied)?, targets);
        };
        self.check_targets(hidden.dims(), targets)?;
        let decoder = self.decoder_weight(tied)?;
        let [batch, seq, d_model] = hidden.dims();
        let hidden = hidden
            .reshape([batch * seq, d_model])
            .select(0, targets.positions().clone());
        let hidden = match &self.transform {
            Some(transform) => transform.forward(hidden),
            None => hidden,
        };
        Ok(loss.forward_chunked((hidden, decoder, self.bias.val()), targets, rows))
    }

    /// Checks that `targets` index hidden states of shape `hidden` `[batch, seq, d_model]`
    /// and this head's vocabulary.
    fn check_targets(&self, hidden: [usize; 3], targets: &MaskedTargets) -> Result<(), MlmError> {
        if targets.vocab_size() != self.vocab_size {
            return Err(MlmError::ShapeMismatch {
                what: "targets (the vocabulary they were checked against)",
                expected: format!("vocab_size = {}, the head's", self.vocab_size),
                actual: vec![targets.vocab_size()],
            });
        }
        let [batch, seq, d_model] = hidden;
        let [target_batch, target_seq] = targets.batch_and_seq();
        if [batch, seq] != [target_batch, target_seq] {
            return Err(MlmError::ShapeMismatch {
                what: "hidden (its batch and sequence length)",
                expected: format!(
                    "[batch = {target_batch}, seq = {target_seq}, d_model], the shape the \
                     targets' positions index"
                ),
                actual: vec![batch, seq, d_model],
            });
        }
        if d_model != self.d_model {
            return Err(MlmError::ShapeMismatch {
                what: "hidden (its d_model)",
                expected: format!("[batch, seq, d_model = {}], the head's", self.d_model),
                actual: vec![batch, seq, d_model],
            });
        }
        Ok(())
    }

    /// The head on the rows `positions` (each in range) of `hidden`.
    fn gathered(
        &self,
        hidden: Tensor<3>,
        positions: Tensor<1, Int>,
        tied: Option<Tensor<2>>,
    ) -> Result<Tensor<2>, MlmError> {
        let [batch, seq, d_model] = hidden.dims();
        let n_rows = batch * seq;
        let rows = hidden.reshape([n_rows, d_model]);
        if positions.dims()[0] == 0 {
            // Nothing masked: burn-ndarray 0.21 divides by zero in a matmul of 0 rows, so
            // decode one row and select none of it (`select`, not an empty `slice`, which
            // burn answers with a fresh tensor): the `[0, vocab]` result stays in the
            // graph, and the parameters get zero gradients rather than none.
            let row = if n_rows > 0 {
                rows.narrow(0, 0, 1)
            } else {
                Tensor::zeros([1, d_model], &rows.device())
            };
            return Ok(self.forward(row, tied)?.select(0, positions));
        }
        self.forward(rows.select(0, positions), tied)
    }

    /// Why decoding with the tied weight `tied` `[vocab, d_model]` would start the loss far
    /// above `ln(vocab_size)`, if it would: when its entries' root mean square `r` gives
    /// logits that spread by `r · √d_model` > 4 (the transform's LayerNorm hands the decoder
    /// rows of unit variance; a loss then starts at least ~8 nats above `ln(vocab_size)`).
    /// BERT's N(0, 0.02) at `d_model` 768 spreads by 0.55; burn-nn's default N(0, 1)
    /// embedding at `d_model` 64 by 8.
    ///
    /// Reads one scalar back from the device. [`forward`](Self::forward) calls it on the
    /// first tied weight it meets in a process and prints the answer to stderr.
    pub fn tied_scale_warning(&self, tied: &Tensor<2>) -> Option<String> {
        let mean_square = tied.clone().inner().square().mean().into_scalar::<f64>();
        let spread = (mean_square * self.d_model as f64).sqrt();
        (spread > TIED_LOGIT_SPREAD_LIMIT).then(|| {
            format!(
                "the tied decoder weight has entries of root mean square {:.3}: at d_model = {} \
                 the logits spread by {spread:.1} and the loss starts far above \
                 ln(vocab_size) = {:.2}. burn-nn's EmbeddingConfig draws N(0, 1); initialise \
                 the embedding as BERT does, N(0, 0.02), with \
                 MlmHeadConfig::init_tied_embedding or EmbeddingConfig::with_initializer",
                mean_square.sqrt(),
                self.d_model,
                (self.vocab_size as f64).ln()
            )
        })
    }

    /// Prints [`tied_scale_warning`](Self::tied_scale_warning) for the first tied weight of
    /// the process, once: a single device read, never one per step.
    fn warn_once_on_tied_scale(&self, tied: &Tensor<2>) {
        static CHECKED: AtomicBool = AtomicBool::new(false);
        if !CHECKED.swap(true, Ordering::Relaxed)
            && let Some(warning) = self.tied_scale_warning(tied)
        {
            eprintln!("mlm-core warning: {warning}");
        }
    }

    fn decoder_weight(&self, tied: Option<Tensor<2>>) -> Result<Tensor<2>, MlmError> {
        match (&self.decoder, tied) {
            (Some(own), None) => Ok(own.val()),
            (None, Some(tied)) => {
                let dims = tied.dims();
                if dims != [self.vocab_size, self.d_model] {
                    return Err(MlmError::ShapeMismatch {
                        what: "tied (the decoder weight)",
                        expected: format!(
                            "[vocab = {}, d_model = {}]",
                            self.vocab_size, self.d_model
                        ),
                        actual: dims.to_vec(),
                    });
                }
                self.warn_once_on_tied_scale(&tied);
                Ok(tied)
            }
            (None, None) => Err(MlmError::DecoderWeight(
                "this head is tied (tie_word_embeddings = true): pass the token-embedding weight to forward",
            )),
            (Some(_), Some(_)) => Err(MlmError::DecoderWeight(
                "this head has its own decoder (tie_word_embeddings = false): pass None as the tied weight",
            )),
        }
    }
}
