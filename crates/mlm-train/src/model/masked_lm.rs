//! [`ModelForMaskedLm`]: a model of any architecture, as the trainer, checkpoints,
//! evaluation and fill-mask hold it.

use std::path::Path;

use burn::module::{Module, ModuleMapper, ModuleVisitor};
use burn::store::{ModuleRecord, RecordError};
use burn::tensor::{Bool, Int, Tensor};
use mlm_core::{MaskedCrossEntropy, MaskedLanguageModel, MaskedTargets, MlmError, MlmLossOutput};

use super::{BertForMaskedLm, MaskedLm, ModernBertForMaskedLm};
use crate::data::DeviceBatch;

/// A masked-language model of one of the registry's architectures
/// ([`super::family::Architecture`]).
#[derive(Module, Debug)]
pub enum ModelForMaskedLm {
    /// BERT's architecture.
    Bert(BertForMaskedLm),
    /// ModernBERT's architecture.
    ModernBert(ModernBertForMaskedLm),
}

/// `match` on the architecture with the same expression for each.
macro_rules! each {
    ($self:expr, $model:ident => $body:expr) => {
        match $self {
            ModelForMaskedLm::Bert($model) => $body,
            ModelForMaskedLm::ModernBert($model) => $body,
        }
    };
}

impl ModelForMaskedLm {
    /// The BERT-architecture model, if it is one.
    pub fn as_bert(&self) -> Option<&BertForMaskedLm> {
        match self {
            Self::Bert(model) => Some(model),
            Self::ModernBert(_) => None,
        }
    }

    /// Visits the parameters under the architecture's own module paths (what a checkpoint
    /// and the Hugging Face name tables use), without the variant's name in front.
    pub fn visit_parameters<V: ModuleVisitor>(&self, visitor: &mut V) {
        each!(self, m => m.visit(visitor))
    }

    /// Maps the parameters under the architecture's own module paths.
    pub fn map_parameters<M: ModuleMapper>(self, mapper: &mut M) -> Self {
        match self {
            Self::Bert(m) => Self::Bert(m.map(mapper)),
            Self::ModernBert(m) => Self::ModernBert(m.map(mapper)),
        }
    }

    /// Writes the weights as a Burn record at `path`, under the architecture's own module
    /// paths (so a BERT's checkpoint reads as before the registry had other architectures).
    ///
    /// # Errors
    /// Burn's [`RecordError`].
    pub fn save_weights(&self, path: &Path) -> Result<(), RecordError> {
        each!(self, m => m.clone().save_file(path))
    }

    /// `self` (a structure of the right sizes) with the weights of `record`.
    ///
    /// # Errors
    /// Burn's message if the record's parameters or shapes differ.
    pub fn with_record(self, record: ModuleRecord) -> Result<Self, String> {
        match self {
            Self::Bert(m) => m.try_load_record(record).map(Self::Bert),
            Self::ModernBert(m) => m.try_load_record(record).map(Self::ModernBert),
        }
        .map_err(|e| e.to_string())
    }
}

impl MaskedLanguageModel for ModelForMaskedLm {
    fn masked_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
        targets: &MaskedTargets,
    ) -> Result<Tensor<2>, MlmError> {
        each!(self, m => m.masked_logits(input_ids, padding_mask, targets))
    }

    fn vocab_size(&self) -> usize {
        each!(self, m => m.vocab_size())
    }

    fn max_seq_len(&self) -> usize {
        each!(self, m => m.max_seq_len())
    }
}

impl MaskedLm for ModelForMaskedLm {
    fn forward_batch(&self, batch: DeviceBatch) -> Result<Tensor<2>, MlmError> {
        each!(self, m => MaskedLm::forward_batch(m, batch))
    }

    fn loss_batch(
        &self,
        batch: DeviceBatch,
        loss_fn: &MaskedCrossEntropy,
    ) -> Result<MlmLossOutput, MlmError> {
        each!(self, m => m.loss_batch(batch, loss_fn))
    }

    fn all_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
    ) -> Result<Tensor<3>, MlmError> {
        each!(self, m => m.all_logits(input_ids, padding_mask))
    }
}
