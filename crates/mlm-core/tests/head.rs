//! The MLM head: shapes of every rank, sparse = dense rows, true weight tying
//! (one parameter receives the gradient of both uses), and typed errors.

use burn::module::Param;
use burn::nn::{Embedding, EmbeddingConfig};
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use mlm_core::{
    MaskedCrossEntropy, MaskedTargets, MlmError, MlmHeadConfig, masked_cross_entropy_with_labels,
};

mod common;
use common::{device, values};

fn hidden<const D: usize>(shape: [usize; D]) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), &device())
}

fn ints<const D: usize>(values: Vec<i64>, shape: [usize; D]) -> Tensor<D, Int> {
    Tensor::from_data(TensorData::new(values, shape), &device())
}

#[test]
fn forward_keeps_leading_dimensions_for_any_rank() {
    let device = device();
    let head = MlmHeadConfig::new(8, 11)
        .with_tie_word_embeddings(false)
        .init(&device);
    assert_eq!(head.forward(hidden([5, 8]), None).unwrap().dims(), [5, 11]);
    assert_eq!(
        head.forward(hidden([2, 3, 8]), None).unwrap().dims(),
        [2, 3, 11]
    );
    assert_eq!(
        head.forward(hidden([2, 2, 3, 8]), None).unwrap().dims(),
        [2, 2, 3, 11]
    );
    let plain = MlmHeadConfig::new(8, 11)
        .with_transform(false)
        .with_tie_word_embeddings(false);
    let plain = plain.init(&device);
    assert!(plain.transform.is_none());
    assert_eq!(plain.forward(hidden([3, 8]), None).unwrap().dims(), [3, 11]);
}

#[test]
fn forward_masked_gives_the_dense_rows_at_the_positions() {
    let head = MlmHeadConfig::new(8, 13).init(&device());
    let embedding = hidden([13, 8]);
    let h = hidden([3, 4, 8]);
    let dense = head.forward(h.clone(), Some(embedding.clone())).unwrap();
    let positions = vec![11i64, 0, 5, 6];
    let sparse = head
        .forward_masked(h, ints(positions.clone(), [4]), Some(embedding))
        .unwrap();
    let dense = dense.reshape([12, 13]).select(0, ints(positions, [4]));
    let diff: f32 = (sparse - dense).abs().max().into_scalar();
    assert!(diff < 1e-5, "max |sparse - dense| = {diff}");
}

#[test]
fn checked_targets_give_the_position_path_s_logits_loss_and_gradients_and_refuse_other_shapes() {
    let device = device();
    let head = MlmHeadConfig::new(8, 13).init(&device);
    let embedding = hidden([13, 8]);
    let (positions, true_tokens) = (vec![11i64, 0, 5, 6], vec![3i64, 12, 0, 7]);
    let run = |by_targets: bool| {
        let h: Tensor<3> = Tensor::from_data(h_values(), &device).require_grad();
        let (logits, out) = if by_targets {
            let targets =
                MaskedTargets::new(&positions, &true_tokens, [3, 4], 13, &device).unwrap();
            let logits = head
                .forward_targets(h.clone(), &targets, Some(embedding.clone()))
                .unwrap();
            let out = MaskedCrossEntropy::default()
                .forward_targets(logits.clone(), &targets)
                .unwrap();
            (logits, out)
        } else {
            let logits = head
                .forward_masked(
                    h.clone(),
                    ints(positions.clone(), [4]),
                    Some(embedding.clone()),
                )
                .unwrap();
            let out =
                masked_cross_entropy_with_labels(logits.clone(), ints(true_tokens.clone(), [4]))
                    .unwrap();
            (logits, out)
        };
        let correct: i64 = out.n_correct.clone().into_scalar::<i64>();
        let grad = values::<f32, _>(h.grad(&out.loss.backward()).unwrap());
        (
            values::<f32, _>(logits.inner()),
            values::<f32, _>(out.loss.inner()),
            correct,
            grad,
        )
    };
    // The same numbers bit for bit: one gather, one loss kernel.
    assert_eq!(run(true), run(false));

    let targets = MaskedTargets::new(&positions, &true_tokens, [3, 4], 13, &device).unwrap();
    let refused = head.forward_targets(hidden([4, 4, 8]), &targets, Some(embedding.clone()));
    assert!(matches!(refused, Err(MlmError::ShapeMismatch { actual, .. }) if actual == [4, 4, 8]));
    let refused = MaskedCrossEntropy::default().forward_targets(hidden([3, 13]), &targets);
    assert!(matches!(refused, Err(MlmError::ShapeMismatch { actual, .. }) if actual == [3, 13]));
    // Nothing masked: loss exactly 0 with a zero gradient.
    let none = MaskedTargets::new(&[], &[], [3, 4], 13, &device).unwrap();
    let h = hidden([3, 4, 8]).require_grad();
    let logits = head
        .forward_targets(h.clone(), &none, Some(embedding))
        .unwrap();
    let out = MaskedCrossEntropy::default()
        .forward_targets(logits, &none)
        .unwrap();
    assert_eq!(values::<f32, _>(out.loss.clone().inner()), [0.0]);
    assert!(
        values::<f32, _>(h.grad(&out.loss.backward()).unwrap())
            .iter()
            .all(|&g| g == 0.0)
    );
}

/// Fixed hidden states `[3, 4, 8]`, the same for both paths.
fn h_values() -> TensorData {
    TensorData::new(
        (0..96)
            .map(|i| ((i * 37 % 19) as f32 - 9.0) / 4.0)
            .collect::<Vec<_>>(),
        [3, 4, 8],
    )
}

#[test]
fn tied_decoder_and_embedding_share_one_parameter_and_its_gradient() {
    let device = device();
    let (vocab, d_model) = (17, 6);
    let embedding: Embedding = EmbeddingConfig::new(vocab, d_model).init(&device);
    let head = MlmHeadConfig::new(d_model, vocab).init(&device);
    let ids = ints(vec![3, 9, 9, 16, 0, 4], [2, 3]);
    let labels = ints(vec![5, -100, 9, -100, 1, -100], [2, 3]);
    let loss_with = |weight_for_embedding: Tensor<2>, weight_for_decoder: Tensor<2>| {
        let lookup = Embedding {
            weight: Param::from_tensor(weight_for_embedding),
        };
        let h = lookup.forward(ids.clone());
        let logits = head.forward(h, Some(weight_for_decoder)).unwrap();
        masked_cross_entropy_with_labels(logits, labels.clone())
            .unwrap()
            .loss
    };
    // Tied: the same parameter in both places.
    let w = embedding.weight.val();
    let tied = values::<f32, _>(w.grad(&loss_with(w.clone(), w.clone()).backward()).unwrap());
    // The two uses separately, each with the other detached.
    let w_a = embedding.weight.val().detach().require_grad();
    let via_embedding = values::<f32, _>(
        w_a.grad(&loss_with(w_a.clone(), w_a.clone().detach()).backward())
            .unwrap(),
    );
    let w_b = embedding.weight.val().detach().require_grad();
    let via_decoder = values::<f32, _>(
        w_b.grad(&loss_with(w_b.clone().detach(), w_b.clone()).backward())
            .unwrap(),
    );
    assert!(via_embedding.iter().any(|&g| g != 0.0) && via_decoder.iter().any(|&g| g != 0.0));
    for i in 0..tied.len() {
        let sum = via_embedding[i] + via_decoder[i];
        assert!(
            (tied[i] - sum).abs() < 1e-6,
            "[{i}] tied {} vs {sum}",
            tied[i]
        );
    }
}

#[test]
fn bad_shapes_and_decoder_choices_are_typed_errors() {
    let device = device();
    let tied = MlmHeadConfig::new(8, 11).init(&device);
    assert!(matches!(
        tied.forward(hidden([2, 7]), Some(hidden([11, 8])))
            .unwrap_err(),
        MlmError::ShapeMismatch { what: "hidden", .. }
    ));
    assert!(matches!(
        tied.forward(hidden([2, 8]), Some(hidden([10, 8])))
            .unwrap_err(),
        MlmError::ShapeMismatch {
            what: "tied (the decoder weight)",
            ..
        }
    ));
    assert!(matches!(
        tied.forward(hidden([2, 8]), None).unwrap_err(),
        MlmError::DecoderWeight(_)
    ));
    let own = MlmHeadConfig::new(8, 11)
        .with_tie_word_embeddings(false)
        .init(&device);
    assert!(matches!(
        own.forward(hidden([2, 8]), Some(hidden([11, 8])))
            .unwrap_err(),
        MlmError::DecoderWeight(_)
    ));
    assert_eq!(
        tied.forward_masked(
            hidden([2, 3, 8]),
            ints(vec![0, 6], [2]),
            Some(hidden([11, 8]))
        )
        .unwrap_err(),
        MlmError::PositionOutOfRange {
            position: 6,
            n_rows: 6
        }
    );
    assert_eq!(
        tied.forward_masked(
            hidden([2, 3, 8]),
            ints(vec![-1], [1]),
            Some(hidden([11, 8]))
        )
        .unwrap_err(),
        MlmError::PositionOutOfRange {
            position: -1,
            n_rows: 6
        }
    );
}

#[test]
fn gelu_gradient_is_the_exact_erf_derivative() {
    // d/dx x Φ(x) = Φ(x) + x φ(x); burn's own gelu backward is the tanh form's (~3e-4 off).
    let xs = [-3.0f32, -1.0, -0.3, 0.0, 0.5, 1.7, 4.0];
    let x =
        Tensor::<1>::from_data(TensorData::new(xs.to_vec(), [xs.len()]), &device()).require_grad();
    let grad = x.grad(&mlm_core::gelu(x.clone()).sum().backward()).unwrap();
    let grad: Vec<f32> = grad.into_data().try_into_vec::<f32>().unwrap();
    for (&x, &g) in xs.iter().zip(&grad) {
        let x = f64::from(x);
        let pdf = (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let cdf = 0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2));
        let expected = cdf + x * pdf;
        assert!(
            (f64::from(g) - expected).abs() < 2e-6,
            "x = {x}: {g} vs {expected}"
        );
    }
}

/// erf by its Maclaurin series (|x| ≤ 3 here), accurate to ~1e-12: the test's own oracle.
fn erf(x: f64) -> f64 {
    let (mut term, mut sum) = (x, x);
    for n in 1..200 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}
