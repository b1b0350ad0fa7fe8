//! [`MlmError`]: every way `mlm-core` rejects bad input, as a typed value.

use thiserror::Error;

/// The error type of `mlm-core`.
///
/// Each variant names the offending value and the rule it broke, so a caller can
/// report it without reading Burn's internals. Nothing in `mlm-core` returns a
/// silently wrong number instead of one of these.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum MlmError {
    /// A label (or graded target) is neither in `[0, vocab_size)` nor the ignore index `-100`.
    #[error(
        "label {label} at flat position {position} is outside [0, {vocab_size}) and is not the ignore index -100"
    )]
    LabelOutOfRange {
        /// Row-major index of the label among all labels.
        position: usize,
        /// The offending label.
        label: i64,
        /// Size of the vocabulary (number of logit columns).
        vocab_size: usize,
    },

    /// A masked target of [`crate::MaskedTargets`] is not a token id in `[0, vocab_size)`.
    /// Unlike a label, a target is always graded: the ignore index `-100` has no place here.
    #[error(
        "masked target {target} at flat position {position} is not a token id in [0, {vocab_size}): targets are graded positions only (the ignore index -100 belongs in HF-style labels)"
    )]
    TargetOutOfRange {
        /// The flat position `b * seq + s` the target belongs to.
        position: i64,
        /// The offending target.
        target: i64,
        /// Size of the vocabulary the targets are checked against.
        vocab_size: usize,
    },

    /// A flat masked position is listed twice: two logits rows would grade one token.
    #[error(
        "masked position {position} is listed twice: each position is graded once (positions computed with a seq_len shorter than a sequence alias rows)"
    )]
    DuplicatePosition {
        /// The repeated flat position `b * seq + s`.
        position: i64,
    },

    /// A sequence is longer than the `seq_len` its flat positions `b * seq_len + s` are
    /// computed with, so they would run into the next sequence's rows.
    #[error(
        "sequence {sequence} has {length} tokens, more than seq_len = {seq_len}: flat positions would alias the next sequence's rows (pass the padded length of your encoder's hidden states)"
    )]
    SequenceLongerThanSeqLen {
        /// Index of the sequence in the batch.
        sequence: usize,
        /// Its number of tokens.
        length: usize,
        /// The `seq_len` that was passed.
        seq_len: usize,
    },

    /// `backward` was asked of a loss that autodiff does not track.
    #[error("cannot compute gradients: {0}")]
    NotDifferentiable(&'static str),

    /// Two tensors (or a tensor and a configuration) disagree on a shape.
    #[error("shape mismatch for {what}: expected {expected}, got {actual:?}")]
    ShapeMismatch {
        /// Which argument has the wrong shape: its parameter name (`hidden`, `targets`,
        /// `tied`, `logits`, …), with what it was compared to where that helps.
        what: &'static str,
        /// The expected shape, in words (e.g. `[.., d_model = 16]`).
        expected: String,
        /// The shape that was passed.
        actual: Vec<usize>,
    },

    /// A masked position indexes past the `batch * seq` rows of the hidden states.
    #[error("masked position {position} is outside the {n_rows} rows of the hidden states")]
    PositionOutOfRange {
        /// The offending flat position `b * seq + s`.
        position: i64,
        /// Number of rows, `batch * seq`.
        n_rows: usize,
    },

    /// A probability-valued setting is not a number in `[0, 1]`.
    #[error("{name} = {value} is not a probability in [0, 1]")]
    InvalidProbability {
        /// Name of the setting, e.g. `mlm_probability`.
        name: &'static str,
        /// The value that was given.
        value: f64,
    },

    /// `mask_replace_prob + random_replace_prob > 1`: the 80/10/10 split cannot be drawn.
    #[error(
        "mask_replace_prob ({mask_replace_prob}) + random_replace_prob ({random_replace_prob}) exceeds 1"
    )]
    ReplaceProbabilitiesExceedOne {
        /// Probability that a selected token becomes `[MASK]`.
        mask_replace_prob: f64,
        /// Probability that a selected token becomes a random token.
        random_replace_prob: f64,
    },

    /// A token id that must index the vocabulary does not.
    #[error("{name} = {id} is outside the vocabulary [0, {vocab_size})")]
    TokenIdOutOfVocab {
        /// What the id is, e.g. `mask_token_id`.
        name: &'static str,
        /// The offending id.
        id: u32,
        /// Size of the vocabulary.
        vocab_size: usize,
    },

    /// `mask_token_id == pad_token_id`: a masked token would read as padding to the encoder.
    #[error(
        "mask_token_id and pad_token_id are both {id}: a masked token would read as padding to the encoder"
    )]
    MaskIsPad {
        /// The id given for both.
        id: u32,
    },

    /// The vocabulary is too small for the requested operation.
    #[error("vocab_size = {vocab_size} is too small: {reason}")]
    VocabTooSmall {
        /// The configured vocabulary size.
        vocab_size: usize,
        /// Why it is too small.
        reason: &'static str,
    },

    /// `min_predictions_per_seq > max_predictions_per_seq`.
    #[error("min_predictions_per_seq ({min}) exceeds max_predictions_per_seq ({max})")]
    InvalidPredictionBounds {
        /// Configured minimum.
        min: usize,
        /// Configured maximum.
        max: usize,
    },

    /// Whole-word or span masking was asked for, but no word boundaries are known for a sequence.
    #[error(
        "whole-word or span masking needs word boundaries, but sequence {sequence} has no word ids and no WordPiece continuation tokens are registered (Masker::with_wordpiece_vocab)"
    )]
    MissingWordIds {
        /// Index of the sequence in the batch.
        sequence: usize,
    },

    /// A span-masking setting ([`crate::SpanMaskingConfig`]) outside its range.
    #[error("span masking: {name} = {value} {rule}")]
    InvalidSpanMasking {
        /// Name of the setting, `geometric_p` or `max_span_words`.
        name: &'static str,
        /// The value that was given.
        value: f64,
        /// The rule it broke.
        rule: &'static str,
    },

    /// A chunked decoder and loss ([`crate::LogitsMode::Chunked`]) asked for chunks of 0 rows.
    #[error(
        "logits chunked by 0 rows: a chunk needs at least 1 row (LogitsMode::Auto picks a size)"
    )]
    ZeroChunkRows,

    /// A sentence that cannot be scored: empty, or longer than the model's positions.
    #[error("sentence {index}: {reason}")]
    InvalidSentence {
        /// Index of the sentence among those given.
        index: usize,
        /// Why, with its length and the model's limit.
        reason: String,
    },

    /// A head was asked to decode without a decoder weight, or was given two.
    #[error("{0}")]
    DecoderWeight(&'static str),
}
