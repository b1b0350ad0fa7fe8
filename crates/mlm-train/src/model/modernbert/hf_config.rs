//! `config.json` of a ModernBERT checkpoint: Hugging Face's `ModernBertConfig`, to and from
//! ours. Reads both forms transformers has written: rotary bases as `rope_parameters` per
//! layer type (5.x) or as `global_rope_theta`/`local_rope_theta` (4.x), and the layer pattern
//! as `layer_types` or `global_attn_every_n_layers`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::config::{AttentionKind, ModernBertConfig};
use crate::data::SubwordTokenizer;
use crate::error::TrainError;
use crate::model::family::ModelFamily;

/// The layer type of a global layer in `layer_types` and `rope_parameters`.
const FULL: &str = "full_attention";
/// The layer type of a local layer.
const SLIDING: &str = "sliding_attention";

/// One layer type's rotary settings in `rope_parameters`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeParameters {
    /// Only `"default"` (plain RoPE) is computed.
    #[serde(default = "default_rope_type")]
    pub rope_type: String,
    /// The base θ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
}

fn default_rope_type() -> String {
    "default".into()
}

/// Hugging Face's `ModernBertConfig` as `config.json` holds it: the fields
/// `ModernBertForMaskedLM` reads, with transformers' defaults (ModernBERT-base) for absent
/// ones; other fields are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[allow(missing_docs)] // Hugging Face's names, documented on ModernBertConfig.
pub struct HfModernBertConfig {
    pub model_type: String,
    pub architectures: Vec<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub hidden_activation: String,
    pub max_position_embeddings: usize,
    pub initializer_range: f64,
    pub initializer_cutoff_factor: f64,
    pub norm_eps: f64,
    pub norm_bias: bool,
    pub pad_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    pub bos_token_id: Option<u32>,
    pub cls_token_id: Option<u32>,
    pub sep_token_id: Option<u32>,
    pub attention_bias: bool,
    pub attention_dropout: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer_types: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_attn_every_n_layers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<BTreeMap<String, RopeParameters>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_rope_theta: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_rope_theta: Option<f64>,
    pub local_attention: usize,
    pub embedding_dropout: f64,
    pub mlp_bias: bool,
    pub mlp_dropout: f64,
    pub decoder_bias: bool,
    pub classifier_bias: bool,
    pub classifier_activation: String,
    pub tie_word_embeddings: bool,
}

impl Default for HfModernBertConfig {
    /// transformers' `ModernBertConfig()` defaults (ModernBERT-base).
    fn default() -> Self {
        Self {
            model_type: "modernbert".into(),
            architectures: Vec::new(),
            vocab_size: 50368,
            hidden_size: 768,
            intermediate_size: 1152,
            num_hidden_layers: 22,
            num_attention_heads: 12,
            hidden_activation: "gelu".into(),
            max_position_embeddings: 8192,
            initializer_range: 0.02,
            initializer_cutoff_factor: 2.0,
            norm_eps: 1e-5,
            norm_bias: false,
            pad_token_id: Some(50283),
            eos_token_id: Some(50282),
            bos_token_id: Some(50281),
            cls_token_id: Some(50281),
            sep_token_id: Some(50282),
            attention_bias: false,
            attention_dropout: 0.0,
            layer_types: None,
            global_attn_every_n_layers: None,
            rope_parameters: None,
            global_rope_theta: None,
            local_rope_theta: None,
            local_attention: 128,
            embedding_dropout: 0.0,
            mlp_bias: false,
            mlp_dropout: 0.0,
            decoder_bias: true,
            classifier_bias: false,
            classifier_activation: "gelu".into(),
            tie_word_embeddings: true,
        }
    }
}

impl HfModernBertConfig {
    /// The `config.json` transformers (4.48 and later) loads a model of `config` from as
    /// `ModernBertForMaskedLM`, with `tokenizer`'s special ids; both forms of the rotary
    /// bases and of the layer pattern are written.
    pub fn from_modernbert(config: &ModernBertConfig, tokenizer: &SubwordTokenizer) -> Self {
        let layer_types = (0..config.num_hidden_layers)
            .map(|i| match config.attention_kind(i) {
                AttentionKind::Global => FULL.to_string(),
                AttentionKind::Local => SLIDING.to_string(),
            })
            .collect();
        let rope = |theta| RopeParameters {
            rope_type: default_rope_type(),
            rope_theta: Some(theta),
        };
        Self {
            architectures: vec![ModelFamily::ModernBert.spec().class.into()],
            vocab_size: config.vocab_size,
            hidden_size: config.hidden_size,
            intermediate_size: config.intermediate_size,
            num_hidden_layers: config.num_hidden_layers,
            num_attention_heads: config.num_attention_heads,
            hidden_activation: config.hidden_activation.clone(),
            max_position_embeddings: config.max_position_embeddings,
            initializer_range: config.initializer_range,
            initializer_cutoff_factor: config.initializer_cutoff_factor,
            norm_eps: config.norm_eps,
            norm_bias: config.norm_bias,
            pad_token_id: Some(tokenizer.pad_id),
            eos_token_id: Some(tokenizer.sep_id),
            bos_token_id: Some(tokenizer.cls_id),
            cls_token_id: Some(tokenizer.cls_id),
            sep_token_id: Some(tokenizer.sep_id),
            attention_bias: config.attention_bias,
            attention_dropout: config.attention_dropout,
            layer_types: Some(layer_types),
            global_attn_every_n_layers: Some(config.global_attn_every_n_layers),
            rope_parameters: Some(BTreeMap::from([
                (FULL.to_string(), rope(config.global_rope_theta)),
                (SLIDING.to_string(), rope(config.local_rope_theta)),
            ])),
            global_rope_theta: Some(config.global_rope_theta),
            local_rope_theta: Some(config.local_rope_theta),
            local_attention: config.local_attention,
            embedding_dropout: config.embedding_dropout,
            mlp_bias: config.mlp_bias,
            mlp_dropout: config.mlp_dropout,
            classifier_bias: config.classifier_bias,
            ..Self::default()
        }
    }

    /// Our [`ModernBertConfig`] for this configuration.
    ///
    /// # Errors
    /// [`TrainError::HfConfig`] naming `path` and the field for a model this crate does not
    /// compute exactly: a `rope_type` other than `"default"`, an activation other than
    /// `"gelu"`, no decoder bias, an untied decoder, a `layer_types` that is not one global
    /// layer every n from the first, or sizes [`ModernBertConfig::validate`] rejects (an odd
    /// `local_attention`, or one longer than `max_position_embeddings`).
    pub fn to_modernbert(&self, path: &Path) -> Result<ModernBertConfig, TrainError> {
        let refuse = |reason: String| TrainError::HfConfig {
            path: path.to_path_buf(),
            reason,
        };
        let unsupported = |field: &str, value: &dyn std::fmt::Debug, supported: &str| {
            refuse(format!(
                "{field} = {value:?} is not supported (only {supported})"
            ))
        };
        if self.classifier_activation != "gelu" {
            let value = &self.classifier_activation;
            return Err(unsupported(
                "classifier_activation",
                value,
                "\"gelu\", the erf form",
            ));
        }
        if !self.decoder_bias {
            return Err(unsupported("decoder_bias", &false, "true"));
        }
        if !self.tie_word_embeddings {
            let supported = "true: the decoder is the token-embedding matrix";
            return Err(unsupported("tie_word_embeddings", &false, supported));
        }
        let config = ModernBertConfig::new(self.vocab_size)
            .with_hidden_size(self.hidden_size)
            .with_intermediate_size(self.intermediate_size)
            .with_num_hidden_layers(self.num_hidden_layers)
            .with_num_attention_heads(self.num_attention_heads)
            .with_max_position_embeddings(self.max_position_embeddings)
            .with_hidden_activation(self.hidden_activation.clone())
            .with_norm_eps(self.norm_eps)
            .with_norm_bias(self.norm_bias)
            .with_attention_bias(self.attention_bias)
            .with_mlp_bias(self.mlp_bias)
            .with_classifier_bias(self.classifier_bias)
            .with_local_attention(self.local_attention)
            .with_global_attn_every_n_layers(self.global_every().map_err(refuse)?)
            .with_global_rope_theta(
                self.rope_theta(FULL, self.global_rope_theta, 160_000.0)
                    .map_err(refuse)?,
            )
            .with_local_rope_theta(
                self.rope_theta(SLIDING, self.local_rope_theta, 10_000.0)
                    .map_err(refuse)?,
            )
            .with_embedding_dropout(self.embedding_dropout)
            .with_attention_dropout(self.attention_dropout)
            .with_mlp_dropout(self.mlp_dropout)
            .with_initializer_range(self.initializer_range)
            .with_initializer_cutoff_factor(self.initializer_cutoff_factor);
        config.validate().map_err(|e| refuse(e.to_string()))?;
        Ok(config)
    }

    /// The global layers' period: from `layer_types` (which must be one global layer every
    /// n from the first) or `global_attn_every_n_layers` (default 3).
    fn global_every(&self) -> Result<usize, String> {
        let Some(types) = &self.layer_types else {
            return Ok(self.global_attn_every_n_layers.unwrap_or(3));
        };
        let layers = self.num_hidden_layers;
        let every = types
            .iter()
            .skip(1)
            .position(|kind| kind == FULL)
            .map_or(layers.max(1), |i| i + 1);
        let expected = (0..layers).map(|i| if i % every == 0 { FULL } else { SLIDING });
        if types.len() == layers && expected.eq(types.iter().map(String::as_str)) {
            return Ok(every);
        }
        Err(format!(
            "layer_types = {types:?} is not supported (only {FULL:?} every n layers from the \
             first, {SLIDING:?} between, one per layer)"
        ))
    }

    /// The rotary base of `layer_type`: its `rope_parameters` entry, else the 4.x key
    /// `flat`, else `default`.
    fn rope_theta(&self, layer_type: &str, flat: Option<f64>, default: f64) -> Result<f64, String> {
        let entry = self
            .rope_parameters
            .as_ref()
            .and_then(|all| all.get(layer_type));
        if let Some(entry) = entry.filter(|e| e.rope_type != "default") {
            return Err(format!(
                "rope_parameters.{layer_type}.rope_type = {:?} is not supported (only \
                 \"default\": plain rotary positions)",
                entry.rope_type
            ));
        }
        Ok(entry.and_then(|e| e.rope_theta).or(flat).unwrap_or(default))
    }
}
