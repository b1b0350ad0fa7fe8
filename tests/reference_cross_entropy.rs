//! Masked cross-entropy against PyTorch (`tests/fixtures/cross_entropy.json`, made by
//! `../shared/reference/make_reference.py`): mean, sum, graded count and the gradient of
//! the mean w.r.t. the logits, within 1e-5 relative (1e-6 absolute near 0), on `Autodiff<NdArray>`
//! (plain tensor ops) and on `Autodiff<Flex>` (the fused kernel and its autodiff operation).

mod common;

use burn::backend::{Autodiff, Flex, NdArray};
use burn::tensor::TensorData;
use burn::tensor::backend::AutodiffBackend;
use common::{assert_close, fixture, floats, run_cross_entropy_case};

type B = Autodiff<NdArray>;

#[test]
fn every_reference_case_matches_pytorch() {
    every_case_matches_pytorch::<B>();
}

#[test]
fn every_reference_case_matches_pytorch_with_the_fused_flex_kernel() {
    every_case_matches_pytorch::<Autodiff<Flex>>();
}

fn every_case_matches_pytorch<B: AutodiffBackend>() {
    let reference = fixture("cross_entropy.json");
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 11, "the fixture lost cases");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let got = run_cross_entropy_case::<B>(case, &Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            got.n_graded as u64,
            case["n_graded"].as_u64().unwrap(),
            "{name}: n_graded"
        );
        let expected_mean = case["loss_mean"].as_f64().unwrap() as f32;
        let expected_sum = case["loss_sum"].as_f64().unwrap() as f32;
        assert_close(
            &format!("{name} mean"),
            &[got.mean],
            &[expected_mean],
            1e-5,
            1e-6,
        );
        assert_close(
            &format!("{name} sum"),
            &[got.sum],
            &[expected_sum],
            1e-5,
            1e-6,
        );
        let expected_grad = floats(&case["grad_logits_of_mean"]);
        assert_close(
            &format!("{name} grad"),
            &got.grad,
            &expected_grad,
            1e-5,
            1e-6,
        );
    }
}

#[test]
fn seed_worked_example_is_the_first_case() {
    // logits (2, 1, 0) for mat / car / sky, true = mat: p(mat) = 0.6652, loss 0.4076.
    let reference = fixture("cross_entropy.json");
    let case = &reference["cases"][0];
    assert_eq!(case["name"], "seed_step4");
    let got = run_cross_entropy_case::<B>(case, &Default::default()).unwrap();
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
    use burn::tensor::{Distribution, ElementConversion, Int, Tensor};
    use mlm_core::MaskedCrossEntropyConfig;
    type F = Autodiff<Flex>;
    let device = Default::default();
    let z: Tensor<F, 2> = Tensor::random([5, 37], Distribution::Normal(0.0, 2.0), &device);
    let labels = || Tensor::<F, 1, Int>::from_data([3, -100, 0, 36, 17], &device);
    for smoothing in [0.0, 0.1] {
        let loss = MaskedCrossEntropyConfig::new()
            .with_label_smoothing(smoothing)
            .init()
            .unwrap();
        let at = |z: Tensor<F, 2>| {
            let out = loss.forward_labels(z, labels()).unwrap();
            f64::from(out.loss.into_scalar().elem::<f32>())
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
    data.convert::<f32>().into_vec().unwrap()
}
