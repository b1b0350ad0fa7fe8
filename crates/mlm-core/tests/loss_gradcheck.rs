//! The gradient of the masked cross-entropy against central finite differences, in f64.
//!
//! The logits are `f64` tensors on flex with autodiff: the fused kernels take `f32` only, so
//! this checks the composed ops.

use burn::tensor::{DType, Distribution, Tensor, TensorData};
use mlm_core::MaskedCrossEntropyConfig;

mod common;
use common::{device, labels, values};

/// An `f64` tensor of `v`, `[6, 9]`.
fn logits(v: Vec<f64>) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v, [6, 9]), (&device(), DType::F64))
}

#[test]
fn gradient_matches_finite_differences() {
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7);
    let z = TensorData::random::<f64, _, _>([6, 9], Distribution::Normal(0.0, 2.0), &mut rng);
    let z = logits(z.try_into_vec::<f64>().unwrap());
    assert_eq!(z.dtype(), DType::F64);
    let label = [4, -100, 0, 8, -100, 2];
    for smoothing in [0.0, 0.1] {
        let loss = MaskedCrossEntropyConfig::new()
            .with_label_smoothing(smoothing)
            .init()
            .unwrap();
        let at = |z: Tensor<2>| {
            let loss = loss.forward_labels(z, labels(&label)).unwrap().loss;
            loss.into_scalar::<f64>()
        };
        let z0 = z.clone().require_grad();
        let out = loss.forward_labels(z0.clone(), labels(&label)).unwrap();
        let analytic = values::<f64, _>(z0.grad(&out.loss.backward()).unwrap());
        let base = values::<f64, _>(z.clone());
        let h = 1e-6;
        for i in 0..base.len() {
            let shifted = |delta: f64| {
                let mut v = base.clone();
                v[i] += delta;
                at(logits(v))
            };
            let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
            assert!(
                (numeric - analytic[i]).abs() < 1e-7,
                "ε={smoothing} [{i}]: finite difference {numeric} vs autodiff {}",
                analytic[i]
            );
        }
    }
}
