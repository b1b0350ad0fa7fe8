//! One optimizer step's gradients: forward to the logits at the masked positions, the
//! masked loss, backward per shard (on threads when the numbers allow), and clipping by the
//! global norm.

use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, AdamWConfig, GradientsAccumulator, GradientsParams};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Tensor};
use mlm_core::MaskedCrossEntropy;

use crate::data::MlmBatch;
use crate::error::TrainError;
use crate::model::BertForMaskedLm;

/// Masked-LM loss of `model` on `batch`: logits at the masked positions only, then
/// `loss_fn` against the original ids.
///
/// # Errors
/// [`MlmError`](mlm_core::MlmError) for a masked position outside the batch.
pub fn forward_loss<B: Backend>(
    model: &BertForMaskedLm<B>,
    batch: MlmBatch<B>,
    loss_fn: &MaskedCrossEntropy,
) -> Result<mlm_core::MlmLossOutput<B>, TrainError> {
    let targets = batch.masked_targets.clone();
    Ok(loss_fn.forward_labels(masked_logits(model, batch)?, targets)?)
}

/// Logits of `model` at the masked positions of `batch`, `[n_masked, vocab]`.
pub(crate) fn masked_logits<B: Backend>(
    model: &BertForMaskedLm<B>,
    batch: MlmBatch<B>,
) -> Result<Tensor<B, 2>, TrainError> {
    Ok(model.forward_masked(
        batch.input_ids,
        batch.token_type_ids,
        batch.padding_mask,
        batch.masked_positions,
    )?)
}

/// One shard's share of an optimizer step.
pub(crate) struct ShardGradients {
    pub(crate) grads: GradientsParams,
    pub(crate) loss_sum: f64,
    pub(crate) n_correct: usize,
}

/// Gradients of the shards of one optimizer step, each shard's summed loss divided by the
/// step's global masked count `n_masked`, so that they add up to the gradient of the mean.
///
/// With `parallel`, each shard runs on its own thread against a replica of `model` whose
/// parameters are fresh autodiff leaves with the same values and parameter ids: burn's
/// autodiff locks per graph, so independent graphs run backward at the same time, and the
/// gradients add up by parameter id. Without it (dropout draws from the backend's one
/// generator, whose order threads would scramble) the shards run one after another; the
/// numbers are the same either way.
pub(crate) fn shard_gradients<B: AutodiffBackend>(
    model: &BertForMaskedLm<B>,
    batches: Vec<MlmBatch<B>>,
    loss_fn: &MaskedCrossEntropy,
    n_masked: usize,
    parallel: bool,
) -> Result<Vec<ShardGradients>, TrainError> {
    struct FreshLeaves;
    impl<B: AutodiffBackend> ModuleMapper<B> for FreshLeaves {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            param.map(|tensor| tensor.detach().require_grad())
        }
    }
    let run = |replica: &BertForMaskedLm<B>, batch| -> Result<ShardGradients, TrainError> {
        let out = forward_loss(replica, batch, loss_fn)?;
        let loss_sum = f64::from(out.loss_sum.clone().into_scalar().elem::<f32>());
        let grads = (out.loss_sum / n_masked.max(1) as f64).backward();
        Ok(ShardGradients {
            grads: GradientsParams::from_grads(grads, replica),
            loss_sum,
            n_correct: out.n_correct,
        })
    };
    if !parallel || batches.len() == 1 {
        return batches.into_iter().map(|batch| run(model, batch)).collect();
    }
    std::thread::scope(|scope| {
        let threads: Vec<_> = batches
            .into_iter()
            .map(|batch| {
                let replica = model.clone().map(&mut FreshLeaves);
                scope.spawn(move || run(&replica, batch))
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a shard's thread panicked"))
            .collect()
    })
}

/// The shards of one step added up: their gradients by parameter, their summed loss and
/// correct count.
pub(crate) fn sum_shards<B: AutodiffBackend>(
    model: &BertForMaskedLm<B>,
    shards: Vec<ShardGradients>,
) -> ShardGradients {
    let mut accumulator = GradientsAccumulator::<BertForMaskedLm<B>>::new();
    let (mut loss_sum, mut n_correct) = (0.0, 0);
    for shard in shards {
        loss_sum += shard.loss_sum;
        n_correct += shard.n_correct;
        accumulator.accumulate(model, shard.grads);
    }
    ShardGradients {
        grads: accumulator.grads(),
        loss_sum,
        n_correct,
    }
}

/// The trainer's optimizer: AdamW with decoupled weight decay `weight_decay` and ε 1e-6
/// (BERT's, Devlin et al. 2019, Appendix A.2, as Hugging Face trains it).
pub(crate) fn adamw<B: AutodiffBackend>(
    weight_decay: f64,
) -> OptimizerAdaptor<AdamW, BertForMaskedLm<B>, B> {
    AdamWConfig::new()
        .with_weight_decay(weight_decay as f32)
        .with_epsilon(1e-6)
        .init()
}

/// Scales `grads` so that their global L2 norm is at most `max_norm`; returns the norm before.
pub(crate) fn clip_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    max_norm: f64,
) -> f64 {
    struct SquaredNorm<'a, B: AutodiffBackend> {
        grads: &'a GradientsParams,
        sum: Option<Tensor<B::InnerBackend, 1>>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(grad) = self.grads.get::<B::InnerBackend, D>(param.id) {
                let squares = grad.powi_scalar(2).sum();
                self.sum = Some(match self.sum.take() {
                    Some(sum) => sum + squares,
                    None => squares,
                });
            }
        }
    }
    struct Scale<'a, B: AutodiffBackend> {
        grads: &'a mut GradientsParams,
        factor: f64,
        _backend: std::marker::PhantomData<B>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) {
                self.grads.register(param.id, grad * self.factor);
            }
        }
    }
    let mut norm = SquaredNorm::<B> { grads, sum: None };
    model.visit(&mut norm);
    let total = norm
        .sum
        .map(|s| f64::from(s.into_scalar().elem::<f32>()).sqrt())
        .unwrap_or(0.0);
    if total > max_norm {
        model.visit(&mut Scale::<B> {
            grads,
            factor: max_norm / total,
            _backend: std::marker::PhantomData,
        });
    }
    total
}
