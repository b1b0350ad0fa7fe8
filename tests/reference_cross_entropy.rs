//! Masked cross-entropy against PyTorch (`tests/fixtures/cross_entropy.json`, made by
//! `../shared/reference/make_reference.py`): mean, sum, graded count and the gradient of
//! the mean w.r.t. the logits, within 1e-5 relative (1e-6 absolute near 0), on `Autodiff<NdArray>`.

mod common;

use burn::backend::{Autodiff, NdArray};
use common::{assert_close, fixture, floats, run_cross_entropy_case};

type B = Autodiff<NdArray>;

#[test]
fn every_reference_case_matches_pytorch() {
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
