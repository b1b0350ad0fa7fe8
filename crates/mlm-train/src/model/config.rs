//! A model's configuration, whatever its architecture: [`ModelConfig`], as a run's
//! `config.json` holds it (`model`, with the family's own fields) and as the trainer asks
//! of it (sizes, checks, a seeded or zero model).

use burn::tensor::Device;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::family::{Architecture, ModelFamily};
use super::masked_lm::ModelForMaskedLm;
use super::{BertConfig, ModernBertConfig};
use crate::error::ConfigError;

/// The configuration of a model of any architecture in the registry
/// ([`super::family::FAMILIES`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ModelConfig {
    /// BERT's architecture (the `bert`, `roberta` and `xlm-roberta` families).
    Bert(BertConfig),
    /// ModernBERT's architecture (the `modernbert` family).
    ModernBert(ModernBertConfig),
}

/// `match` on the architecture with the same expression for each.
macro_rules! each {
    ($self:expr, $config:ident => $body:expr) => {
        match $self {
            ModelConfig::Bert($config) => $body,
            ModelConfig::ModernBert($config) => $body,
        }
    };
}

/// Read and write access to sizes every architecture has, under Hugging Face's names.
macro_rules! shared_sizes {
    ($($field:ident, $field_mut:ident);* $(;)?) => {
        $(
            #[doc = concat!("`", stringify!($field), "`.")]
            pub fn $field(&self) -> usize {
                each!(self, c => c.$field)
            }

            #[doc = concat!("`", stringify!($field), "`, to set.")]
            pub fn $field_mut(&mut self) -> &mut usize {
                each!(self, c => &mut c.$field)
            }
        )*
    };
}

impl ModelConfig {
    shared_sizes!(
        vocab_size, vocab_size_mut;
        hidden_size, hidden_size_mut;
        num_hidden_layers, num_hidden_layers_mut;
        num_attention_heads, num_attention_heads_mut;
        intermediate_size, intermediate_size_mut;
        max_position_embeddings, max_position_embeddings_mut;
    );

    /// The main job's ModernBERT: the sizes of `self` (a BERT's), ModernBERT's choices
    /// ([`with_positions`](Self::with_positions) sets its window).
    pub fn to_modernbert(&self) -> Self {
        let modernbert = ModernBertConfig::new(self.vocab_size())
            .with_hidden_size(self.hidden_size())
            .with_num_hidden_layers(self.num_hidden_layers())
            .with_num_attention_heads(self.num_attention_heads())
            .with_intermediate_size(self.intermediate_size());
        Self::ModernBert(modernbert).with_positions(self.max_position_embeddings())
    }

    /// A new model's configuration for sequences of `positions` tokens: its position table
    /// (`max_position_embeddings`); for a ModernBERT also its window, cut to half the
    /// sequence (rounded down to even) where it is longer (ModernBERT's 128 tokens would
    /// make every layer of the main job's 64-token sequences global).
    pub fn with_positions(mut self, positions: usize) -> Self {
        *self.max_position_embeddings_mut() = positions;
        if let Self::ModernBert(c) = &mut self {
            c.local_attention = c.local_attention.min(positions / 4 * 2).max(2);
        }
        self
    }

    /// The Hugging Face family the model is a checkpoint of.
    pub fn family(&self) -> ModelFamily {
        each!(self, c => c.family)
    }

    /// The architecture that computes it.
    pub fn architecture(&self) -> Architecture {
        match self {
            Self::Bert(_) => Architecture::Bert,
            Self::ModernBert(_) => Architecture::ModernBert,
        }
    }

    /// The longest sequence the model accepts.
    pub fn max_sequence_len(&self) -> usize {
        each!(self, c => c.max_sequence_len())
    }

    /// Number of trainable parameters.
    pub fn num_parameters(&self) -> usize {
        each!(self, c => c.num_parameters())
    }

    /// Sets every dropout probability of the model to `p` (`--dropout`).
    pub fn set_dropout(&mut self, p: f64) {
        match self {
            Self::Bert(c) => {
                c.hidden_dropout_prob = p;
                c.attention_probs_dropout_prob = p;
            }
            Self::ModernBert(c) => {
                c.embedding_dropout = p;
                c.attention_dropout = p;
                c.mlp_dropout = p;
            }
        }
    }

    /// Whether every dropout probability is 0 (the shards of a step may then run in
    /// parallel: no random draws to order).
    pub fn without_dropout(&self) -> bool {
        match self {
            Self::Bert(c) => c.hidden_dropout_prob == 0.0 && c.attention_probs_dropout_prob == 0.0,
            Self::ModernBert(c) => {
                c.embedding_dropout == 0.0 && c.attention_dropout == 0.0 && c.mlp_dropout == 0.0
            }
        }
    }

    /// Rows of the position table before a sequence's first position (RoBERTa's
    /// `padding_idx + 1`); 0 where positions count from 0 or are rotary.
    pub fn position_offset(&self) -> usize {
        match self {
            Self::Bert(c) => c.position_offset,
            Self::ModernBert(_) => 0,
        }
    }

    /// The dropout probability after the embeddings.
    pub fn dropout(&self) -> f64 {
        match self {
            Self::Bert(c) => c.hidden_dropout_prob,
            Self::ModernBert(c) => c.embedding_dropout,
        }
    }

    /// `self` with `other`'s dropout probabilities where both are of one architecture (a
    /// continued run may set its own dropout); `self` unchanged otherwise.
    pub fn with_dropouts_of(&self, other: &ModelConfig) -> ModelConfig {
        match (self, other) {
            (Self::Bert(c), Self::Bert(o)) => Self::Bert(BertConfig {
                hidden_dropout_prob: o.hidden_dropout_prob,
                attention_probs_dropout_prob: o.attention_probs_dropout_prob,
                ..c.clone()
            }),
            (Self::ModernBert(c), Self::ModernBert(o)) => Self::ModernBert(ModernBertConfig {
                embedding_dropout: o.embedding_dropout,
                attention_dropout: o.attention_dropout,
                mlp_dropout: o.mlp_dropout,
                ..c.clone()
            }),
            _ => self.clone(),
        }
    }

    /// Checks the sizes.
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the field and its value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        each!(self, c => c.validate())
    }

    /// A model initialised from `seed`, identically on every backend.
    ///
    /// # Panics
    /// If [`validate`](Self::validate) fails.
    pub fn init_seeded(&self, seed: u64, device: &Device) -> ModelForMaskedLm {
        match self {
            Self::Bert(c) => ModelForMaskedLm::Bert(c.init_seeded(seed, device)),
            Self::ModernBert(c) => ModelForMaskedLm::ModernBert(c.init_seeded(seed, device)),
        }
    }

    /// The model's structure with every weight 0: what a checkpoint is loaded into.
    ///
    /// # Panics
    /// If [`validate`](Self::validate) fails.
    pub fn init(&self, device: &Device) -> ModelForMaskedLm {
        match self {
            Self::Bert(c) => ModelForMaskedLm::Bert(c.init(device)),
            Self::ModernBert(c) => ModelForMaskedLm::ModernBert(c.init(device)),
        }
    }

    /// `model` with this configuration's dropout probabilities.
    ///
    /// # Panics
    /// If `model` is of another architecture.
    pub fn with_dropout(&self, model: ModelForMaskedLm) -> ModelForMaskedLm {
        match (self, model) {
            (Self::Bert(c), ModelForMaskedLm::Bert(m)) => ModelForMaskedLm::Bert(c.with_dropout(m)),
            (Self::ModernBert(c), ModelForMaskedLm::ModernBert(m)) => {
                ModelForMaskedLm::ModernBert(c.with_dropout(m))
            }
            _ => panic!("with_dropout: the model is not of this configuration's architecture"),
        }
    }
}

impl From<BertConfig> for ModelConfig {
    fn from(config: BertConfig) -> Self {
        Self::Bert(config)
    }
}

impl From<ModernBertConfig> for ModelConfig {
    fn from(config: ModernBertConfig) -> Self {
        Self::ModernBert(config)
    }
}

/// The architecture's own fields, flat (`family` names it).
impl Serialize for ModelConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        each!(self, c => c.serialize(serializer))
    }
}

/// By the `family` field (`"bert"` when absent, as runs before the registry wrote it).
impl<'de> Deserialize<'de> for ModelConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let family = match value.get("family") {
            Some(family) => ModelFamily::deserialize(family).map_err(serde::de::Error::custom)?,
            None => ModelFamily::Bert,
        };
        let config = match family.spec().architecture {
            Architecture::Bert => serde_json::from_value(value).map(Self::Bert),
            Architecture::ModernBert => serde_json::from_value(value).map(Self::ModernBert),
        };
        config.map_err(serde::de::Error::custom)
    }
}
