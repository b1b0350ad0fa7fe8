//! Minimal-pair scoring: mlm-core's pseudo-log-likelihood against transformers' on the tiny
//! HF BERT (`tests/fixtures/tiny_bert/pll.json`, by `scripts/peers/make_pll_reference.py`),
//! batching that changes no score, the verdict and its tie rule, the suite readers and their
//! one-line errors, and `train`/`eval --minimal-pairs` as a user runs them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::tensor::Device;
use common::{micro_config, path_arg, run_to_end, summary, train_command};
use mlm_core::{PseudoLogLikelihood, SpecialTokenIds, prefers_grammatical};
use mlm_train::data::{DataFolder, SubwordTokenizer, read_minimal_pairs};
use mlm_train::eval::grammar::{MinimalPairsScore, score_minimal_pairs};
use mlm_train::eval::{Scoring, ScoringOptions, UnigramScorer};
use mlm_train::model::hf::load_hf;
use mlm_train::{ModelForMaskedLm, TrainError};
use serde::Deserialize;

const BIN: &str = env!("CARGO_BIN_EXE_mlm-train");

#[derive(Deserialize)]
struct Reference {
    special: Special,
    sentences: Vec<Case>,
}

#[derive(Deserialize)]
struct Special {
    pad_id: u32,
    cls_id: u32,
    sep_id: u32,
    mask_id: u32,
}

#[derive(Deserialize)]
struct Case {
    ids: Vec<u32>,
    pll: f64,
    pll_word_l2r: f64,
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny_bert")
}

/// transformers' tiny BERT (without autodiff, as `eval` runs) and its PLL reference.
fn tiny_bert() -> (ModelForMaskedLm, Reference, PseudoLogLikelihood) {
    with_reference(&fixture(), &fixture().join("pll.json"))
}

/// The Hugging Face model in `dir` and the PLL reference at `pll`.
fn with_reference(dir: &Path, pll: &Path) -> (ModelForMaskedLm, Reference, PseudoLogLikelihood) {
    let (_, model) = load_hf(dir, &Device::flex()).unwrap();
    let text = std::fs::read_to_string(pll).unwrap();
    let reference: Reference = serde_json::from_str(&text).unwrap();
    let s = &reference.special;
    let scorer = PseudoLogLikelihood::new(SpecialTokenIds {
        cls_id: s.cls_id,
        sep_id: s.sep_id,
        mask_id: s.mask_id,
        pad_id: s.pad_id,
    });
    (model, reference, scorer)
}

#[test]
fn pseudo_log_likelihoods_match_transformers_to_1e_4_in_one_padded_batch() {
    let (model, reference, scorer) = tiny_bert();
    let sentences: Vec<Vec<u32>> = reference.sentences.iter().map(|c| c.ids.clone()).collect();
    let plls = scorer.score(&model, &sentences, &Device::flex()).unwrap();
    for (case, pll) in reference.sentences.iter().zip(&plls) {
        assert!(
            (pll - case.pll).abs() <= 1e-4,
            "{:?}: PLL {pll:.6} vs transformers {:.6}",
            case.ids,
            case.pll
        );
    }
    // The references are real log-likelihoods of this model: negative, and far apart.
    assert!(reference.sentences.iter().all(|c| c.pll < -1.0));
}

#[test]
fn pll_word_l2r_matches_transformers_to_1e_5_with_the_tokenizers_word_pieces() {
    let (model, reference, scorer) = tiny_bert();
    // The `##` pieces of `tiny_tokenizer`'s vocabulary: its lines 42 to 63.
    let continuations: Vec<bool> = (0..64).map(|id| id >= 42).collect();
    let sentences: Vec<Vec<u32>> = reference.sentences.iter().map(|c| c.ids.clone()).collect();
    let plls = scorer
        .score_word_l2r(&model, &sentences, &continuations, &Device::flex())
        .unwrap();
    for (case, pll) in reference.sentences.iter().zip(&plls) {
        assert!(
            (pll - case.pll_word_l2r).abs() <= 1e-5,
            "{:?}: PLL-word-l2r {pll:.7} vs transformers {:.7}",
            case.ids,
            case.pll_word_l2r
        );
    }
    // The tiny random model barely reads context, yet the four sentences with multi-piece
    // words score 3e-4 to 9e-4 from their PLL: 30 to 90 times the tolerance above.
    let differs = reference
        .sentences
        .iter()
        .filter(|c| (c.pll - c.pll_word_l2r).abs() > 2e-4);
    assert_eq!(differs.count(), 4);
}

#[test]
fn modernbert_pseudo_log_likelihoods_match_transformers_to_1e_5() {
    // The tiny ModernBERT of tests/fixtures/continued (3 layers, two of them local with a
    // window of ±2 tokens; `make_pll_reference.py modernbert`): its longest sentence fills
    // all 24 positions, so the windows cut.
    let continued = fixture().join("../continued");
    let (model, reference, scorer) = with_reference(
        &continued.join("modernbert"),
        &continued.join("modernbert_pll.json"),
    );
    let tokenizer =
        SubwordTokenizer::from_file(&continued.join("modernbert/tokenizer.json")).unwrap();
    let continuations = tokenizer.word_continuations().unwrap();
    let sentences: Vec<Vec<u32>> = reference.sentences.iter().map(|c| c.ids.clone()).collect();
    let device = Device::flex();
    let plls = scorer.score(&model, &sentences, &device).unwrap();
    let word_l2r = scorer
        .score_word_l2r(&model, &sentences, &continuations, &device)
        .unwrap();
    for ((case, pll), l2r) in reference.sentences.iter().zip(&plls).zip(&word_l2r) {
        let what = format!("{:?}", case.ids);
        assert!(
            (pll - case.pll).abs() <= 1e-5,
            "{what}: PLL {pll} vs {}",
            case.pll
        );
        let expected = case.pll_word_l2r;
        assert!(
            (l2r - expected).abs() <= 1e-5,
            "{what}: PLL-word-l2r {l2r} vs {expected}"
        );
    }
    assert_eq!(
        reference.sentences.iter().map(|c| c.ids.len()).max(),
        Some(22)
    );
}

#[test]
fn a_sentence_scores_the_same_alone_and_batched_with_others() {
    let (model, reference, scorer) = tiny_bert();
    let sentences: Vec<Vec<u32>> = reference.sentences.iter().map(|c| c.ids.clone()).collect();
    let device = Device::flex();
    let batched = scorer.score(&model, &sentences, &device).unwrap();
    // A budget of one token: every sentence in a forward pass of its own, unpadded.
    let alone = PseudoLogLikelihood {
        max_batch_tokens: 1,
        ..scorer
    };
    for (sentence, batched) in sentences.iter().zip(&batched) {
        let own = alone
            .score(&model, std::slice::from_ref(sentence), &device)
            .unwrap()[0];
        assert!(
            (own - batched).abs() <= 1e-5,
            "{sentence:?}: {own} alone, {batched} batched"
        );
    }
    // One thread or several: the same batches, the same bits.
    let one_thread = PseudoLogLikelihood {
        threads: 1,
        ..scorer
    };
    let three = PseudoLogLikelihood {
        threads: 3,
        max_batch_tokens: 40,
        ..scorer
    };
    assert_eq!(
        one_thread.score(&model, &sentences, &device).unwrap(),
        batched
    );
    assert_eq!(
        three.score(&model, &sentences, &device).unwrap(),
        PseudoLogLikelihood {
            threads: 1,
            ..three
        }
        .score(&model, &sentences, &device)
        .unwrap()
    );
    // Given in another order, each keeps its score.
    let reversed: Vec<Vec<u32>> = sentences.iter().rev().cloned().collect();
    let back = scorer.score(&model, &reversed, &device).unwrap();
    for (forward, backward) in batched.iter().zip(back.iter().rev()) {
        assert!((forward - backward).abs() <= 1e-5);
    }
}

#[test]
fn a_pair_is_right_only_when_the_grammatical_sentence_scores_strictly_higher() {
    assert!(prefers_grammatical(-10.0, -10.5));
    assert!(!prefers_grammatical(-10.5, -10.0));
    assert!(!prefers_grammatical(-10.0, -10.0), "a tie counts as wrong");
}

#[test]
fn sentences_the_model_cannot_score_are_refused_by_index() {
    let (model, _, scorer) = tiny_bert();
    let device = Device::flex();
    for (sentences, expected) in [
        (
            vec![vec![5], vec![]],
            "sentence 1: 0 tokens; the model scores 1 to 14",
        ),
        (
            vec![vec![5; 15]],
            "sentence 0: 15 tokens; the model scores 1 to 14",
        ),
        (
            vec![vec![5, 64]],
            "sentence 0: token id 64 is outside the vocabulary [0, 64)",
        ),
    ] {
        let error = scorer.score(&model, &sentences, &device).unwrap_err();
        assert!(error.to_string().contains(expected), "{error}");
    }
}

/// A WordPiece vocabulary that fits the tiny BERT's 64 rows: the specials, then words.
fn tiny_tokenizer(dir: &Path) -> SubwordTokenizer {
    let mut vocab: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .map(String::from)
        .to_vec();
    vocab.extend(
        [
            "the", "cat", "cats", "dog", "dogs", "is", "are", "here", ".", "a", "big",
        ]
        .map(String::from),
    );
    vocab.extend(('a'..='z').map(String::from));
    vocab.extend(('a'..='z').take(64 - vocab.len()).map(|c| format!("##{c}")));
    let path = dir.join("vocab.txt");
    std::fs::write(&path, vocab.join("\n")).unwrap();
    SubwordTokenizer::from_file(&path).unwrap()
}

#[test]
fn a_zorro_file_scores_each_pair_by_its_plls_and_counts_a_tie_as_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let tokenizer = tiny_tokenizer(tmp.path());
    let (model, _, scorer) = tiny_bert();
    let device = Device::flex();
    // Odd lines ungrammatical, even lines grammatical; the third pair is one sentence twice.
    let lines = [
        "the cats is here .",
        "the cat is here .",
        "the dog are here .",
        "the dogs are here .",
        "a big cat is here .",
        "a big cat is here .",
    ];
    let suite = tmp.path().join("agreement.txt");
    std::fs::write(&suite, lines.join("\n") + "\n").unwrap();
    let paradigms = read_minimal_pairs(&suite).unwrap();
    // A unigram scorer that has seen "cat" and "dogs" often and everything else once: it
    // prefers the grammatical sentence of the first two pairs, and ties on the third.
    let mut counts = vec![1; tokenizer.vocab_size()];
    for word in ["cat", "dogs"] {
        counts[tokenizer.encode(word).unwrap()[0] as usize] = 10;
    }
    let unigram = UnigramScorer::fit(&counts, &tokenizer.special_ids);
    let all = ScoringOptions {
        unigram: Some(&unigram),
        ..ScoringOptions::default()
    };
    let score = score_minimal_pairs(&model, &tokenizer, &suite, &paradigms, &all, &device).unwrap();
    let ids: Vec<Vec<u32>> = lines.iter().map(|l| tokenizer.encode(l).unwrap()).collect();
    let plls = scorer.score(&model, &ids, &device).unwrap();
    let right = [plls[1] > plls[0], plls[3] > plls[2], false];
    let correct = right.iter().filter(|&&r| r).count();
    assert_eq!(score.paradigms.len(), 1);
    let paradigm = &score.paradigms[0];
    assert_eq!(paradigm.name, "agreement");
    assert_eq!(
        (paradigm.pairs, paradigm.correct, paradigm.ties),
        (3, correct, 1)
    );
    assert_eq!(score.accuracy, correct as f64 / 3.0);
    assert_eq!(paradigm.unigram_accuracy, Some(2.0 / 3.0));
    assert_eq!(score.unigram_accuracy, Some(2.0 / 3.0));
    // --max-pairs 1: the first pair only.
    let first_pair = ScoringOptions {
        max_pairs: Some(1),
        ..ScoringOptions::default()
    };
    let first =
        score_minimal_pairs(&model, &tokenizer, &suite, &paradigms, &first_pair, &device).unwrap();
    assert_eq!(
        (first.pairs, first.paradigms[0].correct),
        (1, usize::from(right[0]))
    );
    // The error of a suite holding `text`, which the model cannot score.
    let refusal = |text: &str| {
        std::fs::write(&suite, text).unwrap();
        let paradigms = read_minimal_pairs(&suite).unwrap();
        score_minimal_pairs(
            &model,
            &tokenizer,
            &suite,
            &paradigms,
            &ScoringOptions::default(),
            &device,
        )
        .unwrap_err()
        .to_string()
    };
    // A word outside the vocabulary is named with its file and line.
    let error = refusal("the cat is here .\nthe cat is h3re .\n");
    assert!(
        error.contains("agreement.txt, line 2: \"h3re\" has a character outside"),
        "{error}"
    );
    // A sentence longer than the model's 14 positions, likewise.
    let error = refusal(&format!("the cat is here .\n{}\n", "cat ".repeat(15)));
    assert!(
        error.contains("agreement.txt, line 2: 15 tokens"),
        "{error}"
    );
}

#[test]
fn zorro_and_blimp_files_read_as_pairs_and_bad_files_name_their_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let zorro = dir.join("a_zorro.txt");
    std::fs::write(&zorro, "the cats is here .\nthe cat is here .\n").unwrap();
    let blimp = dir.join("b_blimp.jsonl");
    std::fs::write(
        &blimp,
        "{\"sentence_good\": \"dogs are here.\", \"sentence_bad\": \"dogs is here.\", \"UID\": \"x\"}\n\n",
    )
    .unwrap();
    std::fs::write(dir.join("notes.md"), "not a suite").unwrap();
    let paradigms = read_minimal_pairs(dir).unwrap();
    let names: Vec<&str> = paradigms.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a_zorro", "b_blimp"]);
    let (zorro_pair, blimp_pair) = (&paradigms[0].pairs[0], &paradigms[1].pairs[0]);
    assert_eq!(
        (zorro_pair.good.text.as_str(), zorro_pair.good.line),
        ("the cat is here .", 2)
    );
    assert_eq!(
        (zorro_pair.bad.text.as_str(), zorro_pair.bad.line),
        ("the cats is here .", 1)
    );
    assert_eq!(blimp_pair.good.text, "dogs are here.");
    assert_eq!(blimp_pair.bad.text, "dogs is here.");

    let bad = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let error = read_minimal_pairs(&path).unwrap_err();
        assert!(
            matches!(error, TrainError::MinimalPairs { .. }),
            "{error:?}"
        );
        error.to_string()
    };
    for (error, expected) in [
        (
            bad("odd.txt", "a\nb\nc\n"),
            "odd.txt, line 3: an odd number of lines",
        ),
        (bad("empty.txt", ""), "empty.txt: no minimal pairs in it"),
        (
            bad("gap.txt", "a\n\nb\nc\n"),
            "gap.txt, line 2: an empty sentence",
        ),
        (
            bad(
                "broken.jsonl",
                "{\"sentence_good\": \"a\", \"sentence_bad\": \"b\"}\n{\"sentence_good\": 1}\n",
            ),
            "broken.jsonl, line 2: not a BLiMP line, a JSON object with the strings \
             sentence_good and sentence_bad (invalid type: integer `1`, expected a string, column",
        ),
        (
            bad("pairs.csv", "a,b\n"),
            "pairs.csv: neither a Zorro .txt nor a BLiMP .jsonl",
        ),
    ] {
        assert!(error.contains(expected), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
    }
    let missing = read_minimal_pairs(&dir.join("missing"))
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("missing: no such file or folder"),
        "{missing}"
    );
    let empty_dir = dir.join("empty");
    std::fs::create_dir(&empty_dir).unwrap();
    let error = read_minimal_pairs(&empty_dir).unwrap_err().to_string();
    assert!(
        error.contains("a folder without .txt (Zorro) or .jsonl (BLiMP) files"),
        "{error}"
    );
}

/// `../shared/minimal-pairs/zorro`, the suite as the project keeps it beside the repository.
fn zorro() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/minimal-pairs/zorro")
}

#[test]
fn the_zorro_suite_reads_as_23_paradigms_of_2000_pairs_grammatical_line_second() {
    let paradigms = read_minimal_pairs(&zorro()).unwrap();
    assert_eq!(paradigms.len(), 23);
    assert!(paradigms.iter().all(|p| p.pairs.len() == 2000));
    let across = paradigms
        .iter()
        .find(|p| p.name == "agreement_subject_verb-across_relative_clause")
        .unwrap();
    assert_eq!(across.pairs[0].bad.text, "the books that i like is poor .");
    assert_eq!(across.pairs[0].good.text, "the book that i like is poor .");
}

#[test]
fn train_and_eval_with_minimal_pairs_report_the_same_score_in_summary_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let suite = tmp.path().join("zorro");
    std::fs::create_dir(&suite).unwrap();
    for (name, lines) in [
        (
            "agreement.txt",
            "the whales is here .\nthe whale is here .\nthe man are old .\nthe men are old .\n",
        ),
        ("order.txt", "sea the is wide .\nthe sea is wide .\n"),
    ] {
        std::fs::write(suite.join(name), lines).unwrap();
    }
    let config = micro_config().with_max_steps(2).with_warmup_steps(1);
    let out = run_to_end(train_command(
        &config,
        &run,
        &["--minimal-pairs", path_arg(&suite)],
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let trained = summary(&run)
        .minimal_pairs
        .expect("summary.json has the score");
    assert_eq!(trained.paradigms.len(), 2);
    assert_eq!(trained.pairs, 3);
    assert!(
        stdout.contains("over 2 paradigms (word-frequency baseline "),
        "{stdout}"
    );
    // The baseline, by hand from the run's own training counts: add-one log unigram
    // probabilities summed; "order" is a reordering, so it ties and counts as wrong.
    let counts = DataFolder::open(&run.join("data")).unwrap().unigram_counts;
    let tokenizer = SubwordTokenizer::from_file(&run.join("tokenizer.json")).unwrap();
    let specials = &tokenizer.special_ids;
    let total = counts
        .iter()
        .enumerate()
        .filter(|(id, _)| !specials.contains(&(*id as u32)))
        .map(|(_, &c)| c as f64 + 1.0)
        .sum::<f64>();
    let log_p = |text: &str| -> f64 {
        let mut p: Vec<f64> = (tokenizer.encode(text).unwrap().iter())
            .map(|&id| ((counts[id as usize] + 1) as f64 / total).ln())
            .collect();
        p.sort_by(f64::total_cmp);
        p.iter().sum()
    };
    let agreement = f64::from(u8::from(
        log_p("the whale is here .") > log_p("the whales is here ."),
    )) + f64::from(u8::from(
        log_p("the men are old .") > log_p("the man are old ."),
    ));
    let by_paradigm: Vec<Option<f64>> = trained
        .paradigms
        .iter()
        .map(|p| p.unigram_accuracy)
        .collect();
    assert_eq!(by_paradigm, [Some(agreement / 2.0), Some(0.0)]);
    assert_eq!(trained.unigram_accuracy, Some(agreement / 4.0));
    // eval scores the same checkpoint to the same numbers, and writes them as JSON.
    let json = tmp.path().join("score.json");
    let eval = Command::new(BIN)
        .args([
            "eval",
            "--run",
            path_arg(&run),
            "--minimal-pairs",
            path_arg(&suite),
        ])
        .args(["--json", path_arg(&json)])
        .output()
        .unwrap();
    assert!(
        eval.status.success(),
        "{}",
        String::from_utf8_lossy(&eval.stderr)
    );
    let table = String::from_utf8_lossy(&eval.stdout);
    assert!(
        table.contains("agreement") && table.contains("overall"),
        "{table}"
    );
    let written: MinimalPairsScore =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(written.paradigms, trained.paradigms);
    assert_eq!(written.scoring, Scoring::Pll);
    // PLL-word-l2r on request, with the same baseline beside it.
    let l2r = Command::new(BIN)
        .args(["eval", "--run", path_arg(&run), "--minimal-pairs"])
        .args([
            path_arg(&suite),
            "--scoring",
            "pll-word-l2r",
            "--json",
            path_arg(&json),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&l2r.stdout);
    assert!(stdout.contains("sentences by pll-word-l2r in"), "{stdout}");
    let written: MinimalPairsScore =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(written.scoring, Scoring::PllWordL2r);
    assert_eq!(written.unigram_accuracy, trained.unigram_accuracy);
    // Bad suites are one-line errors; a bad one given to train trains nothing.
    let bad = tmp.path().join("pairs.csv");
    std::fs::write(&bad, "a,b\n").unwrap();
    let out = Command::new(BIN)
        .args([
            "train",
            "--run",
            path_arg(&tmp.path().join("new")),
            "--minimal-pairs",
            path_arg(&bad),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("pairs.csv: neither a Zorro .txt nor a BLiMP .jsonl"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!tmp.path().join("new").exists());
}
