//! Sequence packing and batching: sentences → `[CLS] … [SEP]` sequences → shuffled,
//! freshly masked batches of tensors.

use burn::tensor::Device;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use mlm_core::{MaskedBatch, MaskedTargets, Masker};
use rand::seq::SliceRandom;

use super::Document;
use super::tokenizer::SubwordTokenizer;
use crate::error::{ConfigError, TrainError};
use crate::seed::{Stream, stream_rng};

/// Packs each document's sentences, in order, into `[CLS] … [SEP]` sequences of at most
/// `max_seq_len` tokens ([`pack_document`], packed).
///
/// # Errors
/// [`ConfigError::Value`] if `max_seq_len < 3` ([`check_max_seq_len`]); tokenizer errors.
pub fn pack(
    documents: &[Document],
    tokenizer: &SubwordTokenizer,
    max_seq_len: usize,
) -> Result<Vec<Vec<u32>>, TrainError> {
    check_max_seq_len(max_seq_len)?;
    let mut sequences = Vec::new();
    for document in documents {
        sequences.extend(pack_document(document, tokenizer, max_seq_len, false)?);
    }
    Ok(sequences)
}

/// One document's `[CLS] … [SEP]` sequences of at most `max_seq_len` tokens (at least 3):
/// its sentences packed in order (a sentence never straddles two documents), or with
/// `line_by_line` one sentence per sequence (`run_mlm.py`'s `--line_by_line`; BabyBERTa's
/// one utterance per input). A sentence longer than a sequence is cut into several.
///
/// # Errors
/// Tokenizer errors.
pub fn pack_document(
    document: &Document,
    tokenizer: &SubwordTokenizer,
    max_seq_len: usize,
    line_by_line: bool,
) -> Result<Vec<Vec<u32>>, TrainError> {
    let room = max_seq_len - 2;
    let mut sequences = Vec::new();
    let mut body: Vec<u32> = Vec::with_capacity(room);
    for (i, sentence) in document.sentences.iter().enumerate() {
        let ids = match i == 0 || line_by_line {
            true => tokenizer.encode(sentence)?,
            false => tokenizer.encode_after_space(sentence)?,
        };
        if !body.is_empty() && (line_by_line || body.len() + ids.len() > room) {
            sequences.push(tokenizer.wrap(&body));
            body.clear();
        }
        for piece in ids.chunks(room) {
            if body.len() + piece.len() > room {
                sequences.push(tokenizer.wrap(&body));
                body.clear();
            }
            body.extend_from_slice(piece);
        }
    }
    if !body.is_empty() {
        sequences.push(tokenizer.wrap(&body));
    }
    Ok(sequences)
}

/// Whether `max_seq_len` leaves room for a token: `[CLS]`, one token and `[SEP]`.
///
/// # Errors
/// [`ConfigError::Value`] for `max_seq_len` < 3.
pub fn check_max_seq_len(max_seq_len: usize) -> Result<(), ConfigError> {
    match max_seq_len {
        3.. => Ok(()),
        _ => Err(ConfigError::value(
            "max_seq_len",
            max_seq_len,
            "must be at least 3: [CLS], one token and [SEP]",
        )),
    }
}

/// The order of the sequences in epoch `epoch`: a permutation seeded by `(seed, epoch)`,
/// so a resumed run sees the same order as an uninterrupted one. Held as `u32` (4 bytes a
/// sequence: 80 MiB for a billion tokens in sequences of 64); the shuffle draws the same
/// numbers whatever the element type, so the order is the one a `usize` list would take.
///
/// # Panics
/// If `n` exceeds `u32::MAX` (2^32 sequences: some 275 B tokens in sequences of 64).
pub fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<u32> {
    let n = u32::try_from(n).expect("at most 2^32 - 1 training sequences");
    let mut order: Vec<u32> = (0..n).collect();
    order.shuffle(&mut stream_rng(seed, Stream::EpochOrder, epoch));
    order
}

/// A masked batch on a device, padded to its longest sequence: mlm-core's host-side
/// [`MaskedBatch`] made tensors (not mlm-core's `learner::MlmBatch`, burn-train's batch).
#[derive(Debug, Clone)]
pub struct DeviceBatch {
    /// Corrupted ids `[batch, seq]`.
    pub input_ids: Tensor<2, Int>,
    /// Segment ids `[batch, seq]` (all 0: one segment).
    pub token_type_ids: Tensor<2, Int>,
    /// `[batch, seq]`, `true` at padding.
    pub padding_mask: Tensor<2, Bool>,
    /// The flat masked positions `b * seq + s` and their original ids, `[n_masked]` each,
    /// checked on the host: the head and the loss read nothing back.
    pub targets: MaskedTargets,
    /// Number of real (non-padding) tokens.
    pub n_tokens: usize,
}

/// Masks `sequences` with `masker` (its next batch) and moves them to `device`.
///
/// # Errors
/// The masker's errors (an id outside its vocabulary).
pub fn make_batch(
    sequences: &[&[u32]],
    masker: &mut Masker,
    pad_id: u32,
    device: &Device,
) -> Result<DeviceBatch, TrainError> {
    let mut batches = make_shards(sequences, masker, pad_id, 1, device)?;
    Ok(batches.pop().expect("one shard"))
}

/// Masks `sequences` as one batch (the masker's next, so the masks do not depend on
/// `shards`), then splits it into `shards` batches of consecutive sequences, each padded to
/// its own longest sequence; fewer if there are fewer sequences than shards.
///
/// # Errors
/// The masker's errors (an id outside its vocabulary).
pub fn make_shards(
    sequences: &[&[u32]],
    masker: &mut Masker,
    pad_id: u32,
    shards: usize,
    device: &Device,
) -> Result<Vec<DeviceBatch>, TrainError> {
    let vocab_size = masker.config().vocab_size;
    mask_shards(sequences, masker, shards)?
        .iter()
        .map(|shard| to_device(shard, pad_id, vocab_size, device))
        .collect()
}

/// [`make_shards`] on the host: the masked shards, not yet tensors.
///
/// # Errors
/// The masker's errors (an id outside its vocabulary).
pub fn mask_shards(
    sequences: &[&[u32]],
    masker: &mut Masker,
    shards: usize,
) -> Result<Vec<MaskedBatch>, TrainError> {
    let owned: Vec<Vec<u32>> = sequences.iter().map(|s| s.to_vec()).collect();
    let masked = masker.mask(&owned)?;
    let per_shard = owned.len().div_ceil(shards.max(1)).max(1);
    Ok((0..owned.len().max(1))
        .step_by(per_shard)
        .map(|first| shard(&masked, first..(first + per_shard).min(owned.len())))
        .collect())
}

/// Sequences `rows` of `masked`, with positions renumbered from the shard's first sequence.
fn shard(masked: &MaskedBatch, rows: std::ops::Range<usize>) -> MaskedBatch {
    MaskedBatch {
        input_ids: masked.input_ids[rows.clone()].to_vec(),
        labels: masked.labels[rows.clone()].to_vec(),
        masked_positions: masked
            .masked_positions
            .iter()
            .filter(|(sequence, _)| rows.contains(sequence))
            .map(|&(sequence, position)| (sequence - rows.start, position))
            .collect(),
        spans: masked
            .spans
            .iter()
            .filter(|(sequence, _)| rows.contains(sequence))
            .map(|(sequence, span)| (sequence - rows.start, span.clone()))
            .collect(),
    }
}

/// A masked batch as tensors on `device`, padded with `pad_id` to its longest sequence, its
/// targets checked against `vocab_size`.
///
/// # Errors
/// [`MlmError`](mlm_core::MlmError) for a target outside `[0, vocab_size)` (a masker of
/// another vocabulary than the model's).
pub fn to_device(
    masked: &MaskedBatch,
    pad_id: u32,
    vocab_size: usize,
    device: &Device,
) -> Result<DeviceBatch, TrainError> {
    let batch = masked.input_ids.len();
    let seq = masked.input_ids.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = vec![i64::from(pad_id); batch * seq];
    let mut padding = vec![true; batch * seq];
    for (b, row) in masked.input_ids.iter().enumerate() {
        for (s, &id) in row.iter().enumerate() {
            ids[b * seq + s] = i64::from(id);
            padding[b * seq + s] = false;
        }
    }
    let n_tokens = masked.input_ids.iter().map(Vec::len).sum();
    let targets = masked.targets(seq, vocab_size, device)?;
    Ok(DeviceBatch {
        input_ids: Tensor::from_data(TensorData::new(ids, [batch, seq]), device),
        token_type_ids: Tensor::zeros([batch, seq], device),
        padding_mask: Tensor::from_data(TensorData::new(padding, [batch, seq]), device),
        targets,
        n_tokens,
    })
}

/// Unigram statistics of the tokens a masker can select, from each id's count (`[vocab_size]`,
/// specials ignored): the entropy of their distribution in nats — the loss of a model that
/// ignores context — and the share of the most frequent one — the accuracy of always
/// guessing it. `(0, 0)` when no selectable token occurs.
pub fn unigram_baseline(counts: &[u64], special_ids: &[u32]) -> (f64, f64) {
    let mut counts = counts.to_vec();
    for &id in special_ids {
        counts[id as usize] = 0;
    }
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return (0.0, 0.0);
    }
    let entropy = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / total as f64;
            -p * p.ln()
        })
        .sum();
    let most_frequent = *counts.iter().max().unwrap_or(&0) as f64 / total as f64;
    (entropy, most_frequent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_order_is_a_seeded_permutation() {
        let a = epoch_order(100, 1, 0);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<u32>>());
        assert_eq!(a, epoch_order(100, 1, 0));
        assert_ne!(a, epoch_order(100, 1, 1));
        assert_ne!(a, epoch_order(100, 2, 0));
        // The order of a `usize` list, as runs made before the `u32` list drew it.
        let mut wide: Vec<usize> = (0..100).collect();
        wide.shuffle(&mut stream_rng(1, Stream::EpochOrder, 0));
        assert_eq!(a.iter().map(|&i| i as usize).collect::<Vec<_>>(), wide);
    }

    #[test]
    fn unigram_baseline_of_a_known_distribution() {
        // Tokens 5 and 6 at 3:1, specials 0 and 1 ignored.
        let counts = [2, 2, 0, 0, 0, 3, 1, 0, 0, 0];
        let (entropy, most_frequent) = unigram_baseline(&counts, &[0, 1]);
        let expected = -(0.75f64 * 0.75f64.ln() + 0.25 * 0.25f64.ln());
        assert!((entropy - expected).abs() < 1e-12);
        assert_eq!(most_frequent, 0.75);
    }
}
