//! `config.json` of a BERT-architecture checkpoint: Hugging Face's `BertConfig` (and
//! `RobertaConfig`, the same fields), to and from ours.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::data::SubwordTokenizer;
use crate::error::TrainError;
use crate::model::BertConfig;
use crate::model::family::ModelFamily;

/// Hugging Face's `BertConfig` (or `RobertaConfig`, the same fields) as `config.json` holds
/// it: the fields `BertForMaskedLM` and `RobertaForMaskedLM` read, with transformers' BERT
/// defaults for absent ones; other fields are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HfBertConfig {
    /// `"bert"` or `"roberta"` ([`ModelFamily`]).
    pub model_type: String,
    /// The model classes the checkpoint is for; export writes `["BertForMaskedLM"]` or
    /// `["RobertaForMaskedLM"]`.
    pub architectures: Vec<String>,
    /// Number of tokens in the vocabulary.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Number of attention heads.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Feed-forward activation; only `"gelu"` (the exact, erf form) is supported.
    pub hidden_act: String,
    /// Dropout after embeddings, attention output and feed-forward.
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention probabilities.
    pub attention_probs_dropout_prob: f64,
    /// Length of the position table.
    pub max_position_embeddings: usize,
    /// Number of segment ids.
    pub type_vocab_size: usize,
    /// Standard deviation of the initialisation.
    pub initializer_range: f64,
    /// Epsilon of every LayerNorm.
    pub layer_norm_eps: f64,
    /// Only `"absolute"` (a learned position table) is supported.
    pub position_embedding_type: String,
    /// Must be `true`: the decoder is the word-embedding matrix.
    pub tie_word_embeddings: bool,
    /// Id of the padding token; RoBERTa's positions start after it.
    pub pad_token_id: Option<u32>,
    /// Id of the start token (RoBERTa's `<s>`).
    pub bos_token_id: Option<u32>,
    /// Id of the end token (RoBERTa's `</s>`).
    pub eos_token_id: Option<u32>,
    /// Must be `false`: a decoder attends causally, this encoder does not.
    pub is_decoder: bool,
}

impl Default for HfBertConfig {
    /// transformers' `BertConfig()` defaults (bert-base).
    fn default() -> Self {
        Self {
            model_type: "bert".into(),
            architectures: Vec::new(),
            vocab_size: 30522,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            hidden_dropout_prob: 0.1,
            attention_probs_dropout_prob: 0.1,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            initializer_range: 0.02,
            layer_norm_eps: 1e-12,
            position_embedding_type: "absolute".into(),
            tie_word_embeddings: true,
            pad_token_id: Some(0),
            bos_token_id: None,
            eos_token_id: None,
            is_decoder: false,
        }
    }
}

impl HfBertConfig {
    /// The `config.json` transformers needs to load a model of `config` as its family's
    /// masked LM (`BertForMaskedLM`, `RobertaForMaskedLM`, with the start and end ids), with
    /// `tokenizer`'s special ids.
    pub fn from_bert(config: &BertConfig, tokenizer: &SubwordTokenizer) -> Self {
        let family = config.family.spec();
        // RoBERTa's `<s>` and `</s>` are its start and end tokens.
        let roberta = family.positions_after_padding;
        Self {
            model_type: family.model_type.into(),
            architectures: vec![family.class.into()],
            vocab_size: config.vocab_size,
            hidden_size: config.hidden_size,
            num_hidden_layers: config.num_hidden_layers,
            num_attention_heads: config.num_attention_heads,
            intermediate_size: config.intermediate_size,
            hidden_dropout_prob: config.hidden_dropout_prob,
            attention_probs_dropout_prob: config.attention_probs_dropout_prob,
            max_position_embeddings: config.max_position_embeddings,
            type_vocab_size: config.type_vocab_size,
            initializer_range: config.initializer_range,
            layer_norm_eps: config.layer_norm_eps,
            pad_token_id: Some(tokenizer.pad_id),
            bos_token_id: roberta.then_some(tokenizer.cls_id),
            eos_token_id: roberta.then_some(tokenizer.sep_id),
            ..Self::default()
        }
    }

    /// Our [`BertConfig`] for this configuration.
    ///
    /// # Errors
    /// [`TrainError::HfConfig`] naming `path` and the field if the model is not one this
    /// crate computes exactly: a `model_type` other than `bert` or `roberta`, `hidden_act`
    /// other than `"gelu"`,
    /// `position_embedding_type` other than `"absolute"`, a causal decoder, an untied decoder,
    /// or sizes that [`BertConfig::validate`] rejects.
    pub fn to_bert(&self, path: &Path) -> Result<BertConfig, TrainError> {
        let unsupported = |field: &str, value: &dyn std::fmt::Debug, supported: &str| {
            Err(TrainError::HfConfig {
                path: path.to_path_buf(),
                reason: format!("{field} = {value:?} is not supported (only {supported})"),
            })
        };
        let Some(family) = ModelFamily::from_model_type(&self.model_type) else {
            return unsupported("model_type", &self.model_type, &ModelFamily::supported());
        };
        // transformers' `create_position_ids_from_input_ids`: RoBERTa counts from padding_idx + 1.
        let position_offset = match family.spec().positions_after_padding {
            false => 0,
            true => self.pad_token_id.unwrap_or(1) as usize + 1,
        };
        if self.hidden_act != "gelu" {
            return unsupported("hidden_act", &self.hidden_act, "\"gelu\", the erf form");
        }
        if self.position_embedding_type != "absolute" {
            return unsupported(
                "position_embedding_type",
                &self.position_embedding_type,
                "\"absolute\"",
            );
        }
        if self.is_decoder {
            return unsupported(
                "is_decoder",
                &self.is_decoder,
                "false: a bidirectional encoder",
            );
        }
        if !self.tie_word_embeddings {
            return unsupported(
                "tie_word_embeddings",
                &self.tie_word_embeddings,
                "true: the decoder is the word-embedding matrix",
            );
        }
        let config = BertConfig::new(self.vocab_size)
            .with_hidden_size(self.hidden_size)
            .with_num_hidden_layers(self.num_hidden_layers)
            .with_num_attention_heads(self.num_attention_heads)
            .with_intermediate_size(self.intermediate_size)
            .with_max_position_embeddings(self.max_position_embeddings)
            .with_type_vocab_size(self.type_vocab_size)
            .with_layer_norm_eps(self.layer_norm_eps)
            .with_hidden_dropout_prob(self.hidden_dropout_prob)
            .with_attention_probs_dropout_prob(self.attention_probs_dropout_prob)
            .with_initializer_range(self.initializer_range)
            .with_family(family)
            .with_position_offset(position_offset);
        config.validate().map_err(|e| TrainError::HfConfig {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unsupported_configurations_name_the_field() {
        let path = Path::new("config.json");
        for (field, value) in [
            ("hidden_act", json!("relu")),
            ("position_embedding_type", json!("relative_key")),
            ("model_type", json!("distilbert")),
            ("tie_word_embeddings", json!(false)),
            ("is_decoder", json!(true)),
            ("num_attention_heads", json!(5)),
        ] {
            let mut raw = serde_json::to_value(HfBertConfig::default()).unwrap();
            raw[field] = value;
            let hf: HfBertConfig = serde_json::from_value(raw).unwrap();
            let error = hf.to_bert(path).unwrap_err().to_string();
            assert!(
                error.contains(field) && error.contains("config.json"),
                "{error}"
            );
        }
        let defaults = HfBertConfig::default().to_bert(path).unwrap();
        assert_eq!((defaults.hidden_size, defaults.vocab_size), (768, 30522));
    }
}
