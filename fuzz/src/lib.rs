//! The bodies of the fuzz targets, shared by the libFuzzer binaries (`fuzz_targets/`) and
//! the stable-toolchain driver (`src/bin/drive.rs`). Each decodes arbitrary bytes into an
//! input, runs it, and panics if the answer breaks the contract: a typed error exactly
//! when the input is bad, and the documented invariants otherwise.

use std::path::PathBuf;
use std::sync::OnceLock;

use burn::tensor::{Device, Int, Tensor, TensorData};
use mlm_core::{IGNORE_INDEX, MaskedCrossEntropyConfig, MaskingConfig, MlmError};
use mlm_train::TrainError;
use mlm_train::data::{Document, SubwordTokenizer, clean, pack, read_corpus};

/// Reads bytes front to back; past the end every read is 0.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let (&first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        first
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |acc, _| acc << 8 | u64::from(self.byte()))
    }

    /// A probability in [0, 1], or just outside it for a few byte values.
    fn probability(&mut self) -> f64 {
        match self.byte() {
            255 => 1.5,
            254 => -0.1,
            253 => f64::NAN,
            b => f64::from(b) / 252.0,
        }
    }
}

/// The masker on arbitrary ids and configurations.
///
/// Layout: vocab, mask id, pad id, specials, three probabilities, bounds, whole-word flag, seed,
/// then sequences separated by `0xff` (ids taken modulo `vocab + 1`, so some are out of range).
pub fn masker(data: &[u8]) {
    let mut bytes = Bytes(data);
    let vocab = usize::from(bytes.byte() % 64);
    let mask_id = u32::from(bytes.byte()) % (vocab as u32 + 2);
    let pad_id = u32::from(bytes.byte()) % (vocab as u32 + 2);
    let specials: Vec<u32> = (0..bytes.byte() % 6)
        .map(|_| u32::from(bytes.byte()) % (vocab as u32 + 2))
        .collect();
    let flags = bytes.byte();
    let config = MaskingConfig::new(vocab, mask_id, pad_id, specials.clone())
        .with_mlm_probability(bytes.probability())
        .with_mask_replace_prob(bytes.probability())
        .with_random_replace_prob(bytes.probability())
        .with_min_predictions_per_seq(usize::from(flags % 4))
        .with_max_predictions_per_seq((flags & 0x10 != 0).then_some(usize::from(flags >> 5)))
        .with_whole_word_mask(flags & 0x08 != 0)
        .with_seed(bytes.u64());
    let sequences: Vec<Vec<u32>> = bytes
        .0
        .split(|&b| b == 0xff)
        .map(|s| {
            s.iter()
                .map(|&b| u32::from(b) % (vocab as u32 + 1))
                .collect()
        })
        .collect();
    let masker = match config.init() {
        Ok(masker) => masker,
        Err(error) => {
            let bad_probability = [
                config.mlm_probability,
                config.mask_replace_prob,
                config.random_replace_prob,
            ]
            .iter()
            .any(|p| !(0.0..=1.0).contains(p))
                || config.mask_replace_prob + config.random_replace_prob > 1.0;
            let bad_id = [mask_id, pad_id]
                .iter()
                .chain(&specials)
                .any(|&s| s as usize >= vocab)
                || mask_id == pad_id;
            let bad_bounds = config
                .max_predictions_per_seq
                .is_some_and(|max| config.min_predictions_per_seq > max);
            assert!(
                bad_probability
                    || bad_id
                    || bad_bounds
                    || vocab == 0
                    || matches!(error, MlmError::VocabTooSmall { .. }),
                "valid config refused: {error}"
            );
            return;
        }
    };
    let tokens: Vec<String> = (0..vocab)
        .map(|id| {
            if id % 3 == 0 {
                format!("##{id}")
            } else {
                format!("w{id}")
            }
        })
        .collect();
    let mut masker = if flags & 0x04 != 0 {
        masker.with_wordpiece_vocab(&tokens).unwrap()
    } else {
        masker
    };
    let out_of_range = sequences.iter().flatten().any(|&id| id as usize >= vocab);
    let batch = match masker.mask(&sequences) {
        Ok(batch) => batch,
        Err(MlmError::TokenIdOutOfVocab { .. }) if out_of_range => return,
        Err(MlmError::MissingWordIds { .. }) if config.whole_word_mask && flags & 0x04 == 0 => {
            return;
        }
        Err(error) => panic!("valid batch refused: {error}"),
    };
    assert!(!out_of_range, "an out-of-vocabulary id was accepted");
    let special = |id: u32| id == mask_id || id == pad_id || specials.contains(&id);
    assert_eq!(batch.input_ids.len(), sequences.len());
    for (s, ids) in sequences.iter().enumerate() {
        assert_eq!(batch.input_ids[s].len(), ids.len());
        let selected: Vec<usize> = batch
            .masked_positions
            .iter()
            .filter(|&&(q, _)| q == s)
            .map(|&(_, p)| p)
            .collect();
        if let Some(max) = config.max_predictions_per_seq {
            assert!(selected.len() <= max);
        }
        for (p, &id) in ids.iter().enumerate() {
            let (label, input) = (batch.labels[s][p], batch.input_ids[s][p]);
            if selected.contains(&p) {
                assert!(!special(id), "special id {id} selected");
                assert_eq!(label, i64::from(id));
                assert!(input == mask_id || input == id || !special(input));
            } else {
                assert_eq!((label, input), (IGNORE_INDEX, id));
            }
        }
    }
}

/// The loss on arbitrary small logits and labels.
///
/// Layout: rows (1–6), vocab (0–6), smoothing, then one byte per logit (`0x80` NaN, `0x7f`
/// +inf, `0x81` -inf, else `b as i8 / 8`) and one per label (`0xff` → -100, `0xfe` → vocab,
/// `0xfd` → -1, `0xfc` → -7, else `b % vocab`).
pub fn loss(data: &[u8]) {
    let mut bytes = Bytes(data);
    let rows = 1 + usize::from(bytes.byte() % 6);
    let vocab = usize::from(bytes.byte() % 7);
    let smoothing = [0.0, 0.1, 1.0][usize::from(bytes.byte() % 3)];
    let logits: Vec<f32> = (0..rows * vocab)
        .map(|_| match bytes.byte() {
            0x80 => f32::NAN,
            0x7f => f32::INFINITY,
            0x81 => f32::NEG_INFINITY,
            b => f32::from(b as i8) / 8.0,
        })
        .collect();
    let labels: Vec<i64> = (0..rows)
        .map(|_| match bytes.byte() {
            0xff => IGNORE_INDEX,
            0xfe => vocab as i64,
            0xfd => -1,
            0xfc => -7,
            b if vocab == 0 => i64::from(b),
            b => i64::from(b) % vocab as i64,
        })
        .collect();
    let device = Device::flex().autodiff();
    let z: Tensor<2> =
        Tensor::<2>::from_data(TensorData::new(logits.clone(), [rows, vocab]), &device)
            .require_grad();
    let label_tensor =
        Tensor::<1, Int>::from_data(TensorData::new(labels.clone(), [rows]), &device);
    let loss_fn = MaskedCrossEntropyConfig::new()
        .with_label_smoothing(smoothing)
        .init()
        .unwrap();
    let bad = labels
        .iter()
        .position(|&l| l != IGNORE_INDEX && !(0..vocab as i64).contains(&l));
    let out = match (loss_fn.forward_labels(z.clone(), label_tensor), bad) {
        (Err(MlmError::LabelOutOfRange { position, .. }), Some(first)) => {
            assert_eq!(position, first);
            return;
        }
        (Ok(out), None) => out,
        (result, bad) => panic!("labels {labels:?} (first bad {bad:?}) gave {result:?}"),
    };
    let graded: Vec<usize> = (0..rows).filter(|&r| labels[r] != IGNORE_INDEX).collect();
    assert_eq!(out.n_graded, graded.len());
    let mean = out.loss.clone().into_scalar::<f64>();
    let sum = out.loss_sum.clone().into_scalar::<f64>();
    let finite = graded.iter().all(|&r| {
        logits[r * vocab..(r + 1) * vocab]
            .iter()
            .all(|z| z.is_finite())
    });
    if graded.is_empty() {
        assert_eq!((mean, sum), (0.0, 0.0));
    } else if finite {
        assert!(
            mean.is_finite() && mean >= -1e-6,
            "loss {mean} of finite logits"
        );
        assert!((mean - sum / graded.len() as f64).abs() <= 1e-5 * (1.0 + mean.abs()));
    }
    let grad: Vec<f32> = z
        .grad(&out.loss.backward())
        .expect("a gradient, zero or not")
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    for r in (0..rows).filter(|r| !graded.contains(r)) {
        assert!(
            grad[r * vocab..(r + 1) * vocab].iter().all(|&g| g == 0.0),
            "ungraded row {r} got a gradient"
        );
    }
}

/// A WordPiece tokenizer trained once on the test corpus.
fn tokenizer() -> &'static SubwordTokenizer {
    static TOKENIZER: OnceLock<SubwordTokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/mlm-train/tests/fixtures/corpus");
        let documents = read_corpus(&corpus, "text").unwrap();
        SubwordTokenizer::train(
            documents
                .iter()
                .flat_map(|d| d.sentences.iter().map(String::as_str)),
            300,
        )
        .unwrap()
    })
}

/// Whether `reason` is the refusal a `.txt` file of `bytes` earns by its kind: gzip
/// (its magic bytes), or JSON lines (its first line that is not blank, less a byte-order
/// mark, a JSON object).
fn refused_kind(bytes: &[u8], reason: &str) -> bool {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return reason.starts_with("is gzip-compressed");
    }
    let first_line = bytes
        .split(|&b| b == b'\n')
        .map(|line| line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line))
        .find(|line| !line.iter().all(u8::is_ascii_whitespace))
        .map(<[u8]>::trim_ascii);
    let object = first_line.is_some_and(|line| line.starts_with(b"{") && line.ends_with(b"}"));
    object && reason.starts_with("holds JSON lines")
}

/// Corpus reading, cleaning, tokenizing and packing on arbitrary bytes.
///
/// Layout: the first byte picks the sequence length (3–34); the rest is the file.
pub fn corpus(data: &[u8]) {
    let (max_seq_len, text) = match data.split_first() {
        Some((&b, rest)) => (3 + usize::from(b % 32), rest),
        None => (3, data),
    };
    let dir = std::env::temp_dir().join(format!("mlm-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("input.txt");
    std::fs::write(&file, text).unwrap();
    let sentences = match (read_corpus(&file, "text"), std::str::from_utf8(text)) {
        (Err(TrainError::NotUtf8 { offset, .. }), Err(e)) => {
            assert_eq!(offset, e.valid_up_to());
            return;
        }
        (Err(TrainError::EmptyCorpus(_)), Ok(text)) => {
            assert!(clean(text).is_empty());
            return;
        }
        (Err(TrainError::CorpusFile { reason, .. }), _) => {
            assert!(refused_kind(text, &reason), "{reason}");
            return;
        }
        (Ok(documents), Ok(text)) => {
            assert_eq!(documents.len(), 1);
            assert_eq!(documents[0].sentences, clean(text));
            documents[0].sentences.clone()
        }
        (result, utf8) => panic!("{result:?} for UTF-8 check {utf8:?}"),
    };
    for sentence in &sentences {
        assert!(!sentence.is_empty() && sentence.trim() == sentence);
        assert!(!sentence.contains('\n') && sentence.chars().any(char::is_alphanumeric));
    }
    let tokenizer = tokenizer();
    let document = Document {
        path: file,
        sentences,
    };
    let sequences = pack(std::slice::from_ref(&document), tokenizer, max_seq_len).unwrap();
    for sequence in &sequences {
        assert!(sequence.len() >= 3 && sequence.len() <= max_seq_len);
        assert_eq!(sequence[0], tokenizer.cls_id);
        assert_eq!(*sequence.last().unwrap(), tokenizer.sep_id);
        assert!(
            sequence
                .iter()
                .all(|&id| (id as usize) < tokenizer.vocab_size())
        );
    }
}
