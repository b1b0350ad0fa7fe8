//! A ModernBERT's sizes and choices, with Hugging Face's `ModernBertConfig` names, and their
//! checks.

use burn::config::Config;

use crate::error::ConfigError;
use crate::model::family::ModelFamily;

/// Which attention a layer runs: over every token, or over a window of neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKind {
    /// Every token (`"full_attention"`), positions rotated at `global_rope_theta`.
    Global,
    /// Tokens within `local_attention / 2` positions (`"sliding_attention"`), rotated at
    /// `local_rope_theta`.
    Local,
}

/// Sizes and choices of a ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer",
/// §2.1), with Hugging Face's `ModernBertConfig` names; saved as JSON in a run directory.
/// Defaults are the main job's sizes with ModernBERT-base's choices.
#[derive(Config, Debug, PartialEq)]
pub struct ModernBertConfig {
    /// Number of tokens in the vocabulary.
    pub vocab_size: usize,
    /// Width of the hidden states, `d_model`.
    #[config(default = 128)]
    pub hidden_size: usize,
    /// Number of encoder layers.
    #[config(default = 3)]
    pub num_hidden_layers: usize,
    /// Number of attention heads; must divide `hidden_size`, into an even head width.
    #[config(default = 2)]
    pub num_attention_heads: usize,
    /// Width of each half of the GeGLU feed-forward (`Wi` is `[2 · intermediate_size,
    /// d_model]`).
    #[config(default = 256)]
    pub intermediate_size: usize,
    /// The longest sequence the model accepts (rotary positions have no table: the limit
    /// the checkpoint was trained to).
    #[config(default = 128)]
    pub max_position_embeddings: usize,
    /// Feed-forward activation: `"gelu"` (the erf form), the only one computed.
    #[config(default = "String::from(\"gelu\")")]
    pub hidden_activation: String,
    /// Epsilon of every LayerNorm.
    #[config(default = 1e-5)]
    pub norm_eps: f64,
    /// Whether the LayerNorms have a bias (ModernBERT: no).
    #[config(default = false)]
    pub norm_bias: bool,
    /// Whether `Wqkv` and the attention's `Wo` have biases.
    #[config(default = false)]
    pub attention_bias: bool,
    /// Whether the feed-forward's `Wi` and `Wo` have biases.
    #[config(default = false)]
    pub mlp_bias: bool,
    /// Whether the head's dense layer has a bias.
    #[config(default = false)]
    pub classifier_bias: bool,
    /// Width of a local layer's window in tokens: a token attends to those at most
    /// `local_attention / 2` positions away. Even.
    #[config(default = 128)]
    pub local_attention: usize,
    /// Every this many layers, starting with the first, attends globally; the others locally.
    #[config(default = 3)]
    pub global_attn_every_n_layers: usize,
    /// Rotary base of the global layers (Su et al. 2021, RoFormer §3.4).
    #[config(default = 160_000.0)]
    pub global_rope_theta: f64,
    /// Rotary base of the local layers.
    #[config(default = 10_000.0)]
    pub local_rope_theta: f64,
    /// Dropout after the embeddings' LayerNorm.
    #[config(default = 0.0)]
    pub embedding_dropout: f64,
    /// Dropout on the attention probabilities and after the attention's output projection.
    #[config(default = 0.0)]
    pub attention_dropout: f64,
    /// Dropout between the GeGLU and the feed-forward's output projection.
    #[config(default = 0.0)]
    pub mlp_dropout: f64,
    /// Standard deviation of the truncated normal initialisation.
    #[config(default = 0.02)]
    pub initializer_range: f64,
    /// The truncation, in standard deviations.
    #[config(default = 2.0)]
    pub initializer_cutoff_factor: f64,
    /// The Hugging Face family this model is a checkpoint of.
    #[config(default = "ModelFamily::ModernBert")]
    pub family: ModelFamily,
}

impl ModernBertConfig {
    /// Checks that the sizes make a model: the first failing field is reported.
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the field and its value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("local_attention", self.local_attention),
            (
                "global_attn_every_n_layers",
                self.global_attn_every_n_layers,
            ),
        ]
        .map(|(field, value)| ConfigError::check(field, value, value > 0, "must be positive"));
        let dropout = [
            ("embedding_dropout", self.embedding_dropout),
            ("attention_dropout", self.attention_dropout),
            ("mlp_dropout", self.mlp_dropout),
        ]
        .map(|(field, p)| {
            let reason = "is not a dropout probability in [0, 1)";
            ConfigError::check(field, p, (0.0..1.0).contains(&p), reason)
        });
        let heads = self.num_attention_heads.max(1);
        let rules = [
            ConfigError::check(
                "hidden_size",
                self.hidden_size,
                self.hidden_size.is_multiple_of(2 * heads),
                format!(
                    "is not divisible by num_attention_heads ({heads}) into heads of even \
                     width (rotary positions turn pairs of features)"
                ),
            ),
            ConfigError::check(
                "local_attention",
                self.local_attention,
                self.local_attention.is_multiple_of(2),
                "must be even: a token sees local_attention / 2 positions each side",
            ),
            ConfigError::check(
                "local_attention",
                self.local_attention,
                self.local_attention <= self.max_position_embeddings,
                format!(
                    "is larger than max_position_embeddings ({})",
                    self.max_position_embeddings
                ),
            ),
            ConfigError::check(
                "hidden_activation",
                format!("{:?}", self.hidden_activation),
                self.hidden_activation == "gelu",
                "is not computed (only \"gelu\", the erf form)",
            ),
            ConfigError::check(
                "global_rope_theta",
                self.global_rope_theta,
                self.global_rope_theta > 1.0 && self.local_rope_theta > 1.0,
                format!(
                    "and local_rope_theta ({}) must be rotary bases above 1",
                    self.local_rope_theta
                ),
            ),
        ];
        positive.into_iter().chain(dropout).chain(rules).collect()
    }

    /// The attention of layer `i`: global every `global_attn_every_n_layers`-th layer from
    /// the first (transformers' `layer_types`), local otherwise.
    pub fn attention_kind(&self, i: usize) -> AttentionKind {
        if i.is_multiple_of(self.global_attn_every_n_layers.max(1)) {
            AttentionKind::Global
        } else {
            AttentionKind::Local
        }
    }

    /// The longest sequence: `max_position_embeddings` (rotary positions count from 0).
    pub fn max_sequence_len(&self) -> usize {
        self.max_position_embeddings
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// Number of trainable parameters (the tied decoder counted once).
    pub fn num_parameters(&self) -> usize {
        let (d, ff, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let norm = d * (1 + usize::from(self.norm_bias));
        let bias = |on: bool, n: usize| if on { n } else { 0 };
        let attention =
            3 * d * d + bias(self.attention_bias, 3 * d) + d * d + bias(self.attention_bias, d);
        let mlp = d * 2 * ff + bias(self.mlp_bias, 2 * ff) + ff * d + bias(self.mlp_bias, d);
        let layers = self.num_hidden_layers * (attention + mlp + 2 * norm) - norm;
        let head = d * d + bias(self.classifier_bias, d) + norm + v;
        v * d + norm + layers + norm + head
    }
}
