//! BERT's 80/10/10 corruption: statistical bounds over ≥ 10⁶ candidates, specials and
//! padding never selected, per-sequence bounds, whole words kept whole, determinism,
//! and typed errors for bad configurations.

use mlm_core::{IGNORE_INDEX, MaskedBatch, Masker, MaskingConfig, MlmError};

const PAD: u32 = 0;
const UNK: u32 = 1;
const CLS: u32 = 2;
const SEP: u32 = 3;
const MASK: u32 = 4;
const VOCAB: usize = 30_000;

fn config() -> MaskingConfig {
    MaskingConfig::new(VOCAB, MASK, PAD, vec![UNK, CLS, SEP])
}

/// `[CLS] w… [SEP] [PAD]…`: `words` ordinary ids drawn deterministically, then `pads` pads.
fn sequence(words: usize, pads: usize, salt: u32) -> Vec<u32> {
    let mut ids = vec![CLS];
    ids.extend((0..words as u32).map(|i| 5 + (i * 7919 + salt * 104_729) % (VOCAB as u32 - 5)));
    ids.push(SEP);
    ids.extend(std::iter::repeat_n(PAD, pads));
    ids
}

/// Checks the invariants every batch must keep, whatever the configuration.
fn assert_consistent(input: &[Vec<u32>], batch: &MaskedBatch) {
    assert_eq!(batch.input_ids.len(), input.len());
    for (s, ids) in input.iter().enumerate() {
        assert_eq!(batch.input_ids[s].len(), ids.len(), "length kept");
        for (p, &id) in ids.iter().enumerate() {
            let selected = batch.masked_positions.contains(&(s, p));
            let label = batch.labels[s][p];
            if selected {
                assert_eq!(label, i64::from(id), "graded against the original");
            } else {
                assert_eq!(label, IGNORE_INDEX);
                assert_eq!(batch.input_ids[s][p], id, "unselected tokens unchanged");
            }
        }
    }
}

#[test]
fn split_is_15_percent_then_80_10_10() {
    let mut masker = config().with_seed(7).init().unwrap();
    let (mut candidates, mut selected, mut masked, mut random, mut kept) = (0, 0, 0, 0, 0);
    let mut specials_seen = 0;
    let mut salt = 0;
    while candidates < 1_000_000 {
        let input: Vec<Vec<u32>> = (0..32)
            .map(|_| {
                salt += 1;
                sequence(126, 2, salt)
            })
            .collect();
        let batch = masker.mask(&input).unwrap();
        for &(s, p) in &batch.masked_positions {
            let (original, corrupted) = (input[s][p], batch.input_ids[s][p]);
            assert!(![PAD, CLS, SEP].contains(&original), "special selected");
            selected += 1;
            match corrupted {
                MASK => masked += 1,
                c if c == original => kept += 1,
                c => {
                    assert!(c >= 5, "random replacement {c} is a special id");
                    random += 1;
                }
            }
        }
        candidates += 32 * 126;
        specials_seen += 32 * 4;
    }
    assert!(specials_seen >= 10_000);
    let fraction = selected as f64 / candidates as f64;
    assert!(
        (fraction - 0.15).abs() < 0.002,
        "selected fraction {fraction}"
    );
    let share = |n: usize| n as f64 / selected as f64;
    println!(
        "{candidates} candidates: selected {fraction:.5}; of {selected}: [MASK] {:.5}, random {:.5}, kept {:.5}",
        share(masked),
        share(random),
        share(kept)
    );
    assert!(
        (share(masked) - 0.8).abs() < 0.005,
        "[MASK] share {}",
        share(masked)
    );
    // A random draw equal to the original (p = 1/29 995) counts as kept: within the bound.
    assert!(
        (share(random) - 0.1).abs() < 0.005,
        "random share {}",
        share(random)
    );
    assert!(
        (share(kept) - 0.1).abs() < 0.005,
        "kept share {}",
        share(kept)
    );
}

/// A scheduled rate (`Masker::set_mlm_probability`): the same rate set again draws the same
/// masks as never setting it; a new rate selects at that rate from the next batch on
/// (within 4σ over 256 000 candidates); a rate outside [0, 1] is refused and changes
/// nothing.
#[test]
fn a_rate_set_between_batches_selects_at_that_rate() {
    let input: Vec<Vec<u32>> = (0..64).map(|s| sequence(126, 2, s)).collect();
    let mut fixed = config().with_seed(5).init().unwrap();
    let mut reset = fixed.clone();
    for _ in 0..3 {
        reset.set_mlm_probability(0.15).unwrap();
        assert_eq!(fixed.mask(&input).unwrap(), reset.mask(&input).unwrap());
    }
    for rate in [0.3, 0.05, 0.15] {
        reset.set_mlm_probability(rate).unwrap();
        let (mut selected, mut candidates) = (0, 0);
        while candidates < 256_000 {
            selected += reset.mask(&input).unwrap().masked_positions.len();
            candidates += 64 * 126;
        }
        let fraction = selected as f64 / candidates as f64;
        let sigma = (rate * (1.0 - rate) / candidates as f64).sqrt();
        assert!(
            (fraction - rate).abs() < 4.0 * sigma,
            "rate {rate}: selected {fraction}"
        );
    }
    for bad in [1.2, -0.1, f64::NAN] {
        assert!(matches!(
            reset.set_mlm_probability(bad),
            Err(MlmError::InvalidProbability {
                name: "mlm_probability",
                ..
            })
        ));
        assert_eq!(reset.config().mlm_probability, 0.15, "unchanged");
    }
}

#[test]
fn every_selected_token_is_graded_and_nothing_else_changes() {
    let mut masker = config().with_seed(0).init().unwrap();
    let input: Vec<Vec<u32>> = (0..50)
        .map(|s| sequence(1 + s % 20, s % 5, s as u32))
        .collect();
    let batch = masker.mask(&input).unwrap();
    assert_consistent(&input, &batch);
    assert_eq!(batch.true_tokens().len(), batch.masked_positions.len());
    let flat = batch.flat_positions(30).unwrap();
    let (s, p) = batch.masked_positions[0];
    assert_eq!(flat[0], (s * 30 + p) as i64);
}

#[test]
fn one_token_sequences_still_get_their_prediction() {
    let mut masker = config().with_seed(3).init().unwrap();
    let input: Vec<Vec<u32>> = (0..1000).map(|s| sequence(1, 3, s)).collect();
    let batch = masker.mask(&input).unwrap();
    assert_eq!(batch.masked_positions.len(), 1000);
    assert!(batch.masked_positions.iter().all(|&(_, p)| p == 1));
    // A sequence of specials only has nothing to predict.
    let batch = masker.mask(&[vec![CLS, SEP, PAD]]).unwrap();
    assert!(batch.masked_positions.is_empty());
}

#[test]
fn min_and_max_predictions_per_sequence_hold() {
    let mut masker = config()
        .with_min_predictions_per_seq(3)
        .with_max_predictions_per_seq(Some(5))
        .with_mlm_probability(0.5)
        .init()
        .unwrap();
    let input: Vec<Vec<u32>> = (0..500)
        .map(|s| sequence(2 + s as usize % 40, 1, s))
        .collect();
    let batch = masker.mask(&input).unwrap();
    assert_consistent(&input, &batch);
    for (s, ids) in input.iter().enumerate() {
        let n = batch
            .masked_positions
            .iter()
            .filter(|&&(q, _)| q == s)
            .count();
        assert!(n <= 5, "sequence {s}: {n} > max");
        assert!(n >= 3.min(ids.len() - 3), "sequence {s}: {n} < min");
    }
}

#[test]
fn whole_words_are_selected_together_or_not_at_all() {
    // Vocabulary: 0..5 specials, odd ids ≥ 5 start words, even ids ≥ 6 are "##" pieces.
    let tokens: Vec<String> = (0..VOCAB)
        .map(|id| {
            if id >= 6 && id % 2 == 0 {
                format!("##p{id}")
            } else {
                format!("w{id}")
            }
        })
        .collect();
    let wordpiece = config()
        .with_whole_word_mask(true)
        .init()
        .unwrap()
        .with_wordpiece_vocab(&tokens)
        .unwrap();
    // The same words in byte-level BPE: a word starts with `Ġ`, its other pieces do not.
    let byte_level: Vec<bool> = tokens
        .iter()
        .map(|t| t.strip_prefix("##").map_or(format!("Ġ{t}"), String::from))
        .map(|t| !t.starts_with('Ġ'))
        .collect();
    let bpe = config()
        .with_whole_word_mask(true)
        .init()
        .unwrap()
        .with_word_continuations(byte_level)
        .unwrap();
    // Words of 1–3 pieces: [w][w ##][w ## ##] repeated.
    let words: Vec<Vec<u32>> = (0..40)
        .map(|i| match i % 3 {
            0 => vec![7],
            1 => vec![9, 10],
            _ => vec![11, 12, 14],
        })
        .collect();
    let mut ids = vec![CLS];
    let mut word_of = vec![None];
    for (w, pieces) in words.iter().enumerate() {
        ids.extend(pieces);
        word_of.extend(std::iter::repeat_n(Some(w as u32), pieces.len()));
    }
    ids.push(SEP);
    word_of.push(None);
    let input = vec![ids; 200];
    let word_ids = vec![word_of.clone(); 200];
    let (mut wordpiece, mut bpe) = (wordpiece, bpe);
    for batch in [
        wordpiece.mask(&input).unwrap(),
        wordpiece.mask_with_word_ids(&input, &word_ids).unwrap(),
        bpe.mask(&input).unwrap(),
    ] {
        assert_consistent(&input, &batch);
        assert!(!batch.masked_positions.is_empty());
        for s in 0..200 {
            for w in 0..40u32 {
                let selected: Vec<bool> = (0..word_of.len())
                    .filter(|&p| word_of[p] == Some(w))
                    .map(|p| batch.masked_positions.contains(&(s, p)))
                    .collect();
                assert!(
                    selected.iter().all(|&x| x == selected[0]),
                    "word {w} split: {selected:?}"
                );
            }
        }
    }
    let mut no_vocab = config().with_whole_word_mask(true).init().unwrap();
    assert_eq!(
        no_vocab.mask(&input[..1]).unwrap_err(),
        MlmError::MissingWordIds { sequence: 0 }
    );
}

#[test]
fn same_seed_same_masks_other_seed_other_masks() {
    let input: Vec<Vec<u32>> = (0..20).map(|s| sequence(60, 0, s)).collect();
    let run = |seed| {
        config()
            .with_seed(seed)
            .init()
            .unwrap()
            .mask(&input)
            .unwrap()
    };
    assert_eq!(run(0), run(0));
    assert_ne!(run(0), run(1));
    // The generator advances: two batches from one masker differ (dynamic masking).
    let mut masker: Masker = config().init().unwrap();
    assert_ne!(masker.mask(&input).unwrap(), masker.mask(&input).unwrap());
}

#[test]
fn bad_configurations_are_typed_errors() {
    let err = |c: MaskingConfig| c.init().unwrap_err();
    assert_eq!(
        err(config().with_mlm_probability(1.2)),
        MlmError::InvalidProbability {
            name: "mlm_probability",
            value: 1.2
        }
    );
    assert!(matches!(
        err(config().with_random_replace_prob(f64::NAN)),
        MlmError::InvalidProbability {
            name: "random_replace_prob",
            ..
        }
    ));
    assert!(matches!(
        err(config()
            .with_mask_replace_prob(0.9)
            .with_random_replace_prob(0.2)),
        MlmError::ReplaceProbabilitiesExceedOne { .. }
    ));
    assert_eq!(
        err(MaskingConfig::new(10, 10, 0, vec![])),
        MlmError::TokenIdOutOfVocab {
            name: "mask_token_id",
            id: 10,
            vocab_size: 10
        }
    );
    assert_eq!(
        err(MaskingConfig::new(10, 4, 0, vec![12])),
        MlmError::TokenIdOutOfVocab {
            name: "special_token_ids",
            id: 12,
            vocab_size: 10
        }
    );
    assert!(matches!(
        err(MaskingConfig::new(0, 0, 0, vec![])),
        MlmError::TokenIdOutOfVocab { .. } | MlmError::VocabTooSmall { .. }
    ));
    assert!(matches!(
        err(MaskingConfig::new(2, 0, 1, vec![])),
        MlmError::VocabTooSmall { vocab_size: 2, .. }
    ));
    assert_eq!(
        err(MaskingConfig::new(10, 3, 3, vec![])),
        MlmError::MaskIsPad { id: 3 }
    );
    assert_eq!(
        err(config()
            .with_min_predictions_per_seq(4)
            .with_max_predictions_per_seq(Some(2))),
        MlmError::InvalidPredictionBounds { min: 4, max: 2 }
    );
    let mut masker = config().init().unwrap();
    assert_eq!(
        masker.mask(&[vec![CLS, 30_000, SEP]]).unwrap_err(),
        MlmError::TokenIdOutOfVocab {
            name: "input id",
            id: 30_000,
            vocab_size: VOCAB
        }
    );
}
