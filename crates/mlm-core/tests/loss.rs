//! Masked cross-entropy: the seed's numbers, the gradient `(softmax - onehot) / |M|`
//! against finite differences, shift invariance at ±1e4, the zero-graded contract,
//! and typed errors for bad labels and shapes.

use burn::tensor::{Bool, Distribution, Int, Tensor, TensorData};
use mlm_core::{
    MaskedCrossEntropyConfig, MlmError, Reduction, masked_cross_entropy,
    masked_cross_entropy_with_labels,
};

mod common;
use common::{count, device, labels, logits, scalar, values};

#[test]
fn seed_examples_give_the_seed_numbers() {
    // (2, 1, 0) → p(mat) = 0.6652 → 0.4076; tie → ln 3; runaway (10, 1, 0) → 0.000169.
    for (row, expected) in [
        ([2.0, 1.0, 0.0], 0.407_606),
        ([1.0, 1.0, 1.0], 3f64.ln()),
        ([10.0, 1.0, 0.0], 0.000_168_8),
    ] {
        let out = masked_cross_entropy_with_labels(logits(&[&row]), labels(&[0])).unwrap();
        let loss = scalar(out.loss);
        assert!(
            (loss - expected).abs() < 1e-6 + 1e-4 * expected,
            "{row:?}: {loss}"
        );
    }
}

#[test]
fn mean_over_masked_positions_ignores_visible_tokens() {
    // A 10-token sentence with |M| = 2: the visible rows contribute nothing, whatever they hold.
    let mut rows = vec![[f64::INFINITY, f64::NAN, -1e30]; 10];
    rows[3] = [2.0, 1.0, 0.0];
    rows[7] = [1.0, 1.0, 1.0];
    let rows: Vec<&[f64]> = rows.iter().map(|r| r.as_slice()).collect();
    let mut label = [-100i64; 10];
    label[3] = 0;
    label[7] = 0;
    let z = logits(&rows).require_grad();
    let out = masked_cross_entropy_with_labels(z.clone(), labels(&label)).unwrap();
    assert_eq!(out.n_graded, 2);
    // Row 3: argmax 0 = the true token; row 7 ties, the first index (0) wins and is true too.
    assert_eq!(count(out.n_correct.clone()), 2);
    let expected = (0.407_606 + 3f64.ln()) / 2.0;
    assert!((scalar(out.loss.clone()) - expected).abs() < 1e-5);
    let grad = values::<f64, _>(z.grad(&out.loss.backward()).unwrap());
    for (i, g) in grad.iter().enumerate() {
        if i / 3 != 3 && i / 3 != 7 {
            assert_eq!(*g, 0.0, "visible row {} got gradient", i / 3);
        }
    }
    // (softmax - onehot) / |M| on the graded rows.
    let p = [0.665_241, 0.244_728, 0.090_031];
    let expected_row3 = [(p[0] - 1.0) / 2.0, p[1] / 2.0, p[2] / 2.0];
    for j in 0..3 {
        assert!((grad[9 + j] - expected_row3[j]).abs() < 1e-5);
    }
}

#[test]
fn no_graded_position_gives_zero_loss_and_zero_gradient() {
    let z = logits(&[&[1.0, f64::INFINITY], &[f64::NAN, 0.0]]).require_grad();
    let out = masked_cross_entropy_with_labels(z.clone(), labels(&[-100, -100])).unwrap();
    assert_eq!((out.n_graded, count(out.n_correct.clone())), (0, 0));
    assert_eq!(scalar(out.loss_sum.clone()), 0.0);
    assert_eq!(scalar(out.loss.clone()), 0.0);
    assert_eq!(out.accuracy(), 0.0);
    let grad = values::<f64, _>(
        z.grad(&out.loss.backward())
            .expect("a zero gradient, not none"),
    );
    assert_eq!(grad, vec![0.0; 4]);
}

#[test]
fn adding_1e4_to_a_row_leaves_the_loss_unchanged() {
    let device = device();
    let z: Tensor<2> = Tensor::random([4, 30], Distribution::Normal(0.0, 1.0), &device);
    let label = [3, 29, -100, 0];
    let base = scalar(
        masked_cross_entropy_with_labels(z.clone(), labels(&label))
            .unwrap()
            .loss,
    );
    for offset in [1e4, -1e4] {
        let shifted = z.clone() + offset;
        let loss = scalar(
            masked_cross_entropy_with_labels(shifted, labels(&label))
                .unwrap()
                .loss,
        );
        assert!(loss.is_finite());
        // f32 spacing at 1e4 is ~1e-3: the shift rounds each logit by at most that.
        assert!(
            (loss - base).abs() < 2e-3,
            "offset {offset}: {loss} vs {base}"
        );
    }
}

#[test]
fn targets_with_mask_equal_hf_labels_and_sum_reduction_is_the_sum() {
    let device = device();
    let z: Tensor<3> = Tensor::random([2, 3, 7], Distribution::Normal(0.0, 1.0), &device);
    let hf = Tensor::<2, Int>::from_data(
        TensorData::new(vec![1i64, -100, 6, -100, 0, 3], [2, 3]),
        &device,
    );
    // Ungraded targets may hold anything, even out-of-range ids.
    let targets = Tensor::<2, Int>::from_data(
        TensorData::new(vec![1i64, 999, 6, -7, 0, 3], [2, 3]),
        &device,
    );
    let mask = Tensor::<2, Bool>::from_data(
        TensorData::new(vec![true, false, true, false, true, true], [2, 3]),
        &device,
    );
    let a = masked_cross_entropy_with_labels(z.clone(), hf).unwrap();
    let b = masked_cross_entropy(z.clone(), targets.clone(), mask.clone()).unwrap();
    assert_eq!(a.n_graded, 4);
    assert_eq!(b.n_graded, 4);
    assert_eq!(scalar(a.loss.clone()), scalar(b.loss.clone()));
    let sum = MaskedCrossEntropyConfig::new()
        .with_reduction(Reduction::Sum)
        .init()
        .unwrap()
        .forward(z, targets, mask)
        .unwrap();
    assert!((scalar(sum.loss) - 4.0 * scalar(a.loss)).abs() < 1e-5);
}

#[test]
fn bad_labels_and_shapes_are_typed_errors() {
    let z = || logits(&[&[0.0, 1.0, 2.0], &[0.0, 0.0, 0.0]]);
    assert_eq!(
        masked_cross_entropy_with_labels(z(), labels(&[0, 3])).unwrap_err(),
        MlmError::LabelOutOfRange {
            position: 1,
            label: 3,
            vocab_size: 3
        }
    );
    assert_eq!(
        masked_cross_entropy_with_labels(z(), labels(&[-1, 0])).unwrap_err(),
        MlmError::LabelOutOfRange {
            position: 0,
            label: -1,
            vocab_size: 3
        }
    );
    assert!(matches!(
        masked_cross_entropy_with_labels(z(), labels(&[0, 1, 2])).unwrap_err(),
        MlmError::ShapeMismatch { what: "labels", .. }
    ));
    let mask = Tensor::<1, Bool>::from_data(TensorData::new(vec![true, false], [2]), &device());
    // An out-of-range target is fine where it is not graded, an error where it is.
    assert_eq!(
        masked_cross_entropy(z(), labels(&[1, 5]), mask.clone())
            .unwrap()
            .n_graded,
        1
    );
    assert_eq!(
        masked_cross_entropy(z(), labels(&[5, 1]), mask).unwrap_err(),
        MlmError::LabelOutOfRange {
            position: 0,
            label: 5,
            vocab_size: 3
        }
    );
    assert!(matches!(
        MaskedCrossEntropyConfig::new()
            .with_label_smoothing(1.5)
            .init()
            .unwrap_err(),
        MlmError::InvalidProbability {
            name: "label_smoothing",
            ..
        }
    ));
}
