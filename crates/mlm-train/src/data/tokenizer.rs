//! The subword tokenizer (the `tokenizers` crate): a WordPiece vocabulary trained on the
//! training split or loaded from a `tokenizer.json` or a BERT `vocab.txt`, RoBERTa's
//! byte-level BPE from a `tokenizer.json` or `vocab.json` + `merges.txt`, or XLM-R's
//! SentencePiece Unigram from a `tokenizer.json`.

use std::collections::HashMap;
use std::path::Path;

use ahash::{AHashMap, RandomState};
use compact_str::CompactString;
use rayon::prelude::*;
use tokenizers::models::ModelWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainer};
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::processors::roberta::RobertaProcessing;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString,
    PreTokenizer, Tokenizer,
};

use mlm_core::{MaskRates, Masker, MaskingConfig, SpanMaskingConfig};

use super::Masking;
use crate::error::TrainError;

/// BERT's special tokens, in the order a trained vocabulary assigns their ids (0..5).
pub const SPECIAL_TOKENS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// RoBERTa's special tokens in the roles of [`SPECIAL_TOKENS`]: padding, unknown, start
/// (`[CLS]`'s place), end (`[SEP]`'s) and mask.
pub const ROBERTA_SPECIAL_TOKENS: [&str; 5] = ["<pad>", "<unk>", "<s>", "</s>", "<mask>"];

/// SentencePiece's word start, `▁` (U+2581), which a Metaspace pre-tokenizer puts for a space.
const METASPACE: char = '\u{2581}';

/// The subword model of a tokenizer: it fixes the special tokens and where words start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// BERT's uncased WordPiece (`[CLS] … [SEP]`): a word goes on with `##` pieces.
    WordPiece,
    /// RoBERTa's byte-level BPE (`<s> … </s>`, Radford et al. 2019, §2.2): a word after a
    /// space starts with `Ġ`, the encoded space.
    ByteLevelBpe,
    /// XLM-R's SentencePiece Unigram (`<s> … </s>`, Kudo 2018; Conneau et al. 2020): its
    /// Metaspace pre-tokenizer starts each word with `▁`.
    Unigram,
}

impl TokenizerKind {
    /// The kind of a loaded `tokenizer.json`.
    ///
    /// # Errors
    /// A message naming the model if it is neither WordPiece nor a BPE with a byte-level
    /// pre-tokenizer.
    fn of(tokenizer: &Tokenizer) -> Result<Self, String> {
        let byte_level = matches!(
            tokenizer.get_pre_tokenizer(),
            Some(PreTokenizerWrapper::ByteLevel(_))
        );
        match tokenizer.get_model() {
            ModelWrapper::WordPiece(_) => Ok(Self::WordPiece),
            ModelWrapper::BPE(_) if byte_level => Ok(Self::ByteLevelBpe),
            ModelWrapper::Unigram(_) => Ok(Self::Unigram),
            model => {
                let kind = serde_json::to_value(model)
                    .ok()
                    .and_then(|model| model["type"].as_str().map(String::from))
                    .unwrap_or_else(|| "another".into());
                let level = if kind == "BPE" {
                    " without a byte-level pre-tokenizer"
                } else {
                    ""
                };
                Err(format!(
                    "its model is {kind}{level}; only WordPiece (BERT), byte-level BPE \
                     (RoBERTa) and Unigram (XLM-R) tokenizers are supported"
                ))
            }
        }
    }

    /// Its name in messages: `WordPiece`, `byte-level BPE`.
    pub fn name(self) -> &'static str {
        match self {
            Self::WordPiece => "WordPiece",
            Self::ByteLevelBpe => "byte-level BPE",
            Self::Unigram => "Unigram",
        }
    }

    /// Its special tokens in role order: padding, unknown, start, end, mask.
    pub fn special_tokens(self) -> [&'static str; 5] {
        match self {
            Self::WordPiece => SPECIAL_TOKENS,
            Self::ByteLevelBpe | Self::Unigram => ROBERTA_SPECIAL_TOKENS,
        }
    }

    /// Whether `token` goes on with the word of the token before it (whole-word and span
    /// masking).
    pub fn continues_word(self, token: &str) -> bool {
        match self {
            Self::WordPiece => token.starts_with("##"),
            Self::ByteLevelBpe => !token.starts_with('Ġ'),
            Self::Unigram => !token.starts_with(METASPACE),
        }
    }

    /// The ids never masked nor drawn as replacements: WordPiece's bracketed tokens (the
    /// specials and bert-base's `[unused0]` …), or the tokens a BPE declares special.
    fn special_ids(self, tokenizer: &Tokenizer) -> Vec<u32> {
        let mut ids: Vec<u32> = match self {
            Self::WordPiece => tokenizer
                .get_vocab(true)
                .into_iter()
                .filter(|(token, _)| token.starts_with('[') && token.ends_with(']'))
                .map(|(_, id)| id)
                .collect(),
            Self::ByteLevelBpe | Self::Unigram => tokenizer
                .get_added_tokens_decoder()
                .into_iter()
                .filter(|(_, token)| token.special)
                .map(|(id, _)| id)
                .collect(),
        };
        ids.sort_unstable();
        ids
    }

    /// The special tokens of `tokenizer` in role order: for a BPE or Unigram, BERT's names
    /// where it holds more of them than of RoBERTa's (ModernBERT's byte-level BPE has
    /// `[CLS] [SEP] [MASK] [PAD] [UNK]`), else the kind's own.
    fn special_tokens_of(self, tokenizer: &Tokenizer) -> [&'static str; 5] {
        let held = |names: [&str; 5]| {
            names
                .iter()
                .filter(|t| tokenizer.token_to_id(t).is_some())
                .count()
        };
        match self {
            Self::ByteLevelBpe | Self::Unigram
                if held(SPECIAL_TOKENS) > held(ROBERTA_SPECIAL_TOKENS) =>
            {
                SPECIAL_TOKENS
            }
            _ => self.special_tokens(),
        }
    }
}

/// What a saved tokenizer with the special tokens `specials` adds around a sequence:
/// `[CLS] A [SEP]` (pair `[CLS] A [SEP] B [SEP]`), or RoBERTa's `<s> A </s>` (pair `<s> A
/// </s></s> B </s>`).
fn post_processor(
    specials: [&str; 5],
    [cls_id, sep_id]: [u32; 2],
) -> Result<PostProcessorWrapper, String> {
    let [_, _, cls, sep, _] = specials.map(String::from);
    Ok(match specials == SPECIAL_TOKENS {
        true => TemplateProcessing::builder()
            .try_single("[CLS] $A [SEP]")
            .and_then(|t| t.try_pair("[CLS] $A [SEP] $B:1 [SEP]:1"))
            .map_err(|e| e.to_string())?
            .special_tokens(vec![(cls, cls_id), (sep, sep_id)])
            .build()
            .map_err(|e| e.to_string())?
            .into(),
        false => RobertaProcessing::new((sep, sep_id), (cls, cls_id))
            .add_prefix_space(false)
            .into(),
    })
}

/// A subword tokenizer with the ids of its special tokens: BERT's uncased WordPiece or
/// RoBERTa's byte-level BPE ([`TokenizerKind`]). The fields are named by BERT's roles;
/// RoBERTa's `<s>` is `cls_id`, `</s>` `sep_id`.
#[derive(Clone)]
pub struct SubwordTokenizer {
    inner: Tokenizer,
    /// WordPiece or byte-level BPE.
    pub kind: TokenizerKind,
    /// Its special tokens in role order (padding, unknown, start, end, mask): BERT's
    /// `[PAD] [UNK] [CLS] [SEP] [MASK]` or RoBERTa's `<pad> <unk> <s> </s> <mask>`.
    pub special_tokens: [&'static str; 5],
    /// `[PAD]` (`<pad>`) id.
    pub pad_id: u32,
    /// `[UNK]` (`<unk>`) id: what a word with a character outside the vocabulary becomes.
    pub unk_id: u32,
    /// `[CLS]` (`<s>`) id.
    pub cls_id: u32,
    /// `[SEP]` (`</s>`) id.
    pub sep_id: u32,
    /// `[MASK]` (`<mask>`) id.
    pub mask_id: u32,
    /// Ids never selected for masking nor drawn as random replacements: the five specials
    /// and every other bracketed token such as bert-base's `[unused0]` (WordPiece), or
    /// every token the tokenizer declares special (BPE).
    pub special_ids: Vec<u32>,
}

impl SubwordTokenizer {
    /// Trains an uncased WordPiece vocabulary of `vocab_size` tokens (specials included)
    /// on `sentences`: the same sentences give a byte-identical vocabulary in every process.
    ///
    /// `tokenizers`' own `Tokenizer::train` is not deterministic across processes: it counts
    /// words into a hash map keyed per process at random, and its trainer numbers the
    /// `##`-continuation pieces in that map's iteration order. Merges of equal frequency are
    /// then ranked by those numbers, so each process learns a slightly different vocabulary.
    /// Here the words are counted by us, in sorted order, into a map with fixed hash keys,
    /// and handed to the same trainer (`BpeTrainer::do_train`, which WordPiece training
    /// wraps).
    ///
    /// # Errors
    /// [`TrainError::Tokenizer`] if training fails.
    pub fn train<'a>(
        sentences: impl Iterator<Item = &'a str>,
        vocab_size: usize,
    ) -> Result<Self, TrainError> {
        let fail = |e: tokenizers::Error| TrainError::Tokenizer {
            path: "(training)".into(),
            reason: e.to_string(),
        };
        let specials: Vec<AddedToken> = SPECIAL_TOKENS
            .iter()
            .map(|t| AddedToken::from(*t, true))
            .collect();
        let trainer = BpeTrainer::builder()
            .vocab_size(vocab_size)
            .min_frequency(2)
            .show_progress(false)
            .special_tokens(specials.clone())
            .continuing_subword_prefix("##".into())
            .build();
        let mut bpe = BPE::default();
        trainer
            .do_train(&word_counts(sentences).map_err(fail)?, &mut bpe)
            .map_err(fail)?;
        let mut tokenizer = bert_pipeline(WordPiece::from_bpe(&bpe));
        tokenizer.add_special_tokens(&specials);
        Self::new(tokenizer, TokenizerKind::WordPiece, Path::new("(training)"))
    }

    /// Loads a `tokenizer.json` (a WordPiece or byte-level BPE model), a BERT `vocab.txt`
    /// (one token per line; uncased), or a RoBERTa `vocab.json` with the `merges.txt` beside
    /// it.
    ///
    /// A `tokenizer.json`'s truncation and padding are dropped: a tokenizer saved after
    /// `tokenizer(…, truncation=True, max_length=128)` keeps them, and would cut every
    /// document and prompt at 128 tokens without a word.
    ///
    /// # Errors
    /// [`TrainError::Tokenizer`] naming the file if it is a folder (naming the file in it
    /// to give), cannot be read, is of another kind (a BPE that is not byte-level, a
    /// Unigram, ...), or lacks one of its kind's special tokens (`[MASK]`, `<mask>`, ...).
    pub fn from_file(path: &Path) -> Result<Self, TrainError> {
        let fail = |reason: String| TrainError::Tokenizer {
            path: path.to_path_buf(),
            reason,
        };
        if path.is_dir() {
            return Err(fail(folder_advice(path)));
        }
        if !path.is_file() {
            return Err(fail("no such file".into()));
        }
        let file = path
            .to_str()
            .ok_or_else(|| fail("path is not UTF-8".into()))?;
        let (tokenizer, kind) = match path.extension().and_then(|e| e.to_str()) {
            Some("txt") => {
                let model = WordPiece::from_file(file)
                    .unk_token("[UNK]".into())
                    .build()
                    .map_err(|e| fail(e.to_string()))?;
                (bert_pipeline(model), TokenizerKind::WordPiece)
            }
            Some("json") if path.file_name().is_some_and(|name| name == "vocab.json") => {
                let merges = path.with_file_name("merges.txt");
                let merges = merges
                    .to_str()
                    .ok_or_else(|| fail("path is not UTF-8".into()))?;
                let model = BPE::from_file(file, merges)
                    .build()
                    .map_err(|e| fail(format!("with {merges}: {e}")))?;
                (byte_level_pipeline(model), TokenizerKind::ByteLevelBpe)
            }
            _ => {
                let tokenizer = Tokenizer::from_file(path)
                    .map_err(|e| fail(format!("not a tokenizer.json (nor a vocab.txt): {e}")))?;
                let kind = TokenizerKind::of(&tokenizer).map_err(fail)?;
                (tokenizer, kind)
            }
        };
        Self::new(tokenizer, kind, path)
    }

    fn new(mut inner: Tokenizer, kind: TokenizerKind, path: &Path) -> Result<Self, TrainError> {
        let fail = |reason: String| TrainError::Tokenizer {
            path: path.to_path_buf(),
            reason,
        };
        let specials = kind.special_tokens_of(&inner);
        let id = |token: &str| {
            inner.token_to_id(token).ok_or_else(|| {
                let other = match specials == SPECIAL_TOKENS {
                    true => ROBERTA_SPECIAL_TOKENS,
                    false => SPECIAL_TOKENS,
                };
                let role = specials.iter().position(|t| *t == token).unwrap_or(0);
                let alternative = match kind {
                    TokenizerKind::WordPiece => String::new(),
                    _ => format!(" (nor {})", other[role]),
                };
                fail(format!("the vocabulary has no {token} token{alternative}"))
            })
        };
        let [pad_id, unk_id, cls_id, sep_id, mask_id] = [
            id(specials[0])?,
            id(specials[1])?,
            id(specials[2])?,
            id(specials[3])?,
            id(specials[4])?,
        ];
        // Match the specials (a literal "[MASK]" in a prompt) before normalisation; they
        // are in the vocabulary already (checked above), so no id changes. A tokenizer.json
        // keeps its own settings for those it declares (RoBERTa's `<mask>` strips the space
        // before it).
        let declared: Vec<String> = inner
            .get_added_tokens_decoder()
            .into_values()
            .map(|t| t.content)
            .collect();
        let missing: Vec<AddedToken> = specials
            .iter()
            .filter(|t| kind == TokenizerKind::WordPiece || !declared.iter().any(|d| d == *t))
            .map(|t| AddedToken::from(*t, true))
            .collect();
        inner.add_special_tokens(&missing);
        inner
            .with_truncation(None)
            .map_err(|e| fail(e.to_string()))?;
        inner.with_padding(None);
        let special_ids = kind.special_ids(&inner);
        inner.with_post_processor(Some(
            post_processor(specials, [cls_id, sep_id]).map_err(fail)?,
        ));
        Ok(Self {
            inner,
            kind,
            special_tokens: specials,
            pad_id,
            unk_id,
            cls_id,
            sep_id,
            mask_id,
            special_ids,
        })
    }

    /// Saves as `tokenizer.json`.
    ///
    /// # Errors
    /// [`TrainError::Tokenizer`] if writing fails.
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        self.inner
            .save(path, true)
            .map_err(|e| TrainError::Tokenizer {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })
    }

    /// A masker over this vocabulary that never selects a special token, at `rates`
    /// (BERT §3.1: 15 % selected, 80/10/10 replaced); batch `k` of a run is drawn with
    /// generator `k` of `seed` ([`Masker::resume_at`]). [`Masking::Span`] selects
    /// SpanBERT's spans ([`SpanMaskingConfig`] defaults: Geo(0.2), at most 10 words), whose
    /// word boundaries are this vocabulary's ([`TokenizerKind::continues_word`]).
    ///
    /// # Errors
    /// [`mlm_core::MlmError`] for rates that [`MaskRates::validate`] refuses; for span
    /// masking,
    /// [`TrainError::Tokenizer`] if the ids have gaps ([`vocab`](Self::vocab)).
    pub fn masker(
        &self,
        rates: MaskRates,
        masking: Masking,
        seed: u64,
    ) -> Result<Masker, TrainError> {
        let config = MaskingConfig::new(
            self.vocab_size(),
            self.mask_id,
            self.pad_id,
            self.special_ids.clone(),
        )
        .with_rates(rates)
        .with_seed(seed);
        Ok(match masking {
            Masking::Token => config.init()?,
            Masking::Span => config
                .with_span(Some(SpanMaskingConfig::new()))
                .init()?
                .with_word_continuations(self.word_continuations()?)?,
        })
    }

    /// Which ids continue a word rather than start one, `[vocab_size]`
    /// ([`TokenizerKind::continues_word`]).
    ///
    /// # Errors
    /// [`TrainError::Tokenizer`] if the ids have gaps ([`vocab`](Self::vocab)), or a
    /// Unigram vocabulary has no piece that starts a word with `▁` (no Metaspace
    /// pre-tokenizer), so that every token would continue one word.
    pub fn word_continuations(&self) -> Result<Vec<bool>, TrainError> {
        let vocab = self.vocab()?;
        if self.kind == TokenizerKind::Unigram && !vocab.iter().any(|t| t.starts_with(METASPACE)) {
            return Err(TrainError::Tokenizer {
                path: "(vocabulary)".into(),
                reason: "this Unigram vocabulary has no piece that starts with \u{2581}, \
                         SentencePiece's word start (its pre-tokenizer is not Metaspace), so \
                         whole-word and span masking cannot tell where a word starts: use \
                         --masking token"
                    .into(),
            });
        }
        Ok(vocab
            .iter()
            .map(|token| self.kind.continues_word(token))
            .collect())
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Every token, in id order (line `i` of a BERT `vocab.txt` is token `i`).
    ///
    /// # Errors
    /// [`TrainError::Tokenizer`] if the ids are not `0..vocab_size` without gaps, so that
    /// no `vocab.txt` can hold them.
    pub fn vocab(&self) -> Result<Vec<String>, TrainError> {
        let mut tokens = vec![None; self.vocab_size()];
        for (token, id) in self.inner.get_vocab(true) {
            if let Some(slot) = tokens.get_mut(id as usize) {
                *slot = Some(token);
            }
        }
        tokens
            .into_iter()
            .enumerate()
            .map(|(id, token)| {
                token.ok_or_else(|| TrainError::Tokenizer {
                    path: "(vocabulary)".into(),
                    reason: format!("no token has id {id}: the ids are not contiguous"),
                })
            })
            .collect()
    }

    /// Token ids of `text`, without `[CLS]`/`[SEP]`. The literal `[MASK]` stays one token.
    ///
    /// # Errors
    /// [`TrainError::Tokenizer`] if the tokenizer fails on the text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TrainError> {
        self.inner
            .encode(text, false)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|e| TrainError::Tokenizer {
                path: "(encoding)".into(),
                reason: e.to_string(),
            })
    }

    /// Token ids of a fill-mask prompt: those of [`encode`](Self::encode), but with the
    /// spaces before each mask token taken into it where a byte-level BPE's mask token does
    /// not strip them itself (`lstrip`, which RoBERTa's own `<mask>` has). Without it,
    /// `chef <mask>` is `chef` `Ġ` `<mask>` (in transformers too), and the model fills in
    /// what follows a lone space instead of the word (`Ġword`) the prompt means.
    ///
    /// # Errors
    /// As [`encode`](Self::encode).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>, TrainError> {
        let strips = self
            .inner
            .get_added_tokens_decoder()
            .get(&self.mask_id)
            .is_some_and(|token| token.lstrip);
        if self.kind == TokenizerKind::WordPiece || strips {
            return self.encode(text);
        }
        let mask = self.special_tokens[4];
        let pieces: Vec<&str> = text.split(mask).collect();
        let last = pieces.len() - 1;
        let trimmed: Vec<&str> = pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| if i < last { piece.trim_end() } else { piece })
            .collect();
        self.encode(&trimmed.join(mask))
    }

    /// Token ids of `text` where it follows a space in running text (a document's second
    /// sentence on): a byte-level BPE then starts its first word with `Ġ`, as it does every
    /// other word after a space; WordPiece ignores spaces.
    ///
    /// # Errors
    /// As [`encode`](Self::encode).
    pub fn encode_after_space(&self, text: &str) -> Result<Vec<u32>, TrainError> {
        match self.kind {
            TokenizerKind::WordPiece => self.encode(text),
            TokenizerKind::ByteLevelBpe => self.encode(&format!(" {text}")),
            // Metaspace starts the first word with `▁` already.
            TokenizerKind::Unigram => self.encode(text),
        }
    }

    /// `body` as one sequence: `[CLS] body [SEP]` (BERT's input, Devlin et al. 2019, §3).
    pub fn wrap(&self, body: &[u32]) -> Vec<u32> {
        let mut sequence = Vec::with_capacity(body.len() + 2);
        sequence.push(self.cls_id);
        sequence.extend_from_slice(body);
        sequence.push(self.sep_id);
        sequence
    }

    /// The token of `id` as a reader sees it: WordPiece's token string (`##s` included), a
    /// byte-level BPE token decoded to its text (`Ġof` is ` of`, as transformers' fill-mask
    /// shows it), a Unigram piece with `▁` as a space; the unknown token for an unknown id.
    pub fn token(&self, id: u32) -> String {
        let unknown = || self.special_tokens[1].to_string();
        match self.kind {
            TokenizerKind::WordPiece => self.inner.id_to_token(id).unwrap_or_else(unknown),
            // SentencePiece's word start as the space it stands for (`▁the` is ` the`), as a
            // byte-level BPE's `Ġthe` decodes: a continuation piece shows without it.
            TokenizerKind::Unigram => match self.inner.id_to_token(id) {
                Some(piece) => piece.replace(METASPACE, " "),
                None => unknown(),
            },
            TokenizerKind::ByteLevelBpe => match self.inner.id_to_token(id) {
                Some(_) => self
                    .inner
                    .decode(&[id], false)
                    .unwrap_or_else(|_| unknown()),
                None => unknown(),
            },
        }
    }
}

/// Why the folder `dir` is no tokenizer, and the file in it to give instead.
fn folder_advice(dir: &Path) -> String {
    let inside = ["tokenizer.json", "vocab.txt", "vocab.json"]
        .map(|name| dir.join(name))
        .into_iter()
        .find(|file| file.is_file());
    match inside {
        Some(file) => format!(
            "is a folder, not a tokenizer file: give the file in it, {}",
            file.display()
        ),
        None => "is a folder, not a tokenizer file, and holds no tokenizer.json, vocab.txt \
                 (BERT) nor vocab.json (RoBERTa): give the tokenizer's file"
            .into(),
    }
}

/// How often each word of `sentences` occurs after BERT's normalisation and
/// pre-tokenisation, in a map whose iteration order depends on its contents alone: fixed
/// hash keys, words inserted in sorted order. Counted on every core, in chunks whose maps
/// are then added up: the same counts as one pass.
fn word_counts<'a>(
    sentences: impl Iterator<Item = &'a str>,
) -> tokenizers::Result<AHashMap<CompactString, u64>> {
    let sentences: Vec<&str> = sentences.collect();
    let counts = sentences.par_chunks(4096).map(count_words).try_reduce(
        HashMap::new,
        |mut total, counts| {
            for (word, n) in counts {
                *total.entry(word).or_default() += n;
            }
            Ok(total)
        },
    )?;
    let mut sorted: Vec<(String, u64)> = counts.into_iter().collect();
    sorted.sort_unstable();
    let mut map =
        AHashMap::with_capacity_and_hasher(sorted.len(), RandomState::with_seeds(1, 2, 3, 4));
    map.extend(
        sorted
            .into_iter()
            .map(|(word, n)| (CompactString::from(word), n)),
    );
    Ok(map)
}

/// [`word_counts`] of one chunk of sentences.
fn count_words(sentences: &[&str]) -> tokenizers::Result<HashMap<String, u64>> {
    let normalizer = BertNormalizer::default();
    let mut counts: HashMap<String, u64> = HashMap::new();
    for sentence in sentences {
        let mut normalized = NormalizedString::from(*sentence);
        normalizer.normalize(&mut normalized)?;
        let mut words = PreTokenizedString::from(normalized);
        BertPreTokenizer.pre_tokenize(&mut words)?;
        for (word, _, _) in words.get_splits(OffsetReferential::Original, OffsetType::Byte) {
            *counts.entry(word.to_owned()).or_default() += 1;
        }
    }
    Ok(counts)
}

/// BERT's uncased pipeline around a WordPiece model: clean text, lowercase, strip accents,
/// split on whitespace and punctuation.
/// RoBERTa's pipeline around a BPE of `vocab.json` and `merges.txt`: byte-level
/// pre-tokenizer and decoder, no prefix space (transformers' `RobertaTokenizerFast`).
fn byte_level_pipeline(model: BPE) -> Tokenizer {
    let mut tokenizer = Tokenizer::new(model);
    let byte_level = ByteLevel::new(false, true, true);
    tokenizer.with_pre_tokenizer(Some(byte_level));
    tokenizer.with_decoder(Some(byte_level));
    tokenizer
}

fn bert_pipeline(model: WordPiece) -> Tokenizer {
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_normalizer(Some(BertNormalizer::default()));
    tokenizer.with_pre_tokenizer(Some(BertPreTokenizer));
    tokenizer
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counted in chunks on every core, the words add up to one pass's counts.
    #[test]
    fn word_counts_in_chunks_equal_one_pass() {
        let sentences: Vec<String> = (0..10_000)
            .map(|i| format!("Sentence {} of the Ünïcode test, word{}.", i % 97, i % 13))
            .collect();
        let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
        let mut chunked: Vec<(String, u64)> = word_counts(refs.iter().copied())
            .unwrap()
            .into_iter()
            .map(|(word, n)| (word.to_string(), n))
            .collect();
        chunked.sort_unstable();
        let mut one_pass: Vec<(String, u64)> = count_words(&refs).unwrap().into_iter().collect();
        one_pass.sort_unstable();
        assert!(refs.len() > 2 * 4096);
        assert_eq!(chunked, one_pass);
        assert_eq!(
            one_pass.iter().find(|(w, _)| w == "sentence").unwrap().1,
            10_000
        );
    }

    /// `--masking span` builds a span masker whose words are this vocabulary's: no span
    /// starts or ends inside a word, and `--masking token` selects single tokens.
    #[test]
    fn span_maskers_read_words_from_the_vocabulary() {
        let text = "the unbelievable mountaineers reconsidered their extraordinary \
                    expeditions; nevertheless, the mountaineers kept climbing";
        let tokenizer = SubwordTokenizer::train(std::iter::repeat_n(text, 4), 60).unwrap();
        let vocab = tokenizer.vocab().unwrap();
        let ids = tokenizer.wrap(&tokenizer.encode(text).unwrap());
        let is_piece = |id: u32| vocab[id as usize].starts_with("##");
        assert!(
            ids.iter().filter(|&&id| is_piece(id)).count() > 5,
            "{ids:?}"
        );
        let input = vec![ids.clone(); 200];
        let mut masker = tokenizer
            .masker(MaskRates::bert(0.3), Masking::Span, 7)
            .unwrap();
        let batch = masker.mask(&input).unwrap();
        assert!(batch.spans.iter().any(|(_, span)| span.len() > 1));
        for (_, span) in &batch.spans {
            assert!(
                !is_piece(ids[span.start]),
                "span {span:?} starts inside a word"
            );
            assert!(!is_piece(ids[span.end]), "span {span:?} ends inside a word");
        }
        let mut masker = tokenizer
            .masker(MaskRates::bert(0.3), Masking::Token, 7)
            .unwrap();
        let batch = masker.mask(&input).unwrap();
        assert!(batch.spans.iter().all(|(_, span)| span.len() == 1));
        // BabyBERTa's rates: every selected token becomes [MASK]; BERT's leave some as they
        // were (about 1 in 10 of ~1 000 selected).
        let shown = |rates: MaskRates| {
            let batch = tokenizer
                .masker(rates, Masking::Token, 7)
                .unwrap()
                .mask(&input)
                .unwrap();
            let at = |&(row, col): &(usize, usize)| batch.input_ids[row][col];
            let masked = batch
                .masked_positions
                .iter()
                .filter(|p| at(p) == tokenizer.mask_id);
            batch.masked_positions.len() - masked.count()
        };
        let all_masked = MaskRates {
            mask_replace_prob: 1.0,
            random_replace_prob: 0.0,
            ..MaskRates::bert(0.3)
        };
        assert_eq!(shown(all_masked), 0);
        assert!(shown(MaskRates::bert(0.3)) > 100);
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    /// A `tokenizer.json` saved with truncation at 4 tokens and padding to 16 cuts and pads
    /// nothing: it encodes as the same file without them.
    #[test]
    fn a_saved_truncation_or_padding_cuts_and_pads_nothing() {
        let original = fixture("v0_1_export/tokenizer.json");
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&original).unwrap()).unwrap();
        json["truncation"] = serde_json::json!({
            "direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0
        });
        json["padding"] = serde_json::json!({
            "strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": null,
            "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"
        });
        let dir = tempfile::tempdir().unwrap();
        let saved = dir.path().join("tokenizer.json");
        std::fs::write(&saved, json.to_string()).unwrap();
        let text = "the chef [MASK] the soup";
        let ids = SubwordTokenizer::from_file(&saved)
            .unwrap()
            .encode(text)
            .unwrap();
        let plain = SubwordTokenizer::from_file(&original).unwrap();
        assert_eq!(ids, plain.encode(text).unwrap());
        assert!(ids.len() > 4, "{ids:?}");
    }

    /// RoBERTa's `<mask>` without `lstrip` (the fixture's, as `tokenizers` trains it): a
    /// prompt's mask takes the space before it, so that it stands for a word `Ġword`.
    #[test]
    fn a_prompts_mask_takes_the_space_before_it() {
        let roberta =
            SubwordTokenizer::from_file(&fixture("continued/roberta/tokenizer.json")).unwrap();
        let (chef, mask) = (roberta.encode("The chef").unwrap(), roberta.mask_id);
        let plain = roberta.encode("The chef <mask>.").unwrap();
        let space = plain[chef.len()];
        assert_eq!(roberta.token(space), " ");
        let dot = roberta.encode(".").unwrap();
        assert_eq!(plain, [&chef[..], &[space, mask], &dot].concat());
        let prompt = roberta.encode_prompt("The chef  <mask>. <mask>").unwrap();
        assert_eq!(prompt, [&chef[..], &[mask], &dot, &[mask]].concat());
        // A prompt that starts with its mask, and WordPiece, are encoded as they are.
        let start = "<mask> chef";
        assert_eq!(
            roberta.encode_prompt(start).unwrap(),
            roberta.encode(start).unwrap()
        );
        let bert = SubwordTokenizer::from_file(&fixture("v0_1_export/tokenizer.json")).unwrap();
        let text = "the chef [MASK].";
        assert_eq!(
            bert.encode_prompt(text).unwrap(),
            bert.encode(text).unwrap()
        );
    }

    /// A folder given as the tokenizer names the file in it to give.
    #[test]
    fn a_folder_is_no_tokenizer_and_the_file_in_it_is_named() {
        let folder = fixture("continued/roberta");
        let error = SubwordTokenizer::from_file(&folder)
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            error,
            format!(
                "tokenizer {}: is a folder, not a tokenizer file: give the file in it, {}",
                folder.display(),
                folder.join("tokenizer.json").display()
            )
        );
        let empty = tempfile::tempdir().unwrap();
        let error = SubwordTokenizer::from_file(empty.path())
            .err()
            .unwrap()
            .to_string();
        assert!(error.ends_with("give the tokenizer's file"), "{error}");
    }
}
