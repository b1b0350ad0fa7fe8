//! One optimizer step's gradients: forward to the logits at the masked positions, the
//! masked loss, backward per shard (on threads when the numbers allow), and clipping by the
//! global norm.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamGroup, ParamId};
use burn::optim::{AdamWConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::Tensor;
use mlm_core::MaskedCrossEntropy;

use crate::config::WeightDecayOn;
use crate::data::MlmBatch;
use crate::error::TrainError;
use crate::model::BertForMaskedLm;

/// Masked-LM loss of `model` on `batch`: logits at the masked positions only, then
/// `loss_fn` against the original ids. Reads nothing back from the device.
///
/// # Errors
/// [`MlmError`](mlm_core::MlmError) for targets checked against another batch shape or
/// vocabulary.
pub fn forward_loss(
    model: &BertForMaskedLm,
    batch: MlmBatch,
    loss_fn: &MaskedCrossEntropy,
) -> Result<mlm_core::MlmLossOutput, TrainError> {
    let targets = batch.targets.clone();
    Ok(loss_fn.forward_targets(masked_logits(model, batch)?, &targets)?)
}

/// Logits of `model` at the masked positions of `batch`, `[n_masked, vocab]`.
pub(crate) fn masked_logits(
    model: &BertForMaskedLm,
    batch: MlmBatch,
) -> Result<Tensor<2>, TrainError> {
    Ok(model.forward_masked(
        batch.input_ids,
        batch.token_type_ids,
        batch.padding_mask,
        &batch.targets,
    )?)
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
/// With `parallel`, each shard runs on its own thread against a replica of `model` whose
/// parameters are fresh autodiff leaves with the same values and parameter ids: burn's
/// autodiff locks per graph, so independent graphs run backward at the same time, and the
/// gradients add up by parameter id. Without it (dropout draws from the backend's one
/// generator, whose order threads would scramble) the shards run one after another; the
/// numbers are the same either way.
pub(crate) fn shard_gradients(
    model: &BertForMaskedLm,
    batches: Vec<MlmBatch>,
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
    let run = |replica: &BertForMaskedLm, batch| -> Result<ShardGradients, TrainError> {
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

/// The shards of one step added up, on the device: their gradients by parameter, their
/// totals.
pub(crate) fn sum_shards(model: &BertForMaskedLm, shards: Vec<ShardGradients>) -> ShardGradients {
    let mut accumulator = GradientsAccumulator::<BertForMaskedLm>::new();
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

/// The trainer's optimizer for `model`: AdamW with decoupled weight decay `weight_decay` and
/// ε 1e-6 (BERT's, Devlin et al. 2019, Appendix A.2, as Hugging Face trains it). With
/// [`WeightDecayOn::Matrices`] the parameters of one dimension (biases, LayerNorm's gain and
/// bias) form a group of Burn's [`ParamGroup`] whose AdamW has no decay; the matrices keep the
/// decaying one.
pub(crate) fn adamw(model: &impl Module, weight_decay: f64, on: WeightDecayOn) -> ModuleOptimizer {
    struct Vectors(Vec<ParamId>);
    impl ModuleVisitor for Vectors {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if D < 2 {
                self.0.push(param.id);
            }
        }
    }
    let config = AdamWConfig::new()
        .with_weight_decay(weight_decay as f32)
        .with_epsilon(1e-6);
    let optimizer = config.init();
    match on {
        WeightDecayOn::All => optimizer,
        WeightDecayOn::Matrices => {
            let mut vectors = Vectors(Vec::new());
            model.visit(&mut vectors);
            let undecayed = config.with_weight_decay(0.0).build();
            optimizer.with_group(ParamGroup::from_ids(vectors.0), undecayed, None)
        }
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

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Int, TensorData};

    use super::*;
    use crate::model::BertConfig;

    /// Every parameter's values with its number of dimensions, in module order.
    fn parameters(model: &BertForMaskedLm) -> Vec<(usize, TensorData)> {
        struct Collect(Vec<(usize, TensorData)>);
        impl ModuleVisitor for Collect {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                self.0.push((D, param.val().into_data()));
            }
        }
        let mut collect = Collect(Vec::new());
        model.visit(&mut collect);
        collect.0
    }

    #[test]
    fn only_matrices_decay_biases_and_layer_norms_step_as_without_decay() {
        let device = Device::flex().autodiff();
        let model = BertConfig::new(40)
            .with_hidden_size(8)
            .with_num_hidden_layers(1)
            .with_num_attention_heads(2)
            .with_intermediate_size(12)
            .with_max_position_embeddings(6)
            .with_hidden_dropout_prob(0.0)
            .with_attention_probs_dropout_prob(0.0)
            .init_seeded(7, &device);
        let grads = || {
            let ids = TensorData::new((0..12).map(|i| (i * 7) % 40).collect::<Vec<i64>>(), [2, 6]);
            let input_ids = Tensor::<2, Int>::from_data(ids, &device);
            let logits = model
                .forward(
                    input_ids.clone(),
                    input_ids.zeros_like(),
                    input_ids.equal_elem(-1),
                )
                .expect("the shapes fit");
            GradientsParams::from_grads(logits.powi_scalar(2).mean().backward(), &model)
        };
        let (lr, weight_decay) = (0.1, 0.5);
        let every =
            adamw(&model, weight_decay, WeightDecayOn::All).step(lr, model.clone(), grads());
        let matrices =
            adamw(&model, weight_decay, WeightDecayOn::Matrices).step(lr, model.clone(), grads());
        let none = adamw(&model, 0.0, WeightDecayOn::All).step(lr, model.clone(), grads());
        let (every, matrices, none) =
            (parameters(&every), parameters(&matrices), parameters(&none));
        let mut decayed_vectors = 0;
        for ((every, matrices), none) in every.iter().zip(&matrices).zip(&none) {
            if every.0 >= 2 {
                assert_eq!(
                    matrices.1, every.1,
                    "a matrix not decayed as Burn's AdamW does"
                );
                assert_ne!(
                    every.1, none.1,
                    "a decay of 1 − 0.05 left a matrix as it was"
                );
            } else {
                assert_eq!(matrices.1, none.1, "a bias or LayerNorm parameter decayed");
                decayed_vectors += usize::from(every.1 != none.1);
            }
        }
        // `All` decays the LayerNorm gains (they start at 1; biases start at 0, which a
        // decay keeps).
        assert!(
            decayed_vectors > 0,
            "no vector differs between All and no decay"
        );
        // 5 embedding tensors, 16 in the layer, 5 in the head.
        assert_eq!(every.len(), 16 + 5 + 5);
    }
}
