//! One optimizer step's gradients: forward to the logits at the masked positions, the
//! masked loss, backward per shard (in parallel when the numbers allow), the shards' sum, and
//! clipping by the global norm.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::Tensor;
use mlm_core::MaskedCrossEntropy;
use rayon::prelude::*;

use crate::data::DeviceBatch;
use crate::error::TrainError;
use crate::model::{MaskedLm, ModelForMaskedLm};

/// Masked-LM loss of `model` on `batch`: the head at the masked positions only, then
/// `loss_fn` against the original ids, the logits whole or chunked as `loss_fn` says
/// ([`MaskedLm::loss_batch`]). Reads nothing back from the device.
///
/// # Errors
/// [`MlmError`](mlm_core::MlmError) for targets checked against another batch shape or
/// vocabulary.
pub fn forward_loss(
    model: &impl MaskedLm,
    batch: DeviceBatch,
    loss_fn: &MaskedCrossEntropy,
) -> Result<mlm_core::MlmLossOutput, TrainError> {
    Ok(model.loss_batch(batch, loss_fn)?)
}

/// One shard's share of an optimizer step, or the shards' sum.
pub(crate) struct ShardGradients {
    pub(crate) grads: GradientsParams,
    /// `[loss sum (nats), correct predictions]`, still on the device.
    pub(crate) totals: Tensor<1>,
}

/// Gradients of the shards of one optimizer step, each shard's summed loss divided by the
/// step's global masked count `n_masked`, so that they add up to the gradient of the mean.
///
/// With `parallel`, each shard runs as a task of rayon's pool against a replica of `model` whose
/// parameters are fresh autodiff leaves with the same values and parameter ids: burn's
/// autodiff locks per graph, so independent graphs run backward at the same time, and the
/// gradients add up by parameter id. Without it (dropout draws from the backend's one
/// generator, whose order threads would scramble) the shards run one after another; the
/// numbers are the same either way.
pub(crate) fn shard_gradients(
    model: &ModelForMaskedLm,
    batches: Vec<DeviceBatch>,
    loss_fn: &MaskedCrossEntropy,
    n_masked: usize,
    parallel: bool,
) -> Result<Vec<ShardGradients>, TrainError> {
    struct FreshLeaves;
    impl ModuleMapper for FreshLeaves {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(|tensor| tensor.detach().require_grad())
        }
    }
    let run = |replica: &ModelForMaskedLm, batch| -> Result<ShardGradients, TrainError> {
        let out = forward_loss(replica, batch, loss_fn)?;
        let totals = Tensor::cat(
            vec![out.loss_sum.clone().inner(), out.n_correct.inner().float()],
            0,
        );
        let grads = (out.loss_sum / n_masked.max(1) as f64).backward();
        Ok(ShardGradients {
            grads: GradientsParams::from_grads(grads, replica),
            totals,
        })
    };
    if !parallel || batches.len() == 1 {
        return batches.into_iter().map(|batch| run(model, batch)).collect();
    }
    // The shards are tasks of rayon's pool, the one the kernels' products and sweeps run on: a
    // core whose shard waits for a product's other half takes work from the other shard
    // instead of sleeping (on threads of their own the cores were idle 10 % of the step).
    let replicas: Vec<_> = batches
        .iter()
        .map(|_| model.clone().map(&mut FreshLeaves))
        .collect();
    replicas
        .into_par_iter()
        .zip(batches)
        .with_max_len(1)
        .map(|(replica, batch)| run(&replica, batch))
        .collect()
}

/// The shards of one step added up, on the device: their gradients by parameter, their
/// totals.
pub(crate) fn sum_shards(model: &ModelForMaskedLm, shards: Vec<ShardGradients>) -> ShardGradients {
    let mut accumulator = GradientsAccumulator::<ModelForMaskedLm>::new();
    let mut totals = None;
    for shard in shards {
        totals = Some(match totals {
            Some(sum) => sum + shard.totals,
            None => shard.totals,
        });
        accumulator.accumulate(model, shard.grads);
    }
    ShardGradients {
        grads: accumulator.grads(),
        totals: totals.expect("a step has at least one shard"),
    }
}

/// Scales `grads` so that their global L2 norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_`: every gradient times `min(1, max_norm / norm)`, computed on the
/// device, so that nothing is read back); returns the norm before clipping, `[1]`, on the
/// device (NaN if a gradient is not finite).
pub(crate) fn clip_global_norm<M: Module>(
    model: &M,
    grads: &mut GradientsParams,
    max_norm: f64,
) -> Tensor<1> {
    struct SquaredNorm<'a> {
        grads: &'a GradientsParams,
        sum: Option<Tensor<1>>,
    }
    impl ModuleVisitor for SquaredNorm<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(grad) = self.grads.get::<D>(param.id) {
                let squares = grad.powi_scalar(2).sum();
                self.sum = Some(match self.sum.take() {
                    Some(sum) => sum + squares,
                    None => squares,
                });
            }
        }
    }
    struct Scale<'a> {
        grads: &'a mut GradientsParams,
        factor: Tensor<1>,
    }
    impl ModuleVisitor for Scale<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(grad) = self.grads.remove::<D>(param.id) {
                let factor = self.factor.clone().reshape([1; D]);
                self.grads.register(param.id, grad * factor);
            }
        }
    }
    let mut norm = SquaredNorm { grads, sum: None };
    model.visit(&mut norm);
    let Some(squared) = norm.sum else {
        // No gradient at all: norm 0, nothing to scale.
        let device = model.devices().first().cloned().unwrap_or_default();
        return Tensor::<1>::zeros([1], &device).inner();
    };
    let norm = squared.sqrt();
    // max_norm / 0 = inf, clamped to 1: a zero gradient stays zero.
    let factor = norm.clone().recip().mul_scalar(max_norm).clamp_max(1.0);
    model.visit(&mut Scale { grads, factor });
    norm
}
