//! mlm-core inside burn-train: a [`Batcher`] that pads and masks, and an output type that
//! feeds burn-train's loss, accuracy and perplexity metrics with the masked positions only.
//!
//! ```text
//! token-id sequences ──MlmBatcher (pad, 80/10/10)──▶ MlmBatch ──your encoder + MlmHead──▶
//!   logits [n_masked, vocab] ──masked_cross_entropy──▶ MlmOutput ──▶ LossMetric, AccuracyMetric,
//!                                                                    PerplexityMetric
//! ```
//!
//! Behind the `train` feature of `mlm-core`. Your model implements burn-train's `TrainStep`
//! and `InferenceStep` with [`MlmBatch`] as input and [`MlmOutput`] as output;
//! `examples/learner.rs` of the repository is a whole run.

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::{Bool, Device, ExecutionError, Int, Tensor, TensorData};
use burn_train::ItemLazy;
use burn_train::metric::{AccuracyInput, Adaptor, LossInput, PerplexityInput};

use crate::{MaskedBatch, MaskedTargets, Masker, MlmError, MlmLossOutput};

/// Pads a list of token-id sequences into a batch and corrupts it with a [`Masker`]
/// (BERT's 80/10/10, or whatever the masker is configured for): burn's [`Batcher`] for MLM.
///
/// **Masks are a function of the seed and the batch's content.** burn's `Batcher` is not told
/// a batch's index, and with several DataLoader workers batches are built in whatever order
/// the threads run. So batch masks are drawn from the masker's generator keyed by
/// `(seed, hash of the batch's token ids in order)` (FNV-1a, the same on every platform): a
/// batch gets the same masks whichever worker builds it and however often it is rebuilt, and
/// a DataLoader that shuffles each epoch makes new batches, hence new masks, every epoch
/// (dynamic masking, RoBERTa, Liu et al. 2019, §4.1).
#[derive(Debug, Clone)]
pub struct MlmBatcher {
    masker: Masker,
}

impl MlmBatcher {
    /// A batcher that corrupts with `masker` and pads with its `pad_token_id`
    /// ([`MaskingConfig::pad_token_id`](crate::MaskingConfig::pad_token_id)).
    pub fn new(masker: Masker) -> Self {
        Self { masker }
    }

    /// The corruption of `sequences`, unpadded: what [`Batcher::batch`] puts on the device.
    ///
    /// # Errors
    /// As [`Masker::mask`]: [`MlmError::TokenIdOutOfVocab`] for an id `>= vocab_size`.
    pub fn mask(&self, sequences: &[Vec<u32>]) -> Result<MaskedBatch, MlmError> {
        let mut masker = self.masker.clone();
        masker.resume_at(content_key(sequences));
        masker.mask(sequences)
    }
}

/// FNV-1a over the lengths and ids of `sequences`: the key of a batch's mask generator.
fn content_key(sequences: &[Vec<u32>]) -> u64 {
    const PRIME: u64 = 0x0100_0000_01b3;
    let words = sequences
        .iter()
        .flat_map(|ids| std::iter::once(ids.len() as u32).chain(ids.iter().copied()));
    words.fold(0xcbf2_9ce4_8422_2325, |hash, word| {
        word.to_le_bytes().iter().fold(hash, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(PRIME)
        })
    })
}

/// A padded, masked batch on the device, as [`MlmBatcher`] builds it.
#[derive(Debug, Clone)]
pub struct MlmBatch {
    /// Corrupted input ids, `[batch, seq]`, padded at the end with the pad token to the
    /// longest sequence of the batch.
    pub input_ids: Tensor<2, Int>,
    /// `[batch, seq]`, `true` at padding: burn-nn's `mask_pad` convention
    /// (`TransformerEncoderInput::mask_pad`).
    pub padding_mask: Tensor<2, Bool>,
    /// The masked positions (flat `b * seq + s`) and their true tokens, checked on the host:
    /// what [`MlmHead::forward_targets`](crate::MlmHead::forward_targets) and
    /// [`MaskedCrossEntropy::forward_targets`](crate::MaskedCrossEntropy::forward_targets)
    /// take, so that no step reads anything back from the device.
    pub targets: MaskedTargets,
}

impl Batcher<Vec<u32>, MlmBatch> for MlmBatcher {
    /// # Panics
    /// If a token id is not below the masker's `vocab_size` (a `Batcher` cannot return an
    /// error; check your dataset with [`MlmBatcher::mask`] to get [`MlmError`] instead).
    fn batch(&self, items: Vec<Vec<u32>>, device: &Device) -> MlmBatch {
        let masked = self
            .mask(&items)
            .unwrap_or_else(|e| panic!("MlmBatcher: {e}"));
        let batch = masked.input_ids.len();
        let seq = masked.input_ids.iter().map(Vec::len).max().unwrap_or(0);
        let mut input_ids = Vec::with_capacity(batch * seq);
        let mut padding = Vec::with_capacity(batch * seq);
        for ids in &masked.input_ids {
            input_ids.extend(ids.iter().map(|&id| i64::from(id)));
            input_ids.extend(std::iter::repeat_n(
                i64::from(self.masker.config().pad_token_id),
                seq - ids.len(),
            ));
            padding.extend((0..seq).map(|s| s >= ids.len()));
        }
        // Every sequence is padded to `seq`, so its positions cannot alias.
        let targets = masked
            .targets(seq, self.masker.config().vocab_size, device)
            .unwrap_or_else(|e| panic!("MlmBatcher: {e}"));
        MlmBatch {
            input_ids: Tensor::from_data(TensorData::new(input_ids, [batch, seq]), device),
            padding_mask: Tensor::from_data(TensorData::new(padding, [batch, seq]), device),
            targets,
        }
    }
}

/// What a training or validation step returns to burn-train: the loss and the masked rows'
/// logits and targets, adapted to burn-train's `LossMetric`, `AccuracyMetric` and
/// `PerplexityMetric`.
///
/// The adaptors keep [`MlmLossOutput`]'s global-count semantics: each metric weighs a batch
/// by its number of masked positions, so an epoch's value is `Σ loss_sum / Σ n_masked`
/// (accuracy: `Σ n_correct / Σ n_masked`; perplexity: `exp` of the loss), never a mean of
/// batch means. Accuracy is over the masked positions only.
///
/// A batch with no masked position (every sequence only special tokens, or
/// `min_predictions_per_seq = 0`) has loss 0; burn-train's `LossMetric` and `AccuracyMetric`
/// cannot take a batch of weight 0, so it enters them as one position of loss 0 that is
/// predicted wrongly. `PerplexityMetric` skips it exactly.
#[derive(Debug, Clone)]
pub struct MlmOutput {
    /// The mean loss over the masked positions, `[1]`, in nats.
    pub loss: Tensor<1>,
    /// Logits of the masked positions, `[n_masked, vocab]`.
    pub logits: Tensor<2>,
    /// True tokens of the masked positions, `[n_masked]`.
    pub targets: Tensor<1, Int>,
}

impl MlmOutput {
    /// The output of a step from its masked logits, their targets and the loss
    /// ([`MaskedCrossEntropy::forward_targets`](crate::MaskedCrossEntropy::forward_targets)
    /// of the two).
    ///
    /// # Shapes
    /// - logits: `[n_masked, vocab]`; `targets.len()` is `n_masked`; `loss.loss`: `[1]`.
    pub fn new(logits: Tensor<2>, targets: &MaskedTargets, loss: &MlmLossOutput) -> Self {
        Self {
            loss: loss.loss.clone(),
            logits,
            targets: targets.targets().clone(),
        }
    }

    fn n_masked(&self) -> usize {
        self.targets.dims()[0]
    }

    /// One wrongly predicted row standing in for an empty batch (see the type's docs).
    fn empty_stand_in(&self) -> (Tensor<2>, Tensor<1, Int>) {
        let [_, vocab] = self.logits.dims();
        let device = self.logits.device();
        // Argmax of a zero row is token 0; the target is any other token.
        let target = i64::from(vocab > 1);
        (
            Tensor::zeros([1, vocab], &device),
            Tensor::from_data(TensorData::new(vec![target], [1]), &device),
        )
    }
}

/// burn-train 0.22 computes metrics on the step's own device: a step's output leaves the
/// autodiff graph once the device has run its queue (as burn-train's own
/// `ClassificationOutput` does), and each metric reads back only its scalars.
impl ItemLazy for MlmOutput {
    fn sync(self) -> Result<Self, ExecutionError> {
        self.loss.device().flush()?;
        Ok(Self {
            loss: self.loss.inner(),
            logits: self.logits.inner(),
            targets: self.targets.inner(),
        })
    }
}

impl Adaptor<LossInput> for MlmOutput {
    /// The mean loss repeated `n_masked` times: `LossMetric` weighs a batch by its length.
    fn adapt(&self) -> LossInput {
        let n_masked = self.n_masked().max(1);
        LossInput::new(self.loss.clone().detach().expand([n_masked]))
    }
}

impl Adaptor<AccuracyInput> for MlmOutput {
    fn adapt(&self) -> AccuracyInput {
        if self.n_masked() == 0 {
            let (logits, targets) = self.empty_stand_in();
            return AccuracyInput::new(logits, targets);
        }
        AccuracyInput::new(self.logits.clone().detach(), self.targets.clone())
    }
}

impl Adaptor<PerplexityInput> for MlmOutput {
    fn adapt(&self) -> PerplexityInput {
        PerplexityInput::new(self.logits.clone().detach(), self.targets.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn_train::metric::NumericEntry;

    #[test]
    fn the_content_key_separates_order_lengths_and_ids() {
        let key = |s: &[Vec<u32>]| content_key(s);
        let a = vec![vec![1, 2], vec![3]];
        assert_eq!(key(&a), key(&a.clone()));
        assert_ne!(key(&a), key(&[vec![3], vec![1, 2]]));
        assert_ne!(key(&a), key(&[vec![1], vec![2, 3]]));
        assert_ne!(key(&a), key(&[vec![1, 2], vec![4]]));
        // FNV-1a of no bytes is its offset basis.
        assert_eq!(key(&[]), 0xcbf2_9ce4_8422_2325);
    }

    fn output(logits: Vec<f32>, targets: Vec<i64>, vocab: usize) -> MlmOutput {
        let device = Device::flex();
        let n = targets.len();
        let logits = Tensor::<2>::from_data(TensorData::new(logits, [n, vocab]), &device);
        let positions: Vec<i64> = (0..n as i64).collect();
        let targets = MaskedTargets::new(&positions, &targets, [n, 1], vocab, &device).unwrap();
        let loss = crate::MaskedCrossEntropy::default()
            .forward_targets(logits.clone(), &targets)
            .expect("valid targets");
        MlmOutput::new(logits, &targets, &loss)
    }

    fn aggregated(entry: NumericEntry) -> (f64, usize) {
        match entry {
            NumericEntry::Aggregated {
                aggregated_value,
                count,
            } => (aggregated_value, count),
            NumericEntry::Value(value) | NumericEntry::Final(value) => (value, 1),
        }
    }

    #[test]
    fn an_empty_batch_enters_the_metrics_as_one_wrong_row_of_loss_zero() {
        use burn::data::dataloader::Progress;
        use burn_train::metric::{
            AccuracyMetric, LossMetric, Metric, MetricMetadata, Numeric, PerplexityMetric,
        };
        let meta = MetricMetadata {
            progress: Progress::new(1, 1, None),
            iteration: Some(1),
            lr: None,
        };
        // Two masked rows: token 1 predicted right (p = e/(e+1)), token 0 wrong (p = 1/(e+1)).
        let full = output(vec![0.0, 1.0, 0.0, 1.0], vec![1, 0], 2);
        let empty = output(vec![], vec![], 2);
        let (mut loss, mut accuracy, mut perplexity) = (
            LossMetric::new(),
            AccuracyMetric::new(),
            PerplexityMetric::new(),
        );
        for batch in [&full, &empty] {
            loss.update(&batch.adapt(), &meta).expect("a loss");
            accuracy.update(&batch.adapt(), &meta).expect("an accuracy");
            perplexity
                .update(&batch.adapt(), &meta)
                .expect("a perplexity");
        }
        let e = std::f64::consts::E;
        let full_loss = ((e + 1.0).ln() - 1.0 + (e + 1.0).ln()) / 2.0;
        let (value, count) = aggregated(loss.running_value().expect("a running loss"));
        assert_eq!(count, 3, "two masked rows and the stand-in");
        assert!((value - 2.0 * full_loss / 3.0).abs() < 1e-6, "{value}");
        assert_eq!(
            aggregated(accuracy.running_value().expect("a running accuracy")),
            (100.0 / 3.0, 3)
        );
        let (value, count) = aggregated(perplexity.running_value().expect("a running perplexity"));
        assert_eq!(count, 2, "perplexity skips the empty batch");
        assert!((value - full_loss.exp()).abs() < 1e-5, "{value}");
    }
}
