//! AdamW in one sweep per parameter on flex: Burn's `AdamW` arithmetic, element for element,
//! with the same state record, so checkpoints and numbers do not change.
//!
//! Burn's `AdamW` runs about twelve tensor operations per parameter (moments, bias
//! corrections, square root, quotient, decay, update), each a single-threaded pass over the
//! whole tensor on flex: some 0.4 s a step for BERT-base's 110 M parameters. This reads the
//! parameter, its gradient and both moments once, on every core, and writes the three back
//! in place where flex owns them alone. Each element goes through the same `f32` operations in
//! the same order as Burn's (no fused multiply-add), so the results are bit for bit Burn's
//! (`fused_adamw_equals_burns_adamw_bit_for_bit`). Other backends run Burn's `AdamW`.

#[cfg(feature = "flex")]
use burn::backend::flex::FlexTensor;
#[cfg(feature = "flex")]
use burn::backend::{DispatchDevice, Flex};
#[cfg(feature = "flex")]
use burn::optim::AdaptiveMomentumState;
use burn::optim::{AdamW, AdamWConfig, AdamWState, LearningRate, Optimizer};
use burn::tensor::{DType, Device, Tensor};
#[cfg(feature = "flex")]
use rayon::prelude::*;

/// AdamW (Loshchilov & Hutter 2019, Algorithm 2, as Burn computes it): decoupled weight decay
/// `weight_decay`, β₁ 0.9, β₂ 0.999, `epsilon` added to `√v̂`.
#[derive(Clone)]
pub(crate) struct FusedAdamW {
    /// Burn's `AdamW` of the same settings: what other backends run.
    burn: AdamW,
    weight_decay: f32,
    epsilon: f32,
}

/// Burn's `AdamWConfig` defaults, which the trainer keeps.
const BETA_1: f32 = 0.9;
const BETA_2: f32 = 0.999;

impl FusedAdamW {
    /// AdamW with `weight_decay` and `epsilon`.
    pub(crate) fn new(weight_decay: f32, epsilon: f32) -> Self {
        let config = AdamWConfig::new()
            .with_beta_1(BETA_1)
            .with_beta_2(BETA_2)
            .with_weight_decay(weight_decay)
            .with_epsilon(epsilon);
        Self {
            burn: config.build(),
            weight_decay,
            epsilon,
        }
    }
}

impl Optimizer for FusedAdamW {
    type State<const D: usize> = AdamWState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        #[cfg(feature = "flex")]
        if on_flex(&tensor) && on_flex(&grad) {
            return self.flex_step(lr, tensor, grad, state);
        }
        self.burn.step(lr, tensor, grad, state)
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        AdamW::to_device(state, device)
    }
}

/// Whether `tensor` is an `f32` tensor on flex (the optimizer sees no autodiff).
#[cfg(feature = "flex")]
fn on_flex<const D: usize>(tensor: &Tensor<D>) -> bool {
    tensor.dtype() == DType::F32 && matches!(tensor.device().as_dispatch(), DispatchDevice::Flex(_))
}

#[cfg(not(feature = "flex"))]
#[allow(dead_code)]
fn on_flex<const D: usize>(_: &Tensor<D>) -> bool {
    false
}

#[cfg(feature = "flex")]
impl FusedAdamW {
    /// The step as one sweep: moments, bias correction, update and decay per element, on
    /// every core.
    fn flex_step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<AdamWState<D>>,
    ) -> (Tensor<D>, Option<AdamWState<D>>) {
        #[cfg(test)]
        tests::FLEX_STEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let shape = tensor.shape();
        let primitive = |t: Tensor<D>| t.try_into_primitive::<Flex>().expect("an f32 flex tensor");
        let (mut param, grad) = (contiguous(primitive(tensor)), contiguous(primitive(grad)));
        let (time, mut m, mut v) = match state {
            Some(s) => (
                s.momentum.time + 1,
                Some(contiguous(primitive(s.momentum.moment_1))),
                Some(contiguous(primitive(s.momentum.moment_2))),
            ),
            None => (1, None, None),
        };
        let first = m.is_none();
        let n = shape.num_elements();
        let (mut m_out, mut v_out) = (
            m.take().unwrap_or_else(|| zeros(n)),
            v.take().unwrap_or_else(|| zeros(n)),
        );
        let step = Coefficients::new(self, lr, time);
        {
            let p = param.storage_mut::<f32>();
            let g = grad.as_slice::<f32>().expect("contiguous");
            let (m, v) = (m_out.storage_mut::<f32>(), v_out.storage_mut::<f32>());
            const CHUNK: usize = 1 << 14;
            p.par_chunks_mut(CHUNK)
                .zip(m.par_chunks_mut(CHUNK))
                .zip(v.par_chunks_mut(CHUNK))
                .zip(g.par_chunks(CHUNK))
                .for_each(|(((p, m), v), g)| step.sweep(first, p, m, v, g));
        }
        let tensor = |t: FlexTensor| Tensor::<D>::from_primitive::<Flex>(t).reshape(shape.clone());
        let momentum = AdaptiveMomentumState {
            time,
            moment_1: tensor(m_out),
            moment_2: tensor(v_out),
            max_moment_2: None,
        };
        (tensor(param), Some(AdamWState { momentum }))
    }
}

/// `t` with contiguous storage from offset 0 (a copy only where it is a view).
#[cfg(feature = "flex")]
fn contiguous(t: FlexTensor) -> FlexTensor {
    match t.layout().contiguous_offsets() {
        Some((0, _)) => t,
        _ => FlexTensor::from_data(t.into_data()),
    }
}

#[cfg(feature = "flex")]
fn zeros(n: usize) -> FlexTensor {
    FlexTensor::from_data(burn::tensor::TensorData::new(vec![0f32; n], [n]))
}

/// One step's scalars, as Burn's `AdamW` rounds them to `f32`.
#[cfg(feature = "flex")]
#[derive(Clone, Copy)]
struct Coefficients {
    factor_1: f32,
    factor_2: f32,
    correction_1: f32,
    correction_2: f32,
    epsilon: f32,
    /// `1 − lr · λ`, or `None` without decay (Burn then leaves the parameter as it is).
    keep: Option<f32>,
    lr: f32,
}

#[cfg(feature = "flex")]
impl Coefficients {
    fn new(optimizer: &FusedAdamW, lr: LearningRate, time: usize) -> Self {
        let decay_rate = lr * f64::from(optimizer.weight_decay);
        let time = time as i32;
        Self {
            factor_1: 1.0 - BETA_1,
            factor_2: 1.0 - BETA_2,
            correction_1: 1f32 - BETA_1.powi(time),
            correction_2: 1f32 - BETA_2.powi(time),
            epsilon: optimizer.epsilon,
            keep: (decay_rate != 0.0).then_some((1.0 - decay_rate) as f32),
            lr: lr as f32,
        }
    }

    /// Burn's `AdamW::step` on one chunk: each line one of its tensor operations.
    fn sweep(self, first: bool, p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32]) {
        for (((p, m), v), &g) in p.iter_mut().zip(m).zip(v).zip(g) {
            let (g_1, g_2) = (g * self.factor_1, (g * g) * self.factor_2);
            (*m, *v) = match first {
                true => (g_1, g_2),
                false => (*m * BETA_1 + g_1, *v * BETA_2 + g_2),
            };
            let m_hat = *m / self.correction_1;
            let v_hat = *v / self.correction_2;
            let delta = m_hat / (v_hat.sqrt() + self.epsilon);
            let decayed = self.keep.map_or(*p, |keep| *p * keep);
            *p = decayed - delta * self.lr;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use burn::optim::{AdamWConfig, ModuleOptimizer};

    use super::*;
    use crate::config::WeightDecayOn;
    use crate::model::BertForMaskedLm;
    use crate::train::optimizer::tests::{gradients, micro_model, parameters};
    use crate::train::optimizer::{adamw, vectors};

    /// Parameters the fused sweep has updated, in every test of this binary.
    pub(super) static FLEX_STEPS: AtomicUsize = AtomicUsize::new(0);

    /// Burn's own AdamW with the trainer's settings and groups.
    fn burns_adamw(model: &BertForMaskedLm, weight_decay: f32) -> ModuleOptimizer {
        let config = AdamWConfig::new()
            .with_weight_decay(weight_decay)
            .with_epsilon(1e-6);
        let undecayed = config.clone().with_weight_decay(0.0).build();
        config.init().with_group(vectors(model), undecayed, None)
    }

    #[test]
    fn fused_adamw_equals_burns_adamw_bit_for_bit() {
        let model = micro_model(&Device::flex().autodiff());
        let before = FLEX_STEPS.load(Ordering::Relaxed);
        let (mut ours, mut burns) = (model.clone(), model.clone());
        let mut fused = adamw(&model, 0.5, WeightDecayOn::Matrices);
        let mut reference = burns_adamw(&model, 0.5);
        for (step, lr) in [1e-2, 3e-2, 2e-2].into_iter().enumerate() {
            ours = fused.step(lr, ours.clone(), gradients(&ours, step as i64));
            burns = reference.step(lr, burns.clone(), gradients(&burns, step as i64));
            // `TensorData` compares bytes: equal bits.
            assert_eq!(parameters(&ours), parameters(&burns), "step {}", step + 1);
        }
        assert!(
            FLEX_STEPS.load(Ordering::Relaxed) - before >= 3 * 26,
            "the fused sweep did not run"
        );
    }
}
