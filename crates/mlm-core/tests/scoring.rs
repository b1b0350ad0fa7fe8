//! Pseudo-log-likelihood scoring against a model whose logits are known in closed form: each
//! sentence's PLL is the f64 sum of the log-softmax of those logits at every masked copy, and
//! every copy the scorer builds is `[CLS] … [MASK] … [SEP]` with its padding masked out.

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

/// The logits at a masked position from its two neighbours: +2 for the left one, +1 for the
/// right one, and a slope over the vocabulary, so that no two tokens tie.
fn neighbour_logits(left: u32, right: u32) -> Vec<f64> {
    (0..VOCAB as u32)
        .map(|v| {
            2.0 * f64::from(u8::from(v == left))
                + f64::from(u8::from(v == right))
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
            assert_eq!(
                copy.iter().filter(|&&id| id == 4).count(),
                1,
                "one mask per copy"
            );
            let sep = copy
                .iter()
                .position(|&id| id == i64::from(SPECIAL.sep_id))
                .unwrap();
            for (s, &pad) in padding[row * seq..(row + 1) * seq].iter().enumerate() {
                assert_eq!(pad, s > sep, "padding exactly after [SEP]");
            }
            let row_logits = neighbour_logits(copy[col - 1] as u32, copy[col + 1] as u32);
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

/// The PLL of `sentence` under [`NeighbourModel`], by hand in f64.
fn expected_pll(sentence: &[u32]) -> f64 {
    let framed: Vec<u32> = [SPECIAL.cls_id]
        .into_iter()
        .chain(sentence.iter().copied())
        .chain([SPECIAL.sep_id])
        .collect();
    (1..framed.len() - 1)
        .map(|i| {
            let z = neighbour_logits(framed[i - 1], framed[i + 1]);
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
            let expected = expected_pll(sentence);
            assert!(
                (pll - expected).abs() < 1e-5,
                "{sentence:?}: {pll} vs {expected}"
            );
        }
    }
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
