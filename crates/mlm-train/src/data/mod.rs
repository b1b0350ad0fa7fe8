//! The data pipeline: corpus → cleaned sentences → WordPiece ids → packed sequences in a
//! memory-mapped data folder ([`prepare_folder`], [`DataFolder`]) → freshly masked batches.

pub mod batch;
pub mod corpus;
pub mod folder;
pub mod masking;
pub mod minimal_pairs;
pub mod npy;
pub mod prepare;
pub mod schedule;
pub mod source;
pub mod tokenizer;

use std::path::Path;

pub use batch::{
    DeviceBatch, check_max_seq_len, epoch_order, make_batch, make_shards, mask_shards, pack,
    pack_document, to_device, unigram_baseline, unigram_baseline_of_counts,
};
pub use corpus::{CORPUS_PACKAGES, Document, clean, fetch_corpus, read_corpus, split_held_out};
pub use folder::{DataFolder, Manifest, TokenSplit};
pub use masking::Masking;
pub use minimal_pairs::{MinimalPair, Paradigm, Sentence, read_minimal_pairs};
pub use prepare::{PrepareOptions, prepare_folder};
pub use schedule::BatchSchedule;
pub use tokenizer::{SPECIAL_TOKENS, WordPieceTokenizer};

use crate::error::TrainError;

/// Training and held-out sequences with the tokenizer that made them, in memory (for
/// library users with a small corpus, such as the `learner` example; the trainer reads a
/// [`DataFolder`]).
pub struct PreparedData {
    /// The tokenizer.
    pub tokenizer: WordPieceTokenizer,
    /// Packed training sequences.
    pub train: Vec<Vec<u32>>,
    /// Packed held-out sequences (every 50th document).
    pub held_out: Vec<Vec<u32>>,
}

/// In memory: reads and splits the `.txt` corpus, trains the tokenizer on the training split (unless one
/// is given), and packs both splits into sequences of at most `max_seq_len` tokens.
///
/// # Errors
/// Corpus, tokenizer and configuration errors, each naming its file or value.
pub fn prepare(
    corpus: &Path,
    tokenizer: Option<WordPieceTokenizer>,
    vocab_size: usize,
    max_seq_len: usize,
    held_out_every: usize,
) -> Result<PreparedData, TrainError> {
    let (train_docs, held_out_docs) = split_held_out(read_corpus(corpus)?, held_out_every);
    let tokenizer = match tokenizer {
        Some(tokenizer) => tokenizer,
        None => WordPieceTokenizer::train(
            train_docs
                .iter()
                .flat_map(|d| d.sentences.iter().map(String::as_str)),
            vocab_size,
        )?,
    };
    Ok(PreparedData {
        train: pack(&train_docs, &tokenizer, max_seq_len)?,
        held_out: pack(&held_out_docs, &tokenizer, max_seq_len)?,
        tokenizer,
    })
}
