#![doc = include_str!("../README.md")]
//!
//! ## The pipeline, item by item
//!
//! The head, the loss and the input corruption are each one step of one pipeline:
//!
//! ```text
//! token ids ──corrupt 80/10/10──▶ input ids + labels                       masking::Masker
//! input ids ──your encoder──▶ hidden states h [batch, seq, d_model]
//! h ──gather masked rows──▶ h_M [n_masked, d_model]                        MlmHead::forward_targets
//! h_M ──transform (dense→GELU→LayerNorm)──▶ ──decoder z = W h + b──▶ logits [n_masked, vocab]
//! logits ──log-softmax──▶ ──pick true token──▶ ──negate──▶ ──mean over M──▶ loss   MaskedCrossEntropy::forward_targets
//! ```
//!
//! - [`MaskingConfig`] / [`Masker`]: select ~15 % of the tokens; 80 % become `[MASK]`,
//!   10 % a random token, 10 % stay; all are graded against the original
//!   (BERT, Devlin et al. 2019, §3.1 and appendix A.1); or, with [`SpanMaskingConfig`],
//!   spans of whole words with one 80/10/10 draw per span (SpanBERT, Joshi et al. 2020, §3.1).
//! - [`MlmHeadConfig`] / [`MlmHead`]: Hugging Face's `BertOnlyMLMHead`, own or tied decoder.
//! - [`masked_cross_entropy`], [`masked_cross_entropy_with_labels`], [`MaskedCrossEntropy`]:
//!   the mean of `-log p(true token)` over the masked positions only, with the sum and
//!   count needed to normalise gradient accumulation globally.
//! - [`MlmHead::forward_loss`] with a [`LogitsMode`]: the head and the loss together, the
//!   logits `[n_masked, vocab]` whole or a chunk of rows at a time, never whole (large
//!   vocabularies: XLM-R's 250 002).
//! - [`MaskedTargets`]: the masked positions and their true tokens, checked on the host
//!   before upload, so that [`MlmHead::forward_targets`] and
//!   [`MaskedCrossEntropy::forward_targets`] read nothing back from the device (no stall of a
//!   GPU's queue in the training step).
//! - [`multi_head_attention`] ([`attention`]) and [`layer_norm`]: the encoder's
//!   self-attention and LayerNorm, each one operation (a fused kernel on burn-flex), for the
//!   encoder that feeds the head; [`linear()`], its projections; [`bias_gelu`] and
//!   [`bias_residual_layer_norm`] ([`epilogue`]), what follows a projection, with its bias.
//!
//! - [`PseudoLogLikelihood`] ([`scoring`]): a sentence's pseudo-log-likelihood under any
//!   [`MaskedLanguageModel`], all masked copies of many sentences in one forward pass (or
//!   PLL-word-l2r, Kauf & Ivanova 2023), and [`prefers_grammatical`], the verdict on a
//!   minimal pair (Salazar et al. 2020).
//!
//! - `learner` (with the `train` feature, so not linked here): `MlmBatcher`
//!   and `MlmOutput`, the pieces burn-train's `DataLoader` and `Learner` need.
//!
//! Bad input is answered with an [`MlmError`], never a silently wrong number.

pub mod attention;
pub mod epilogue;
mod error;
mod fused;
pub mod head;
#[cfg(feature = "train")]
pub mod learner;
pub mod linear;
pub mod loss;
pub mod masking;
pub mod scoring;
pub mod targets;

pub use attention::{multi_head_attention, multi_head_attention_qkv_packed};
pub use epilogue::{bias_gelu, bias_residual_layer_norm};
pub use error::MlmError;
pub use head::{MlmHead, MlmHeadConfig, MlmHeadTransform, gelu, layer_norm};
pub use linear::linear;
pub use loss::{
    CHUNK_LOGITS, IGNORE_INDEX, LogitsMode, MaskedCrossEntropy, MaskedCrossEntropyConfig,
    MlmLossOutput, Reduction, masked_cross_entropy, masked_cross_entropy_with_labels,
};
pub use masking::{MaskRates, MaskedBatch, Masker, MaskingConfig, SpanMaskingConfig};
pub use scoring::{MaskedLanguageModel, PseudoLogLikelihood, SpecialTokenIds, prefers_grammatical};
pub use targets::MaskedTargets;
