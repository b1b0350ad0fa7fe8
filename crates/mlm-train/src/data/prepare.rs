//! `prepare`: a corpus → a [data folder](super::folder), in one streaming pass on every core.
//! Documents are read in batches of about 16 MiB of text, cleaned and tokenized in parallel,
//! and appended in corpus order, so the same command writes the same bytes. The folder is
//! built beside its destination (`DIR.partial`) and renamed into place when complete.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;

use super::batch::{check_max_seq_len, pack_document};
use super::corpus::{Document, Repeats, clean, split_held_out};
use super::folder::{
    DATA_FORMAT, FileEntry, Manifest, ShardEntry, SplitEntry, hex_sha256, vocab_sha256,
};
use super::npy::{Dtype, npy_bytes};
use super::source::{RawDocument, RawDocuments, SourceFile, source_files};
use super::tokenizer::SubwordTokenizer;
use crate::error::TrainError;
use crate::files::{io, write_json};

/// Text read per parallel batch, bytes.
const BATCH_BYTES: usize = 16 << 20;

/// How `prepare` builds a data folder.
#[derive(Clone)]
pub struct PrepareOptions {
    /// The tokenizer to use; `None`: train a WordPiece vocabulary of `vocab_size` tokens on
    /// the first `tokenizer_sample_bytes` of training text.
    pub tokenizer: Option<SubwordTokenizer>,
    /// Size of a trained vocabulary, specials included.
    pub vocab_size: usize,
    /// Text a trained vocabulary learns from, bytes of cleaned sentences (the whole
    /// training split when it is smaller).
    pub tokenizer_sample_bytes: usize,
    /// Longest sequence, `[CLS]` and `[SEP]` included.
    pub max_seq_len: usize,
    /// One sentence per sequence (else a document's sentences packed into sequences).
    pub line_by_line: bool,
    /// One document in this many is held out.
    pub held_out_every: usize,
    /// The field of a `.jsonl` record that holds its text.
    pub text_field: String,
    /// A shard is closed after the document that brings it to this many tokens.
    pub shard_tokens: usize,
}

impl PrepareOptions {
    /// Packed sequences of at most `max_seq_len` tokens, one document in `held_out_every`
    /// held out, a trained vocabulary of `vocab_size`, JSON text in `text`, 256 MiB of
    /// tokenizer sample and shards of 2^26 tokens (128 MiB at u16).
    pub fn new(vocab_size: usize, max_seq_len: usize, held_out_every: usize) -> Self {
        Self {
            tokenizer: None,
            vocab_size,
            tokenizer_sample_bytes: 256 << 20,
            max_seq_len,
            line_by_line: false,
            held_out_every,
            text_field: "text".into(),
            shard_tokens: 1 << 26,
        }
    }
}

/// Prepares `corpus` (a corpus file or folder) into the data folder `out`, which must not
/// exist; returns its manifest. Prints a progress line to stderr every 10 seconds, and a
/// warning for the files of a folder skipped as no corpus kind and for the documents
/// dropped as repeats of earlier ones ([`Repeats`]).
///
/// # Errors
/// [`TrainError::DataFolder`] if `out` exists, `held_out_every` is below 2 or the held-out
/// split would be empty; corpus errors naming the file and line ([`TrainError::CorpusFile`],
/// [`TrainError::NotUtf8`]),
/// [`TrainError::EmptyCorpus`]; tokenizer and I/O errors. On any error nothing is left at
/// `out`, and its staging folder is removed.
pub fn prepare_folder(
    corpus: &Path,
    out: &Path,
    options: &PrepareOptions,
) -> Result<Manifest, TrainError> {
    check_max_seq_len(options.max_seq_len)?;
    if out.exists() {
        return Err(TrainError::DataFolder {
            path: out.to_path_buf(),
            reason: "already exists: remove it or choose another --out".into(),
        });
    }
    if options.held_out_every < 2 {
        return Err(TrainError::DataFolder {
            path: out.to_path_buf(),
            reason: format!(
                "held_out_every = {} holds out every document and trains on none: it must be \
                 at least 2",
                options.held_out_every
            ),
        });
    }
    let staging = staging_dir(out);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let result = write_folder(corpus, &staging, options)
        .and_then(|manifest| check_held_out(manifest, out))
        .and_then(|manifest| {
            std::fs::rename(&staging, out)
                .map(|_| manifest)
                .map_err(io(out))
        });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

/// `manifest` if its held-out split has a sequence to validate on.
///
/// # Errors
/// [`TrainError::DataFolder`] naming `out`, the documents and `held_out_every`.
fn check_held_out(manifest: Manifest, out: &Path) -> Result<Manifest, TrainError> {
    if manifest.held_out.sequences > 0 {
        return Ok(manifest);
    }
    let every = manifest.held_out_every;
    // 2, every other document, is the most that can be held out.
    let way_out = match every {
        2 => "give more text".to_string(),
        _ => "hold out more with a smaller --held-out-every (2 holds out every other \
              document), or give more text"
            .to_string(),
    };
    Err(TrainError::DataFolder {
        path: out.to_path_buf(),
        reason: format!(
            "the held-out split is empty: holding out one document in {every} of the \
             corpus's {} (a corpus of fewer documents is cut into chunks of sentences first) \
             held out none; {way_out}",
            manifest.train.documents
        ),
    })
}

/// Where `out` is built: `out.partial`, beside it.
fn staging_dir(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

fn write_folder(
    corpus: &Path,
    dir: &Path,
    options: &PrepareOptions,
) -> Result<Manifest, TrainError> {
    let found = source_files(corpus)?;
    if let Some(warning) = found.skipped_warning() {
        eprintln!("warning: {warning}");
    }
    let files = &found.files;
    let tokenizer = match &options.tokenizer {
        Some(tokenizer) => tokenizer.clone(),
        None => train_tokenizer(corpus, files, options)?,
    };
    let vocab_size = tokenizer.vocab_size();
    let dtype = Dtype::for_vocab(vocab_size);
    let mut train = SplitWriter::new("train", dtype, options.shard_tokens, Some(vocab_size));
    let mut held_out = SplitWriter::new("held_out", dtype, options.shard_tokens, None);
    let mut progress = Progress::new();
    let mut documents = SplitDocuments::new(
        RawDocuments::new(files, &options.text_field),
        options.held_out_every,
    );
    let splits = (&mut train, &mut held_out);
    write_documents(
        &mut documents,
        &tokenizer,
        options,
        dir,
        splits,
        &mut progress,
    )?;
    if train.entry.documents + held_out.entry.documents == 0 {
        return Err(TrainError::EmptyCorpus(corpus.to_path_buf()));
    }
    if let Some(report) = documents.repeats.report(corpus) {
        eprintln!("warning: {report}");
    }
    let counts = train.counts.take().expect("the training split counts");
    let manifest = Manifest {
        format: DATA_FORMAT.into(),
        tokenizer_sha256: vocab_sha256(&tokenizer)?,
        vocab_size,
        token_dtype: match dtype {
            Dtype::U16 => "uint16",
            _ => "uint32",
        }
        .into(),
        max_seq_len: options.max_seq_len,
        line_by_line: options.line_by_line,
        held_out_every: options.held_out_every,
        text_field: options.text_field.clone(),
        source_files: files.len(),
        unigram_counts: write_file(
            dir,
            "unigram_counts.npy",
            npy_bytes(Dtype::U64, counts.into_iter()),
        )?,
        train: train.finish(dir)?,
        held_out: held_out.finish(dir)?,
    };
    tokenizer.save(&dir.join("tokenizer.json"))?;
    write_json(&dir.join("manifest.json"), &manifest)?;
    progress.done(&manifest);
    Ok(manifest)
}

/// Packs every document of `documents` on every core and appends its sequences to its
/// split, `(train, held_out)`, in corpus order.
fn write_documents(
    documents: &mut SplitDocuments,
    tokenizer: &SubwordTokenizer,
    options: &PrepareOptions,
    dir: &Path,
    (train, held_out): (&mut SplitWriter, &mut SplitWriter),
    progress: &mut Progress,
) -> Result<(), TrainError> {
    while let Some(batch) = documents.next_batch()? {
        let sequences = batch
            .par_iter()
            .map(|(_, document)| {
                pack_document(
                    document,
                    tokenizer,
                    options.max_seq_len,
                    options.line_by_line,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        for ((is_held_out, _), sequences) in batch.iter().zip(sequences) {
            let split = if *is_held_out {
                &mut *held_out
            } else {
                &mut *train
            };
            split.push(dir, sequences)?;
        }
        progress.report(train.tokens() + held_out.tokens());
    }
    Ok(())
}

/// A WordPiece vocabulary trained on the training split's first
/// `options.tokenizer_sample_bytes` of cleaned sentences.
///
/// # Errors
/// [`TrainError::EmptyCorpus`] if the training split has no sentence; corpus errors.
fn train_tokenizer(
    corpus: &Path,
    files: &[SourceFile],
    options: &PrepareOptions,
) -> Result<SubwordTokenizer, TrainError> {
    let mut documents = SplitDocuments::new(
        RawDocuments::new(files, &options.text_field),
        options.held_out_every,
    );
    let (mut sample, mut bytes) = (Vec::new(), 0);
    while let Some(batch) = documents.next_batch()? {
        for (_, document) in batch.into_iter().filter(|(held_out, _)| !held_out) {
            bytes += document.sentences.iter().map(String::len).sum::<usize>();
            sample.extend(document.sentences);
        }
        if bytes >= options.tokenizer_sample_bytes {
            break;
        }
    }
    if sample.is_empty() {
        return Err(TrainError::EmptyCorpus(corpus.to_path_buf()));
    }
    SubwordTokenizer::train(sample.iter().map(String::as_str), options.vocab_size)
}

/// Cleaned documents in batches, each marked held out or not: one in `every` is held out
/// ([`split_held_out`]'s rule, applied as they stream by; a corpus of fewer than `every`
/// documents is first cut into chunks, so that it still has a held-out part). A document
/// that repeats an earlier one is dropped ([`Repeats`]).
struct SplitDocuments<'a> {
    raw: RawDocuments<'a>,
    every: usize,
    /// Documents seen so far.
    seen: usize,
    /// The first documents, kept until there are `every` of them (or the corpus ends).
    first: Option<Vec<Document>>,
    /// The documents read, and the repeats dropped.
    repeats: Repeats,
}

impl<'a> SplitDocuments<'a> {
    fn new(raw: RawDocuments<'a>, every: usize) -> Self {
        Self {
            raw,
            every,
            seen: 0,
            first: Some(Vec::new()),
            repeats: Repeats::default(),
        }
    }

    /// The next batch of `(held out, document)`, in corpus order (`None` at the end).
    fn next_batch(&mut self) -> Result<Option<Vec<(bool, Document)>>, TrainError> {
        loop {
            let (documents, exhausted) = self.read_batch()?;
            let Some(first) = self.first.as_mut() else {
                return Ok((!documents.is_empty() || !exhausted).then(|| self.assign(documents)));
            };
            first.extend(documents);
            if first.len() >= self.every {
                let first = self.first.take().expect("checked");
                return Ok(Some(self.assign(first)));
            }
            if exhausted {
                let first = self.first.take().expect("checked");
                let (train, held_out) = split_held_out(first, self.every);
                let marked = train.into_iter().map(|d| (false, d));
                let batch: Vec<_> = marked
                    .chain(held_out.into_iter().map(|d| (true, d)))
                    .collect();
                return Ok((!batch.is_empty()).then_some(batch));
            }
        }
    }

    /// About [`BATCH_BYTES`] of documents, cleaned in parallel (those with no sentence left
    /// out, and repeats), and whether the corpus ended.
    fn read_batch(&mut self) -> Result<(Vec<Document>, bool), TrainError> {
        let (mut raw, mut bytes) = (Vec::new(), 0);
        while bytes < BATCH_BYTES {
            match self.raw.next().transpose()? {
                Some(document) => {
                    bytes += document.text.len();
                    raw.push(document);
                }
                None => return Ok((self.clean_new(raw), true)),
            }
        }
        Ok((self.clean_new(raw), false))
    }

    /// `raw` cleaned and hashed on every core, less the documents with no sentence and
    /// the repeats, in order.
    fn clean_new(&mut self, raw: Vec<RawDocument>) -> Vec<Document> {
        let cleaned: Vec<(Document, Option<usize>, u64)> = raw
            .into_par_iter()
            .map(|raw| {
                let sentences = clean(&raw.text);
                let hash = Repeats::hash(&sentences);
                let document = Document {
                    path: raw.path,
                    sentences,
                };
                (document, raw.line, hash)
            })
            .collect();
        cleaned
            .into_iter()
            .filter(|(document, line, hash)| {
                !document.sentences.is_empty()
                    && self.repeats.is_new_hash(*hash, &document.path, *line)
            })
            .map(|(document, ..)| document)
            .collect()
    }

    fn assign(&mut self, documents: Vec<Document>) -> Vec<(bool, Document)> {
        documents
            .into_iter()
            .map(|document| {
                let held_out = self.seen % self.every == self.every / 2;
                self.seen += 1;
                (held_out, document)
            })
            .collect()
    }
}

/// A split's shards as they fill: whole documents, closed at `shard_tokens`.
struct SplitWriter {
    name: &'static str,
    dtype: Dtype,
    shard_tokens: usize,
    tokens: Vec<u32>,
    offsets: Vec<u64>,
    documents: Vec<u64>,
    entry: SplitEntry,
    /// Id counts (the training split's).
    counts: Option<Vec<u64>>,
}

impl SplitWriter {
    fn new(name: &'static str, dtype: Dtype, shard_tokens: usize, count: Option<usize>) -> Self {
        Self {
            name,
            dtype,
            shard_tokens,
            tokens: Vec::new(),
            offsets: vec![0],
            documents: Vec::new(),
            entry: SplitEntry::default(),
            counts: count.map(|vocab_size| vec![0; vocab_size]),
        }
    }

    /// Tokens written or waiting.
    fn tokens(&self) -> u64 {
        self.entry.tokens + self.tokens.len() as u64
    }

    /// Appends one document's sequences.
    fn push(&mut self, dir: &Path, sequences: Vec<Vec<u32>>) -> Result<(), TrainError> {
        self.documents.push(self.offsets.len() as u64 - 1);
        self.entry.documents += 1;
        for sequence in sequences {
            if let Some(counts) = self.counts.as_mut() {
                sequence.iter().for_each(|&id| counts[id as usize] += 1);
            }
            self.tokens.extend(sequence);
            self.offsets.push(self.tokens.len() as u64);
        }
        if self.tokens.len() >= self.shard_tokens {
            self.flush(dir)?;
        }
        Ok(())
    }

    /// Writes the shard being filled, if it holds a document.
    fn flush(&mut self, dir: &Path) -> Result<(), TrainError> {
        if self.documents.is_empty() {
            return Ok(());
        }
        let stem = format!("{}-{:05}", self.name, self.entry.shards.len());
        let tokens = std::mem::take(&mut self.tokens);
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let documents = std::mem::take(&mut self.documents);
        let sequences = offsets.len() as u64 - 1;
        self.entry.sequences += sequences;
        self.entry.tokens += tokens.len() as u64;
        self.entry.shards.push(ShardEntry {
            sequences,
            tokens: write_file(
                dir,
                &format!("{stem}.tokens.npy"),
                npy_bytes(self.dtype, tokens.into_iter().map(u64::from)),
            )?,
            offsets: write_file(
                dir,
                &format!("{stem}.offsets.npy"),
                npy_bytes(Dtype::U64, offsets.into_iter()),
            )?,
            documents: write_file(
                dir,
                &format!("{stem}.documents.npy"),
                npy_bytes(Dtype::U64, documents.into_iter()),
            )?,
        });
        Ok(())
    }

    fn finish(mut self, dir: &Path) -> Result<SplitEntry, TrainError> {
        self.flush(dir)?;
        Ok(self.entry)
    }
}

fn write_file(dir: &Path, name: &str, bytes: Vec<u8>) -> Result<FileEntry, TrainError> {
    let path = dir.join(name);
    std::fs::write(&path, &bytes).map_err(io(&path))?;
    Ok(FileEntry {
        file: name.into(),
        bytes: bytes.len() as u64,
        sha256: hex_sha256(&bytes),
    })
}

/// Progress lines on stderr, at most one per 10 seconds.
struct Progress {
    started: Instant,
    last: Instant,
}

impl Progress {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            started: now,
            last: now,
        }
    }

    fn report(&mut self, tokens: u64) {
        if self.last.elapsed().as_secs() >= 10 {
            self.last = Instant::now();
            let seconds = self.started.elapsed().as_secs_f64();
            eprintln!(
                "prepare: {tokens} tokens in {seconds:.0} s ({:.0} tokens/s)",
                tokens as f64 / seconds
            );
        }
    }

    fn done(&self, manifest: &Manifest) {
        let seconds = self.started.elapsed().as_secs_f64();
        let tokens = manifest.train.tokens + manifest.held_out.tokens;
        eprintln!(
            "prepare: {} + {} documents, {} + {} sequences, {tokens} tokens (train + held-out) \
             in {seconds:.1} s ({:.0} tokens/s)",
            manifest.train.documents,
            manifest.held_out.documents,
            manifest.train.sequences,
            manifest.held_out.sequences,
            tokens as f64 / seconds
        );
    }
}
