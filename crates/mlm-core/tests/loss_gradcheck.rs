//! The gradient of the masked cross-entropy against central finite differences, in f64.
//!
//! Its own test binary: burn 0.21's ndarray device keeps one default float dtype per
//! process, so f64 tensors made after an f32 test on the same device compute in f32.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Distribution, ElementConversion, Int, Tensor, TensorData};
use mlm_core::MaskedCrossEntropyConfig;

type B64 = Autodiff<NdArray<f64>>;

fn labels(values: &[i64]) -> Tensor<B64, 1, Int> {
    Tensor::from_data(
        TensorData::new(values.to_vec(), [values.len()]),
        &Default::default(),
    )
}

fn values<Bk: burn::tensor::backend::Backend>(t: Tensor<Bk, 2>) -> Vec<f64> {
    t.into_data().convert::<f64>().into_vec().unwrap()
}

#[test]
fn gradient_matches_finite_differences() {
    let device = Default::default();
    let z: Tensor<B64, 2> = Tensor::random([6, 9], Distribution::Normal(0.0, 2.0), &device);
    let label = [4, -100, 0, 8, -100, 2];
    for smoothing in [0.0, 0.1] {
        let loss = MaskedCrossEntropyConfig::new()
            .with_label_smoothing(smoothing)
            .init()
            .unwrap();
        let at = |z: Tensor<B64, 2>| {
            let loss = loss.forward_labels(z, labels(&label)).unwrap().loss;
            loss.into_scalar().elem::<f64>()
        };
        let z0 = z.clone().require_grad();
        let out = loss.forward_labels(z0.clone(), labels(&label)).unwrap();
        let analytic = values(z0.grad(&out.loss.backward()).unwrap());
        let base = values(z.clone());
        let h = 1e-6;
        for i in 0..base.len() {
            let shifted = |delta: f64| {
                let mut v = base.clone();
                v[i] += delta;
                at(Tensor::from_data(TensorData::new(v, [6, 9]), &device))
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
