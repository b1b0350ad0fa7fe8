//! The registry of model families: one row per Hugging Face `model_type` this crate computes
//! exactly, read by import, export, the checkpoint's tokenizer check and the trainer. A
//! family that shares an architecture with another is a row of data (RoBERTa is BERT's
//! encoder under other names and positions); a family with an architecture of its own also
//! has a folder of its own, `model/<architecture>/`, behind [`Architecture`].
//!
//! Adding a family: its row in [`FAMILIES`] (and its [`ModelFamily`] variant); for a new
//! architecture, its folder, an [`Architecture`] variant and its arms below. Nothing else
//! (`docs/ARCHITECTURE.md`; `scripts/check-architecture.sh` checks that no family folder
//! reaches into another and that the rest of the crate reaches a family's folder only
//! through `model`'s exports).

use std::path::Path;

use super::ModelConfig;
use super::bert::{self, HfBertConfig};
use super::hf::HfName;
use super::modernbert::{self, HfModernBertConfig};
use crate::data::{SubwordTokenizer, TokenizerKind};
use crate::error::TrainError;
use crate::files::write_json;

/// A Hugging Face model family (`model_type` in `config.json`), as a run's `config.json`
/// names it (`model.family`, lowercase).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelFamily {
    /// `BertForMaskedLM` (Devlin et al. 2019): WordPiece, positions from 0.
    #[default]
    Bert,
    /// `RobertaForMaskedLM` (Liu et al. 2019): byte-level BPE, positions from
    /// `padding_idx + 1`, one segment, `lm_head.*` names.
    Roberta,
    /// `XLMRobertaForMaskedLM` (Conneau et al. 2020): RoBERTa's encoder and names over a
    /// SentencePiece Unigram vocabulary (250 002 tokens in XLM-R).
    #[serde(rename = "xlm-roberta")]
    XlmRoberta,
    /// `ModernBertForMaskedLM` (Warner et al. 2024): pre-norm, rotary positions, global and
    /// sliding-window attention, GeGLU; byte-level BPE.
    ModernBert,
}

/// The architectures, one folder each, that compute the families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// The post-LN encoder with learned absolute positions and a tied MLM head
    /// ([`bert`]).
    Bert,
    /// The pre-norm encoder with rotary positions, alternating global and local attention
    /// and a GeGLU feed-forward ([`modernbert`]).
    ModernBert,
}

/// What the crate needs to know of a family.
#[derive(Debug)]
pub struct Family {
    /// The family.
    pub family: ModelFamily,
    /// `model_type` in a Hugging Face `config.json`.
    pub model_type: &'static str,
    /// The masked-LM class transformers loads an export as (`architectures`).
    pub class: &'static str,
    /// The tokenizers its checkpoints read ids of.
    pub tokenizers: &'static [TokenizerKind],
    /// Whether positions count from `pad_token_id + 1` (transformers'
    /// `create_position_ids_from_input_ids`), not from 0.
    pub positions_after_padding: bool,
    /// The architecture that computes it.
    pub architecture: Architecture,
}

/// The registry: one row per family.
pub const FAMILIES: [Family; 4] = [
    Family {
        family: ModelFamily::Bert,
        model_type: "bert",
        class: "BertForMaskedLM",
        tokenizers: &[TokenizerKind::WordPiece],
        positions_after_padding: false,
        architecture: Architecture::Bert,
    },
    Family {
        family: ModelFamily::Roberta,
        model_type: "roberta",
        class: "RobertaForMaskedLM",
        tokenizers: &[TokenizerKind::ByteLevelBpe],
        positions_after_padding: true,
        architecture: Architecture::Bert,
    },
    Family {
        family: ModelFamily::XlmRoberta,
        model_type: "xlm-roberta",
        class: "XLMRobertaForMaskedLM",
        tokenizers: &[TokenizerKind::Unigram, TokenizerKind::ByteLevelBpe],
        positions_after_padding: true,
        architecture: Architecture::Bert,
    },
    Family {
        family: ModelFamily::ModernBert,
        model_type: "modernbert",
        class: "ModernBertForMaskedLM",
        tokenizers: &[TokenizerKind::ByteLevelBpe, TokenizerKind::WordPiece],
        positions_after_padding: false,
        architecture: Architecture::ModernBert,
    },
];

impl ModelFamily {
    /// This family's row of [`FAMILIES`].
    pub fn spec(self) -> &'static Family {
        FAMILIES
            .iter()
            .find(|row| row.family == self)
            .expect("every family has its row in FAMILIES")
    }

    /// `model_type` in a Hugging Face `config.json`.
    pub fn model_type(self) -> &'static str {
        self.spec().model_type
    }

    /// The family whose `model_type` this is, if the registry has it.
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        FAMILIES
            .iter()
            .find(|row| row.model_type == model_type)
            .map(|row| row.family)
    }

    /// The `model_type`s of the registry, for a refusal: `"bert", "roberta" or "xlm-roberta"`.
    pub fn supported() -> String {
        let quoted: Vec<String> = FAMILIES
            .iter()
            .map(|row| format!("{:?}", row.model_type))
            .collect();
        match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

impl Architecture {
    /// Our configuration of a checkpoint of this architecture, from `json`, its
    /// `config.json` at `path` as read.
    ///
    /// # Errors
    /// [`TrainError::HfConfig`] naming `path` and the field for a model the architecture
    /// does not compute exactly; [`TrainError::Json`] naming `path` for a field of the wrong
    /// type.
    pub fn read_config(
        self,
        json: serde_json::Value,
        path: &Path,
    ) -> Result<ModelConfig, TrainError> {
        let json_error = |source| TrainError::Json {
            path: path.to_path_buf(),
            source,
        };
        Ok(match self {
            Self::Bert => serde_json::from_value::<HfBertConfig>(json)
                .map_err(json_error)?
                .to_bert(path)?
                .into(),
            Self::ModernBert => serde_json::from_value::<HfModernBertConfig>(json)
                .map_err(json_error)?
                .to_modernbert(path)?
                .into(),
        })
    }

    /// Writes the `config.json` of a model of `config`, with `tokenizer`'s special ids, at
    /// `path`.
    ///
    /// # Errors
    /// [`TrainError::Io`] / [`TrainError::Json`] naming `path`.
    pub fn write_config(
        config: &ModelConfig,
        tokenizer: &SubwordTokenizer,
        path: &Path,
    ) -> Result<(), TrainError> {
        match config {
            ModelConfig::Bert(c) => write_json(path, &HfBertConfig::from_bert(c, tokenizer)),
            ModelConfig::ModernBert(c) => {
                write_json(path, &HfModernBertConfig::from_modernbert(c, tokenizer))
            }
        }
    }

    /// Every parameter of a model of `config` with its key in `config.family`'s checkpoints
    /// ([`HfName`]): the table import and export read.
    pub fn names(config: &ModelConfig) -> Vec<HfName> {
        match config {
            ModelConfig::Bert(c) => bert::names::names(c),
            ModelConfig::ModernBert(c) => modernbert::names::names(c),
        }
    }

    /// Keys (prefixes) of a `family` checkpoint that a masked-LM model does not use.
    pub fn ignored_prefixes(self, family: ModelFamily) -> Vec<String> {
        match self {
            Self::Bert => bert::names::ignored_prefixes(family),
            Self::ModernBert => modernbert::names::ignored_prefixes(),
        }
    }

    /// The tied copies a `family` checkpoint may store, each with the key it is tied to.
    pub fn tied_copies(self, family: ModelFamily) -> Vec<(String, String)> {
        match self {
            Self::Bert => bert::names::tied_copies(family).to_vec(),
            Self::ModernBert => modernbert::names::tied_copies(),
        }
    }
}
