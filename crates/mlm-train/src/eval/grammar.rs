//! Grammar by minimal pairs: each sentence of a pair scored by its pseudo-log-likelihood
//! ([`mlm_core::PseudoLogLikelihood`], Salazar et al. 2020), the pair right when the
//! grammatical one scores higher (a tie is wrong), accuracy per paradigm and overall.
//!
//! ```text
//! Zorro .txt / BLiMP .jsonl ──read──▶ paradigms ──WordPiece──▶ ids ──PLL, batched──▶
//!   good vs bad ──▶ accuracy per paradigm ──mean──▶ overall (chance: 50 %)
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Device;
use mlm_core::{MlmError, PseudoLogLikelihood, SpecialTokenIds, prefers_grammatical};
use serde::{Deserialize, Serialize};

use crate::data::{Paradigm, Sentence, SubwordTokenizer};
use crate::error::TrainError;
use crate::files::write_json;
use crate::model::BertForMaskedLm;

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
    /// Per paradigm, in file-name order.
    pub paradigms: Vec<ParadigmScore>,
    /// Wall time of the scoring, seconds (tokenizing included).
    pub seconds: f64,
}

impl ParadigmScore {
    /// The verdicts on a paradigm's pairs from their sentences' pseudo-log-likelihoods,
    /// `[good, bad]` for each pair in turn.
    fn of(name: &str, plls: &[f64]) -> Self {
        let (mut correct, mut ties) = (0, 0);
        for pll in plls.chunks_exact(2) {
            correct += usize::from(prefers_grammatical(pll[0], pll[1]));
            ties += usize::from(pll[0] == pll[1]);
        }
        let pairs = plls.len() / 2;
        Self {
            name: name.into(),
            pairs,
            correct,
            ties,
            accuracy: correct as f64 / pairs as f64,
        }
    }
}

impl MinimalPairsScore {
    /// The result as a table: one row per paradigm, then the overall row.
    pub fn table(&self) -> String {
        let width = self
            .paradigms
            .iter()
            .map(|p| p.name.len())
            .max()
            .unwrap_or(0)
            .max(7);
        let mut out = format!("{:<width$}  accuracy  pairs  ties\n", "paradigm");
        for p in &self.paradigms {
            out += &format!(
                "{:<width$}  {:>6.1} %  {:>5}  {:>4}\n",
                p.name,
                100.0 * p.accuracy,
                p.pairs,
                p.ties
            );
        }
        out += &format!(
            "{:<width$}  {:>6.1} %  {:>5}  (mean of {} paradigm{}; chance 50 %)",
            "overall",
            100.0 * self.accuracy,
            self.pairs,
            self.paradigms.len(),
            if self.paradigms.len() == 1 { "" } else { "s" }
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

/// Scores the first `max_pairs` pairs (all with `None`) of every paradigm with `model`, all
/// sentences of all paradigms in one batched [`PseudoLogLikelihood::score`].
///
/// # Errors
/// [`TrainError::MinimalPairs`] for no paradigms or `max_pairs` 0, and naming the file and
/// line of a sentence the tokenizer cannot encode (a word that becomes `[UNK]`, nothing left after normalisation) or one longer than
/// the model's positions; the model's errors.
pub fn score_minimal_pairs(
    model: &BertForMaskedLm,
    tokenizer: &SubwordTokenizer,
    suite: &Path,
    paradigms: &[Paradigm],
    max_pairs: Option<usize>,
    device: &Device,
) -> Result<MinimalPairsScore, TrainError> {
    let started = Instant::now();
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
    let plls = PseudoLogLikelihood::new(special_ids(tokenizer))
        .score(model, &sentences, device)
        .map_err(|error| match error {
            MlmError::InvalidSentence { index, reason } => TrainError::MinimalPairs {
                path: origins[index].0.clone(),
                line: Some(origins[index].1),
                reason,
            },
            other => other.into(),
        })?;
    let mut offset = 0;
    let paradigms: Vec<ParadigmScore> = paradigms
        .iter()
        .map(|paradigm| {
            let scores = &plls[offset..offset + 2 * taken(paradigm)];
            offset += scores.len();
            ParadigmScore::of(&paradigm.name, scores)
        })
        .collect();
    Ok(MinimalPairsScore {
        suite: suite.to_path_buf(),
        accuracy: paradigms.iter().map(|p| p.accuracy).sum::<f64>() / paradigms.len() as f64,
        pairs: paradigms.iter().map(|p| p.pairs).sum(),
        max_pairs,
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
