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

pub use batch::{
    DeviceBatch, check_max_seq_len, epoch_order, make_batch, make_shards, mask_shards, pack,
    pack_document, to_device, unigram_baseline,
};
pub use corpus::{
    CorpusPackage, DEFAULT_CORPUS, DEFAULT_PACKAGES, Document, PACKAGES, PackageText, Registry,
    clean, default_packages, fetch_corpus, package, read_corpus, split_held_out,
};
pub use folder::{DataFolder, Manifest, TokenSplit};
pub use masking::Masking;
pub use minimal_pairs::{MinimalPair, Paradigm, Sentence, read_minimal_pairs};
pub use prepare::{PrepareOptions, prepare_folder};
pub use schedule::BatchSchedule;
pub use tokenizer::{ROBERTA_SPECIAL_TOKENS, SPECIAL_TOKENS, SubwordTokenizer, TokenizerKind};
