//! The data folder that `mlm-train prepare` writes and `train --data` memory-maps: token
//! shards as `.npy` arrays, their sequence and document offsets, the training split's token
//! counts, the tokenizer, and `manifest.json` with a sha256 per file.
//!
//! ```text
//! DIR/manifest.json                   what follows, with counts and checksums
//! DIR/tokenizer.json                  the tokenizer that made the ids
//! DIR/train-00000.tokens.npy          token ids, flat (u16, or u32 for a larger vocabulary)
//! DIR/train-00000.offsets.npy         u64 [sequences + 1]: sequence i is tokens[o[i]..o[i+1]]
//! DIR/train-00000.documents.npy       u64 [documents]: each document's first sequence
//! DIR/held_out-00000.*.npy            the same for the held-out split
//! DIR/unigram_counts.npy              u64 [vocab_size]: how often each id occurs in training
//! ```

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::npy::{Dtype, NpyArray};
use super::tokenizer::SubwordTokenizer;
use crate::error::TrainError;
use crate::files::{io, read_json};

/// The `format` of the manifests this build writes and reads.
pub const DATA_FORMAT: &str = "mlm-train data 1";

/// One file of the folder and its checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its name in the folder.
    pub file: String,
    /// Its size, bytes.
    pub bytes: u64,
    /// sha256 of its bytes, hex.
    pub sha256: String,
}

/// One shard of a split: its sequences, whole documents of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// Sequences in the shard.
    pub sequences: u64,
    /// Token ids.
    pub tokens: FileEntry,
    /// Sequence offsets into `tokens`.
    pub offsets: FileEntry,
    /// First sequence of each document.
    pub documents: FileEntry,
}

/// A split (training or held-out): its counts and shards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitEntry {
    /// Documents.
    pub documents: u64,
    /// Sequences.
    pub sequences: u64,
    /// Tokens, `[CLS]` and `[SEP]` included.
    pub tokens: u64,
    /// Its shards, in order.
    pub shards: Vec<ShardEntry>,
}

/// `manifest.json`: how the folder was made and what it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`DATA_FORMAT`].
    pub format: String,
    /// sha256 of the tokenizer's vocabulary, one token per line in id order.
    pub tokenizer_sha256: String,
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// `uint16` or `uint32`.
    pub token_dtype: String,
    /// Longest sequence, `[CLS]` and `[SEP]` included.
    pub max_seq_len: usize,
    /// One sentence per sequence (else documents packed into sequences).
    pub line_by_line: bool,
    /// One document in this many is held out.
    pub held_out_every: usize,
    /// The JSON field read from `.jsonl` records.
    pub text_field: String,
    /// Corpus files read.
    pub source_files: usize,
    /// The training split.
    pub train: SplitEntry,
    /// The held-out split.
    pub held_out: SplitEntry,
    /// How often each id occurs in the training split.
    pub unigram_counts: FileEntry,
}

impl Manifest {
    /// Every file the manifest lists.
    pub fn files(&self) -> impl Iterator<Item = &FileEntry> {
        self.train
            .shards
            .iter()
            .chain(&self.held_out.shards)
            .flat_map(|shard| [&shard.tokens, &shard.offsets, &shard.documents])
            .chain([&self.unigram_counts])
    }

    /// Reads `DIR/manifest.json`.
    ///
    /// # Errors
    /// [`TrainError::DataFolder`] if `dir` does not exist, has none (it is not a finished data
    /// folder) or it is of another format; JSON and I/O errors naming the file.
    pub fn read(dir: &Path) -> Result<Self, TrainError> {
        let path = dir.join("manifest.json");
        if !dir.is_dir() {
            return Err(TrainError::DataFolder {
                path: dir.to_path_buf(),
                reason: "does not exist (`mlm-train prepare --corpus PATH --out DIR` makes one; \
                         a run made from a folder since moved reads its new path from `data` in \
                         the run's config.json)"
                    .into(),
            });
        }
        if !path.is_file() {
            return Err(TrainError::DataFolder {
                path: dir.to_path_buf(),
                reason: "no manifest.json: not a finished data folder (`mlm-train prepare \
                         --corpus PATH --out DIR` makes one)"
                    .into(),
            });
        }
        let manifest: Self = read_json(&path)?;
        if manifest.format != DATA_FORMAT {
            return Err(TrainError::DataFolder {
                path,
                reason: format!(
                    "format `{}`, this build reads `{DATA_FORMAT}`",
                    manifest.format
                ),
            });
        }
        Ok(manifest)
    }
}

/// sha256 of a tokenizer's vocabulary, one token per line in id order: what
/// [`Manifest::tokenizer_sha256`] holds.
///
/// # Errors
/// [`TrainError::Tokenizer`] if the ids have gaps.
pub fn vocab_sha256(tokenizer: &SubwordTokenizer) -> Result<String, TrainError> {
    Ok(hex_sha256(tokenizer.vocab()?.join("\n").as_bytes()))
}

/// sha256 of `bytes`, hex.
pub fn hex_sha256(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// One memory-mapped shard.
struct Shard {
    tokens: NpyArray,
    offsets: NpyArray,
}

/// The sequences of a split, memory-mapped: reading one touches its pages only.
pub struct TokenSplit {
    shards: Vec<Shard>,
    /// Index of each shard's first sequence in the split, then the split's length.
    starts: Vec<usize>,
}

impl TokenSplit {
    /// Number of sequences.
    pub fn len(&self) -> usize {
        *self.starts.last().expect("at least the total")
    }

    /// Whether the split has no sequence.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sequence `i`'s token ids.
    ///
    /// # Panics
    /// If `i >= len`.
    pub fn sequence(&self, i: usize) -> Vec<u32> {
        assert!(i < self.len(), "sequence {i} of {}", self.len());
        let shard = self.starts.partition_point(|&start| start <= i) - 1;
        let Shard { tokens, offsets } = &self.shards[shard];
        let local = i - self.starts[shard];
        tokens.ids(offsets.get(local) as usize..offsets.get(local + 1) as usize)
    }

    /// Unmaps the pages read so far ([`NpyArray::release`]): a run's memory stays that of a
    /// batch, whatever the size of the corpus.
    pub fn release_pages(&self) {
        for shard in &self.shards {
            shard.tokens.release();
            shard.offsets.release();
        }
    }

    /// The first `n` sequences (all of them if fewer).
    pub fn first(&self, n: usize) -> Vec<Vec<u32>> {
        (0..n.min(self.len())).map(|i| self.sequence(i)).collect()
    }
}

/// A data folder, checked and mapped.
pub struct DataFolder {
    /// Where it is.
    pub path: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// The tokenizer that made its ids.
    pub tokenizer: SubwordTokenizer,
    /// Training sequences.
    pub train: TokenSplit,
    /// Held-out sequences.
    pub held_out: TokenSplit,
    /// How often each id occurs in the training split, `[vocab_size]`.
    pub unigram_counts: Vec<u64>,
}

impl DataFolder {
    /// Opens the folder `dir`: reads its manifest, checks every file's size and sha256
    /// against it (on every core), and maps the shards.
    ///
    /// # Errors
    /// [`TrainError::DataFolder`] naming the folder or the file at fault: no manifest (an
    /// unfinished `prepare`), a missing file, a size or sha256 other than the manifest's, an
    /// array that does not match its counts, a tokenizer of another vocabulary.
    pub fn open(dir: &Path) -> Result<Self, TrainError> {
        let manifest = Manifest::read(dir)?;
        let files: Vec<&FileEntry> = manifest.files().collect();
        files
            .par_iter()
            .map(|entry| verify(dir, entry))
            .collect::<Result<Vec<()>, _>>()?;
        let tokenizer = SubwordTokenizer::from_file(&dir.join("tokenizer.json"))?;
        if vocab_sha256(&tokenizer)? != manifest.tokenizer_sha256 {
            return Err(folder_error(
                dir.join("tokenizer.json"),
                "its vocabulary's sha256 differs from the manifest's tokenizer_sha256",
            ));
        }
        Ok(Self {
            train: open_split(dir, &manifest.train, &manifest.token_dtype)?,
            held_out: open_split(dir, &manifest.held_out, &manifest.token_dtype)?,
            unigram_counts: unigram_counts(dir, &manifest)?,
            path: dir.to_path_buf(),
            manifest,
            tokenizer,
        })
    }

    /// The training split's unigram counts of the folder `dir`, `[vocab_size]`, read without
    /// the shards (only the counts' file is checked against the manifest): the word-frequency
    /// baseline's statistics ([`crate::eval::UnigramScorer`]).
    ///
    /// # Errors
    /// [`TrainError::DataFolder`] for no manifest, or a counts file that is missing, changed
    /// since `prepare` or of another length than the vocabulary.
    pub fn read_unigram_counts(dir: &Path) -> Result<Vec<u64>, TrainError> {
        let manifest = Manifest::read(dir)?;
        verify(dir, &manifest.unigram_counts)?;
        unigram_counts(dir, &manifest)
    }
}

/// The counts array of a verified folder, checked against its vocabulary size.
fn unigram_counts(dir: &Path, manifest: &Manifest) -> Result<Vec<u64>, TrainError> {
    let counts = open_array(dir, &manifest.unigram_counts, Dtype::U64)?;
    if counts.len() != manifest.vocab_size {
        return Err(folder_error(
            dir.join(&manifest.unigram_counts.file),
            format!(
                "holds {} counts for a vocabulary of {}",
                counts.len(),
                manifest.vocab_size
            ),
        ));
    }
    Ok((0..counts.len()).map(|i| counts.get(i)).collect())
}

/// Checks one file's size, then its sha256, against the manifest.
fn verify(dir: &Path, entry: &FileEntry) -> Result<(), TrainError> {
    let path = dir.join(&entry.file);
    let bytes = std::fs::metadata(&path)
        .map_err(|_| folder_error(path.clone(), "missing, though the manifest lists it"))?
        .len();
    if bytes != entry.bytes {
        return Err(folder_error(
            path,
            format!("{bytes} bytes, the manifest says {}", entry.bytes),
        ));
    }
    let mut hasher = Sha256::new();
    let mut file = std::fs::File::open(&path).map_err(io(&path))?;
    std::io::copy(&mut file, &mut hasher).map_err(io(&path))?;
    let digest = format!("{:x}", hasher.finalize());
    if digest != entry.sha256 {
        return Err(folder_error(
            path,
            format!(
                "sha256 {digest} differs from the manifest's {}: the file changed after \
                 `prepare` wrote it; prepare the folder again",
                entry.sha256
            ),
        ));
    }
    Ok(())
}

fn open_array(dir: &Path, entry: &FileEntry, dtype: Dtype) -> Result<NpyArray, TrainError> {
    let path = dir.join(&entry.file);
    let array = NpyArray::open(&path).map_err(|reason| folder_error(path.clone(), reason))?;
    if array.dtype() != dtype {
        return Err(folder_error(
            path,
            format!("holds {:?}, expected {dtype:?}", array.dtype()),
        ));
    }
    Ok(array)
}

fn open_split(dir: &Path, split: &SplitEntry, token_dtype: &str) -> Result<TokenSplit, TrainError> {
    let dtype = match token_dtype {
        "uint16" => Dtype::U16,
        _ => Dtype::U32,
    };
    let mut starts = vec![0];
    let mut shards = Vec::with_capacity(split.shards.len());
    for entry in &split.shards {
        let tokens = open_array(dir, &entry.tokens, dtype)?;
        let offsets = open_array(dir, &entry.offsets, Dtype::U64)?;
        let n = entry.sequences as usize;
        if offsets.len() != n + 1 || offsets.get(n) as usize != tokens.len() {
            return Err(folder_error(
                dir.join(&entry.offsets.file),
                format!(
                    "does not describe {n} sequences of its {} tokens",
                    tokens.len()
                ),
            ));
        }
        starts.push(starts.last().expect("starts at 0") + n);
        shards.push(Shard { tokens, offsets });
    }
    Ok(TokenSplit { shards, starts })
}

fn folder_error(path: PathBuf, reason: impl Into<String>) -> TrainError {
    TrainError::DataFolder {
        path,
        reason: reason.into(),
    }
}
