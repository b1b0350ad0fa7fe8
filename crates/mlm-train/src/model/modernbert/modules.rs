//! ModernBERT for masked-language modelling, top to bottom: token embeddings → pre-norm
//! layers of rotary attention (global or over a sliding window) and a GeGLU feed-forward →
//! final norm → the tied `mlm-core` head on the masked rows only.
//!
//! Warner et al. 2024, "Smarter, Better, Faster, Longer" §2.1; transformers'
//! `modeling_modernbert.py`, whose names the fields keep (`Wqkv` is `wqkv`).

use burn::module::Module;
use burn::nn::{Dropout, Embedding, LayerNorm, Linear};
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Int, Tensor};
use mlm_core::attention::{self, PADDING_BIAS};
use mlm_core::{
    MaskedCrossEntropy, MaskedLanguageModel, MaskedTargets, MlmError, MlmHead, MlmLossOutput, gelu,
    multi_head_attention,
};

use super::rotary::Rotary;
use super::window::{Window, banded};
use crate::data::DeviceBatch;
use crate::model::{MaskedLm, per_token};

/// `layer_norm` with epsilon `eps` over the last dimension, its bias 0 where it has none
/// (`norm_bias = false`), as one [`mlm_core::layer_norm`].
fn norm(layer_norm: &LayerNorm, eps: f64, x: Tensor<3>) -> Tensor<3> {
    let gamma = layer_norm.gamma.val();
    let beta = match &layer_norm.beta {
        Some(beta) => beta.val(),
        None => gamma.zeros_like(),
    };
    mlm_core::layer_norm(x, gamma, beta, eps)
}

/// Token embeddings, LayerNorm and dropout; no position or segment embeddings.
#[derive(Module, Debug)]
pub struct ModernBertEmbeddings {
    /// `[vocab, d_model]`; also the tied decoder of the head.
    pub tok_embeddings: Embedding,
    /// LayerNorm over the embedding.
    pub norm: LayerNorm,
    /// Dropout after it (`embedding_dropout`).
    pub drop: Dropout,
}

/// Self-attention with rotary positions: one `Wqkv` product, then `Wo`.
#[derive(Module, Debug)]
pub struct ModernBertAttention {
    /// Query, key and value projections side by side, `[d_model, 3 · d_model]`.
    pub wqkv: Linear,
    /// Output projection `[d_model, d_model]`.
    pub wo: Linear,
    /// Dropout on the probabilities and after `wo` (`attention_dropout`).
    pub drop: Dropout,
    /// Number of heads.
    pub num_attention_heads: usize,
}

/// What one attention kind needs: its rotation, the padding, and for a local layer its
/// window.
pub struct AttentionInputs {
    /// Rotary positions at this kind's base.
    pub rotary: Rotary,
    /// `[batch, seq]`: 0, or [`PADDING_BIAS`] at padding keys.
    pub key_bias: Tensor<2>,
    /// The local layers' window; `None` for a global layer.
    pub window: Option<Window>,
}

impl ModernBertAttention {
    /// `hidden [batch, seq, d_model]` → `[batch, seq, d_model]`.
    pub fn forward(&self, hidden: Tensor<3>, inputs: &AttentionInputs) -> Tensor<3> {
        let heads = self.num_attention_heads;
        let d = hidden.dims()[2];
        let qkv = per_token(&self.wqkv, hidden);
        let [query, key, value] = [0, 1, 2].map(|i| qkv.clone().narrow(2, i * d, d));
        let (query, key) = (
            inputs.rotary.apply(query, heads),
            inputs.rotary.apply(key, heads),
        );
        let [batch, seq, _] = query.dims();
        let qkv = [query, key, value];
        let context = match &inputs.window {
            None if self.drop.prob == 0.0 => {
                let [query, key, value] = qkv;
                multi_head_attention(query, key, value, inputs.key_bias.clone(), heads)
            }
            None => self.biased(qkv, inputs.key_bias.clone().reshape([batch, 1, 1, seq])),
            Some(Window::Full(bias)) => self.biased(qkv, bias.clone()),
            Some(Window::Blocks { half, bias }) => {
                let split =
                    |x: Tensor<3>| x.reshape([batch, seq, heads, d / heads]).swap_dims(1, 2);
                let context = banded(qkv.map(split), bias.clone(), *half, &self.drop);
                context.swap_dims(1, 2).reshape([batch, seq, d])
            }
        };
        self.drop.forward(per_token(&self.wo, context))
    }

    /// `softmax(q kᵀ / √d_head + bias) v` per head, dropout on the probabilities; `bias`
    /// broadcasts to `[batch, heads, seq, seq]`.
    fn biased(&self, [query, key, value]: [Tensor<3>; 3], bias: Tensor<4>) -> Tensor<3> {
        let heads = self.num_attention_heads;
        let [batch, seq, d] = query.dims();
        let split = |x: Tensor<3>| x.reshape([batch, seq, heads, d / heads]).swap_dims(1, 2);
        let scores = split(query).matmul(split(key).transpose()) / ((d / heads) as f64).sqrt();
        let probs = self.drop.forward(softmax(scores + bias, 3));
        attention::context(probs, value)
    }
}

/// The GeGLU feed-forward: `Wo(gelu(x Wi_input) ⊙ x Wi_gate)` (Shazeer 2020).
#[derive(Module, Debug)]
pub struct ModernBertMlp {
    /// Input and gate halves side by side, `[d_model, 2 · intermediate_size]`.
    pub wi: Linear,
    /// Projection back, `[intermediate_size, d_model]`.
    pub wo: Linear,
    /// Dropout before `wo` (`mlp_dropout`).
    pub drop: Dropout,
}

impl ModernBertMlp {
    /// `[batch, seq, d_model]` → `[batch, seq, d_model]`.
    pub fn forward(&self, hidden: Tensor<3>) -> Tensor<3> {
        let both = per_token(&self.wi, hidden);
        let width = both.dims()[2] / 2;
        let (input, gate) = (
            both.clone().narrow(2, 0, width),
            both.narrow(2, width, width),
        );
        per_token(&self.wo, self.drop.forward(gelu(input) * gate))
    }
}

/// One pre-norm layer: `h + attn(attn_norm(h))`, then `h + mlp(mlp_norm(h))`.
#[derive(Module, Debug)]
pub struct ModernBertLayer {
    /// LayerNorm before attention; `None` in layer 0, whose input is the normed embedding.
    pub attn_norm: Option<LayerNorm>,
    /// Attention.
    pub attn: ModernBertAttention,
    /// LayerNorm before the feed-forward.
    pub mlp_norm: LayerNorm,
    /// Feed-forward.
    pub mlp: ModernBertMlp,
    /// Whether the layer attends over the sliding window (else globally).
    pub local: bool,
    /// Epsilon of its LayerNorms.
    pub norm_eps: f64,
}

impl ModernBertLayer {
    /// `[batch, seq, d_model]` → `[batch, seq, d_model]`, with its kind's inputs.
    pub fn forward(&self, hidden: Tensor<3>, inputs: &AttentionInputs) -> Tensor<3> {
        let normed = match &self.attn_norm {
            Some(layer_norm) => norm(layer_norm, self.norm_eps, hidden.clone()),
            None => hidden.clone(),
        };
        let hidden = hidden + self.attn.forward(normed, inputs);
        let normed = norm(&self.mlp_norm, self.norm_eps, hidden.clone());
        hidden + self.mlp.forward(normed)
    }
}

/// ModernBERT with its masked-LM head (`head.dense → gelu → head.norm`, decoder tied to
/// `tok_embeddings` with its own bias).
#[derive(Module, Debug)]
pub struct ModernBertForMaskedLm {
    /// `model.embeddings`.
    pub embeddings: ModernBertEmbeddings,
    /// `model.layers`.
    pub layers: Vec<ModernBertLayer>,
    /// `model.final_norm`.
    pub final_norm: LayerNorm,
    /// `head` (transform) and `decoder.bias`; the decoder's weight is `tok_embeddings`.
    pub head: MlmHead,
    /// Epsilon of every LayerNorm but the head's (which keeps its own).
    pub norm_eps: f64,
    /// Width of the local layers' window in tokens.
    pub local_attention: usize,
    /// Rotary base of the global layers.
    pub global_rope_theta: f64,
    /// Rotary base of the local layers.
    pub local_rope_theta: f64,
    /// The longest sequence.
    pub max_position_embeddings: usize,
}

impl ModernBertForMaskedLm {
    /// Hidden states after `final_norm`.
    ///
    /// # Shapes
    /// - input_ids, padding_mask: `[batch, seq]`, `seq <= max_position_embeddings`,
    ///   `padding_mask` `true` at padding (keys never attended to)
    /// - output: `[batch, seq, d_model]`
    pub fn encode(&self, input_ids: Tensor<2, Int>, padding_mask: Tensor<2, Bool>) -> Tensor<3> {
        let [_, seq] = input_ids.dims();
        let device = input_ids.device();
        let key_bias = padding_mask.float().mul_scalar(PADDING_BIAS);
        let head_dim = self.head.d_model() / self.layers[0].attn.num_attention_heads;
        let global = AttentionInputs {
            rotary: Rotary::new(seq, head_dim, self.global_rope_theta, &device),
            key_bias: key_bias.clone(),
            window: None,
        };
        let local = AttentionInputs {
            rotary: Rotary::new(seq, head_dim, self.local_rope_theta, &device),
            window: Some(Window::new(key_bias.clone(), self.local_attention / 2)),
            key_bias,
        };
        let embedded = self.embeddings.tok_embeddings.forward(input_ids);
        let embedded = norm(&self.embeddings.norm, self.norm_eps, embedded);
        let mut hidden = self.embeddings.drop.forward(embedded);
        for layer in &self.layers {
            hidden = layer.forward(hidden, if layer.local { &local } else { &global });
        }
        norm(&self.final_norm, self.norm_eps, hidden)
    }

    /// The decoder's weight: the token embeddings.
    fn tied(&self) -> Option<Tensor<2>> {
        Some(self.embeddings.tok_embeddings.weight.val())
    }
}

/// Pseudo-log-likelihood scoring ([`mlm_core::PseudoLogLikelihood`]).
impl MaskedLanguageModel for ModernBertForMaskedLm {
    fn masked_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
        targets: &MaskedTargets,
    ) -> Result<Tensor<2>, MlmError> {
        let hidden = self.encode(input_ids, padding_mask);
        self.head.forward_targets(hidden, targets, self.tied())
    }

    fn vocab_size(&self) -> usize {
        self.head.vocab_size()
    }

    fn max_seq_len(&self) -> usize {
        self.max_position_embeddings
    }
}

/// The trainer's model: the batch's segment ids are not read (ModernBERT has none).
impl MaskedLm for ModernBertForMaskedLm {
    fn forward_batch(&self, batch: DeviceBatch) -> Result<Tensor<2>, MlmError> {
        self.masked_logits(batch.input_ids, batch.padding_mask, &batch.targets)
    }

    fn loss_batch(
        &self,
        batch: DeviceBatch,
        loss_fn: &MaskedCrossEntropy,
    ) -> Result<MlmLossOutput, MlmError> {
        let hidden = self.encode(batch.input_ids, batch.padding_mask);
        self.head
            .forward_loss(hidden, &batch.targets, self.tied(), loss_fn)
    }

    fn all_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
    ) -> Result<Tensor<3>, MlmError> {
        let hidden = self.encode(input_ids, padding_mask);
        self.head.forward(hidden, self.tied())
    }
}
