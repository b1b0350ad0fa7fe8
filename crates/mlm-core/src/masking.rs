//! BERT's input corruption: select ~15 % of the tokens, then 80 % → `[MASK]`,
//! 10 % → a random token, 10 % unchanged; every selected token is graded against
//! its original id.
//!
//! Source: BERT (Devlin et al. 2019), §3.1 "Task #1: Masked LM" and appendix A.1;
//! names and defaults follow Hugging Face's `DataCollatorForLanguageModeling`
//! (`mlm_probability`, `mask_replace_prob`, `random_replace_prob`); whole-word
//! masking follows the released BERT code's `--do_whole_word_mask`. Span masking
//! ([`SpanMaskingConfig`]) follows SpanBERT (Joshi et al. 2020, §3.1): contiguous runs of
//! whole words, with one 80/10/10 draw per span. Runs on the host, seeded, so the same seed
//! gives the same masks on every platform.

use std::ops::Range;

use burn::config::Config;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use burn::tensor::Device;

use crate::{IGNORE_INDEX, MaskedTargets, MlmError};

/// How much a masker selects and what it puts in the selected places: the three rates of
/// BERT's corruption (Devlin et al. 2019, §3.1), with Hugging Face's
/// `DataCollatorForLanguageModeling` names. The one place their defaults and their bounds
/// live: [`MaskingConfig`] and a trainer's settings take them from here.
///
/// Serialized as its three fields; a field left out reads as BERT's
/// ([`MaskRates::BERT`]), so a settings file may embed it flattened.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct MaskRates {
    /// Share of the candidate tokens (or whole words) selected for prediction, in `[0, 1]`.
    pub mlm_probability: f64,
    /// Share of the selected tokens replaced by `[MASK]`, in `[0, 1]`.
    pub mask_replace_prob: f64,
    /// Share of the selected tokens replaced by a random non-special token, in `[0, 1 -
    /// mask_replace_prob]`; the rest stay unchanged. Every selected token is graded against
    /// its original id.
    pub random_replace_prob: f64,
}

impl MaskRates {
    /// BERT's rates: 15 % selected; of those 80 % `[MASK]`, 10 % random, 10 % unchanged.
    pub const BERT: Self = Self {
        mlm_probability: 0.15,
        mask_replace_prob: 0.8,
        random_replace_prob: 0.1,
    };

    /// BERT's 80/10/10 at `mlm_probability`.
    pub fn bert(mlm_probability: f64) -> Self {
        Self {
            mlm_probability,
            ..Self::BERT
        }
    }

    /// Checks the bounds: each rate a probability, the two replacement shares together at
    /// most 1 (compared as their sum: `0.9 + 0.1` is 1, `1 - 0.9` is below 0.1 in f64).
    ///
    /// # Errors
    /// [`MlmError::InvalidProbability`] naming the first rate outside `[0, 1]` (NaN
    /// included); [`MlmError::ReplaceProbabilitiesExceedOne`] if `mask_replace_prob +
    /// random_replace_prob > 1`.
    pub fn validate(&self) -> Result<(), MlmError> {
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
        Ok(())
    }
}

impl Default for MaskRates {
    /// [`MaskRates::BERT`].
    fn default() -> Self {
        Self::BERT
    }
}

/// Configuration of a [`Masker`]; [`init`](Self::init) validates it.
///
/// # Example
/// ```
/// use mlm_core::{IGNORE_INDEX, MaskingConfig};
///
/// // bert-base-uncased's ids: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
/// let mut masker = MaskingConfig::new(30_522, 103, 0, vec![100, 101, 102])
///     .with_seed(7)
///     .init()?;
/// let sequence = [101, 1996, 4937, 2938, 2006, 1996, 13523, 102, 0, 0];
/// let batch = masker.mask(&[sequence.to_vec()])?;
/// for &(_, position) in &batch.masked_positions {
///     // Never [CLS], [SEP] or [PAD]; graded against the original token.
///     assert!((1..7).contains(&position));
///     assert_eq!(batch.labels[0][position], i64::from(sequence[position]));
/// }
/// assert_eq!(batch.labels[0][8], IGNORE_INDEX);
/// # Ok::<(), mlm_core::MlmError>(())
/// ```
#[derive(Config, Debug)]
pub struct MaskingConfig {
    /// Number of tokens in the vocabulary; every id must be below it.
    pub vocab_size: usize,
    /// Id of the `[MASK]` token: never selected nor drawn, whether or not it is listed in
    /// `special_token_ids`.
    pub mask_token_id: u32,
    /// Id of the `[PAD]` token: never selected nor drawn, whether or not it is listed in
    /// `special_token_ids`. Required, so that sequences padded before masking never get
    /// padding graded (Hugging Face's collator reads it from the tokenizer). It must be the
    /// id your padding uses: the masker cannot tell another id's padding from text.
    pub pad_token_id: u32,
    /// Further ids never selected and never drawn as random replacements: `[CLS]`,
    /// `[SEP]`, `[UNK]`, and any others (e.g. bert-base's `[unusedN]`).
    pub special_token_ids: Vec<u32>,
    /// Probability that a candidate token (or whole word) is selected for prediction
    /// ([`MaskRates::mlm_probability`]).
    #[config(default = "MaskRates::BERT.mlm_probability")]
    pub mlm_probability: f64,
    /// Probability that a selected token is replaced by `[MASK]`
    /// ([`MaskRates::mask_replace_prob`]).
    #[config(default = "MaskRates::BERT.mask_replace_prob")]
    pub mask_replace_prob: f64,
    /// Probability that a selected token is replaced by a random non-special token
    /// ([`MaskRates::random_replace_prob`]). The rest, `1 - mask_replace_prob -
    /// random_replace_prob`, stays unchanged.
    #[config(default = "MaskRates::BERT.random_replace_prob")]
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
    /// Select spans of whole words instead (SpanBERT §3.1), with one 80/10/10 draw per span;
    /// `None` selects tokens (or words, with `whole_word_mask`) one by one, as BERT does.
    /// Spans are always whole words, so `whole_word_mask` is then implied. A configuration
    /// saved without this field reads as `None`.
    #[config(default = "None")]
    pub span: Option<SpanMaskingConfig>,
    /// Seed of the `StdRng` that draws the masks; 0 is a seed like any other.
    #[config(default = 0)]
    pub seed: u64,
}

impl MaskingConfig {
    /// The three rates of this configuration.
    pub fn rates(&self) -> MaskRates {
        MaskRates {
            mlm_probability: self.mlm_probability,
            mask_replace_prob: self.mask_replace_prob,
            random_replace_prob: self.random_replace_prob,
        }
    }

    /// This configuration with `rates` (checked by [`init`](Self::init)).
    pub fn with_rates(self, rates: MaskRates) -> Self {
        Self {
            mlm_probability: rates.mlm_probability,
            mask_replace_prob: rates.mask_replace_prob,
            random_replace_prob: rates.random_replace_prob,
            ..self
        }
    }

    /// Validates the configuration and builds a [`Masker`].
    ///
    /// # Errors
    /// - those of [`MaskRates::validate`]: [`MlmError::InvalidProbability`] if a probability
    ///   is not in `[0, 1]`, [`MlmError::ReplaceProbabilitiesExceedOne`] if
    ///   `mask_replace_prob + random_replace_prob > 1`;
    /// - [`MlmError::TokenIdOutOfVocab`] if `mask_token_id`, `pad_token_id` or a special id
    ///   is `>= vocab_size`;
    /// - [`MlmError::MaskIsPad`] if `mask_token_id == pad_token_id`;
    /// - [`MlmError::InvalidPredictionBounds`] if `min_predictions_per_seq > max_predictions_per_seq`;
    /// - [`MlmError::VocabTooSmall`] if `vocab_size` is 0, or random replacement is on and
    ///   every id is special;
    /// - [`MlmError::InvalidSpanMasking`] if `span` is set with `geometric_p` outside `(0, 1]`
    ///   or `max_span_words` of 0.
    pub fn init(&self) -> Result<Masker, MlmError> {
        self.rates().validate()?;
        if self.vocab_size == 0 {
            return Err(MlmError::VocabTooSmall {
                vocab_size: 0,
                reason: "a vocabulary needs at least the [MASK] token",
            });
        }
        let ids = [
            ("mask_token_id", self.mask_token_id),
            ("pad_token_id", self.pad_token_id),
        ]
        .into_iter()
        .chain(
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
        if self.mask_token_id == self.pad_token_id {
            return Err(MlmError::MaskIsPad {
                id: self.mask_token_id,
            });
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
        if let Some(span) = &self.span {
            span.validate()?;
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

/// SpanBERT's span masking (Joshi et al. 2020, §3.1): the option [`MaskingConfig::span`].
///
/// Per sequence, with `n` candidate (non-special) tokens:
/// 1. **Budget.** `B = ⌊mlm_probability · n + u⌋` tokens, `u` uniform in `[0, 1)`: rounded up
///    or down at random, so that `E[B] = mlm_probability · n` (the released code rounds up,
///    `⌈0.15 · 62⌉ = 10` tokens of 62 is 16.1 %). `B` is then raised to
///    `min(min_predictions_per_seq, n)` and lowered to `max_predictions_per_seq`.
/// 2. **Length.** A span length `ℓ` in words is drawn from the geometric law truncated to
///    `1..=max_span_words` and renormalised, `P(ℓ) = p (1 − p)^(ℓ−1) / (1 − (1 − p)^max)`
///    ([`length_probability`](Self::length_probability)). This is what the released SpanBERT
///    code does (`len_distrib`, normalised), and it gives the paper's mean of 3.8 words at
///    `p = 0.2, max = 10`; clipping, `min(ℓ, 10)`, would give 4.46.
/// 3. **Start.** A word not yet selected is drawn uniformly; the span starts at its first
///    piece (§3.1: spans are complete words and start at the beginning of a word).
/// 4. **Extend.** The span takes that word and then the following words, whole, until it has
///    `ℓ` words or it meets a special token or the sequence's end (spans never cross
///    `[CLS]`, `[SEP]`, `[PAD]`, …), an already selected word (spans never overlap), or the
///    budget: a word is added only while fewer than `B` tokens are selected, so the sequence
///    ends with at least `B` selected tokens and overshoots by less than its last word (by 0
///    when every word is one token). A word that would exceed `max_predictions_per_seq` is
///    never added.
/// 5. Steps 2–4 repeat until `B` tokens are selected or no word is left.
///
/// Then each span gets one 80/10/10 draw (§3.1: BERT's replacement, made at the span level
/// rather than per token): every token of the span becomes `[MASK]`, or every one becomes its
/// own random non-special token, or all stay. Every selected token is graded against its
/// original.
///
/// Words come from the word ids of [`Masker::mask_with_word_ids`] or the WordPiece vocabulary
/// of [`Masker::with_wordpiece_vocab`]; without either, masking fails with
/// [`MlmError::MissingWordIds`].
#[derive(Config, Debug, PartialEq)]
pub struct SpanMaskingConfig {
    /// Parameter `p` of the geometric law of span lengths in words, in `(0, 1]`; before
    /// truncation the mean length is `1 / p`.
    #[config(default = 0.2)]
    pub geometric_p: f64,
    /// Longest span in words, at least 1: longer draws are excluded and the law renormalised.
    #[config(default = 10)]
    pub max_span_words: usize,
}

impl SpanMaskingConfig {
    /// Probability that a span is drawn with `words` words:
    /// `p (1 − p)^(words−1) / (1 − (1 − p)^max_span_words)` for `words` in
    /// `1..=max_span_words`, 0 otherwise. Assumes a valid configuration.
    pub fn length_probability(&self, words: usize) -> f64 {
        if words == 0 || words > self.max_span_words {
            return 0.0;
        }
        let p = self.geometric_p;
        p * (1.0 - p).powf(words as f64 - 1.0) / self.kept_mass()
    }

    /// `1 − (1 − p)^max_span_words`: the mass of the untruncated law on `1..=max_span_words`.
    fn kept_mass(&self) -> f64 {
        -(self.max_span_words as f64 * (-self.geometric_p).ln_1p()).exp_m1()
    }

    /// # Errors
    /// [`MlmError::InvalidSpanMasking`] for `geometric_p` outside `(0, 1]` or
    /// `max_span_words` of 0.
    fn validate(&self) -> Result<(), MlmError> {
        if !(self.geometric_p > 0.0 && self.geometric_p <= 1.0) {
            return Err(MlmError::InvalidSpanMasking {
                name: "geometric_p",
                value: self.geometric_p,
                rule: "must be in (0, 1] (SpanBERT: 0.2)",
            });
        }
        if self.max_span_words == 0 {
            return Err(MlmError::InvalidSpanMasking {
                name: "max_span_words",
                value: 0.0,
                rule: "must be at least 1 (SpanBERT: 10)",
            });
        }
        Ok(())
    }

    /// One span length in words, by inversion of the truncated law's distribution function:
    /// `ℓ = 1 + ⌊ln(1 − u · kept_mass) / ln(1 − p)⌋` for `u` uniform in `[0, 1)`.
    fn sample_length(&self, rng: &mut StdRng) -> usize {
        let u = rng.random::<f64>();
        let tail = (-u * self.kept_mass()).ln_1p() / (-self.geometric_p).ln_1p();
        // `p = 1`: 0 / -inf = -0, one word. The clamp absorbs rounding at the top bin.
        (1 + tail.floor().max(0.0) as usize).min(self.max_span_words)
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
    /// The selected positions grouped by 80/10/10 draw, as `(sequence, start..end)`: one
    /// single-token span per selected token (ascending) under token and whole-word masking;
    /// one span per SpanBERT span, in the order drawn, under [`MaskingConfig::span`].
    /// Sequence-major; together they cover `masked_positions` exactly once.
    pub spans: Vec<(usize, Range<usize>)>,
}

impl MaskedBatch {
    /// Selected positions as flat row indices `sequence * seq_len + position` into a batch
    /// padded to `seq_len`: the positions of [`crate::MaskedTargets::new`].
    ///
    /// # Errors
    /// [`MlmError::SequenceLongerThanSeqLen`] if a sequence has more than `seq_len` tokens:
    /// its positions would alias the next sequence's rows.
    pub fn flat_positions(&self, seq_len: usize) -> Result<Vec<i64>, MlmError> {
        let mut sequences = self.input_ids.iter().enumerate();
        if let Some((sequence, ids)) = sequences.find(|(_, ids)| ids.len() > seq_len) {
            return Err(MlmError::SequenceLongerThanSeqLen {
                sequence,
                length: ids.len(),
                seq_len,
            });
        }
        Ok(self
            .masked_positions
            .iter()
            .map(|&(sequence, position)| (sequence * seq_len + position) as i64)
            .collect())
    }

    /// The original ids at the selected positions, in [`masked_positions`](Self::masked_positions)
    /// order: the targets of the `[n_masked, vocab]` logits of the sparse head.
    pub fn true_tokens(&self) -> Vec<i64> {
        self.masked_positions
            .iter()
            .map(|&(sequence, position)| self.labels[sequence][position])
            .collect()
    }

    /// The masked positions and their true tokens, checked and uploaded to `device`: what
    /// [`MlmHead::forward_targets`](crate::MlmHead::forward_targets) and
    /// [`MaskedCrossEntropy::forward_targets`](crate::MaskedCrossEntropy::forward_targets)
    /// take, for hidden states `[batch, seq_len, d_model]` (every sequence padded, or cut
    /// by nothing, to `seq_len`).
    ///
    /// # Errors
    /// [`MlmError::SequenceLongerThanSeqLen`] as [`flat_positions`](Self::flat_positions),
    /// and the errors of [`MaskedTargets::new`](crate::MaskedTargets::new).
    pub fn targets(
        &self,
        seq_len: usize,
        vocab_size: usize,
        device: &Device,
    ) -> Result<MaskedTargets, MlmError> {
        MaskedTargets::new(
            &self.flat_positions(seq_len)?,
            &self.true_tokens(),
            [self.input_ids.len(), seq_len],
            vocab_size,
            device,
        )
    }
}

/// Draws BERT's 80/10/10 corruption (or SpanBERT's, [`SpanMaskingConfig`]), seeded; build
/// it with [`MaskingConfig::init`].
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

/// The words of one sequence that may still start a span (not selected, not too long for
/// `max_predictions_per_seq`), with each word's index in the list: a uniform draw and a
/// removal are both O(1).
struct FreeWords {
    list: Vec<usize>,
    slot: Vec<Option<usize>>,
}

impl FreeWords {
    /// Words `0..n`, all free.
    fn all(n: usize) -> Self {
        Self {
            list: (0..n).collect(),
            slot: (0..n).map(Some).collect(),
        }
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn contains(&self, word: usize) -> bool {
        self.slot[word].is_some()
    }

    /// A free word, uniformly; the list must not be empty.
    fn draw(&self, rng: &mut StdRng) -> usize {
        self.list[rng.random_range(0..self.list.len())]
    }

    /// Takes `word` out (a no-op if it is out already).
    fn remove(&mut self, word: usize) {
        let Some(at) = self.slot[word].take() else {
            return;
        };
        self.list.swap_remove(at);
        if let Some(&moved) = self.list.get(at) {
            self.slot[moved] = Some(at);
        }
    }
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

    /// Selects `mlm_probability` of the candidates from the next batch on, the replacement
    /// shares and the generators unchanged: a masking rate scheduled over a run (Yang et al.
    /// 2023, "Learning Better Masking for Better Language Model Pre-training", 30 % → 15 %).
    /// Setting the rate it has changes nothing, so a run without a schedule draws the same
    /// masks as one that never calls it.
    ///
    /// # Errors
    /// [`MlmError::InvalidProbability`] for a rate outside `[0, 1]` (NaN included); the
    /// masker is then unchanged.
    pub fn set_mlm_probability(&mut self, mlm_probability: f64) -> Result<(), MlmError> {
        MaskRates {
            mlm_probability,
            ..self.config.rates()
        }
        .validate()?;
        self.config.mlm_probability = mlm_probability;
        Ok(())
    }

    /// Registers WordPiece continuation tokens (`##…`) so that whole-word masking can
    /// find word boundaries from the ids alone. `tokens[id]` is the token string of `id`.
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if `tokens` does not have `vocab_size` entries.
    pub fn with_wordpiece_vocab<S: AsRef<str>>(self, tokens: &[S]) -> Result<Self, MlmError> {
        let is_continuation = tokens.iter().map(|t| t.as_ref().starts_with("##"));
        self.with_word_continuations(is_continuation.collect())
    }

    /// Registers, for every id, whether its token goes on with the word of the token before
    /// it, for any subword vocabulary: WordPiece's `##` pieces
    /// ([`with_wordpiece_vocab`](Self::with_wordpiece_vocab)), or a byte-level BPE's tokens
    /// that do not start with `Ġ` (RoBERTa's encoded space; Hugging Face's collator only masks
    /// whole words for WordPiece).
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if `is_continuation` does not have `vocab_size` entries.
    pub fn with_word_continuations(mut self, is_continuation: Vec<bool>) -> Result<Self, MlmError> {
        if is_continuation.len() != self.config.vocab_size {
            return Err(MlmError::ShapeMismatch {
                what: "subword vocabulary",
                expected: format!("[vocab_size = {}] tokens", self.config.vocab_size),
                actual: vec![is_continuation.len()],
            });
        }
        self.is_continuation = Some(is_continuation);
        Ok(self)
    }

    /// Corrupts a batch of variable-length sequences.
    ///
    /// With `whole_word_mask` or `span`, word boundaries come from the registered WordPiece
    /// vocabulary ([`with_wordpiece_vocab`](Self::with_wordpiece_vocab)).
    ///
    /// # Errors
    /// [`MlmError::TokenIdOutOfVocab`] for an input id `>= vocab_size`;
    /// [`MlmError::MissingWordIds`] if whole-word or span masking has no vocabulary to read.
    pub fn mask(&mut self, sequences: &[Vec<u32>]) -> Result<MaskedBatch, MlmError> {
        self.mask_inner(sequences, None)
    }

    /// Corrupts a batch with word ids given per token (as `tokenizers`' `Encoding::get_word_ids`):
    /// with `whole_word_mask` or `span`, consecutive tokens with the same `Some(word)` form a word.
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
            spans: Vec::new(),
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
            // Each span gets one 80/10/10 draw; token masking's spans are single tokens.
            let spans: Vec<Vec<usize>> = match &self.config.span {
                Some(span) => self.select_spans(span, &units, &mut rng),
                None => {
                    let mut positions: Vec<usize> = self
                        .select(&units, &mut rng)
                        .into_iter()
                        .flatten()
                        .collect();
                    positions.sort_unstable();
                    positions
                        .into_iter()
                        .map(|position| vec![position])
                        .collect()
                }
            };
            let mut input_ids = ids.clone();
            let mut labels = vec![IGNORE_INDEX; ids.len()];
            for span in &spans {
                let replacement = self.replacement(&mut rng);
                for &position in span {
                    labels[position] = i64::from(ids[position]);
                    input_ids[position] = match replacement {
                        Replacement::Mask => self.config.mask_token_id,
                        Replacement::Random => {
                            let draw = rng.random_range(0..self.random_candidates.len());
                            self.random_candidates[draw]
                        }
                        Replacement::Keep => ids[position],
                    };
                }
            }
            let mut positions: Vec<usize> = spans.iter().flatten().copied().collect();
            positions.sort_unstable();
            batch
                .masked_positions
                .extend(positions.into_iter().map(|position| (index, position)));
            batch.spans.extend(
                spans
                    .iter()
                    .map(|span| (index, span[0]..span[span.len() - 1] + 1)),
            );
            batch.input_ids.push(input_ids);
            batch.labels.push(labels);
        }
        self.batches_masked += 1;
        Ok(batch)
    }

    /// Groups the non-special positions of one sequence into selection units:
    /// single tokens, or whole words under `whole_word_mask` or `span`. A word's positions
    /// are consecutive, and units are in position order.
    fn candidate_units(
        &self,
        index: usize,
        ids: &[u32],
        word_ids: Option<&[Option<u32>]>,
    ) -> Result<Vec<Vec<usize>>, MlmError> {
        let candidates = (0..ids.len()).filter(|&p| !self.is_special[ids[p] as usize]);
        if !self.config.whole_word_mask && self.config.span.is_none() {
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

    /// SpanBERT's selection in one sequence of candidate `words` (steps 1–5 of
    /// [`SpanMaskingConfig`]): the spans' positions, in the order drawn.
    fn select_spans(
        &self,
        span: &SpanMaskingConfig,
        words: &[Vec<usize>],
        rng: &mut StdRng,
    ) -> Vec<Vec<usize>> {
        let n: usize = words.iter().map(Vec::len).sum();
        if n == 0 {
            return Vec::new();
        }
        let cap = self.config.max_predictions_per_seq.unwrap_or(usize::MAX);
        let budget = ((self.config.mlm_probability * n as f64 + rng.random::<f64>()) as usize)
            .max(self.config.min_predictions_per_seq.min(n))
            .min(cap)
            .min(n);
        let mut free = FreeWords::all(words.len());
        let (mut count, mut spans) = (0, Vec::new());
        while count < budget && !free.is_empty() {
            let length = span.sample_length(rng);
            let mut word = free.draw(rng);
            if count + words[word].len() > cap {
                free.remove(word); // count only grows: it never fits later either
                continue;
            }
            let mut positions = Vec::new();
            for taken in 1.. {
                free.remove(word);
                positions.extend_from_slice(&words[word]);
                count += words[word].len();
                let next = word + 1;
                let extends = taken < length
                    && count < budget
                    && next < words.len()
                    && words[next][0] == words[word][words[word].len() - 1] + 1
                    && free.contains(next)
                    && count + words[next].len() <= cap;
                if !extends {
                    break;
                }
                word = next;
            }
            spans.push(positions);
        }
        spans
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
