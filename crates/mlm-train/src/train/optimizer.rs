//! The optimizer: AdamW with BERT's settings and decay on the matrices only.

use burn::module::{Module, ModuleVisitor, Param, ParamGroup, ParamId};
use burn::optim::ModuleOptimizer;
use burn::tensor::Tensor;

use super::fused_adamw::FusedAdamW;
use crate::config::WeightDecayOn;

/// The trainer's optimizer for `model`: AdamW with decoupled weight decay `weight_decay` and
/// ε 1e-6 (BERT's, Devlin et al. 2019, Appendix A.2, as Hugging Face trains it). With
/// [`WeightDecayOn::Matrices`] the parameters of one dimension (biases, LayerNorm's gain and
/// bias) form a group of Burn's [`ParamGroup`] whose AdamW has no decay; the matrices keep the
/// decaying one. Each is [`FusedAdamW`]: Burn's AdamW, bit for bit, in one sweep per parameter
/// on flex.
pub(crate) fn adamw(model: &impl Module, weight_decay: f64, on: WeightDecayOn) -> ModuleOptimizer {
    const EPSILON: f32 = 1e-6;
    let optimizer = ModuleOptimizer::from(FusedAdamW::new(weight_decay as f32, EPSILON));
    match on {
        WeightDecayOn::All => optimizer,
        WeightDecayOn::Matrices => {
            let undecayed = FusedAdamW::new(0.0, EPSILON);
            optimizer.with_group(vectors(model), undecayed, None)
        }
    }
}

/// The parameters of one dimension (biases, LayerNorm's gain and bias): BERT's and Hugging
/// Face's undecayed group.
pub(crate) fn vectors(model: &impl Module) -> ParamGroup {
    struct Vectors(Vec<ParamId>);
    impl ModuleVisitor for Vectors {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if D < 2 {
                self.0.push(param.id);
            }
        }
    }
    let mut vectors = Vectors(Vec::new());
    model.visit(&mut vectors);
    ParamGroup::from_ids(vectors.0)
}

#[cfg(test)]
pub(crate) mod tests {
    use burn::optim::GradientsParams;
    use burn::tensor::{Device, Int, TensorData};

    use super::*;
    use crate::model::{BertConfig, BertForMaskedLm};

    /// Every parameter's values with its number of dimensions, in module order.
    pub(crate) fn parameters(model: &BertForMaskedLm) -> Vec<(usize, TensorData)> {
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

    /// A one-layer BERT of width 8 over 40 tokens, seeded, on `device`.
    pub(crate) fn micro_model(device: &Device) -> BertForMaskedLm {
        BertConfig::new(40)
            .with_hidden_size(8)
            .with_num_hidden_layers(1)
            .with_num_attention_heads(2)
            .with_intermediate_size(12)
            .with_max_position_embeddings(6)
            .with_hidden_dropout_prob(0.0)
            .with_attention_probs_dropout_prob(0.0)
            .init_seeded(7, device)
    }

    /// The gradients of the mean squared logits of [`micro_model`] on two sequences of 6 ids,
    /// drawn from `salt`.
    pub(crate) fn gradients(model: &BertForMaskedLm, salt: i64) -> GradientsParams {
        let ids: Vec<i64> = (0..12).map(|i| (i * 7 + salt) % 40).collect();
        let device = &model.devices()[0];
        let input_ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [2, 6]), device);
        let logits = model
            .forward(
                input_ids.clone(),
                input_ids.zeros_like(),
                input_ids.equal_elem(-1),
            )
            .expect("the shapes fit");
        GradientsParams::from_grads(logits.powi_scalar(2).mean().backward(), model)
    }

    #[test]
    fn only_matrices_decay_biases_and_layer_norms_step_as_without_decay() {
        let model = micro_model(&Device::flex().autodiff());
        let grads = || gradients(&model, 0);
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
