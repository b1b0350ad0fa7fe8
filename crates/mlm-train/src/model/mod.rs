//! The models, one folder per architecture ([`bert`], [`modernbert`]), the registry of the
//! Hugging Face families they compute ([`family`]), what the rest of the crate holds of any
//! of them ([`ModelConfig`], [`ModelForMaskedLm`]), and the Hugging Face format they share
//! ([`hf`]).
//!
//! The shared pieces are named once: mlm-core's head and loss (every family's model ends in
//! an [`mlm_core::MlmHead`] and is graded by [`mlm_core::MaskedCrossEntropy`]), and
//! [`MaskedLm`], what the trainer, evaluation and fill-mask ask of a model.

pub mod bert;
pub mod config;
pub mod family;
pub mod hf;
pub mod masked_lm;
pub mod modernbert;

use burn::nn::Linear;
use burn::tensor::{Bool, Int, Tensor};
use mlm_core::{MaskedCrossEntropy, MaskedLanguageModel, MlmError, MlmLossOutput};

use crate::data::DeviceBatch;

pub use bert::{
    BertAttention, BertConfig, BertEmbeddings, BertForMaskedLm, BertLayer, BertResidual,
    BertSelfAttention, evenly_spread_positions, neighbour_query_key, sinusoidal_positions,
};
pub use config::ModelConfig;
pub use family::{Architecture, FAMILIES, Family, ModelFamily};
pub use masked_lm::ModelForMaskedLm;
pub use modernbert::{
    AttentionKind, ModernBertAttention, ModernBertConfig, ModernBertEmbeddings,
    ModernBertForMaskedLm, ModernBertLayer, ModernBertMlp,
};

/// `linear` applied to every token of `x [batch, seq, d_in]` → `[batch, seq, d_out]`, as one
/// `[batch·seq, d_in] × [d_in, d_out]` product: burn's 3-D `linear` broadcasts the weight into
/// one small product per sequence, and its weight gradient into a `[batch, d_in, d_out]` sum.
/// Every architecture's projections go through it, as [`mlm_core::linear()`] (a kernel of its
/// own on flex).
pub fn per_token(linear: &Linear, x: Tensor<3>) -> Tensor<3> {
    let bias = linear.bias.as_ref().map(|b| b.val());
    tokens_times(x, linear.weight.val(), bias)
}

/// The `linears` of one input side by side, `[batch, seq, Σ d_out]`: one product by their
/// weights concatenated along the output features, as the query, key and value projections
/// feed [`multi_head_attention_qkv_packed`](mlm_core::multi_head_attention_qkv_packed); and
/// their biases concatenated likewise (where every one has one), not yet added: the
/// attention kernel adds them as it reads each head. The gradient reaches each weight and
/// bias through the concatenation; `x`'s is one product.
pub fn per_token_packed<const N: usize>(
    linears: [&Linear; N],
    x: Tensor<3>,
) -> (Tensor<3>, Option<Tensor<1>>) {
    let weight = Tensor::cat(linears.map(|l| l.weight.val()).to_vec(), 1);
    let biases: Option<Vec<Tensor<1>>> = linears
        .iter()
        .map(|l| l.bias.as_ref().map(|b| b.val()))
        .collect();
    (
        tokens_times(x, weight, None),
        biases.map(|b| Tensor::cat(b, 0)),
    )
}

/// `linear`'s product without its bias, `x W` `[batch, seq, d_out]`, as [`per_token`]
/// computes it: for an epilogue that adds the bias itself ([`mlm_core::bias_gelu`],
/// [`mlm_core::bias_residual_layer_norm`]).
pub fn per_token_product(linear: &Linear, x: Tensor<3>) -> Tensor<3> {
    tokens_times(x, linear.weight.val(), None)
}

/// `x [batch, seq, d_in] · weight [d_in, d_out] (+ bias)` as one `[batch·seq, d_in]` product.
fn tokens_times(x: Tensor<3>, weight: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<3> {
    let [batch, seq, d_in] = x.dims();
    let y = mlm_core::linear(x.reshape([batch * seq, d_in]), weight, bias);
    let d_out = y.dims()[1];
    y.reshape([batch, seq, d_out])
}

/// A masked-language model of any family, as the training step, held-out evaluation,
/// fill-mask and minimal-pair scoring ([`MaskedLanguageModel`]) drive it: token ids in,
/// logits out, graded rows gathered before the head (sparse prediction).
pub trait MaskedLm: MaskedLanguageModel + Send + Sync {
    /// Logits at the masked positions of `batch`, `[n_masked, vocab_size]`.
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if `batch.targets` were checked for another batch shape
    /// or vocabulary.
    fn forward_batch(&self, batch: DeviceBatch) -> Result<Tensor<2>, MlmError>;

    /// The masked-LM loss of `batch` under `loss_fn`, the logits whole or chunked as its
    /// [`LogitsMode`](mlm_core::LogitsMode) says ([`mlm_core::MlmHead::forward_loss`]):
    /// the training step's forward.
    ///
    /// # Errors
    /// As [`forward_batch`](Self::forward_batch).
    fn loss_batch(
        &self,
        batch: DeviceBatch,
        loss_fn: &MaskedCrossEntropy,
    ) -> Result<MlmLossOutput, MlmError>;

    /// Logits at every position of one segment, `[batch, seq, vocab_size]` (fill-mask).
    ///
    /// # Shapes
    /// - input_ids: `[batch, seq]`
    /// - padding_mask: `[batch, seq]`, `true` at padding
    ///
    /// # Errors
    /// None in practice for a model built by its configuration: the head's shapes are fixed.
    fn all_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
    ) -> Result<Tensor<3>, MlmError>;
}
