//! Properties of the loss and the masker over generated inputs (proptest).
//!
//! Loss: non-negative; mean = sum ÷ count; invariant to the order of the rows and to a
//! constant added to a row; each graded row's gradient sums to 0 and every ungraded row's
//! gradient is exactly 0. Masker: never selects a special or padding id, respects the
//! per-sequence bounds, keeps lengths, and grades exactly the selected positions; under span
//! masking its spans are disjoint runs of whole words, free of specials, each all `[MASK]`
//! or none.

use burn::tensor::{Int, Tensor, TensorData};
use mlm_core::{IGNORE_INDEX, MaskingConfig, SpanMaskingConfig, masked_cross_entropy_with_labels};
use proptest::prelude::*;

mod common;
use common::{device, scalar};

/// A `[rows, vocab]` batch of logits in [-30, 30] with labels, each `-100` or in `[0, vocab)`.
#[derive(Debug, Clone)]
struct Case {
    vocab: usize,
    logits: Vec<f32>,
    labels: Vec<i64>,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..8, 1usize..9).prop_flat_map(|(rows, vocab)| {
        let label = prop_oneof![Just(IGNORE_INDEX), 0..vocab as i64];
        (
            prop::collection::vec(-30.0f32..30.0, rows * vocab),
            prop::collection::vec(label, rows),
        )
            .prop_map(move |(logits, labels)| Case {
                vocab,
                logits,
                labels,
            })
    })
}

impl Case {
    fn rows(&self) -> usize {
        self.labels.len()
    }

    fn logits(&self) -> Tensor<2> {
        Tensor::from_data(
            TensorData::new(self.logits.clone(), [self.rows(), self.vocab]),
            &device(),
        )
    }

    fn labels(&self) -> Tensor<1, Int> {
        Tensor::from_data(
            TensorData::new(self.labels.clone(), [self.rows()]),
            &device(),
        )
    }

    /// (mean loss, summed loss, graded count).
    fn loss(&self) -> (f64, f64, usize) {
        let out = masked_cross_entropy_with_labels(self.logits(), self.labels()).unwrap();
        (scalar(out.loss), scalar(out.loss_sum), out.n_graded)
    }

    /// The same rows in the order `order`.
    fn permuted(&self, order: &[usize]) -> Case {
        let v = self.vocab;
        Case {
            vocab: v,
            logits: order
                .iter()
                .flat_map(|&r| self.logits[r * v..(r + 1) * v].iter().copied())
                .collect(),
            labels: order.iter().map(|&r| self.labels[r]).collect(),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn loss_is_non_negative_and_mean_is_sum_over_count(case in case()) {
        let (mean, sum, n) = case.loss();
        let graded = case.labels.iter().filter(|&&l| l != IGNORE_INDEX).count();
        prop_assert_eq!(n, graded);
        prop_assert!(mean >= 0.0 && sum >= 0.0, "mean {} sum {}", mean, sum);
        if n == 0 {
            prop_assert_eq!((mean, sum), (0.0, 0.0));
        } else {
            prop_assert!((mean - sum / n as f64).abs() <= 1e-6 * (1.0 + mean));
        }
    }

    #[test]
    fn permuting_rows_leaves_the_loss_unchanged(
        (case, order) in case().prop_flat_map(|c| {
            let order = Just((0..c.rows()).collect::<Vec<_>>()).prop_shuffle();
            (Just(c), order)
        })
    ) {
        let (a, _, n) = case.loss();
        let (b, _, m) = case.permuted(&order).loss();
        prop_assert_eq!(n, m);
        prop_assert!((a - b).abs() <= 1e-5 * (1.0 + a), "{} vs {}", a, b);
    }

    #[test]
    fn adding_a_constant_to_a_row_leaves_the_loss_unchanged(
        (case, row, shift) in case().prop_flat_map(|c| {
            let rows = c.rows();
            (Just(c), 0..rows, -1000.0f32..1000.0)
        })
    ) {
        let (base, _, _) = case.loss();
        let mut shifted = case.clone();
        for z in &mut shifted.logits[row * case.vocab..(row + 1) * case.vocab] {
            *z += shift;
        }
        let (loss, _, _) = shifted.loss();
        // f32 spacing near 1030 is 6e-5: each shifted logit may round by half of that.
        prop_assert!((loss - base).abs() <= 2e-4 * (1.0 + base), "{} vs {}", loss, base);
    }

    #[test]
    fn graded_row_gradients_sum_to_zero_and_ungraded_rows_get_none(case in case()) {
        let z = case.logits().require_grad();
        let out = masked_cross_entropy_with_labels(z.clone(), case.labels()).unwrap();
        let grad: Vec<f32> = z.grad(&out.loss.backward()).unwrap().into_data().try_into_vec::<f32>().unwrap();
        for (r, &label) in case.labels.iter().enumerate() {
            let row = &grad[r * case.vocab..(r + 1) * case.vocab];
            if label == IGNORE_INDEX {
                prop_assert!(row.iter().all(|&g| g == 0.0), "ungraded row {}: {:?}", r, row);
            } else {
                let sum: f32 = row.iter().sum();
                prop_assert!(sum.abs() <= 1e-6, "graded row {} sums to {}", r, sum);
                // (softmax - onehot) / n: negative only at the true token.
                prop_assert!(row[label as usize] <= 0.0);
            }
        }
    }
}

/// A masker configuration over a vocabulary of 40 ids with its padding id among the specials.
#[derive(Debug, Clone)]
struct MaskerCase {
    config: MaskingConfig,
    sequences: Vec<Vec<u32>>,
}

const VOCAB: u32 = 40;
const PAD: u32 = 0;

fn masker_case() -> impl Strategy<Value = MaskerCase> {
    let specials = prop::collection::vec(0..VOCAB, 0..6);
    let bounds = (0usize..6, prop::option::of(0usize..8))
        .prop_filter("min <= max", |(min, max)| max.is_none_or(|max| *min <= max));
    let probabilities = (0.0f64..=1.0, 0.0f64..=1.0, 0.0f64..=1.0)
        .prop_map(|(p, mask, random)| (p, mask, random * (1.0 - mask)));
    let sequences = prop::collection::vec(prop::collection::vec(0..VOCAB, 0..40), 0..6);
    (
        1..VOCAB,
        specials,
        bounds,
        probabilities,
        any::<u64>(),
        sequences,
    )
        .prop_map(
            |(mask_id, specials, (min, max), (p, mask, random), seed, sequences)| MaskerCase {
                config: MaskingConfig::new(VOCAB as usize, mask_id, PAD, specials)
                    .with_mlm_probability(p)
                    .with_mask_replace_prob(mask)
                    .with_random_replace_prob(random)
                    .with_min_predictions_per_seq(min)
                    .with_max_predictions_per_seq(max)
                    .with_seed(seed),
                sequences,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn masker_keeps_its_invariants(case in masker_case()) {
        let config = &case.config;
        let mut masker = config.init().unwrap();
        let batch = masker.mask(&case.sequences).unwrap();
        let special = |id: u32| {
            id == config.mask_token_id || id == config.pad_token_id || config.special_token_ids.contains(&id)
        };
        prop_assert_eq!(batch.input_ids.len(), case.sequences.len());
        for (s, ids) in case.sequences.iter().enumerate() {
            prop_assert_eq!(batch.input_ids[s].len(), ids.len());
            prop_assert_eq!(batch.labels[s].len(), ids.len());
            let selected: Vec<usize> = batch
                .masked_positions
                .iter()
                .filter(|&&(q, _)| q == s)
                .map(|&(_, p)| p)
                .collect();
            let candidates = ids.iter().filter(|&&id| !special(id)).count();
            let max = config.max_predictions_per_seq.unwrap_or(usize::MAX);
            prop_assert!(selected.len() <= max);
            prop_assert!(selected.len() >= config.min_predictions_per_seq.min(candidates).min(max));
            for (p, &id) in ids.iter().enumerate() {
                let (label, input) = (batch.labels[s][p], batch.input_ids[s][p]);
                if selected.contains(&p) {
                    prop_assert!(!special(id), "special or padding id {} selected", id);
                    prop_assert_eq!(label, i64::from(id), "graded against the original");
                    prop_assert!(
                        input == config.mask_token_id || input == id || !special(input),
                        "replacement {} is special", input
                    );
                } else {
                    prop_assert_eq!(label, IGNORE_INDEX, "unselected position graded");
                    prop_assert_eq!(input, id, "unselected position changed");
                }
            }
        }
        prop_assert_eq!(batch.true_tokens().len(), batch.masked_positions.len());
    }

    #[test]
    fn span_masker_keeps_its_invariants(
        case in masker_case(),
        geometric_p in 0.01f64..=1.0,
        max_span_words in 1usize..12,
    ) {
        let config = case.config.clone().with_span(Some(
            SpanMaskingConfig::new()
                .with_geometric_p(geometric_p)
                .with_max_span_words(max_span_words),
        ));
        // Ids divisible by 3 are `##` continuation pieces, as in the fuzz target.
        let is_piece = |id: u32| id.is_multiple_of(3);
        let tokens: Vec<String> = (0..VOCAB)
            .map(|id| if is_piece(id) { format!("##{id}") } else { format!("w{id}") })
            .collect();
        let mut masker = config.init().unwrap().with_wordpiece_vocab(&tokens).unwrap();
        let batch = masker.mask(&case.sequences).unwrap();
        let special = |id: u32| {
            id == config.mask_token_id || id == config.pad_token_id || config.special_token_ids.contains(&id)
        };
        let mut covered: Vec<(usize, usize)> = batch
            .spans
            .iter()
            .flat_map(|(s, span)| span.clone().map(move |p| (*s, p)))
            .collect();
        covered.sort_unstable();
        prop_assert_eq!(&covered, &batch.masked_positions, "spans cover the selection once");
        for (s, span) in &batch.spans {
            let ids = &case.sequences[*s];
            // Position p continues the word of p - 1.
            let continues = |p: usize| p > 0 && is_piece(ids[p]) && !special(ids[p]) && !special(ids[p - 1]);
            prop_assert!(!span.is_empty() && span.end <= ids.len());
            prop_assert!(!continues(span.start), "span {:?} starts inside a word", span);
            prop_assert!(span.end == ids.len() || !continues(span.end), "span {:?} ends inside a word", span);
            let corrupted = &batch.input_ids[*s][span.clone()];
            let masked = corrupted.iter().filter(|&&id| id == config.mask_token_id).count();
            prop_assert!(masked == 0 || masked == span.len(), "span {:?} partly [MASK]", span);
        }
        let max = config.max_predictions_per_seq.unwrap_or(usize::MAX);
        for (s, ids) in case.sequences.iter().enumerate() {
            let selected = batch.masked_positions.iter().filter(|&&(q, _)| q == s).count();
            prop_assert!(selected <= max);
            for (p, &id) in ids.iter().enumerate() {
                let (label, input) = (batch.labels[s][p], batch.input_ids[s][p]);
                if batch.masked_positions.contains(&(s, p)) {
                    prop_assert!(!special(id), "special or padding id {} selected", id);
                    prop_assert_eq!(label, i64::from(id), "graded against the original");
                } else {
                    prop_assert_eq!(label, IGNORE_INDEX, "unselected position graded");
                    prop_assert_eq!(input, id, "unselected position changed");
                }
            }
        }
    }
}
