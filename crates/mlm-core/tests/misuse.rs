//! What a Burn user met when trying mlm-core from outside the workspace (issue 41), each
//! finding as a test: a tied head on burn-nn's default embedding, positions that alias,
//! padding masked before it was declared, errors that blamed the wrong argument, and a
//! device without autodiff.

use burn::nn::EmbeddingConfig;
use burn::tensor::{Device, Distribution, Int, Tensor};
use mlm_core::{
    MaskedCrossEntropy, MaskedTargets, MaskingConfig, MlmError, MlmHeadConfig,
    masked_cross_entropy_with_labels,
};

mod common;
use common::{device, labels, logits, scalar};

const VOCAB: usize = 1000;
const D_MODEL: usize = 64;

/// The starting loss of a tied head over `weight` `[VOCAB, D_MODEL]`: 4 × 16 hidden states
/// of N(0, 1), every position graded with a uniformly drawn true token.
fn starting_loss(weight: Tensor<2>) -> f64 {
    let device = device();
    let head = MlmHeadConfig::new(D_MODEL, VOCAB).init(&device);
    device.seed(5);
    let hidden = Tensor::<3>::random([4, 16, D_MODEL], Distribution::Normal(0.0, 1.0), &device);
    let positions: Vec<i64> = (0..64).collect();
    let tokens: Vec<i64> = (0..64).map(|i| (i * 389 + 17) % VOCAB as i64).collect();
    let targets = MaskedTargets::new(&positions, &tokens, [4, 16], VOCAB, &device).unwrap();
    let logits = head
        .forward_targets(hidden, &targets, Some(weight))
        .unwrap();
    let out = MaskedCrossEntropy::default()
        .forward_targets(logits, &targets)
        .unwrap();
    scalar(out.loss)
}

#[test]
fn a_tied_head_starts_near_ln_v_on_the_offered_embedding_and_warns_on_burn_nn_s_default() {
    let device = device();
    let head_config = MlmHeadConfig::new(D_MODEL, VOCAB);
    let head = head_config.init(&device);
    let ln_v = (VOCAB as f64).ln();

    // burn-nn's default Embedding draws N(0, 1): logits spread by √64 = 8.
    let default = EmbeddingConfig::new(VOCAB, D_MODEL).init(&device);
    let loss = starting_loss(default.weight.val());
    assert!(loss > ln_v + 8.0, "default embedding starts at {loss}");
    let warning = head
        .tied_scale_warning(&default.weight.val())
        .expect("burn-nn's default embedding is flagged");
    assert!(
        warning.contains("init_tied_embedding") && warning.contains("N(0, 1)"),
        "{warning}"
    );

    // The offered initialiser, BERT's N(0, 0.02): spread 0.16, so within a few hundredths of
    // ln V (the excess of a Gaussian spread σ is about σ²/2 = 0.013).
    let bert = head_config.init_tied_embedding(&device);
    assert_eq!(bert.weight.dims(), [VOCAB, D_MODEL]);
    let loss = starting_loss(bert.weight.val());
    assert!(
        (loss - ln_v).abs() < 0.1,
        "BERT's init starts at {loss}, ln V = {ln_v}"
    );
    assert_eq!(head.tied_scale_warning(&bert.weight.val()), None);
}

#[test]
fn a_seq_len_shorter_than_a_sequence_is_refused_instead_of_aliasing_rows() {
    let mut masker = MaskingConfig::new(20, 1, 0, vec![])
        .with_mlm_probability(1.0)
        .init()
        .unwrap();
    let batch = masker.mask(&[vec![5; 6], vec![7; 6]]).unwrap();
    let too_long = MlmError::SequenceLongerThanSeqLen {
        sequence: 0,
        length: 6,
        seq_len: 5,
    };
    assert_eq!(batch.flat_positions(5).unwrap_err(), too_long);
    assert_eq!(batch.targets(5, 20, &device()).unwrap_err(), too_long);
    assert_eq!(batch.flat_positions(6).unwrap()[6], 6);
    // Positions made some other way that alias are caught when they are checked.
    assert_eq!(
        MaskedTargets::new(&[3, 4, 8, 8], &[5, 5, 7, 7], [2, 6], 20, &device()).unwrap_err(),
        MlmError::DuplicatePosition { position: 8 }
    );
}

#[test]
fn padding_and_mask_tokens_are_never_selected_even_when_unlisted() {
    const PAD: u32 = 0;
    const MASK: u32 = 1;
    // Special ids listed: none. Padding is added before masking, [MASK] appears in the text.
    let mut masker = MaskingConfig::new(30, MASK, PAD, vec![])
        .with_mlm_probability(1.0)
        .init()
        .unwrap();
    let padded = vec![
        vec![4, 5, MASK, 6, PAD, PAD],
        vec![7, PAD, PAD, PAD, PAD, PAD],
    ];
    for _ in 0..50 {
        let batch = masker.mask(&padded).unwrap();
        let selected: Vec<(usize, usize)> = batch.masked_positions.clone();
        assert_eq!(selected, [(0, 0), (0, 1), (0, 3), (1, 0)]);
        for (s, row) in batch.input_ids.iter().enumerate() {
            // Random replacements are never [PAD] or [MASK] drawn as "random".
            for (p, &id) in row.iter().enumerate() {
                if padded[s][p] == PAD {
                    assert_eq!((id, batch.labels[s][p]), (PAD, -100));
                }
            }
        }
    }
    assert_eq!(
        MaskingConfig::new(30, MASK, 30, vec![]).init().unwrap_err(),
        MlmError::TokenIdOutOfVocab {
            name: "pad_token_id",
            id: 30,
            vocab_size: 30
        }
    );
}

#[test]
fn errors_name_the_argument_that_is_wrong() {
    let device = device();
    let head = MlmHeadConfig::new(64, 10).init(&device);
    let tied = Some(Tensor::<2>::zeros([10, 64], &device));
    let hidden = Tensor::<3>::zeros([2, 3, 64], &device);

    // -100 in a MaskedTargets: no claim that -100 would be accepted.
    let ignore = MaskedTargets::new(&[0, 1], &[3, -100], [2, 3], 10, &device).unwrap_err();
    assert!(matches!(
        ignore,
        MlmError::TargetOutOfRange { target: -100, .. }
    ));
    assert!(
        !ignore.to_string().contains("is not the ignore index"),
        "{ignore}"
    );

    // Targets checked against vocab 11, a head of vocab 10: the targets are blamed.
    let targets = MaskedTargets::new(&[0, 4], &[3, 10], [2, 3], 11, &device).unwrap();
    let refused = head
        .forward_targets(hidden.clone(), &targets, tied.clone())
        .unwrap_err();
    assert!(
        matches!(&refused, MlmError::ShapeMismatch { what, actual, .. }
            if what.starts_with("targets") && actual == &[11]),
        "{refused}"
    );
    // The loss, given logits of the head's vocabulary 10: both vocabularies are named.
    let logits = Tensor::<2>::zeros([2, 10], &device);
    let refused = MaskedCrossEntropy::default()
        .forward_targets(logits, &targets)
        .unwrap_err();
    assert!(
        matches!(&refused, MlmError::ShapeMismatch { what, .. }
            if what.starts_with("logits and targets")),
        "{refused}"
    );

    // d_model 32 passed to a head of 64: the hidden states as passed, not the gathered rows.
    let targets = MaskedTargets::new(&[0, 4], &[3, 9], [2, 3], 10, &device).unwrap();
    let narrow = Tensor::<3>::zeros([2, 3, 32], &device);
    let refused = head
        .forward_targets(narrow, &targets, tied.clone())
        .unwrap_err();
    assert!(
        matches!(&refused, MlmError::ShapeMismatch { what: "hidden (its d_model)", actual, .. }
            if actual == &[2, 3, 32]),
        "{refused}"
    );
    // Batch and sequence length swapped: the same 6 rows, but the wrong ones; refused.
    let swapped = Tensor::<3>::zeros([3, 2, 64], &device);
    let refused = head.forward_targets(swapped, &targets, tied).unwrap_err();
    assert!(
        matches!(&refused, MlmError::ShapeMismatch {
            what: "hidden (its batch and sequence length)", actual, .. } if actual == &[3, 2, 64]),
        "{refused}"
    );
    assert_eq!(
        MaskingConfig::new(10, 0, 0, vec![]).init().unwrap_err(),
        MlmError::MaskIsPad { id: 0 }
    );
}

#[test]
fn backward_without_autodiff_says_how_to_build_the_device() {
    // The device a user forgets `.autodiff()` on.
    let plain = Device::flex();
    let z = Tensor::<2>::from_floats([[2.0, 1.0, 0.0]], &plain);
    let out =
        masked_cross_entropy_with_labels(z, Tensor::<1, Int>::from_ints([0], &plain)).unwrap();
    let Err(error) = out.backward() else {
        panic!("a loss without autodiff gave gradients");
    };
    assert!(
        matches!(&error, MlmError::NotDifferentiable(reason) if reason.contains(".autodiff()")),
        "{error}"
    );

    // On the autodiff device, but nothing that requires a gradient feeds the loss.
    let untracked = masked_cross_entropy_with_labels(logits(&[&[2.0, 1.0, 0.0]]), labels(&[0]));
    assert!(matches!(
        untracked.unwrap().backward(),
        Err(MlmError::NotDifferentiable(_))
    ));

    // Tracked: the gradient of the seed's example, (softmax − onehot) / 1.
    let z = logits(&[&[2.0f32, 1.0, 0.0]]).require_grad();
    let out = masked_cross_entropy_with_labels(z.clone(), labels(&[0])).unwrap();
    let grad = z.grad(&out.backward().unwrap()).unwrap();
    let grad: Vec<f32> = common::values(grad);
    assert!((grad[0] - (0.665_240_9 - 1.0)).abs() < 1e-6, "{grad:?}");
}
