//! Pseudo-log-likelihood scoring against a model whose logits are known in closed form: each
//! sentence's PLL is the f64 sum of the log-softmax of those logits at every masked copy, and
//! every copy the scorer builds is `[CLS] … [MASK] … [SEP]` with its padding masked out. The
//! logits see how many tokens a copy masks, so PLL-word-l2r's copies (the scored token and
//! the rest of its word masked) are checked by value too.

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use mlm_core::{
    MaskedLanguageModel, MaskedTargets, MlmError, PseudoLogLikelihood, SpecialTokenIds,
};

const VOCAB: usize = 12;
const SPECIAL: SpecialTokenIds = SpecialTokenIds {
    pad_id: 0,
    cls_id: 2,
    sep_id: 3,
    mask_id: 4,
};

/// Ids 9, 10 and 11 continue a word (WordPiece's `##` pieces); the others start one.
const CONTINUATIONS: [bool; VOCAB] = [
    false, false, false, false, false, false, false, false, false, true, true, true,
];

/// The logits at a masked position from its two neighbours and the copy's number of masks:
/// +2 for the left one, +1 for the right one, +0.5 for the id equal to the number of masks,
/// and a slope over the vocabulary, so that no two tokens tie.
fn neighbour_logits(left: u32, right: u32, masks: usize) -> Vec<f64> {
    (0..VOCAB as u32)
        .map(|v| {
            2.0 * f64::from(u8::from(v == left))
                + f64::from(u8::from(v == right))
                + 0.5 * f64::from(u8::from(v as usize == masks))
                + 0.1 * f64::from(v)
        })
        .collect()
}

/// Checks each copy it is given, then answers with [`neighbour_logits`].
struct NeighbourModel;

impl MaskedLanguageModel for NeighbourModel {
    fn masked_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
        targets: &MaskedTargets,
    ) -> Result<Tensor<2>, MlmError> {
        let [_, seq] = input_ids.dims();
        let device = input_ids.device();
        let ids: Vec<i64> = input_ids
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap();
        let padding: Vec<bool> = padding_mask.into_data().try_to_vec::<bool>().unwrap();
        let positions: Vec<i64> = targets
            .positions()
            .clone()
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap();
        let mut logits = Vec::new();
        for &p in &positions {
            let (row, col) = (p as usize / seq, p as usize % seq);
            let copy = &ids[row * seq..(row + 1) * seq];
            assert_eq!(copy[0], i64::from(SPECIAL.cls_id));
            assert_eq!(
                copy[col],
                i64::from(SPECIAL.mask_id),
                "the scored position is masked"
            );
            let masks = copy.iter().filter(|&&id| id == 4).count();
            assert!(
                copy[col..col + masks].iter().all(|&id| id == 4),
                "the masks are one run from the scored position"
            );
            let sep = copy
                .iter()
                .position(|&id| id == i64::from(SPECIAL.sep_id))
                .unwrap();
            for (s, &pad) in padding[row * seq..(row + 1) * seq].iter().enumerate() {
                assert_eq!(pad, s > sep, "padding exactly after [SEP]");
            }
            let row_logits = neighbour_logits(copy[col - 1] as u32, copy[col + 1] as u32, masks);
            logits.extend(row_logits.iter().map(|&z| z as f32));
        }
        Ok(Tensor::from_data(
            TensorData::new(logits, [positions.len(), VOCAB]),
            &device,
        ))
    }

    fn vocab_size(&self) -> usize {
        VOCAB
    }

    fn max_seq_len(&self) -> usize {
        8
    }
}

/// The PLL of `sentence` under [`NeighbourModel`], by hand in f64: each token masked alone,
/// or with `word_l2r` together with the continuation pieces after it.
fn expected_pll(sentence: &[u32], word_l2r: bool) -> f64 {
    let framed: Vec<u32> = [SPECIAL.cls_id]
        .into_iter()
        .chain(sentence.iter().copied())
        .chain([SPECIAL.sep_id])
        .collect();
    (1..framed.len() - 1)
        .map(|i| {
            let mut end = i + 1;
            while word_l2r && end < framed.len() - 1 && CONTINUATIONS[framed[end] as usize] {
                end += 1;
            }
            // The right neighbour is a mask when the word goes on.
            let right = if end > i + 1 {
                SPECIAL.mask_id
            } else {
                framed[i + 1]
            };
            let z = neighbour_logits(framed[i - 1], right, end - i);
            let log_sum = z.iter().map(|z| z.exp()).sum::<f64>().ln();
            z[framed[i] as usize] - log_sum
        })
        .sum()
}

#[test]
fn each_sentence_scores_the_sum_of_its_masked_log_probabilities() {
    let sentences = vec![vec![5, 6, 7], vec![9], vec![5, 5, 11, 10, 6, 8], vec![7, 6]];
    for max_batch_tokens in [1, 20, 8192] {
        let scorer = PseudoLogLikelihood {
            max_batch_tokens,
            ..PseudoLogLikelihood::new(SPECIAL)
        };
        let plls = scorer
            .score(&NeighbourModel, &sentences, &Device::flex())
            .unwrap();
        for (sentence, pll) in sentences.iter().zip(plls) {
            let expected = expected_pll(sentence, false);
            assert!(
                (pll - expected).abs() < 1e-5,
                "{sentence:?}: {pll} vs {expected}"
            );
        }
    }
}

#[test]
fn pll_word_l2r_masks_the_rest_of_each_word_with_its_token() {
    // Words of one to three pieces, one word ending the sentence, one leading continuation.
    let sentences = vec![
        vec![5, 9, 10, 6],
        vec![7, 11],
        vec![6, 5, 9, 9, 9],
        vec![9, 5],
        vec![5, 6, 7],
    ];
    let device = Device::flex();
    for max_batch_tokens in [1, 8192] {
        let scorer = PseudoLogLikelihood {
            max_batch_tokens,
            ..PseudoLogLikelihood::new(SPECIAL)
        };
        let l2r = scorer
            .score_word_l2r(&NeighbourModel, &sentences, &CONTINUATIONS, &device)
            .unwrap();
        let plain = scorer.score(&NeighbourModel, &sentences, &device).unwrap();
        for ((sentence, l2r), plain) in sentences.iter().zip(&l2r).zip(&plain) {
            let expected = expected_pll(sentence, true);
            assert!(
                (l2r - expected).abs() < 1e-5,
                "{sentence:?}: {l2r} vs {expected}"
            );
            // Multi-piece words score otherwise than under the PLL; one-piece words alike.
            let multi_piece = sentence[1..].iter().any(|&id| CONTINUATIONS[id as usize]);
            assert_eq!((l2r - plain).abs() > 1e-3, multi_piece, "{sentence:?}");
        }
    }
    let error = PseudoLogLikelihood::new(SPECIAL)
        .score_word_l2r(&NeighbourModel, &sentences, &CONTINUATIONS[..11], &device)
        .unwrap_err();
    assert!(error.to_string().contains("is_continuation"), "{error}");
}

#[test]
fn unscorable_sentences_are_refused_before_any_forward_pass() {
    let scorer = PseudoLogLikelihood::new(SPECIAL);
    let device = Device::flex();
    let refuse = |sentences: Vec<Vec<u32>>| {
        scorer
            .score(&NeighbourModel, &sentences, &device)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refuse(vec![vec![5], vec![]]),
        "sentence 1: 0 tokens; the model scores 1 to 6 (its positions less [CLS] and [SEP])"
    );
    assert!(refuse(vec![vec![5; 7]]).starts_with("sentence 0: 7 tokens"));
    assert!(
        refuse(vec![vec![5, 12]])
            .contains("sentence 0: token id 12 is outside the vocabulary [0, 12)")
    );
    let bad_special = PseudoLogLikelihood::new(SpecialTokenIds {
        mask_id: 40,
        ..SPECIAL
    });
    let error = bad_special
        .score(&NeighbourModel, &[vec![5]], &device)
        .unwrap_err();
    assert!(error.to_string().contains("mask_id = 40"), "{error}");
    assert_eq!(
        scorer.score(&NeighbourModel, &[], &device).unwrap(),
        Vec::<f64>::new()
    );
}
