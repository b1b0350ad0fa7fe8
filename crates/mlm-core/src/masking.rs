//! BERT's input corruption: select ~15 % of the tokens, then 80 % → `[MASK]`,
//! 10 % → a random token, 10 % unchanged; every selected token is graded against
//! its original id.
//!
//! Source: BERT (Devlin et al. 2019), §3.1 "Task #1: Masked LM" and appendix A.1;
//! names and defaults follow Hugging Face's `DataCollatorForLanguageModeling`
//! (`mlm_probability`, `mask_replace_prob`, `random_replace_prob`); whole-word
//! masking follows the released BERT code's `--do_whole_word_mask`. Runs on the
//! host, seeded, so the same seed gives the same masks on every platform.

use burn::config::Config;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::{IGNORE_INDEX, MlmError};

/// Configuration of a [`Masker`]; [`init`](Self::init) validates it.
#[derive(Config, Debug)]
pub struct MaskingConfig {
    /// Number of tokens in the vocabulary; every id must be below it.
    pub vocab_size: usize,
    /// Id of the `[MASK]` token.
    pub mask_token_id: u32,
    /// Ids never selected and never drawn as random replacements: `[PAD]`, `[CLS]`,
    /// `[SEP]`, `[MASK]`, `[UNK]`, and any others (e.g. bert-base's `[unusedN]`).
    pub special_token_ids: Vec<u32>,
    /// Probability that a candidate token (or whole word) is selected for prediction.
    #[config(default = 0.15)]
    pub mlm_probability: f64,
    /// Probability that a selected token is replaced by `[MASK]`.
    #[config(default = 0.8)]
    pub mask_replace_prob: f64,
    /// Probability that a selected token is replaced by a random non-special token.
    /// The rest, `1 - mask_replace_prob - random_replace_prob`, stays unchanged.
    #[config(default = 0.1)]
    pub random_replace_prob: f64,
    /// Each sequence with at least this many candidate tokens gets at least this many
    /// predictions (BERT's data pipeline guarantees 1).
    #[config(default = 1)]
    pub min_predictions_per_seq: usize,
    /// Cap on predictions per sequence (BERT: 20 at length 128); `None` for no cap.
    #[config(default = "None")]
    pub max_predictions_per_seq: Option<usize>,
    /// Select whole words: all WordPiece pieces of a word together, or none.
    #[config(default = false)]
    pub whole_word_mask: bool,
    /// Seed of the `StdRng` that draws the masks; 0 is a seed like any other.
    #[config(default = 0)]
    pub seed: u64,
}

impl MaskingConfig {
    /// Validates the configuration and builds a [`Masker`].
    ///
    /// # Errors
    /// - [`MlmError::InvalidProbability`] if a probability is not in `[0, 1]`;
    /// - [`MlmError::ReplaceProbabilitiesExceedOne`] if `mask_replace_prob + random_replace_prob > 1`;
    /// - [`MlmError::TokenIdOutOfVocab`] if `mask_token_id` or a special id is `>= vocab_size`;
    /// - [`MlmError::InvalidPredictionBounds`] if `min_predictions_per_seq > max_predictions_per_seq`;
    /// - [`MlmError::VocabTooSmall`] if `vocab_size` is 0, or random replacement is on and
    ///   every id is special.
    pub fn init(&self) -> Result<Masker, MlmError> {
        for (name, value) in [
            ("mlm_probability", self.mlm_probability),
            ("mask_replace_prob", self.mask_replace_prob),
            ("random_replace_prob", self.random_replace_prob),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(MlmError::InvalidProbability { name, value });
            }
        }
        if self.mask_replace_prob + self.random_replace_prob > 1.0 {
            return Err(MlmError::ReplaceProbabilitiesExceedOne {
                mask_replace_prob: self.mask_replace_prob,
                random_replace_prob: self.random_replace_prob,
            });
        }
        if self.vocab_size == 0 {
            return Err(MlmError::VocabTooSmall {
                vocab_size: 0,
                reason: "a vocabulary needs at least the [MASK] token",
            });
        }
        let ids = std::iter::once(("mask_token_id", self.mask_token_id)).chain(
            self.special_token_ids
                .iter()
                .map(|&id| ("special_token_ids", id)),
        );
        let mut is_special = vec![false; self.vocab_size];
        for (name, id) in ids {
            match is_special.get_mut(id as usize) {
                Some(special) => *special = true,
                None => {
                    return Err(MlmError::TokenIdOutOfVocab {
                        name,
                        id,
                        vocab_size: self.vocab_size,
                    });
                }
            }
        }
        if let Some(max) = self.max_predictions_per_seq
            && self.min_predictions_per_seq > max
        {
            return Err(MlmError::InvalidPredictionBounds {
                min: self.min_predictions_per_seq,
                max,
            });
        }
        let random_candidates: Vec<u32> = (0..self.vocab_size as u32)
            .filter(|&id| !is_special[id as usize])
            .collect();
        if self.random_replace_prob > 0.0 && random_candidates.is_empty() {
            return Err(MlmError::VocabTooSmall {
                vocab_size: self.vocab_size,
                reason: "random_replace_prob > 0 but every id is special, so no random replacement can be drawn",
            });
        }
        Ok(Masker {
            config: self.clone(),
            batches_masked: 0,
            is_special,
            random_candidates,
            is_continuation: None,
        })
    }
}

/// A batch after corruption; sequences keep their lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskedBatch {
    /// Corrupted ids, one `Vec` per sequence, same lengths as the input.
    pub input_ids: Vec<Vec<u32>>,
    /// Original id at every selected position, [`IGNORE_INDEX`] (`-100`) elsewhere.
    pub labels: Vec<Vec<i64>>,
    /// Selected positions as `(sequence, position)`, sequence-major, ascending.
    pub masked_positions: Vec<(usize, usize)>,
}

impl MaskedBatch {
    /// Selected positions as flat row indices `sequence * seq_len + position` into a batch
    /// padded to `seq_len`: the `positions` argument of [`crate::MlmHead::forward_masked`].
    pub fn flat_positions(&self, seq_len: usize) -> Vec<i64> {
        self.masked_positions
            .iter()
            .map(|&(sequence, position)| (sequence * seq_len + position) as i64)
            .collect()
    }

    /// The original ids at the selected positions, in [`masked_positions`](Self::masked_positions)
    /// order: the targets of the `[n_masked, vocab]` logits of `forward_masked`.
    pub fn masked_targets(&self) -> Vec<i64> {
        self.masked_positions
            .iter()
            .map(|&(sequence, position)| self.labels[sequence][position])
            .collect()
    }
}

/// Draws BERT's 80/10/10 corruption, seeded; build it with [`MaskingConfig::init`].
///
/// Batch `k` is drawn from its own `StdRng` seeded by `(seed, k)`, so successive batches
/// get fresh masks (dynamic masking, RoBERTa §4.1), a run is reproducible from its seed,
/// and a resumed run continues with [`resume_at`](Self::resume_at) instead of a saved
/// generator state.
#[derive(Debug, Clone)]
pub struct Masker {
    config: MaskingConfig,
    batches_masked: u64,
    is_special: Vec<bool>,
    random_candidates: Vec<u32>,
    is_continuation: Option<Vec<bool>>,
}

/// The generator of batch `index`: ChaCha12 keyed by the seed and the batch index, the same
/// on every platform.
fn batch_rng(seed: u64, index: u64) -> StdRng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&index.to_le_bytes());
    StdRng::from_seed(key)
}

/// What happens to one selected token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replacement {
    Mask,
    Random,
    Keep,
}

impl Masker {
    /// The validated configuration.
    pub fn config(&self) -> &MaskingConfig {
        &self.config
    }

    /// Number of batches masked so far: the index of the next batch's generator.
    pub fn batches_masked(&self) -> u64 {
        self.batches_masked
    }

    /// Continues as if `batches_masked` batches had been masked already (resuming a run).
    pub fn resume_at(&mut self, batches_masked: u64) {
        self.batches_masked = batches_masked;
    }

    /// Registers WordPiece continuation tokens (`##…`) so that whole-word masking can
    /// find word boundaries from the ids alone. `tokens[id]` is the token string of `id`.
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if `tokens` does not have `vocab_size` entries.
    pub fn with_wordpiece_vocab<S: AsRef<str>>(mut self, tokens: &[S]) -> Result<Self, MlmError> {
        if tokens.len() != self.config.vocab_size {
            return Err(MlmError::ShapeMismatch {
                what: "WordPiece vocabulary",
                expected: format!("[vocab_size = {}] tokens", self.config.vocab_size),
                actual: vec![tokens.len()],
            });
        }
        self.is_continuation = Some(
            tokens
                .iter()
                .map(|token| token.as_ref().starts_with("##"))
                .collect(),
        );
        Ok(self)
    }

    /// Corrupts a batch of variable-length sequences.
    ///
    /// With `whole_word_mask`, word boundaries come from the registered WordPiece
    /// vocabulary ([`with_wordpiece_vocab`](Self::with_wordpiece_vocab)).
    ///
    /// # Errors
    /// [`MlmError::TokenIdOutOfVocab`] for an input id `>= vocab_size`;
    /// [`MlmError::MissingWordIds`] if whole-word masking has no vocabulary to read.
    pub fn mask(&mut self, sequences: &[Vec<u32>]) -> Result<MaskedBatch, MlmError> {
        self.mask_inner(sequences, None)
    }

    /// Corrupts a batch with word ids given per token (as `tokenizers`' `Encoding::get_word_ids`):
    /// with `whole_word_mask`, consecutive tokens with the same `Some(word)` are selected together.
    ///
    /// # Errors
    /// As [`mask`](Self::mask), and [`MlmError::ShapeMismatch`] if `word_ids` does not
    /// match `sequences` in number or lengths.
    pub fn mask_with_word_ids(
        &mut self,
        sequences: &[Vec<u32>],
        word_ids: &[Vec<Option<u32>>],
    ) -> Result<MaskedBatch, MlmError> {
        let lengths = |v: &[_]| v.iter().map(Vec::len).collect::<Vec<_>>();
        if sequences.len() != word_ids.len()
            || sequences
                .iter()
                .zip(word_ids)
                .any(|(s, w)| s.len() != w.len())
        {
            return Err(MlmError::ShapeMismatch {
                what: "word_ids",
                expected: format!("one per token, lengths {:?}", lengths(sequences)),
                actual: word_ids.iter().map(Vec::len).collect(),
            });
        }
        self.mask_inner(sequences, Some(word_ids))
    }

    fn mask_inner(
        &mut self,
        sequences: &[Vec<u32>],
        word_ids: Option<&[Vec<Option<u32>>]>,
    ) -> Result<MaskedBatch, MlmError> {
        let mut rng = batch_rng(self.config.seed, self.batches_masked);
        let mut batch = MaskedBatch {
            input_ids: Vec::with_capacity(sequences.len()),
            labels: Vec::with_capacity(sequences.len()),
            masked_positions: Vec::new(),
        };
        for (index, ids) in sequences.iter().enumerate() {
            if let Some(&id) = ids
                .iter()
                .find(|&&id| id as usize >= self.config.vocab_size)
            {
                return Err(MlmError::TokenIdOutOfVocab {
                    name: "input id",
                    id,
                    vocab_size: self.config.vocab_size,
                });
            }
            let units = self.candidate_units(index, ids, word_ids.map(|w| w[index].as_slice()))?;
            let mut input_ids = ids.clone();
            let mut labels = vec![IGNORE_INDEX; ids.len()];
            let mut positions: Vec<usize> = self
                .select(&units, &mut rng)
                .into_iter()
                .flatten()
                .collect();
            positions.sort_unstable();
            for &position in &positions {
                labels[position] = i64::from(ids[position]);
                input_ids[position] = match self.replacement(&mut rng) {
                    Replacement::Mask => self.config.mask_token_id,
                    Replacement::Random => {
                        let draw = rng.random_range(0..self.random_candidates.len());
                        self.random_candidates[draw]
                    }
                    Replacement::Keep => ids[position],
                };
            }
            batch
                .masked_positions
                .extend(positions.into_iter().map(|position| (index, position)));
            batch.input_ids.push(input_ids);
            batch.labels.push(labels);
        }
        self.batches_masked += 1;
        Ok(batch)
    }

    /// Groups the non-special positions of one sequence into selection units:
    /// single tokens, or whole words under `whole_word_mask`.
    fn candidate_units(
        &self,
        index: usize,
        ids: &[u32],
        word_ids: Option<&[Option<u32>]>,
    ) -> Result<Vec<Vec<usize>>, MlmError> {
        let candidates = (0..ids.len()).filter(|&p| !self.is_special[ids[p] as usize]);
        if !self.config.whole_word_mask {
            return Ok(candidates.map(|p| vec![p]).collect());
        }
        // `continues(p)`: position p belongs to the same word as candidate p - 1.
        let continues: Box<dyn Fn(usize) -> bool> = match (word_ids, &self.is_continuation) {
            (Some(words), _) => Box::new(move |p| words[p].is_some() && words[p] == words[p - 1]),
            (None, Some(is_continuation)) => Box::new(move |p| is_continuation[ids[p] as usize]),
            (None, None) => return Err(MlmError::MissingWordIds { sequence: index }),
        };
        let mut units: Vec<Vec<usize>> = Vec::new();
        let mut previous = None;
        for position in candidates {
            match units.last_mut() {
                Some(word) if previous == Some(position.wrapping_sub(1)) && continues(position) => {
                    word.push(position)
                }
                _ => units.push(vec![position]),
            }
            previous = Some(position);
        }
        Ok(units)
    }

    /// Bernoulli(`mlm_probability`) per unit, then the per-sequence bounds in tokens:
    /// drop random selected units above `max_predictions_per_seq`, add random unselected
    /// units (that fit under the max) below `min_predictions_per_seq`.
    fn select(&self, units: &[Vec<usize>], rng: &mut StdRng) -> Vec<Vec<usize>> {
        let p = self.config.mlm_probability;
        let (mut selected, mut unselected): (Vec<&Vec<usize>>, Vec<&Vec<usize>>) =
            units.iter().partition(|_| rng.random::<f64>() < p);
        let count = |units: &[&Vec<usize>]| units.iter().map(|unit| unit.len()).sum::<usize>();
        let max = self.config.max_predictions_per_seq.unwrap_or(usize::MAX);
        while count(&selected) > max {
            let drop = rng.random_range(0..selected.len());
            unselected.push(selected.swap_remove(drop));
        }
        let min = self.config.min_predictions_per_seq;
        while count(&selected) < min {
            let room = max - count(&selected);
            unselected.retain(|unit| unit.len() <= room);
            if unselected.is_empty() {
                break;
            }
            let add = rng.random_range(0..unselected.len());
            selected.push(unselected.swap_remove(add));
        }
        selected.into_iter().cloned().collect()
    }

    /// The 80/10/10 draw for one selected token.
    fn replacement(&self, rng: &mut StdRng) -> Replacement {
        let u = rng.random::<f64>();
        if u < self.config.mask_replace_prob {
            Replacement::Mask
        } else if u < self.config.mask_replace_prob + self.config.random_replace_prob {
            Replacement::Random
        } else {
            Replacement::Keep
        }
    }
}
