//! Grammar by minimal pairs: each sentence of a pair scored by its pseudo-log-likelihood
//! ([`mlm_core::PseudoLogLikelihood`], Salazar et al. 2020), the pair right when the
//! grammatical one scores higher (a tie is wrong), accuracy per paradigm and overall, each
//! beside the word-frequency baseline's ([`UnigramScorer`]).
//!
//! ```text
//! Zorro .txt / BLiMP .jsonl ──read──▶ paradigms ──WordPiece──▶ ids ──PLL, batched──▶
//!   good vs bad ──▶ accuracy per paradigm ──mean──▶ overall (chance: 50 %)
//!                                      └──Σ log p_unigram──▶ the baseline's, the same way
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Device;
use clap::ValueEnum;
use mlm_core::{MlmError, PseudoLogLikelihood, SpecialTokenIds, prefers_grammatical};
use serde::{Deserialize, Serialize};

use crate::data::{Paradigm, Sentence, SubwordTokenizer};
use crate::error::TrainError;
use crate::files::write_json;
use crate::model::MaskedLm;

use super::UnigramScorer;

/// How a sentence of a pair is scored (`--scoring`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Scoring {
    /// The pseudo-log-likelihood: each token masked alone (Salazar et al. 2020, §2.1).
    #[default]
    Pll,
    /// PLL-word-l2r: each token masked with the later pieces of its word (Kauf & Ivanova
    /// 2023, §3).
    PllWordL2r,
}

impl std::fmt::Display for Scoring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pll => "pll",
            Self::PllWordL2r => "pll-word-l2r",
        })
    }
}

/// How a suite is scored beside the model: how many pairs, which score, which baseline.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScoringOptions<'a> {
    /// At most this many pairs of each paradigm, the first ones (`None`: all).
    pub max_pairs: Option<usize>,
    /// The sentence score.
    pub scoring: Scoring,
    /// The word-frequency baseline to score the same pairs with, if any.
    pub unigram: Option<&'a UnigramScorer>,
}

/// One paradigm's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParadigmScore {
    /// The paradigm (its file's stem).
    pub name: String,
    /// Pairs scored.
    pub pairs: usize,
    /// Pairs whose grammatical sentence scored strictly higher.
    pub correct: usize,
    /// Pairs whose two sentences scored the same (counted as wrong).
    pub ties: usize,
    /// `correct / pairs`.
    pub accuracy: f64,
    /// The word-frequency baseline's accuracy on the same pairs ([`UnigramScorer`], ties
    /// wrong); `null` for a run without training counts (an imported one).
    #[serde(default)]
    pub unigram_accuracy: Option<f64>,
}

/// A suite's result: per paradigm and overall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinimalPairsScore {
    /// The file or folder scored.
    pub suite: PathBuf,
    /// The mean of the paradigms' accuracies (Zorro's and BLiMP's overall score; chance is
    /// 0.5).
    pub accuracy: f64,
    /// Pairs scored, all paradigms together.
    pub pairs: usize,
    /// At most this many pairs per paradigm were scored, the first ones of each file
    /// (`null`: all).
    pub max_pairs: Option<usize>,
    /// The sentence score (a result made before the option existed: `pll`).
    #[serde(default)]
    pub scoring: Scoring,
    /// The mean of the paradigms' `unigram_accuracy`: the word-frequency baseline.
    #[serde(default)]
    pub unigram_accuracy: Option<f64>,
    /// Per paradigm, in file-name order.
    pub paradigms: Vec<ParadigmScore>,
    /// Wall time of the scoring, seconds (tokenizing included).
    pub seconds: f64,
}

impl ParadigmScore {
    /// The verdicts on a paradigm's pairs from their sentences' pseudo-log-likelihoods and,
    /// where there is one, their unigram scores: `[good, bad]` for each pair in turn.
    fn of(name: &str, plls: &[f64], unigram: Option<&[f64]>) -> Self {
        let (correct, ties) = verdicts(plls);
        let pairs = plls.len() / 2;
        Self {
            name: name.into(),
            pairs,
            correct,
            ties,
            accuracy: correct as f64 / pairs as f64,
            unigram_accuracy: unigram.map(|scores| verdicts(scores).0 as f64 / pairs as f64),
        }
    }
}

/// `(right, tied)` pairs of `[good, bad]` scores.
fn verdicts(scores: &[f64]) -> (usize, usize) {
    scores.chunks_exact(2).fold((0, 0), |(right, tied), pair| {
        (
            right + usize::from(prefers_grammatical(pair[0], pair[1])),
            tied + usize::from(pair[0] == pair[1]),
        )
    })
}

impl MinimalPairsScore {
    /// The result as a table: one row per paradigm, then the overall row; the `unigram`
    /// column is the word-frequency baseline's accuracy.
    pub fn table(&self) -> String {
        let width = self
            .paradigms
            .iter()
            .map(|p| p.name.len())
            .max()
            .unwrap_or(0)
            .max(7);
        let percent =
            |share: Option<f64>| share.map_or("n/a".into(), |s| format!("{:.1} %", 100.0 * s));
        let mut out = format!("{:<width$}  accuracy   unigram  pairs  ties\n", "paradigm");
        for p in &self.paradigms {
            out += &format!(
                "{:<width$}  {:>8}  {:>8}  {:>5}  {:>4}\n",
                p.name,
                percent(Some(p.accuracy)),
                percent(p.unigram_accuracy),
                p.pairs,
                p.ties
            );
        }
        out += &format!(
            "{:<width$}  {:>8}  {:>8}  {:>5}  (mean of {} paradigm{}; chance 50 %; unigram: {})",
            "overall",
            percent(Some(self.accuracy)),
            percent(self.unigram_accuracy),
            self.pairs,
            self.paradigms.len(),
            if self.paradigms.len() == 1 { "" } else { "s" },
            match self.unigram_accuracy {
                Some(_) => "the word-frequency baseline of the run's training tokens",
                None => "n/a, the run has no training counts",
            }
        );
        out
    }

    /// Writes the result as pretty JSON, atomically.
    ///
    /// # Errors
    /// [`TrainError::Io`] / [`TrainError::Json`] naming `path`.
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        write_json(path, self)
    }
}

/// Scores the first `options.max_pairs` pairs (all with `None`) of every paradigm with
/// `model`, all sentences of all paradigms in one batched [`PseudoLogLikelihood`] call, and
/// with `options.unigram` (the word-frequency baseline) where one is given.
///
/// # Errors
/// [`TrainError::MinimalPairs`] for no paradigms or `max_pairs` 0, and naming the file and
/// line of a sentence the tokenizer cannot encode (a word that becomes `[UNK]`, nothing left after normalisation) or one longer than
/// the model's positions; the model's errors.
pub fn score_minimal_pairs(
    model: &impl MaskedLm,
    tokenizer: &SubwordTokenizer,
    suite: &Path,
    paradigms: &[Paradigm],
    options: &ScoringOptions,
    device: &Device,
) -> Result<MinimalPairsScore, TrainError> {
    let started = Instant::now();
    let ScoringOptions {
        max_pairs,
        scoring,
        unigram,
    } = *options;
    if paradigms.is_empty() || max_pairs == Some(0) {
        return Err(TrainError::MinimalPairs {
            path: suite.to_path_buf(),
            line: None,
            reason: "nothing to score: no paradigm, or at most 0 pairs of each".into(),
        });
    }
    let taken = |paradigm: &Paradigm| paradigm.pairs.len().min(max_pairs.unwrap_or(usize::MAX));
    // Each encoded sentence with where it came from, to name it if the scorer refuses it.
    let (mut sentences, mut origins) = (Vec::new(), Vec::new());
    for paradigm in paradigms {
        for pair in &paradigm.pairs[..taken(paradigm)] {
            for sentence in [&pair.good, &pair.bad] {
                sentences.push(encode(tokenizer, &paradigm.path, sentence)?);
                origins.push((&paradigm.path, sentence.line));
            }
        }
    }
    let scorer = PseudoLogLikelihood::new(special_ids(tokenizer));
    let plls = match scoring {
        Scoring::Pll => scorer.score(model, &sentences, device),
        Scoring::PllWordL2r => {
            scorer.score_word_l2r(model, &sentences, &tokenizer.word_continuations()?, device)
        }
    }
    .map_err(|error| match error {
        MlmError::InvalidSentence { index, reason } => TrainError::MinimalPairs {
            path: origins[index].0.clone(),
            line: Some(origins[index].1),
            reason,
        },
        other => other.into(),
    })?;
    let frequencies: Option<Vec<f64>> =
        unigram.map(|scorer| sentences.iter().map(|ids| scorer.score(ids)).collect());
    let mut offset = 0;
    let paradigms: Vec<ParadigmScore> = paradigms
        .iter()
        .map(|paradigm| {
            let range = offset..offset + 2 * taken(paradigm);
            offset = range.end;
            let unigram = frequencies.as_ref().map(|scores| &scores[range.clone()]);
            ParadigmScore::of(&paradigm.name, &plls[range], unigram)
        })
        .collect();
    let mean = |share: &dyn Fn(&ParadigmScore) -> Option<f64>| {
        paradigms
            .iter()
            .map(share)
            .sum::<Option<f64>>()
            .map(|sum| sum / paradigms.len() as f64)
    };
    Ok(MinimalPairsScore {
        suite: suite.to_path_buf(),
        accuracy: mean(&|p| Some(p.accuracy)).unwrap_or_default(),
        unigram_accuracy: mean(&|p| p.unigram_accuracy),
        pairs: paradigms.iter().map(|p| p.pairs).sum(),
        max_pairs,
        scoring,
        paradigms,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The tokenizer's special ids, as the scorer takes them.
fn special_ids(tokenizer: &SubwordTokenizer) -> SpecialTokenIds {
    SpecialTokenIds {
        cls_id: tokenizer.cls_id,
        sep_id: tokenizer.sep_id,
        mask_id: tokenizer.mask_id,
        pad_id: tokenizer.pad_id,
    }
}

/// The ids of `sentence`, refused where a word becomes `[UNK]` (the scorer checks the length).
fn encode(
    tokenizer: &SubwordTokenizer,
    path: &Path,
    sentence: &Sentence,
) -> Result<Vec<u32>, TrainError> {
    let fault = |reason: String| TrainError::MinimalPairs {
        path: path.to_path_buf(),
        line: Some(sentence.line),
        reason,
    };
    let ids = tokenizer.encode(&sentence.text)?;
    if ids.contains(&tokenizer.unk_id) {
        // The first word that alone becomes [UNK]: what the user must look at.
        let word = sentence
            .text
            .split_whitespace()
            .find(|word| {
                tokenizer
                    .encode(word)
                    .is_ok_and(|ids| ids.contains(&tokenizer.unk_id))
            })
            .unwrap_or(&sentence.text);
        return Err(fault(format!(
            "{word:?} has a character outside the run's vocabulary (it becomes [UNK]), so \
             the sentence cannot be scored as written"
        )));
    }
    Ok(ids)
}
