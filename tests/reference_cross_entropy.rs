//! Masked cross-entropy against PyTorch (`tests/fixtures/cross_entropy.json`, made by
//! `../shared/reference/make_reference.py`): mean, sum, graded count and the gradient of
//! the mean w.r.t. the logits, within 1e-5 relative (1e-6 absolute near 0), on flex with
//! autodiff (the fused kernel and its autodiff operation), with and without gradient
//! checkpointing, and on ndarray with autodiff (plain tensor ops) with the `ndarray` feature.

mod common;

use burn::tensor::{Device, TensorData};
use common::{
    assert_close, assert_every_cross_entropy_case_matches_pytorch, fixture, run_cross_entropy_case,
};

/// burn-flex with autodiff: the fused kernel and its autodiff operation.
fn flex_device() -> Device {
    Device::flex().autodiff()
}

#[cfg(feature = "ndarray")]
#[test]
fn every_reference_case_matches_pytorch() {
    let device = common::composed_device();
    assert_every_cross_entropy_case_matches_pytorch("composed", &device, 1e-5, 1e-6);
}

#[test]
fn every_reference_case_matches_pytorch_with_the_fused_flex_kernel() {
    assert_every_cross_entropy_case_matches_pytorch("flex", &flex_device(), 1e-5, 1e-6);
}

/// Gradient checkpointing (`Autodiff<Flex, BalancedCheckpointing>`) takes the same fused
/// kernel and gives the same numbers.
#[test]
fn every_reference_case_matches_pytorch_on_flex_with_gradient_checkpointing() {
    let device = Device::flex().autodiff().gradient_checkpointing();
    assert_every_cross_entropy_case_matches_pytorch("flex balanced", &device, 1e-5, 1e-6);
}

#[test]
fn seed_worked_example_is_the_first_case() {
    // logits (2, 1, 0) for mat / car / sky, true = mat: p(mat) = 0.6652, loss 0.4076.
    let reference = fixture("cross_entropy.json");
    let case = &reference["cases"][0];
    assert_eq!(case["name"], "seed_step4");
    let got = run_cross_entropy_case(case, &flex_device()).unwrap();
    assert!((got.mean - 0.407_606).abs() < 1e-5, "loss {}", got.mean);
    // d loss / d z = softmax - onehot = (0.6652 - 1, 0.2447, 0.0900).
    assert_close(
        "seed grad",
        &got.grad,
        &[-0.334_759, 0.244_728, 0.090_031],
        1e-4,
        1e-6,
    );
}

/// The fused kernel's gradient (the state its autodiff operation saves) against central
/// finite differences of its own forward, in f32 (burn-flex's kernel has no f64 path; the
/// f64 check of the plain ops is `crates/mlm-core/tests/loss_gradcheck.rs`): step 1e-2,
/// whose truncation error (~1e-5 here) and f32 rounding (~1e-5) stay well inside 1e-3.
#[test]
fn the_fused_flex_gradient_matches_finite_differences() {
    use burn::tensor::{Distribution, Int, Tensor};
    use mlm_core::MaskedCrossEntropyConfig;
    let device = flex_device();
    let z: Tensor<2> = Tensor::random([5, 37], Distribution::Normal(0.0, 2.0), &device);
    let labels = || Tensor::<1, Int>::from_data([3, -100, 0, 36, 17], &device);
    for smoothing in [0.0, 0.1] {
        let loss = MaskedCrossEntropyConfig::new()
            .with_label_smoothing(smoothing)
            .init()
            .unwrap();
        let at = |z: Tensor<2>| {
            let out = loss.forward_labels(z, labels()).unwrap();
            f64::from(out.loss.into_scalar::<f32>())
        };
        let z0 = z.clone().require_grad();
        let out = loss.forward_labels(z0.clone(), labels()).unwrap();
        let analytic = floats_of(z0.grad(&out.loss.backward()).unwrap().into_data());
        let base = floats_of(z.clone().into_data());
        let h = 1e-2;
        for i in 0..base.len() {
            let shifted = |delta: f32| {
                let mut v = base.clone();
                v[i] += delta;
                at(Tensor::from_data(TensorData::new(v, [5, 37]), &device))
            };
            let numeric = (shifted(h) - shifted(-h)) / (2.0 * f64::from(h));
            assert!(
                (numeric - f64::from(analytic[i])).abs() < 1e-3,
                "ε={smoothing} [{i}]: finite difference {numeric} vs fused {}",
                analytic[i]
            );
        }
    }
}

fn floats_of(data: TensorData) -> Vec<f32> {
    data.convert::<f32>().try_into_vec::<f32>().unwrap()
}
