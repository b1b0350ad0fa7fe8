//! Held-out evaluation: the masked-LM loss, accuracy and perplexity of a model on sequences
//! masked the same way at every call, split by what the input showed at the graded positions.

use burn::tensor::Device;
use mlm_core::{IGNORE_INDEX, MaskRates, MaskedCrossEntropy};

use crate::config::TrainConfig;
use crate::data::{Masking, SubwordTokenizer, make_batch};
use crate::error::TrainError;
use crate::model::MaskedLm;
use crate::seed::{Stream, derive_seed};

/// Held-out metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalMetrics {
    /// Mean loss over all masked tokens, nats.
    pub loss: f64,
    /// Share of masked tokens predicted exactly.
    pub accuracy: f64,
    /// Number of masked tokens graded.
    pub n_masked: usize,
    /// Mean loss at the graded positions whose input was `[MASK]` (80 % of them, BERT §3.1),
    /// nats: what the model predicts from the context alone. `None` if there was none.
    pub mask_loss: Option<f64>,
    /// Mean loss at the graded positions whose input was a random token (10 %), nats.
    pub random_loss: Option<f64>,
    /// Mean loss at the graded positions whose input was the original token (10 %), nats:
    /// there the model can copy what it sees.
    pub unchanged_loss: Option<f64>,
}

impl EvalMetrics {
    /// `exp(loss)`.
    pub fn perplexity(&self) -> f64 {
        self.loss.exp()
    }
}

/// Held-out batches are masked at BERT's rates (15 %, then 80/10/10) whatever the training
/// rates, so that held-out losses of runs with different `mask_rates` compare.
pub const EVAL_MASK_RATES: MaskRates = MaskRates::BERT;

/// Held-out batches use token masking whatever the training batches use (`--masking span`),
/// so that held-out losses of runs with different masking compare: every run is graded on
/// the same positions with the same inputs. A span-trained model is then measured on the
/// task BERT is, single masked tokens, not on the spans it trained on.
pub const EVAL_MASKING: Masking = Masking::Token;

/// Masked-LM loss and accuracy over `sequences`, masked with a fixed seed (the same masks
/// at every call) by token masking at [`EVAL_MASK_RATES`], without autodiff.
///
/// # Errors
/// Masker and loss errors.
pub fn evaluate(
    model: &impl MaskedLm,
    sequences: &[Vec<u32>],
    tokenizer: &SubwordTokenizer,
    config: &TrainConfig,
    device: &Device,
) -> Result<EvalMetrics, TrainError> {
    let mut masker = tokenizer.masker(
        EVAL_MASK_RATES,
        EVAL_MASKING,
        derive_seed(config.seed, Stream::HeldOutMasks, 0),
    )?;
    let loss_fn = MaskedCrossEntropy::default();
    // Summed loss, count and correct predictions at [MASK], random and unchanged inputs:
    // three kinds that partition the graded positions (a target is never [MASK]).
    let mut by_input = [(0.0, 0, 0); 3];
    let sequences = &sequences[..sequences.len().min(config.max_eval_sequences)];
    // Batches of the global batch's size: the masks of batch k depend on its sequences, so
    // every world size must cut the held-out split alike.
    for chunk in sequences.chunks(config.batch_size * config.world_size) {
        let chunk: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
        let batch = make_batch(&chunk, &mut masker, tokenizer.pad_id, device)?;
        let inputs = batch
            .input_ids
            .clone()
            .flatten::<1>(0, 1)
            .select(0, batch.targets.positions().clone());
        let targets = batch.targets.targets().clone();
        let at_mask = inputs.clone().equal_elem(tokenizer.mask_id);
        let unchanged = inputs.equal(targets.clone());
        let random = at_mask
            .clone()
            .bool_not()
            .bool_and(unchanged.clone().bool_not());
        let logits = model.forward_batch(batch)?;
        // The loss with every other kind's labels set to the ignore index.
        for (sum, selected) in by_input.iter_mut().zip([at_mask, random, unchanged]) {
            let labels = targets.clone().mask_fill(selected.bool_not(), IGNORE_INDEX);
            let out = loss_fn.forward_labels(logits.clone(), labels)?;
            sum.0 += f64::from(out.loss_sum.into_scalar::<f32>());
            sum.1 += out.n_graded;
            sum.2 += out.n_correct.into_scalar::<i64>() as usize;
        }
    }
    let loss_sum: f64 = by_input.iter().map(|kind| kind.0).sum();
    let n_masked: usize = by_input.iter().map(|kind| kind.1).sum();
    let n_correct: usize = by_input.iter().map(|kind| kind.2).sum();
    let mean = |(sum, n, _): (f64, usize, usize)| (n > 0).then(|| sum / n as f64);
    Ok(EvalMetrics {
        loss: loss_sum / n_masked.max(1) as f64,
        accuracy: n_correct as f64 / n_masked.max(1) as f64,
        n_masked,
        mask_loss: mean(by_input[0]),
        random_loss: mean(by_input[1]),
        unchanged_loss: mean(by_input[2]),
    })
}
