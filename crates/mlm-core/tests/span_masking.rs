//! SpanBERT's span masking (Joshi et al. 2020, §3.1), `MaskingConfig::span`: the span-length
//! histogram against the truncated geometric law, specials never selected and never crossed,
//! the overall rate, one 80/10/10 draw per span, labels, seeding and typed errors. The token
//! path's own tests are in `masking.rs`.

use mlm_core::{IGNORE_INDEX, MaskedBatch, Masker, MaskingConfig, MlmError, SpanMaskingConfig};

const PAD: u32 = 0;
const UNK: u32 = 1;
const CLS: u32 = 2;
const SEP: u32 = 3;
const MASK: u32 = 4;
const VOCAB: usize = 30_000;

/// Odd ids ≥ 5 start a word; even ids ≥ 6 are `##` continuation pieces.
fn is_piece(id: u32) -> bool {
    id >= 6 && id.is_multiple_of(2)
}

/// The WordPiece vocabulary of [`is_piece`]: `w5`, `##p6`, `w7`, …
fn tokens() -> Vec<String> {
    (0..VOCAB as u32)
        .map(|id| {
            if is_piece(id) {
                format!("##p{id}")
            } else {
                format!("w{id}")
            }
        })
        .collect()
}

fn span_config() -> MaskingConfig {
    MaskingConfig::new(VOCAB, MASK, PAD, vec![UNK, CLS, SEP])
        .with_span(Some(SpanMaskingConfig::new()))
}

fn span_masker(config: MaskingConfig) -> Masker {
    config
        .init()
        .unwrap()
        .with_wordpiece_vocab(&tokens())
        .unwrap()
}

/// `n_words` words of `1..=max_pieces` pieces each (lengths and ids vary with `salt`),
/// without specials.
fn words(n_words: usize, max_pieces: u32, salt: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    for w in 0..n_words as u32 {
        let hash = (w.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503)) >> 7;
        let start = 5 + 2 * (hash % 14_000);
        ids.push(start);
        for piece in 1..1 + hash % max_pieces {
            ids.push(6 + 2 * ((hash + piece) % 14_000));
        }
    }
    ids
}

/// `[CLS] words [SEP]`.
fn sentence(n_words: usize, max_pieces: u32, salt: u32) -> Vec<u32> {
    let mut ids = vec![CLS];
    ids.extend(words(n_words, max_pieces, salt));
    ids.push(SEP);
    ids
}

/// Words in `span` of sequence `ids`: the positions that start a word.
fn words_in(ids: &[u32], span: &std::ops::Range<usize>) -> usize {
    span.clone().filter(|&p| !is_piece(ids[p])).count()
}

/// The invariants of every span-masked batch: labels, unchanged unselected tokens, spans that
/// are disjoint runs of whole words covering exactly the selected positions, free of
/// specials, each with one 80/10/10 outcome.
fn assert_span_batch(input: &[Vec<u32>], batch: &MaskedBatch, special: impl Fn(u32) -> bool) {
    let mut covered: Vec<(usize, usize)> = batch
        .spans
        .iter()
        .flat_map(|(s, span)| span.clone().map(move |p| (*s, p)))
        .collect();
    covered.sort_unstable();
    assert_eq!(
        covered, batch.masked_positions,
        "spans cover the selection once"
    );
    for (s, ids) in input.iter().enumerate() {
        assert_eq!(batch.input_ids[s].len(), ids.len(), "length kept");
        for (p, &id) in ids.iter().enumerate() {
            if batch.masked_positions.binary_search(&(s, p)).is_ok() {
                assert!(!special(id), "special id {id} selected at ({s}, {p})");
                assert_eq!(
                    batch.labels[s][p],
                    i64::from(id),
                    "graded against the original"
                );
            } else {
                assert_eq!(
                    batch.labels[s][p], IGNORE_INDEX,
                    "unselected position graded"
                );
                assert_eq!(batch.input_ids[s][p], id, "unselected token changed");
            }
        }
    }
    for (s, span) in &batch.spans {
        let ids = &input[*s];
        assert!(!span.is_empty());
        let continues = |p: usize| is_piece(ids[p]) && !special(ids[p]) && !special(ids[p - 1]);
        assert!(!continues(span.start), "span {span:?} starts inside a word");
        assert!(
            span.end == ids.len() || !continues(span.end),
            "span {span:?} ends inside a word"
        );
        let corrupted = &batch.input_ids[*s][span.clone()];
        let masked = corrupted.iter().filter(|&&id| id == MASK).count();
        assert!(
            masked == 0 || masked == span.len(),
            "span {span:?} is partly [MASK]: {corrupted:?}"
        );
    }
}

#[test]
fn the_length_law_is_the_truncated_geometric_with_the_papers_mean() {
    let law = SpanMaskingConfig::new();
    let probabilities: Vec<f64> = (0..=11).map(|k| law.length_probability(k)).collect();
    assert_eq!((probabilities[0], probabilities[11]), (0.0, 0.0));
    assert!((probabilities.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    for k in 1..10 {
        let ratio = probabilities[k + 1] / probabilities[k];
        assert!((ratio - 0.8).abs() < 1e-12, "P({})/P({k}) = {ratio}", k + 1);
    }
    // SpanBERT §3.1: p = 0.2 clipped at 10 "yields a mean span length of 3.8" words.
    let mean: f64 = (1..=10).map(|k| k as f64 * probabilities[k]).sum();
    assert!((mean - 3.8).abs() < 0.005, "mean {mean}");
    let one_word = SpanMaskingConfig::new().with_geometric_p(1.0);
    assert_eq!(one_word.length_probability(1), 1.0);
    assert_eq!(one_word.length_probability(2), 0.0);
}

/// Spans end at their drawn length unless the budget, a special token or an earlier span
/// stops them first. At a 2 % rate in sequences of 50 000 words (about 270 spans each),
/// earlier spans stop about 1 % of them and the sequence's end almost none. The last span
/// of each sequence, which the budget stops, is left out; it is length-biased (a longer span
/// is likelier to be the one that crosses the budget), which is why the sequences are long.
#[test]
fn span_lengths_in_words_follow_the_geometric_law() {
    let law = SpanMaskingConfig::new();
    let mut masker = span_masker(span_config().with_mlm_probability(0.02).with_seed(11));
    let mut histogram = [0usize; 11];
    for salt in 0..40 {
        let input: Vec<Vec<u32>> = (0..2).map(|s| sentence(50_000, 3, 2 * salt + s)).collect();
        let batch = masker.mask(&input).unwrap();
        for (s, ids) in input.iter().enumerate() {
            let spans: Vec<_> = batch.spans.iter().filter(|(q, _)| *q == s).collect();
            for (_, span) in &spans[..spans.len() - 1] {
                histogram[words_in(ids, span)] += 1;
            }
        }
    }
    let n: usize = histogram.iter().sum();
    assert!(n > 20_000, "{n} spans");
    assert_eq!(histogram[0], 0);
    // Pearson's chi-square over the 10 lengths: 9 degrees of freedom, 27.88 at p = 0.001.
    let chi_square: f64 = (1..=10)
        .map(|k| {
            let expected = n as f64 * law.length_probability(k);
            (histogram[k] as f64 - expected).powi(2) / expected
        })
        .sum();
    let shares: Vec<String> = (1..=10)
        .map(|k| format!("{k}: {:.4}", histogram[k] as f64 / n as f64))
        .collect();
    println!("{n} spans, chi-square {chi_square:.2}; shares {shares:?}");
    assert!(chi_square < 27.88, "chi-square {chi_square:.2}");
}

#[test]
fn no_special_token_is_selected_and_no_span_crosses_one() {
    let specials = [PAD, UNK, CLS, SEP, MASK];
    let mut masker = span_masker(span_config().with_mlm_probability(0.5).with_seed(3));
    // Short words between specials: [CLS] a [SEP] b [UNK] c [SEP] [PAD]…, and a lone
    // `##` piece right after a special (a word cut by packing), which starts a word.
    let input: Vec<Vec<u32>> = (0..400)
        .map(|salt| {
            let mut ids = vec![CLS];
            ids.extend(words(1 + salt as usize % 7, 3, salt));
            ids.push(SEP);
            ids.push(8);
            ids.extend(words(2 + salt as usize % 5, 2, salt + 1));
            ids.push(UNK);
            ids.extend(words(1 + salt as usize % 3, 4, salt + 2));
            ids.push(SEP);
            ids.extend(std::iter::repeat_n(PAD, salt as usize % 4));
            ids
        })
        .collect();
    let mut selected = 0;
    for _ in 0..5 {
        let batch = masker.mask(&input).unwrap();
        assert_span_batch(&input, &batch, |id| specials.contains(&id));
        selected += batch.masked_positions.len();
    }
    assert!(selected > 10_000, "{selected} selected");
    let all_special = vec![vec![CLS, SEP, PAD, PAD]];
    assert!(masker.mask(&all_special).unwrap().spans.is_empty());
}

/// Sequences of 62 candidates, as the trainer's. With one-token words the budget is met
/// exactly, `E[B] = 15 %` of the candidates. With words of 1, 2 or 3 pieces (equally often)
/// the last word overshoots it by `(L − 1) / 2` tokens on average, over a length-biased `L`:
/// `(0 + 1 + 3) / 6 = 0.67` tokens a sequence, so 15 % + 0.67 / 62 = 16.08 %.
#[test]
fn the_overall_rate_is_met() {
    for (max_pieces, low, high) in [(1, 0.148, 0.152), (3, 0.1585, 0.163)] {
        let mut masker = span_masker(span_config().with_seed(5));
        let (mut candidates, mut selected) = (0, 0);
        let mut salt = 0;
        while candidates < 1_000_000 {
            let input: Vec<Vec<u32>> = (0..32)
                .map(|_| {
                    salt += 1;
                    let mut ids = sentence(70, max_pieces, salt);
                    ids.truncate(63);
                    ids.push(SEP);
                    ids
                })
                .collect();
            let batch = masker.mask(&input).unwrap();
            candidates += input.iter().map(|ids| ids.len() - 2).sum::<usize>();
            selected += batch.masked_positions.len();
        }
        let rate = selected as f64 / candidates as f64;
        println!("words of 1..={max_pieces} pieces: {selected} / {candidates} = {rate:.5}");
        assert!((low..high).contains(&rate), "rate {rate}");
    }
}

/// Each span is all `[MASK]`, all random tokens or all kept; span-level shares 80/10/10.
#[test]
fn replacement_is_drawn_once_per_span() {
    let mut masker = span_masker(span_config().with_seed(9));
    let (mut mask, mut random, mut kept) = (0usize, 0usize, 0usize);
    let mut salt = 0;
    while mask + random + kept < 40_000 {
        let input: Vec<Vec<u32>> = (0..64)
            .map(|_| {
                salt += 1;
                sentence(100, 3, salt)
            })
            .collect();
        let batch = masker.mask(&input).unwrap();
        assert_span_batch(&input, &batch, |id| id < 5);
        for (s, span) in &batch.spans {
            let original = &input[*s][span.clone()];
            let corrupted = &batch.input_ids[*s][span.clone()];
            if corrupted.iter().all(|&id| id == MASK) {
                mask += 1;
            } else if corrupted == original {
                kept += 1;
            } else {
                // A random draw may equal its original (p = 1/29 995): every other differs.
                let same = corrupted
                    .iter()
                    .zip(original)
                    .filter(|(c, o)| c == o)
                    .count();
                assert!(same < corrupted.len(), "random span {span:?} kept");
                assert!(
                    corrupted.iter().all(|&id| id >= 5),
                    "special drawn: {corrupted:?}"
                );
                random += 1;
            }
        }
    }
    let n = (mask + random + kept) as f64;
    let (mask, random, kept) = (mask as f64 / n, random as f64 / n, kept as f64 / n);
    println!("{n} spans: [MASK] {mask:.4}, random {random:.4}, kept {kept:.4}");
    // Standard errors at 40 000 spans: 0.0020 for 80 %, 0.0015 for 10 %.
    assert!((mask - 0.8).abs() < 0.01, "[MASK] share {mask}");
    assert!((random - 0.1).abs() < 0.008, "random share {random}");
    assert!((kept - 0.1).abs() < 0.008, "kept share {kept}");
}

#[test]
fn word_ids_give_the_words_and_the_bounds_hold() {
    // Word ids instead of a vocabulary: every token its own word unless grouped.
    let ids: Vec<u32> = std::iter::once(CLS)
        .chain((0..60).map(|i| 5 + 2 * i))
        .chain([SEP])
        .collect();
    let word_of: Vec<Option<u32>> = std::iter::once(None)
        .chain((0..60).map(|i| Some(i / 3)))
        .chain([None])
        .collect();
    let mut masker = span_config()
        .with_max_predictions_per_seq(Some(12))
        .with_min_predictions_per_seq(7)
        .with_mlm_probability(0.05)
        .init()
        .unwrap();
    let input = vec![ids; 300];
    let batch = masker
        .mask_with_word_ids(&input, &vec![word_of.clone(); 300])
        .unwrap();
    for s in 0..300 {
        let selected: Vec<usize> = batch
            .masked_positions
            .iter()
            .filter(|&&(q, _)| q == s)
            .map(|&(_, p)| p)
            .collect();
        // A budget of min = 7 tokens met with words of 3: 9 tokens, under max = 12.
        assert_eq!(selected.len(), 9);
        assert!(selected.iter().all(|&p| word_of[p].is_some()));
        for (q, span) in batch.spans.iter().filter(|(q, _)| *q == s) {
            assert_eq!(
                (span.start - 1) % 3,
                0,
                "({q}, {span:?}) starts inside a word"
            );
            assert_eq!(span.len() % 3, 0, "({q}, {span:?}) ends inside a word");
        }
    }
}

#[test]
fn token_masking_spans_are_its_single_tokens() {
    let mut masker = MaskingConfig::new(VOCAB, MASK, PAD, vec![UNK, CLS, SEP])
        .init()
        .unwrap();
    let input: Vec<Vec<u32>> = (0..20).map(|s| sentence(60, 2, s)).collect();
    let batch = masker.mask(&input).unwrap();
    let singles: Vec<(usize, std::ops::Range<usize>)> = batch
        .masked_positions
        .iter()
        .map(|&(s, p)| (s, p..p + 1))
        .collect();
    assert_eq!(batch.spans, singles);
}

#[test]
fn same_seed_same_spans_and_one_word_spans_at_p_one() {
    let input: Vec<Vec<u32>> = (0..20).map(|s| sentence(80, 3, s)).collect();
    let run = |config: MaskingConfig| span_masker(config).mask(&input).unwrap();
    assert_eq!(run(span_config()), run(span_config()));
    assert_ne!(run(span_config()), run(span_config().with_seed(1)));
    let mut masker = span_masker(span_config());
    assert_ne!(masker.mask(&input).unwrap(), masker.mask(&input).unwrap());
    for law in [
        SpanMaskingConfig::new().with_geometric_p(1.0),
        SpanMaskingConfig::new().with_max_span_words(1),
    ] {
        let batch = run(span_config().with_span(Some(law)));
        for (s, span) in &batch.spans {
            assert_eq!(words_in(&input[*s], span), 1, "({s}, {span:?})");
        }
    }
}

#[test]
fn bad_span_settings_and_missing_words_are_typed_errors() {
    let err = |law: SpanMaskingConfig| span_config().with_span(Some(law)).init().unwrap_err();
    for p in [0.0, -0.1, 1.5, f64::NAN] {
        assert!(matches!(
            err(SpanMaskingConfig::new().with_geometric_p(p)),
            MlmError::InvalidSpanMasking {
                name: "geometric_p",
                ..
            }
        ));
    }
    let zero = err(SpanMaskingConfig::new().with_max_span_words(0));
    assert_eq!(
        zero.to_string(),
        "span masking: max_span_words = 0 must be at least 1 (SpanBERT: 10)"
    );
    let mut no_vocab = span_config().init().unwrap();
    assert_eq!(
        no_vocab.mask(&[sentence(5, 1, 0)]).unwrap_err(),
        MlmError::MissingWordIds { sequence: 0 }
    );
}

/// A configuration saved before span masking existed has no `span` field: it reads as token
/// masking. One saved with it reads back equal.
#[test]
fn configs_without_the_span_field_still_load() {
    let saved = serde_json::to_value(span_config()).unwrap();
    let loaded: MaskingConfig = serde_json::from_value(saved.clone()).unwrap();
    assert_eq!(loaded.span, Some(SpanMaskingConfig::new()));
    let mut old = saved;
    old.as_object_mut().unwrap().remove("span");
    let loaded: MaskingConfig = serde_json::from_value(old).unwrap();
    assert_eq!(loaded.span, None);
}
