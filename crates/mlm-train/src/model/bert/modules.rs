//! BERT for masked-language modelling, top to bottom: embeddings → encoder layers →
//! the tied `mlm-core` head on the masked rows only.
//!
//! Post-LN Transformer encoder as in BERT (Devlin et al. 2019, §3; Vaswani et al. 2017).
//! Field names follow Hugging Face's `BertForMaskedLM` checkpoint keys one to one
//! (`self_attention` for `attention.self`, `layer_norm` for `LayerNorm`), so that
//! import and export are a table of names ([`super::names`]).

use burn::module::Module;
use burn::nn::{Dropout, Embedding, LayerNorm, Linear};
use burn::tensor::{Bool, Int, Tensor};
use mlm_core::attention::{self, PADDING_BIAS};
use mlm_core::{
    MaskedCrossEntropy, MaskedLanguageModel, MaskedTargets, MlmError, MlmHead, MlmLossOutput,
    bias_gelu, bias_residual_layer_norm, gelu, multi_head_attention_qkv_packed,
};

#[cfg(doc)]
use super::config::BertConfig;
use crate::data::DeviceBatch;
use crate::model::{MaskedLm, per_token, per_token_packed, per_token_product};

/// Token + position + segment embeddings, then LayerNorm and dropout.
#[derive(Module, Debug)]
pub struct BertEmbeddings {
    /// `[vocab, d_model]`; also the tied decoder of the MLM head.
    pub word_embeddings: Embedding,
    /// `[max_position_embeddings, d_model]`, learned absolute positions.
    pub position_embeddings: Embedding,
    /// `[type_vocab_size, d_model]`, segment A/B.
    pub token_type_embeddings: Embedding,
    /// LayerNorm over the sum.
    pub layer_norm: LayerNorm,
    /// Its ε ([`BertConfig::layer_norm_eps`]; burn's `LayerNorm` keeps its own private).
    pub layer_norm_eps: f64,
    /// The position row of a sequence's first token ([`BertConfig::position_offset`]).
    pub position_offset: usize,
    /// Dropout after the LayerNorm.
    pub dropout: Dropout,
}

impl BertEmbeddings {
    /// `input_ids`, `token_type_ids`: `[batch, seq]` → `[batch, seq, d_model]`.
    pub fn forward(&self, input_ids: Tensor<2, Int>, token_type_ids: Tensor<2, Int>) -> Tensor<3> {
        let [batch, seq] = input_ids.dims();
        let first = self.position_offset as i64;
        let position_ids = Tensor::arange(first..first + seq as i64, &input_ids.device())
            .unsqueeze::<2>()
            .repeat_dim(0, batch);
        let sum = self.word_embeddings.forward(input_ids)
            + self.position_embeddings.forward(position_ids)
            + self.token_type_embeddings.forward(token_type_ids);
        self.dropout
            .forward(norm(&self.layer_norm, self.layer_norm_eps, sum))
    }
}

/// `layer_norm` (with its `epsilon`) over the last dimension of `x`, as one
/// [`mlm_core::layer_norm`] (a fused kernel on flex).
fn norm(layer_norm: &LayerNorm, epsilon: f64, x: Tensor<3>) -> Tensor<3> {
    let beta = layer_norm
        .beta
        .as_ref()
        .expect("BERT's LayerNorms have a bias");
    mlm_core::layer_norm(x, layer_norm.gamma.val(), beta.val(), epsilon)
}

/// Multi-head scaled dot-product self-attention (`attention.self` in Hugging Face's names).
#[derive(Module, Debug)]
pub struct BertSelfAttention {
    /// Query projection `[d_model, d_model]`.
    pub query: Linear,
    /// Key projection `[d_model, d_model]`.
    pub key: Linear,
    /// Value projection `[d_model, d_model]`.
    pub value: Linear,
    /// Dropout on the attention probabilities.
    pub dropout: Dropout,
    /// Number of heads.
    pub num_attention_heads: usize,
}

impl BertSelfAttention {
    /// `hidden [batch, seq, d_model]`, `key_bias [batch, seq]` (0, or
    /// [`PADDING_BIAS`] at padding keys) → context `[batch, seq, d_model]`. Without dropout
    /// on the probabilities, one `[d_model, 3·d_model]` projection and one
    /// [`multi_head_attention_qkv_packed`] (a fused kernel on flex).
    pub fn forward(&self, hidden: Tensor<3>, key_bias: Tensor<2>) -> Tensor<3> {
        let heads = self.num_attention_heads;
        let projections = [&self.query, &self.key, &self.value];
        if self.dropout.prob == 0.0 {
            let (qkv, qkv_bias) = per_token_packed(projections, hidden);
            return multi_head_attention_qkv_packed(qkv, qkv_bias, key_bias, heads);
        }
        let [query, key, value] = projections.map(|linear| per_token(linear, hidden.clone()));
        let probs = attention::probabilities(query, key, key_bias, heads);
        attention::context(self.dropout.forward(probs), value)
    }

    /// Attention probabilities `[batch, heads, query, key]` (rows sum to 1), before dropout;
    /// arguments as in [`forward`](Self::forward).
    pub fn probabilities(&self, hidden: Tensor<3>, key_bias: Tensor<2>) -> Tensor<4> {
        let query = per_token(&self.query, hidden.clone());
        let key = per_token(&self.key, hidden);
        attention::probabilities(query, key, key_bias, self.num_attention_heads)
    }
}

/// Dense → dropout → residual add → LayerNorm (`attention.output` and `output` in HF's names).
#[derive(Module, Debug)]
pub struct BertResidual {
    /// Projection back to `d_model`.
    pub dense: Linear,
    /// Post-LN LayerNorm over the residual sum.
    pub layer_norm: LayerNorm,
    /// Its ε ([`BertConfig::layer_norm_eps`]; burn's `LayerNorm` keeps its own private).
    pub layer_norm_eps: f64,
    /// Dropout before the residual add.
    pub dropout: Dropout,
}

impl BertResidual {
    /// `LayerNorm(residual + dropout(dense(hidden)))`, `[batch, seq, _]` → `[batch, seq, d_model]`.
    /// Without dropout, the dense layer's bias, the residual add and the LayerNorm are one
    /// [`bias_residual_layer_norm`] (one kernel on flex).
    pub fn forward(&self, hidden: Tensor<3>, residual: Tensor<3>) -> Tensor<3> {
        let (bias, beta) = (&self.dense.bias, &self.layer_norm.beta);
        if let (Some(bias), Some(beta), 0.0) = (bias, beta, self.dropout.prob) {
            let product = per_token_product(&self.dense, hidden);
            let norm = (self.layer_norm.gamma.val(), beta.val());
            let eps = self.layer_norm_eps;
            return bias_residual_layer_norm(product, bias.val(), residual, norm, eps);
        }
        let sum = residual + self.dropout.forward(per_token(&self.dense, hidden));
        norm(&self.layer_norm, self.layer_norm_eps, sum)
    }
}

/// Self-attention with its output block.
#[derive(Module, Debug)]
pub struct BertAttention {
    /// `attention.self`.
    pub self_attention: BertSelfAttention,
    /// `attention.output`.
    pub output: BertResidual,
}

/// One post-LN encoder layer: attention block, then the GELU feed-forward block.
#[derive(Module, Debug)]
pub struct BertLayer {
    /// Attention block.
    pub attention: BertAttention,
    /// Feed-forward expansion `[d_model, intermediate_size]`, followed by GELU (erf).
    pub intermediate: Linear,
    /// Feed-forward projection back, residual and LayerNorm.
    pub output: BertResidual,
}

impl BertLayer {
    /// `[batch, seq, d_model]` → `[batch, seq, d_model]`.
    pub fn forward(&self, hidden: Tensor<3>, key_bias: Tensor<2>) -> Tensor<3> {
        let context = self
            .attention
            .self_attention
            .forward(hidden.clone(), key_bias);
        let attended = self.attention.output.forward(context, hidden);
        let expanded = match &self.intermediate.bias {
            // The bias and GELU in one pass over the product (one kernel on flex).
            Some(bias) => bias_gelu(
                per_token_product(&self.intermediate, attended.clone()),
                bias.val(),
            ),
            None => gelu(per_token(&self.intermediate, attended.clone())),
        };
        self.output.forward(expanded, attended)
    }
}

/// BERT with its masked-language-model head tied to the token embedding.
#[derive(Module, Debug)]
pub struct BertForMaskedLm {
    /// `bert.embeddings`.
    pub embeddings: BertEmbeddings,
    /// `bert.encoder.layer`.
    pub layers: Vec<BertLayer>,
    /// `cls.predictions`: transform and output bias; the decoder is `word_embeddings`.
    pub head: MlmHead,
}

impl BertForMaskedLm {
    /// Hidden states of the last layer.
    ///
    /// # Shapes
    /// - input_ids, token_type_ids: `[batch, seq]`, `seq <= max_position_embeddings`
    /// - padding_mask: `[batch, seq]`, `true` at padding (keys never attended to)
    /// - output: `[batch, seq, d_model]`
    pub fn encode(
        &self,
        input_ids: Tensor<2, Int>,
        token_type_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
    ) -> Tensor<3> {
        // Additive bias: a padding key gets -1e9 before the softmax, i.e. probability 0.
        let key_bias = padding_mask.float().mul_scalar(PADDING_BIAS);
        let mut hidden = self.embeddings.forward(input_ids, token_type_ids);
        for layer in &self.layers {
            hidden = layer.forward(hidden, key_bias.clone());
        }
        hidden
    }

    /// Logits at the masked positions only (sparse prediction).
    ///
    /// # Shapes
    /// - input_ids, token_type_ids, padding_mask: as in [`encode`](Self::encode)
    /// - targets: `n_masked` flat positions `b * seq + s`, checked on the host (nothing is
    ///   read back from the device)
    /// - output: `[n_masked, vocab]`
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if `targets` were checked for another batch shape or
    /// vocabulary.
    pub fn forward_masked(
        &self,
        input_ids: Tensor<2, Int>,
        token_type_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
        targets: &MaskedTargets,
    ) -> Result<Tensor<2>, MlmError> {
        let hidden = self.encode(input_ids, token_type_ids, padding_mask);
        self.head.forward_targets(
            hidden,
            targets,
            Some(self.embeddings.word_embeddings.weight.val()),
        )
    }

    /// Logits at the masked positions of `batch` ([`forward_masked`](Self::forward_masked)),
    /// `[n_masked, vocab]`.
    ///
    /// # Errors
    /// As [`forward_masked`](Self::forward_masked).
    pub fn forward_batch(&self, batch: DeviceBatch) -> Result<Tensor<2>, MlmError> {
        self.forward_masked(
            batch.input_ids,
            batch.token_type_ids,
            batch.padding_mask,
            &batch.targets,
        )
    }

    /// Logits at every position, `[batch, seq, vocab]` (fill-mask and Hugging Face parity).
    ///
    /// # Errors
    /// None in practice: the head's shapes are fixed by construction.
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        token_type_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
    ) -> Result<Tensor<3>, MlmError> {
        let hidden = self.encode(input_ids, token_type_ids, padding_mask);
        self.head
            .forward(hidden, Some(self.embeddings.word_embeddings.weight.val()))
    }
}

/// Pseudo-log-likelihood scoring ([`mlm_core::PseudoLogLikelihood`]): one segment, sizes
/// read off the embedding tables.
impl MaskedLanguageModel for BertForMaskedLm {
    fn masked_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
        targets: &MaskedTargets,
    ) -> Result<Tensor<2>, MlmError> {
        let token_type_ids = input_ids.zeros_like();
        self.forward_masked(input_ids, token_type_ids, padding_mask, targets)
    }

    fn vocab_size(&self) -> usize {
        self.embeddings.word_embeddings.weight.dims()[0]
    }

    fn max_seq_len(&self) -> usize {
        self.embeddings.position_embeddings.weight.dims()[0]
    }
}

/// The trainer's model: one segment for fill-mask, the batch's own segments in training.
impl MaskedLm for BertForMaskedLm {
    fn forward_batch(&self, batch: DeviceBatch) -> Result<Tensor<2>, MlmError> {
        BertForMaskedLm::forward_batch(self, batch)
    }

    fn loss_batch(
        &self,
        batch: DeviceBatch,
        loss_fn: &MaskedCrossEntropy,
    ) -> Result<MlmLossOutput, MlmError> {
        let hidden = self.encode(batch.input_ids, batch.token_type_ids, batch.padding_mask);
        let tied = Some(self.embeddings.word_embeddings.weight.val());
        self.head
            .forward_loss(hidden, &batch.targets, tied, loss_fn)
    }

    fn all_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
    ) -> Result<Tensor<3>, MlmError> {
        let token_type_ids = input_ids.zeros_like();
        self.forward(input_ids, token_type_ids, padding_mask)
    }
}
